//! Every input a fuzz target ever failed on (`fuzz/regressions/<target>/`, committed when
//! the fuzzer finds it and the bug is fixed) runs again here through the same code the fuzz
//! target runs (`kiln_stages::fuzzing`), so a fixed crash stays fixed without the fuzzer.
//! Each target also runs on the hand-written hostile fixtures and the real sample model, so
//! the targets' own properties (variants read back, nothing written outside the build) are
//! checked on every `cargo test`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kiln_stages::fuzzing;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.is_file() && p.file_name().is_some_and(|n| n != "README.md"))
        .collect();
    files.sort();
    files
}

/// Runs target `name` on every file, each in a fresh scratch directory; returns how many ran.
fn replay(name: &str, files: &[PathBuf]) -> usize {
    for file in files {
        let data = std::fs::read(file).expect("read the input");
        let scratch = tempfile::tempdir().expect("scratch dir");
        let outcome = std::panic::catch_unwind(|| fuzzing::run(name, &data, scratch.path()));
        assert!(
            outcome.is_ok(),
            "fuzz target {name} fails on {}",
            file.display()
        );
    }
    files.len()
}

#[test]
fn the_targets_are_the_fuzz_crates_bins() {
    let manifest = std::fs::read_to_string(repo().join("fuzz/Cargo.toml")).unwrap();
    let manifest: toml::Value = toml::from_str(&manifest).unwrap();
    let mut bins: Vec<&str> = manifest["bin"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    bins.sort();
    let mut targets = fuzzing::TARGETS.to_vec();
    targets.sort();
    assert_eq!(bins, targets);
    for target in fuzzing::TARGETS {
        let source = repo().join(format!("fuzz/fuzz_targets/{target}.rs"));
        let source = std::fs::read_to_string(&source).unwrap();
        assert!(
            source.contains("kiln_stages::fuzzing::"),
            "{target} runs its own code"
        );
    }
}

#[test]
fn every_input_a_fuzzer_failed_on_passes_now() {
    let regressions = repo().join("fuzz/regressions");
    let mut ran = BTreeMap::new();
    for target in fuzzing::TARGETS {
        let files = files_in(&regressions.join(target));
        ran.insert(target, replay(target, &files));
    }
    // No folder of another name (a typo would leave its inputs unchecked).
    for dir in std::fs::read_dir(&regressions).unwrap() {
        let dir = dir.unwrap();
        if dir.path().is_dir() {
            let name = dir.file_name().to_string_lossy().into_owned();
            assert!(
                fuzzing::TARGETS.contains(&name.as_str()),
                "fuzz/regressions/{name}"
            );
        }
    }
    let total: usize = ran.values().sum();
    let committed = fuzzing::TARGETS
        .iter()
        .map(|t| files_in(&regressions.join(t)).len())
        .sum::<usize>();
    eprintln!("replayed {total} fuzz regressions: {ran:?}");
    assert_eq!(total, committed);
}

#[test]
fn the_model_targets_hold_on_real_and_hostile_models() {
    let fixtures = repo().join("worker/tests/fixtures");
    let mut models = files_in(&fixtures.join("hostile"));
    models.extend(files_in(&fixtures));
    let fox = repo().join("examples/sample-game/assets/Fox.glb");
    if fox.is_file() {
        models.push(fox);
    }
    assert!(models.len() >= 22, "models: {}", models.len());
    for target in ["gltf_geometry", "animation", "vat", "inventory"] {
        assert_eq!(replay(target, &models), models.len());
    }
}
