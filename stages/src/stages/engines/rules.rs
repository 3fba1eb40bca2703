//! The engine detection table (`stages/engines.toml`) and its matcher.
//!
//! A rule names an engine by strings that survive minification (error messages, banners,
//! shader chunk names) and reads the exact version from the file's own constants. The table
//! is data so a team can add an engine (Cocos Creator, LayaAir, their own) without code:
//! `KILN_ENGINE_RULES` names a file of extra rules in the same format.

use memchr::memmem;
use regex::bytes::Regex;
use serde::Deserialize;

/// The rules Kiln ships with.
pub const BUILTIN: &str = include_str!("../../../engines.toml");

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    #[serde(default)]
    engine: Vec<RuleSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleSpec {
    name: String,
    #[serde(default)]
    global: String,
    #[serde(default)]
    min_bytes: u64,
    #[serde(default)]
    all: Vec<String>,
    #[serde(default)]
    any: Vec<String>,
    #[serde(default)]
    min_any: Option<usize>,
    version: Vec<VersionSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct VersionSpec {
    pattern: String,
    #[serde(default = "first_capture")]
    format: String,
}

fn first_capture() -> String {
    "$1".into()
}

#[derive(Debug)]
struct Rule {
    name: String,
    global: String,
    min_bytes: u64,
    all: Vec<memmem::Finder<'static>>,
    any: Vec<memmem::Finder<'static>>,
    min_any: usize,
    version: Vec<(Regex, String)>,
}

/// A compiled table.
#[derive(Debug)]
pub struct EngineRules {
    rules: Vec<Rule>,
}

/// What a file was recognised as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detection {
    pub name: String,
    pub version: String,
    pub global: String,
    /// An ES module (top-level `export`), not a classic script.
    pub module: bool,
}

impl EngineRules {
    /// The shipped table plus, if given, a team's extra rules (checked first, so a team can
    /// also override a shipped engine).
    pub fn load(extra: Option<&str>) -> Result<Self, String> {
        let mut rules = match extra {
            Some(text) => Self::parse(text)?.rules,
            None => Vec::new(),
        };
        rules.extend(Self::parse(BUILTIN)?.rules);
        Ok(Self { rules })
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let file: RuleFile =
            toml::from_str(text).map_err(|e| format!("engine rules: {}", e.message()))?;
        let mut rules = Vec::new();
        for spec in file.engine {
            let fail = |what: String| format!("engine rule {:?}: {what}", spec.name);
            if spec.name.trim().is_empty() {
                return Err("engine rule without a name".into());
            }
            if spec.all.is_empty() && spec.any.is_empty() {
                return Err(fail("needs at least one string in `all` or `any`".into()));
            }
            if spec.version.is_empty() {
                return Err(fail("needs at least one `version` pattern".into()));
            }
            let finders = |strings: &[String]| -> Result<Vec<memmem::Finder<'static>>, String> {
                strings
                    .iter()
                    .map(|s| {
                        if s.is_empty() {
                            Err(fail("empty marker string".into()))
                        } else {
                            Ok(memmem::Finder::new(s.as_bytes()).into_owned())
                        }
                    })
                    .collect()
            };
            let version = spec
                .version
                .iter()
                .map(|v| {
                    Regex::new(&v.pattern)
                        .map(|r| (r, v.format.clone()))
                        .map_err(|e| fail(format!("version pattern {:?}: {e}", v.pattern)))
                })
                .collect::<Result<_, _>>()?;
            let min_any = spec.min_any.unwrap_or(usize::from(!spec.any.is_empty()));
            if min_any > spec.any.len() {
                return Err(fail(format!(
                    "min_any = {min_any} but only {} strings in `any`",
                    spec.any.len()
                )));
            }
            rules.push(Rule {
                all: finders(&spec.all)?,
                any: finders(&spec.any)?,
                name: spec.name,
                global: spec.global,
                min_bytes: spec.min_bytes,
                min_any,
                version,
            });
        }
        Ok(Self { rules })
    }

    /// The smallest file any rule accepts: smaller files need not be read.
    pub fn min_bytes(&self) -> u64 {
        self.rules.iter().map(|r| r.min_bytes).min().unwrap_or(0)
    }

    /// Every engine the file matches (normally none or one), in table order.
    pub fn detect(&self, path: &str, bytes: &[u8]) -> Vec<Detection> {
        let mut found = Vec::new();
        for rule in &self.rules {
            if (bytes.len() as u64) < rule.min_bytes
                || !rule.all.iter().all(|f| f.find(bytes).is_some())
                || rule.any.iter().filter(|f| f.find(bytes).is_some()).count() < rule.min_any
            {
                continue;
            }
            let Some(version) = rule.version.iter().find_map(|(pattern, format)| {
                let captures = pattern.captures(bytes)?;
                let mut out = Vec::new();
                captures.expand(format.as_bytes(), &mut out);
                String::from_utf8(out).ok().filter(|v| !v.is_empty())
            }) else {
                // The markers say "this engine" but no version: not something to share.
                continue;
            };
            if found.iter().any(|d: &Detection| d.name == rule.name) {
                continue;
            }
            found.push(Detection {
                name: rule.name.clone(),
                version,
                global: rule.global.clone(),
                module: is_module(path, bytes),
            });
        }
        found
    }
}

/// An ES module has top-level `export`/`import` statements; a classic script never does.
pub fn is_module(path: &str, bytes: &[u8]) -> bool {
    if path.ends_with(".mjs") {
        return true;
    }
    if path.ends_with(".cjs") {
        return false;
    }
    static STATEMENT: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    STATEMENT
        .get_or_init(|| {
            // Statement shapes, not words: an engine's own messages quote `import "…"`.
            Regex::new(concat!(
                r#"(?m)(?:^|[;}])[ \t]*(?:"#,
                r#"export[ \t]*(?:\{[^}]*\}[ \t]*(?:;|$|from\b)|\*[ \t]*(?:as\b[^;]*?)?from\b"#,
                r#"|default\b|const\b|let\b|var\b|function\b|class\b|async\b)"#,
                r#"|import[ \t]*(?:[\w$]+[ \t]*,?[ \t]*)?(?:\{[^}]*\}|\*[ \t]*as[ \t]+[\w$]+)?"#,
                r#"[ \t]*(?:from[ \t]*)?["'][^"'\n]+["'][ \t]*(?:;|$))"#
            ))
            .expect("valid pattern")
        })
        .is_match(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = r#"
[[engine]]
name = "toy"
global = "TOY"
min_bytes = 10
all = ["toy engine: no canvas"]
any = ["glsl_a", "glsl_b", "glsl_c"]
min_any = 2
[[engine.version]]
pattern = 'TOY_VERSION\s*=\s*"(\d+)"'
format = "0.$1"
"#;

    #[test]
    fn markers_and_version_decide() {
        let rules = EngineRules::parse(TABLE).unwrap();
        let engine = br#"var TOY_VERSION = "42"; warn("toy engine: no canvas"); glsl_a; glsl_c;"#;
        let found = rules.detect("toy.js", engine);
        assert_eq!(
            found,
            [Detection {
                name: "toy".into(),
                version: "0.42".into(),
                global: "TOY".into(),
                module: false
            }]
        );
        // One of the `any` markers is not enough.
        assert!(
            rules
                .detect(
                    "a.js",
                    br#"TOY_VERSION="42";"toy engine: no canvas" glsl_a"#
                )
                .is_empty()
        );
        // No version: not an engine build Kiln can name.
        assert!(
            rules
                .detect("a.js", br#""toy engine: no canvas" glsl_a glsl_b"#)
                .is_empty()
        );
        // Too small.
        assert!(
            EngineRules::parse(&TABLE.replace("min_bytes = 10", "min_bytes = 100000"))
                .unwrap()
                .detect("toy.js", engine)
                .is_empty()
        );
    }

    #[test]
    fn module_or_classic() {
        assert!(is_module("a.js", b"const a=1;export{a as A};"));
        assert!(is_module("a.js", b"import { x } from './x.js';\nx();"));
        assert!(is_module("a.js", b"export default 1"));
        assert!(!is_module("a.js", b"(function(){var s='export {';})()"));
        // Babylon 9's UMD build quotes an import in a warning.
        assert!(!is_module(
            "babylon.js",
            br#"x;Logger.Warn('not registered; import "@babylonjs/core/x" to enable');"#
        ));
        assert!(is_module("a.js", b"import\"./side-effect.js\";"));
        assert!(is_module("a.js", b"export*from\"./core.js\";"));
        assert!(!is_module("a.cjs", b"export{a};"));
        assert!(is_module("a.mjs", b""));
    }

    #[test]
    fn bad_tables_are_named() {
        let err = EngineRules::parse("[[engine]]\nname='x'\nall=['a']\n").unwrap_err();
        assert!(err.contains("version"), "{err}");
        let err = EngineRules::parse(
            "[[engine]]\nname='x'\nall=['a']\n[[engine.version]]\npattern='('\n",
        )
        .unwrap_err();
        assert!(err.contains("engine rule \"x\": version pattern"), "{err}");
        let err = EngineRules::parse("[[engine]]\nname='x'\nmarkers=['a']\n").unwrap_err();
        assert!(err.contains("markers"), "{err}");
        assert!(EngineRules::load(None).is_ok(), "the shipped table parses");
    }
}
