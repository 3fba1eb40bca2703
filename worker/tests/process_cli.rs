//! `kiln-worker process PACKAGE --out DIR`: the whole pipeline with no server, as teams and
//! benchmarks run it.

use std::io::Write;
use std::process::Command;

use kiln_common::signing::{ManifestSignature, ManifestSigner};

fn zip_with(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default();
    for (name, data) in entries {
        zip.start_file(*name, options).unwrap();
        zip.write_all(data).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

fn run(args: &[&str], data_dir: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kiln-worker"))
        .args(args)
        .env("KILN_DATA_DIR", data_dir)
        .output()
        .unwrap()
}

#[test]
fn process_writes_signed_manifest_objects_and_report() {
    let dir = tempfile::tempdir().unwrap();
    let gltf = br#"{"asset":{"version":"2.0"},"buffers":[{"uri":"mesh.bin","byteLength":4}]}"#;
    let script = "console.log('kiln');\n".repeat(100);
    let package = dir.path().join("game.zip");
    std::fs::write(
        &package,
        zip_with(&[
            (
                "index.html",
                b"<!doctype html><script src=main.js></script>",
            ),
            ("main.js", script.as_bytes()),
            ("models/box.gltf", gltf),
            ("models/mesh.bin", b"\0\0\0\0"),
        ]),
    )
    .unwrap();
    let out = dir.path().join("out");
    let key = dir.path().join("key");
    let output = run(
        &[
            "process",
            package.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
            "--game",
            "box",
        ],
        dir.path(),
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    let manifest_bytes = std::fs::read(out.join("manifest.json")).unwrap();
    let signature = ManifestSignature::parse_header(
        std::fs::read_to_string(out.join("manifest.sig"))
            .unwrap()
            .trim(),
    )
    .unwrap();
    let (signer, _) = ManifestSigner::load_or_generate(&key).unwrap();
    assert!(signer.public_jwk().verify(&manifest_bytes, &signature));

    let manifest: serde_json::Value = serde_json::from_slice(&manifest_bytes).unwrap();
    assert_eq!(manifest["game"], "box");
    let files = manifest["files"].as_array().unwrap();
    // Four files of the package and the model's two variants.
    assert_eq!(files.len(), 6);
    for file in files {
        let object = std::fs::read(out.join(file["key"].as_str().unwrap())).unwrap();
        use sha2::Digest;
        assert_eq!(
            hex::encode(sha2::Sha256::digest(&object)),
            file["sha256"].as_str().unwrap()
        );
        for form in file["encodings"].as_array().unwrap() {
            assert!(out.join(form["key"].as_str().unwrap()).exists());
        }
    }
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    let kinds: Vec<(&str, &str)> = report["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["path"].as_str().unwrap(), f["kind"].as_str().unwrap()))
        .collect();
    assert!(
        kinds.contains(&("models/mesh.bin", "gltf-buffer")),
        "{kinds:?}"
    );
    assert!(kinds.contains(&("main.js", "js")));
    let js = report["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "main.js")
        .unwrap();
    assert!(js["brotli_bytes"].as_u64().unwrap() < js["bytes_before"].as_u64().unwrap());
    // Nothing left behind but the outputs.
    let leftovers: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".work") || n == ".tmp")
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn process_refuses_a_hostile_package_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let package = dir.path().join("evil.zip");
    std::fs::write(&package, zip_with(&[("../../evil.js", b"x")])).unwrap();
    let out = dir.path().join("out");
    let output = run(
        &[
            "process",
            package.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("parent directory"), "{stderr}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["error"]["stage"], "unpack");
    assert_eq!(report["error"]["file"], "../../evil.js");
    assert!(!dir.path().join("evil.js").exists());
    assert!(
        !out.join("manifest.json").exists(),
        "no manifest for a refused package"
    );

    let not_a_package = dir.path().join("notes.txt");
    std::fs::write(&not_a_package, "hello").unwrap();
    let output = run(
        &[
            "process",
            not_a_package.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("not a zip or tar.gz"));
}

#[test]
fn a_broken_model_fails_that_file_not_the_build() {
    let dir = tempfile::tempdir().unwrap();
    let fox = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/sample-game/assets/Fox.glb"
    ))
    .unwrap();
    let package = dir.path().join("game.zip");
    std::fs::write(
        &package,
        zip_with(&[
            ("index.html", b"<html></html>"),
            ("models/fox.glb", &fox),
            ("models/broken.glb", &fox[..fox.len() / 2]),
        ]),
    )
    .unwrap();
    let out = dir.path().join("out");
    let output = run(
        &[
            "process",
            package.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    let file = |path: &str| {
        report["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == path)
            .unwrap_or_else(|| panic!("{path} in report"))
            .clone()
    };
    let broken = file("models/broken.glb");
    assert!(
        broken["error"].as_str().unwrap().contains("glTF"),
        "{broken}"
    );
    assert!(
        file("models/fox.meshopt.glb")["bytes_after"]
            .as_u64()
            .unwrap()
            < fox.len() as u64
    );
    assert!(
        file("models/fox.quantized.glb")["bytes_after"]
            .as_u64()
            .unwrap()
            < fox.len() as u64
    );
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    let models = manifest["models"].as_array().unwrap();
    assert_eq!(models.len(), 1, "only the good model has variants");
    assert_eq!(models[0]["path"], "models/fox.glb");
}
