//! Helpers shared by the conformance tests: the Node.js judges in `tests/gltf-check` and the
//! model corpus (`../shared/assets` when present, else the sample game's Fox).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

mod npm;
pub use npm::npm_installed;

/// The gltf-check folder, its npm packages installed.
pub fn gltf_check() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gltf-check");
    npm_installed(&dir, "node_modules/gltf-validator", "ci");
    dir
}

/// Every model of the corpus: the sample game's Fox, then `../shared/assets` (malformed
/// test files excluded).
pub fn models() -> Vec<PathBuf> {
    let mut list =
        vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/sample-game/assets/Fox.glb")];
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut entries: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        entries.sort();
        for path in entries {
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if path.is_dir() {
                if name != "invalid" {
                    walk(&path, out);
                }
            } else if name.ends_with(".glb") || name.ends_with(".gltf") {
                out.push(path);
            }
        }
    }
    walk(&shared_assets(), &mut list);
    if list.len() == 1 {
        require_corpus();
        eprintln!("../shared/assets is not here: checking the sample game's model only");
    }
    list
}

/// Under `CI=true` a suite whose corpus is missing fails instead of checking less.
pub fn ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// Fails under `CI=true` when `../shared/assets` is not beside the checkout; elsewhere (a
/// user's clone) the corpus suites check what the repository has.
pub fn require_corpus() {
    assert!(
        !ci() || shared_assets().is_dir(),
        "CI=true and {} is missing: the corpus suites would check nothing",
        shared_assets().display()
    );
}

pub fn shared_assets() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/assets")
}

/// A zip package of `entries` (name, bytes); a name ending in `/` is a directory entry.
pub fn zip_with(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default();
    for (name, data) in entries {
        if let Some(dir) = name.strip_suffix('/') {
            zip.add_directory(dir, options).unwrap();
        } else {
            zip.start_file(*name, options).unwrap();
            std::io::Write::write_all(&mut zip, data).unwrap();
        }
    }
    zip.finish().unwrap().into_inner()
}

/// Runs `node SCRIPT ARGS…` in gltf-check and parses the one JSON object it prints.
pub fn node_json(script: &str, args: &[&std::ffi::OsStr]) -> serde_json::Value {
    let dir = gltf_check();
    let out = Command::new("node")
        .arg(dir.join(script))
        .args(args)
        .output()
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "{script}: {e}\nstdout: {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Every canonical vertex of `model` posed by three.js (`anim.mjs sample`) at `times[c]` of
/// each clip `c`: the vertex count and the positions, clip by clip, time by time, vertex by
/// vertex (x, y, z).
pub fn three_sample(model: &Path, times: &[Vec<f64>]) -> (usize, Vec<f32>) {
    let dir = tempfile::tempdir().unwrap();
    let spec = serde_json::json!({"clips": times.iter().enumerate()
        .map(|(i, t)| serde_json::json!({"index": i, "times": t})).collect::<Vec<_>>()});
    let spec_path = dir.path().join("times.json");
    let bin_path = dir.path().join("out.bin");
    std::fs::write(&spec_path, spec.to_string()).unwrap();
    let summary = node_json(
        "anim.mjs",
        &[
            std::ffi::OsStr::new("sample"),
            model.as_os_str(),
            spec_path.as_os_str(),
            bin_path.as_os_str(),
        ],
    );
    let vertices = summary["vertices"].as_u64().unwrap() as usize;
    let positions = std::fs::read(&bin_path)
        .unwrap()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    (vertices, positions)
}
