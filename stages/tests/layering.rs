//! The layering the compiler cannot see by itself, checked: the pipeline's dependency graph
//! holds no async runtime, database, queue or S3 client; the API's routes link no pipeline
//! code; and no stage imports another stage (they share only `ir`, `gltf` and `animation`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The crates in `package`'s normal (non-dev) dependency graph, as `cargo tree` resolves them
/// for that package alone.
fn dependency_graph(package: &str, extra: &[&str]) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "--locked",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .args(["--format", "{p}", "-p", package])
        .args(extra)
        .current_dir(root())
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut crates: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(String::from)
        .collect();
    crates.sort();
    crates.dedup();
    crates
}

#[test]
fn the_pipeline_links_no_runtime_database_queue_or_object_store() {
    let crates = dependency_graph("kiln-stages", &[]);
    assert!(crates.len() > 20, "{crates:?}");
    let forbidden = [
        "tokio",
        "sqlx",
        "apalis",
        "aws-",
        "hyper",
        "reqwest",
        "prometheus",
    ];
    let found: Vec<&String> = crates
        .iter()
        .filter(|c| forbidden.iter().any(|f| c.starts_with(f)))
        .collect();
    assert!(found.is_empty(), "kiln-stages depends on {found:?}");
}

#[test]
fn the_api_reaches_the_queue_not_the_pipeline() {
    // Its routes: without the embedded mode's in-process workers.
    let crates = dependency_graph("kiln-api", &["--no-default-features"]);
    assert!(crates.iter().any(|c| c == "kiln-jobs"), "{crates:?}");
    let forbidden = [
        "kiln-stages",
        "kiln-worker",
        "meshopt",
        "lol_html",
        "exr",
        "naga",
    ];
    let found: Vec<&String> = crates
        .iter()
        .filter(|c| forbidden.contains(&c.as_str()))
        .collect();
    assert!(found.is_empty(), "kiln-api's routes depend on {found:?}");
    let jobs = dependency_graph("kiln-jobs", &[]);
    assert!(!jobs.iter().any(|c| c == "kiln-stages"), "{jobs:?}");
}

/// `use` paths naming a stage module, from every file of a stage.
#[test]
fn no_stage_imports_another_stage() {
    let stages_dir = root().join("stages/src/stages");
    // A stage is `NAME.rs` (with its sub-modules in `NAME/`) or `NAME/mod.rs`.
    let mut stages: Vec<String> = std::fs::read_dir(&stages_dir)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            if e.path().join("mod.rs").exists() {
                return Some(name);
            }
            name.strip_suffix(".rs")
                .filter(|n| *n != "mod")
                .map(String::from)
        })
        .collect();
    stages.sort();
    stages.dedup();
    assert!(stages.len() >= 9, "{stages:?}");
    // The animation pass runs inside the geometry stage, on each model before its geometry
    // (ARCHITECTURE.md, "The model step"); nothing else crosses.
    let allowed = [("geometry", "animation")];
    let mut checked = 0;
    let mut crossings = Vec::new();
    for stage in &stages {
        let mut files: Vec<PathBuf> = vec![stages_dir.join(format!("{stage}.rs"))]
            .into_iter()
            .filter(|f| f.exists())
            .collect();
        if let Ok(dir) = std::fs::read_dir(stages_dir.join(stage)) {
            files.extend(dir.flatten().map(|e| e.path()));
        }
        // A stage's tests may run the stages before it to make their input.
        for file in files.into_iter().filter(|f| !f.ends_with("tests.rs")) {
            let text = std::fs::read_to_string(&file).unwrap();
            let text = text.split("\nmod tests {").next().unwrap_or(&text);
            checked += 1;
            for other in stages.iter().filter(|o| *o != stage) {
                if allowed.contains(&(stage.as_str(), other.as_str())) {
                    continue;
                }
                for pattern in [
                    format!("crate::stages::{other}"),
                    format!("super::{other}::"),
                    format!("super::{other};"),
                    format!("super::super::{other}"),
                ] {
                    if text.contains(&pattern) {
                        crossings.push(format!("{}: {pattern}", file.display()));
                    }
                }
            }
        }
    }
    assert!(checked >= stages.len());
    assert!(crossings.is_empty(), "{crossings:#?}");
}
