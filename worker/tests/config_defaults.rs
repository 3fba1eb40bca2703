//! One source for every default. The stages' options hold their own defaults
//! (`AnimationOptions::default()`, `VatOptions::default()`, …); `Config::default()` holds the
//! rest, and its `[animation]` and `[vat]` sections are overrides on top of the stages'. The
//! README's configuration table states each default: setting a variable to the value the
//! README gives must change nothing a process would run with.

use kiln_common::config::Config;
use kiln_stages::stages::images::{self, ImageOptions};
use kiln_worker::runtime::{animation_options, vat_selection};

/// What a process runs with: the configuration (the stage sections left out) and the stage
/// options it implies.
fn effective(vars: &[(&str, &str)]) -> String {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let config = Config::load_from(&vars).unwrap_or_else(|e| panic!("{vars:?}: {e}"));
    let animation = animation_options(&config.animation);
    let vat = vat_selection(&config.vat).unwrap();
    let images = images::apply(&config.images, &ImageOptions::default()).unwrap();
    let mut rest = config.clone();
    rest.animation = Default::default();
    rest.vat = Default::default();
    rest.images = Default::default();
    format!("{rest:?}\n{animation:?}\n{vat:?}\n{images:?}")
}

/// `(variable, default)` pairs from the README's table: each backticked name of the first
/// column with the backticked value at the same position in the second (`_SUFFIX` names
/// continue the first one's section). Rows whose defaults are prose or depend on something
/// else (`{data}/…`, "(none)", one value for several deployments) are left out.
fn readme_defaults() -> Vec<(String, String)> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let table = readme
        .split("## Configuration")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("the README has a Configuration section");
    let ticked = |cell: &str| -> Vec<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(String::from)
            .collect()
    };
    let mut out = Vec::new();
    for line in table.lines().filter(|l| l.starts_with("| `KILN_")) {
        let cells: Vec<&str> = line.split(" | ").collect();
        let (names, values) = (ticked(cells[0]), ticked(cells[1]));
        let prose = cells[1].replace('`', "");
        if names.len() != values.len() || prose.contains('(') || prose.contains(" or ") {
            continue;
        }
        let section: String = names[0].split('_').take(2).collect::<Vec<_>>().join("_");
        for (name, value) in names.iter().zip(values) {
            if value.contains(['{', '…']) {
                continue;
            }
            let name = if name.starts_with('_') {
                format!("{section}{name}")
            } else {
                name.clone()
            };
            out.push((name, value));
        }
    }
    out
}

#[test]
fn the_readme_states_the_defaults_the_code_has() {
    let defaults = effective(&[]);
    let rows = readme_defaults();
    let mut drifted = Vec::new();
    for (name, value) in &rows {
        if effective(&[(name, value)]) != defaults {
            drifted.push(format!("{name}={value}"));
        }
    }
    assert!(
        drifted.is_empty(),
        "the README's default differs from the code's: {drifted:?}"
    );
    // The stage options are among them, and a value that is not the default is seen.
    for name in [
        "KILN_ANIMATION_TOLERANCE",
        "KILN_ANIMATION_WEIGHT_BITS",
        "KILN_VAT_FRAME_RATE",
        "KILN_VAT_MAX_SIZE",
        "KILN_IMAGES_MIN_SSIMULACRA2",
        "KILN_IMAGES_MAX_PIXELS",
        "KILN_WORKER_CONCURRENCY",
    ] {
        assert!(rows.iter().any(|(n, _)| n == name), "{name} not checked");
    }
    assert_ne!(effective(&[("KILN_ANIMATION_TOLERANCE", "1e-4")]), defaults);
    assert_ne!(effective(&[("KILN_VAT_FRAME_RATE", "24")]), defaults);
    assert_ne!(effective(&[("KILN_IMAGES_LOSSY", "true")]), defaults);
    eprintln!("{} README defaults checked against the code", rows.len());
    assert!(rows.len() >= 30, "only {} rows checked", rows.len());
}

/// The `[animation]` and `[vat]` sections restate nothing: unset, the stages' own defaults
/// are what runs.
#[test]
fn unset_stage_sections_keep_the_stages_defaults() {
    use kiln_stages::stages::animation::AnimationOptions;
    use kiln_stages::stages::vat::VatOptions;
    let config = Config::default();
    assert_eq!(
        animation_options(&config.animation),
        Some(AnimationOptions::default())
    );
    assert_eq!(
        vat_selection(&config.vat).unwrap().options,
        VatOptions::default()
    );
}
