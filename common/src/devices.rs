//! Device classes: a device descriptor (OS, version, model, memory, cores) mapped to one of a
//! few coarse classes by the rule table `common/rules/device-classes.toml`.
//!
//! Classes, not models, key the decode statistics, the Prometheus labels and the per-class
//! manifests, so their number stays bounded however many phone models report.

use std::sync::LazyLock;

use regex::{Regex, RegexBuilder};
use serde::{Deserialize, Serialize};

/// Every class a rule may name, plus `unknown` for devices no rule matches.
pub const CLASSES: &[&str] = &[
    "ios-high",
    "ios-low",
    "android-high",
    "android-mid",
    "android-low",
    "desktop",
    "unknown",
];

pub const UNKNOWN: &str = "unknown";

const RULES_TOML: &str = include_str!("../rules/device-classes.toml");

/// What a loader knows about its device; every field optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Descriptor {
    pub os: Option<String>,
    pub os_version: Option<String>,
    pub runtime: Option<String>,
    pub model: Option<String>,
    /// GiB.
    pub memory: Option<f64>,
    pub cores: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    rule: Vec<RuleSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleSpec {
    class: String,
    #[serde(default)]
    os: Vec<String>,
    model: Option<String>,
    min_os_major: Option<u32>,
    max_os_major: Option<u32>,
    min_memory: Option<f64>,
    max_memory: Option<f64>,
    min_cores: Option<u32>,
    max_cores: Option<u32>,
}

struct Rule {
    spec: RuleSpec,
    model: Option<Regex>,
}

#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    #[error("device class rules: {0}")]
    Toml(#[from] toml::de::Error),
    #[error("device class rule {0}: class {1:?} is not one of {CLASSES:?}")]
    Class(usize, String),
    #[error("device class rule {0}: model pattern: {1}")]
    Pattern(usize, regex::Error),
}

pub struct Rules(Vec<Rule>);

impl Rules {
    pub fn parse(text: &str) -> Result<Self, RulesError> {
        let file: RuleFile = toml::from_str(text)?;
        file.rule
            .into_iter()
            .enumerate()
            .map(|(n, spec)| {
                if !CLASSES.contains(&spec.class.as_str()) {
                    return Err(RulesError::Class(n + 1, spec.class));
                }
                let model = spec
                    .model
                    .as_deref()
                    .map(|p| RegexBuilder::new(p).case_insensitive(true).build())
                    .transpose()
                    .map_err(|e| RulesError::Pattern(n + 1, e))?;
                Ok(Rule { spec, model })
            })
            .collect::<Result<_, _>>()
            .map(Rules)
    }

    /// The class of the first rule the device meets, else `unknown`.
    pub fn classify(&self, device: &Descriptor) -> &str {
        let os = device.os.as_deref().map(str::to_ascii_lowercase);
        let major = device
            .os_version
            .as_deref()
            .and_then(|v| v.split(['.', '_', ' ']).next())
            .and_then(|m| m.trim().parse::<u32>().ok());
        let at_least = |limit: Option<f64>, value: Option<f64>, min: bool| match limit {
            None => true,
            Some(l) => value.is_some_and(|v| if min { v >= l } else { v <= l }),
        };
        self.0
            .iter()
            .find(|rule| {
                let s = &rule.spec;
                (s.os.is_empty() || os.as_deref().is_some_and(|o| s.os.iter().any(|r| r == o)))
                    && rule
                        .model
                        .as_ref()
                        .is_none_or(|re| device.model.as_deref().is_some_and(|m| re.is_match(m)))
                    && at_least(s.min_os_major.map(f64::from), major.map(f64::from), true)
                    && at_least(s.max_os_major.map(f64::from), major.map(f64::from), false)
                    && at_least(s.min_memory, device.memory, true)
                    && at_least(s.max_memory, device.memory, false)
                    && at_least(
                        s.min_cores.map(f64::from),
                        device.cores.map(f64::from),
                        true,
                    )
                    && at_least(
                        s.max_cores.map(f64::from),
                        device.cores.map(f64::from),
                        false,
                    )
            })
            .map_or(UNKNOWN, |rule| rule.spec.class.as_str())
    }
}

/// The table in the repository, parsed once (a broken table fails the unit tests).
pub static RULES: LazyLock<Rules> =
    LazyLock::new(|| Rules::parse(RULES_TOML).expect("common/rules/device-classes.toml is valid"));

pub fn classify(device: &Descriptor) -> &'static str {
    RULES.classify(device)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(os: &str, version: &str, model: &str, memory: f64, cores: u32) -> Descriptor {
        let some = |s: &str| (!s.is_empty()).then(|| s.to_string());
        Descriptor {
            os: some(os),
            os_version: some(version),
            runtime: None,
            model: some(model),
            memory: (memory > 0.0).then_some(memory),
            cores: (cores > 0).then_some(cores),
        }
    }

    #[test]
    fn the_table_parses_and_classifies_known_devices() {
        let cases = [
            (device("ios", "17.4", "iPhone", 0.0, 6), "ios-high"),
            (
                device("iOS", "17.4", "iPhone 12 Pro<iPhone13,3>", 0.0, 6),
                "ios-high",
            ),
            (
                device("ios", "16.1", "iPhone 8<iPhone10,4>", 0.0, 6),
                "ios-low",
            ),
            (device("ios", "15.8", "iPhone", 0.0, 6), "ios-low"),
            (device("ios", "", "", 0.0, 0), "ios-high"),
            (device("android", "14", "SM-S918B", 4.0, 8), "android-high"),
            (device("android", "14", "Pixel 8", 0.0, 0), "android-high"),
            (device("android", "13", "SM-A135F", 4.0, 8), "android-low"),
            (device("android", "12", "M2101K6G", 8.0, 8), "android-high"),
            (device("android", "12", "M2101K6G", 4.0, 8), "android-mid"),
            (device("android", "11", "", 2.0, 8), "android-low"),
            (device("android", "8.1", "SM-G960F", 4.0, 8), "android-low"),
            (device("android", "13", "", 0.0, 4), "android-low"),
            (device("harmonyos", "4", "ALN-AL00", 8.0, 8), "android-high"),
            (device("windows", "10.0", "", 8.0, 16), "desktop"),
            (device("linux", "", "", 0.0, 0), "desktop"),
            (device("", "", "", 0.0, 0), "unknown"),
            (device("symbian", "9", "N95", 0.1, 1), "unknown"),
        ];
        for (d, class) in cases {
            assert_eq!(classify(&d), class, "{d:?}");
        }
    }

    #[test]
    fn bad_tables_are_refused_with_the_rule_named() {
        assert!(matches!(
            Rules::parse("[[rule]]\nclass = \"toaster\"\n"),
            Err(RulesError::Class(1, _))
        ));
        assert!(matches!(
            Rules::parse(
                "[[rule]]\nclass = \"desktop\"\n[[rule]]\nclass = \"desktop\"\nmodel = \"(\"\n"
            ),
            Err(RulesError::Pattern(2, _))
        ));
        assert!(matches!(
            Rules::parse("[[rule]]\nclass = \"desktop\"\nram = 1\n"),
            Err(RulesError::Toml(_))
        ));
    }
}
