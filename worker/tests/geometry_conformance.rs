//! Every model in `../shared/assets` (when present) and the sample game's Fox through the
//! geometry stage, each variant judged by outside tools (`tests/gltf-check`: the Khronos
//! glTF-Validator, meshoptimizer's own decoder, three.js GLTFLoader + MeshoptDecoder).

use std::path::{Path, PathBuf};
use std::process::Command;

use kiln_stages::gltf::DirResources as Dir;
use kiln_stages::stages::geometry::{GeometryOptions, MeshoptCodec, optimize_model};

mod support;

fn checker() -> PathBuf {
    support::gltf_check().join("check.mjs")
}

use support::models;

fn check_all(codec: MeshoptCodec) {
    let check = checker();
    let out_dir = tempfile::tempdir().unwrap();
    let options = GeometryOptions {
        codec,
        ..GeometryOptions::default()
    };
    let mut failures = Vec::new();
    for (n, model) in models().iter().enumerate() {
        let bytes = std::fs::read(model).unwrap();
        let resources = Dir(model.parent().unwrap().to_owned());
        let optimized = match optimize_model(&bytes, &resources, &options) {
            Ok(m) => m,
            Err(e) => {
                failures.push(format!("{}: stage failed: {e}", model.display()));
                continue;
            }
        };
        // Outputs sit beside the source so relative image URIs resolve as in a build.
        let dir = out_dir.path().join(n.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        copy_dir(model.parent().unwrap(), &dir);
        let quantized = dir.join("kiln.quantized.glb");
        let meshopt = dir.join("kiln.meshopt.glb");
        std::fs::write(&quantized, &optimized.quantized).unwrap();
        std::fs::write(&meshopt, &optimized.meshopt).unwrap();
        let output = Command::new("node")
            .arg(&check)
            .arg("--reference")
            .arg(model)
            .arg(&quantized)
            .arg(&meshopt)
            .arg("--no-objects")
            .output()
            .expect("node runs the checker");
        let report: serde_json::Value = match serde_json::from_slice(&output.stdout) {
            Ok(r) => r,
            Err(e) => {
                failures.push(format!(
                    "{}: checker output unreadable: {e}: {}",
                    model.display(),
                    String::from_utf8_lossy(&output.stderr)
                ));
                continue;
            }
        };
        let source_errors = report["reference"]["validator"]["numErrors"]
            .as_u64()
            .unwrap_or(0);
        for out in report["outputs"].as_array().into_iter().flatten() {
            let failed: Vec<String> = out["failed"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f.as_str().map(str::to_string))
                // A source with validator errors is judged by not adding any (below).
                .filter(|f| !(source_errors > 0 && f.contains("validator_no_errors")))
                // Morph deltas have their own (coarser) bits: judged against their bound below.
                .filter(|f| f != "morph_error_within_tolerance")
                .collect();
            // Deltas sit on a grid of step max|delta| / (2^(bits-1) - 1): at most half a step
            // per axis, √3/2 of a step as a vector (deltas are within the model's extent).
            let morph_bound = 3f64.sqrt() / 2.0 / ((1u64 << (options.morph_bits - 1)) - 1) as f64;
            for object in out["compare"]["per_object"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let error = object["morph"]["max_position_error_scene_rel"]
                    .as_f64()
                    .unwrap_or(0.0);
                if error > morph_bound {
                    failures.push(format!(
                        "{} → {}: morph error {error:.2e} of the scene > bound {morph_bound:.2e}",
                        model.display(),
                        out["file"]
                    ));
                }
            }
            let errors = out["validator"]["numErrors"].as_u64().unwrap_or(0);
            let decoded = out["decoded_validator"]["numErrors"].as_u64().unwrap_or(0);
            if errors > source_errors || decoded > source_errors {
                failures.push(format!(
                    "{} → {}: validator errors {errors} (decoded {decoded}) > source's {source_errors}: {}",
                    model.display(),
                    out["file"],
                    out["validator"]["messages"]
                ));
            }
            if !failed.is_empty() {
                failures.push(format!(
                    "{} → {}: {failed:?} {}",
                    model.display(),
                    out["file"],
                    out["compare"]
                ));
            }
        }
        eprintln!(
            "{:<60} quantized {:>9} meshopt {:>9} max err {:.2e}",
            model.display(),
            optimized.report.quantized_bytes,
            optimized.report.meshopt_bytes,
            optimized.report.max_position_error_relative
        );
    }
    assert!(
        failures.is_empty(),
        "{} problems:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn copy_dir(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let path = entry.path();
        if path.is_file() {
            std::fs::copy(&path, to.join(entry.file_name())).unwrap();
        }
    }
}

#[test]
fn every_model_passes_the_validator_decoder_and_three_js_ext() {
    check_all(MeshoptCodec::Ext);
}

#[test]
fn every_model_passes_the_validator_decoder_and_three_js_khr() {
    check_all(MeshoptCodec::Khr);
}

/// The Khronos validator's malformed test files: each gets a result or a clear error from the
/// stage — never a panic.
#[test]
fn malformed_models_never_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/assets/invalid/validator");
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "glb" || e == "gltf") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&dir, &mut files);
    if files.is_empty() {
        support::require_corpus();
        eprintln!("{} is not here: nothing to check", dir.display());
        return;
    }
    // The corpus holds 40 of the validator's malformed models; fewer means a broken copy.
    assert!(
        files.len() >= 40,
        "only {} malformed files found",
        files.len()
    );
    let (mut ok, mut refused) = (0, 0);
    for file in &files {
        let bytes = std::fs::read(file).unwrap();
        let resources = Dir(file.parent().unwrap().to_owned());
        match optimize_model(&bytes, &resources, &GeometryOptions::default()) {
            Ok(_) => ok += 1,
            Err(e) => {
                assert!(!e.to_string().is_empty());
                refused += 1;
            }
        }
    }
    eprintln!(
        "{} malformed files: {ok} optimised, {refused} refused with a reason",
        files.len()
    );
    assert_eq!(ok + refused, files.len());
    assert!(refused > 0, "no malformed file was refused");
}
