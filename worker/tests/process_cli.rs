//! `kiln-worker process PACKAGE --out DIR`: the whole pipeline with no server, as teams and
//! benchmarks run it.

mod support;

use std::process::Command;

use kiln_common::signing::{ManifestSignature, ManifestSigner};

fn run(args: &[&str], data_dir: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kiln-worker"))
        .args(args)
        .env("KILN_DATA_DIR", data_dir)
        .output()
        .unwrap()
}

/// Zips `entries` into `<dir>/<name>.zip` and runs `kiln-worker process` on it (with `extra`
/// arguments) into `<dir>/<name>`: the command's output and that folder.
fn process_package(
    dir: &std::path::Path,
    name: &str,
    entries: &[(&str, &[u8])],
    extra: &[&str],
) -> (std::process::Output, std::path::PathBuf) {
    let package = dir.join(format!("{name}.zip"));
    std::fs::write(&package, support::zip_with(entries)).unwrap();
    let out = dir.join(name);
    let mut args = vec![
        "process",
        package.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    (run(&args, dir), out)
}

#[test]
fn process_writes_signed_manifest_objects_and_report() {
    let dir = tempfile::tempdir().unwrap();
    let gltf = br#"{"asset":{"version":"2.0"},"buffers":[{"uri":"mesh.bin","byteLength":4}]}"#;
    let script = "console.log('kiln');\n".repeat(100);
    let package = dir.path().join("game.zip");
    std::fs::write(
        &package,
        support::zip_with(&[
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
    std::fs::write(&package, support::zip_with(&[("../../evil.js", b"x")])).unwrap();
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
    let (output, out) = process_package(
        dir.path(),
        "out",
        &[
            ("index.html", b"<html></html>"),
            ("models/fox.glb", &fox),
            ("models/broken.glb", &fox[..fox.len() / 2]),
        ],
        &[],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    let file = |path: &str| file_entry(&report, path);
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

fn fox() -> Vec<u8> {
    std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../examples/sample-game/assets/Fox.glb"),
    )
    .unwrap()
}

/// The `files` entry at `path` of a manifest or report.
fn file_entry(doc: &serde_json::Value, path: &str) -> serde_json::Value {
    doc["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == path)
        .unwrap_or_else(|| panic!("{path} in {doc}"))
        .clone()
}

fn manifest_and_report(out: &std::path::Path) -> (serde_json::Value, serde_json::Value) {
    let read = |name: &str| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(out.join(name)).unwrap()).unwrap()
    };
    (read("manifest.json"), read("report.json"))
}

/// `process --vat` bakes every animated model; the bake's files are in the signed manifest
/// with a `vat` entry per mesh; a model the stage can't bake is named with the reason and
/// the build goes on.
#[test]
fn process_with_vat_puts_the_bake_in_the_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let still = br#"{"asset":{"version":"2.0"},"buffers":[{"uri":"mesh.bin","byteLength":4}]}"#;
    let (output, out) = process_package(
        dir.path(),
        "out",
        &[
            ("index.html", b"<!doctype html>"),
            ("models/fox.glb", &fox()),
            ("models/box.gltf", still),
            ("models/mesh.bin", b"\0\0\0\0"),
        ],
        &["--vat"],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let (manifest, report) = manifest_and_report(&out);
    let vat = manifest["vat"].as_array().unwrap();
    assert_eq!(vat.len(), 1, "{vat:?}");
    assert_eq!(vat[0]["source"], "models/fox.glb");
    assert_eq!(vat[0]["path"], "models/fox.vat/fox/vat.json");
    let paths: Vec<&str> = manifest["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    for name in [
        "mesh.glb",
        "positions-0.png",
        "normals-0.png",
        "vat.json",
        "vat.glsl",
        "vat.wgsl",
    ] {
        assert!(
            paths.contains(&format!("models/fox.vat/fox/{name}").as_str()),
            "{name}"
        );
    }
    // The VAT mesh is not a model of the game: no geometry variants of it.
    assert!(
        !paths
            .iter()
            .any(|p| p.contains("fox.vat") && p.contains(".meshopt."))
    );
    let models = report["stages"]["vat"]["models"].as_array().unwrap();
    let box_model = models
        .iter()
        .find(|m| m["source"] == "models/box.gltf")
        .unwrap();
    assert_eq!(box_model["error"], "the model has no animation to bake");
    let fox_report = &models
        .iter()
        .find(|m| m["source"] == "models/fox.glb")
        .unwrap()["report"];
    assert!(fox_report["meshes"][0]["position_max"].as_f64().unwrap() > 0.0);
}

/// A build's `kiln.toml` chooses models and settings; a bad one fails the build and says
/// which setting is wrong.
#[test]
fn kiln_toml_selects_models_and_bad_settings_fail_the_build() {
    let dir = tempfile::tempdir().unwrap();
    let toml = b"[vat]\nfiles = [\"fox.glb\"]\nencoding = \"low\"\nframe_rate = 10\n";
    let (output, out) = process_package(
        dir.path(),
        "out",
        &[("kiln.toml", toml), ("fox.glb", &fox())],
        &[],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let (manifest, _) = manifest_and_report(&out);
    assert_eq!(manifest["vat"][0]["encoding"], "low");

    let (output, out) = process_package(
        dir.path(),
        "bad-out",
        &[
            ("kiln.toml", b"[vat]\nencoding = \"ultra\"\n"),
            ("fox.glb", &fox()),
        ],
        &[],
    );
    assert_eq!(output.status.code(), Some(1));
    let (_, report) = {
        let r: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
        ((), r)
    };
    assert_eq!(report["error"]["stage"], "vat");
    assert_eq!(report["error"]["file"], "kiln.toml");
    assert!(
        report["error"]["reason"]
            .as_str()
            .unwrap()
            .contains("encoding \"ultra\"")
    );
    assert!(!out.join("manifest.json").exists());
}

/// `kiln.toml` `[models] drop_unused_attributes = true`: a triangle whose UVs no material
/// reads (it has none) loses them in both variants and the report says so; without it they
/// stay (games assign materials in code).
#[test]
fn kiln_toml_drops_attributes_no_material_reads_only_when_asked() {
    // Positions and UVs of one triangle, no material.
    let triangle = br#"{"asset": {"version": "2.0"}, "scene": 0, "scenes": [{"nodes": [0]}],
      "nodes": [{"mesh": 0}], "meshes": [{"primitives": [{"attributes": {"POSITION": 0, "TEXCOORD_0": 1}}]}],
      "buffers": [{"byteLength": 60, "uri": "data:application/octet-stream;base64,AAAAAAAAAAAAAAAAAACAPwAAAAAAAAAAAAAAAAAAgD8AAAAAAAAAAAAAAAAAAIA/AAAAAAAAAAAAAIA/"}],
      "bufferViews": [{"buffer": 0, "byteLength": 36}, {"buffer": 0, "byteOffset": 36, "byteLength": 24}],
      "accessors": [
        {"bufferView": 0, "componentType": 5126, "count": 3, "type": "VEC3", "min": [0, 0, 0], "max": [1, 1, 0]},
        {"bufferView": 1, "componentType": 5126, "count": 3, "type": "VEC2"}]}"#;
    let dir = tempfile::tempdir().unwrap();
    let mut variants = Vec::new();
    for (name, toml) in [
        ("asked", &b"[models]\ndrop_unused_attributes = true\n"[..]),
        ("default", &b"[models]\n"[..]),
    ] {
        let (output, out) = process_package(
            dir.path(),
            name,
            &[("kiln.toml", toml), ("triangle.gltf", &triangle[..])],
            &[],
        );
        assert!(
            output.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let (manifest, report) = manifest_and_report(&out);
        let dropped = report
            .pointer("/stages/geometry/models/0/report/unused_attributes_dropped")
            .cloned();
        let mut names = Vec::new();
        for variant in ["triangle.quantized.glb", "triangle.meshopt.glb"] {
            let key = file_entry(&manifest, variant)["key"]
                .as_str()
                .unwrap()
                .to_string();
            let bytes = std::fs::read(out.join(key)).unwrap();
            let json_len = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
            let json: serde_json::Value =
                serde_json::from_slice(&bytes[20..20 + json_len]).unwrap();
            let attributes = &json["meshes"][0]["primitives"][0]["attributes"];
            names.push(
                attributes
                    .as_object()
                    .unwrap()
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>(),
            );
        }
        variants.push((name, dropped, names, report));
    }
    let (_, dropped, names, report) = &variants[0];
    assert_eq!(
        dropped.as_ref(),
        Some(&serde_json::json!(["meshes[0].primitives[0].TEXCOORD_0"])),
        "{report}"
    );
    assert!(names.iter().all(|n| n == &["POSITION"]), "{names:?}");
    let (_, dropped, names, _) = &variants[1];
    assert_eq!(dropped, &None);
    assert!(
        names.iter().all(|n| n == &["POSITION", "TEXCOORD_0"]),
        "{names:?}"
    );
}

/// `kiln.toml` `[models] serve = "quantized"`: a game that loads its models itself gets the
/// quantized variant at the model's own path (what `/play/` serves); the manifest's model
/// list still names every variant. `serve = "meshopt"` needs a decoder the game did not set
/// up: the build fails on `kiln.toml` with a reason, nothing is published.
#[test]
fn kiln_toml_serves_the_quantized_variant_at_the_models_path() {
    let dir = tempfile::tempdir().unwrap();
    let process = |name: &str, toml: &[u8]| {
        process_package(
            dir.path(),
            name,
            &[("kiln.toml", toml), ("assets/Fox.glb", &fox())],
            &[],
        )
    };
    let (output, out) = process("opted-in", b"[models]\nserve = \"quantized\"\n");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let (manifest, _) = manifest_and_report(&out);
    let file = |path: &str| file_entry(&manifest, path);
    let served = file("assets/Fox.glb");
    let quantized = file("assets/Fox.quantized.glb");
    assert_eq!(served["sha256"], quantized["sha256"]);
    assert_eq!(served["key"], quantized["key"]);
    let model = &manifest["models"][0];
    let original = model["variants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["variant"] == "original")
        .unwrap();
    assert_ne!(original["url"], served["url"], "the original stays listed");
    let bytes = std::fs::read(out.join(served["key"].as_str().unwrap())).unwrap();
    assert_eq!(&bytes[..4], b"glTF");
    let json_len = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    let json = String::from_utf8_lossy(&bytes[20..20 + json_len]);
    assert!(json.contains("KHR_mesh_quantization"), "{json}");
    assert!(!json.contains("meshopt_compression"), "no decoder needed");

    let (default, out) = process("default", b"[vat]\nfiles = []\n");
    assert!(default.status.success());
    let (manifest, _) = manifest_and_report(&out);
    let f = file_entry(&manifest, "assets/Fox.glb");
    assert_eq!(
        f["size"],
        fox().len(),
        "without the opt-in: the original file"
    );

    for (name, toml, says) in [
        (
            "meshopt",
            &b"[models]\nserve = \"meshopt\"\n"[..],
            "needs the game to set up a decoder",
        ),
        (
            "typo",
            &b"[models]\nserve = \"quantised\"\n"[..],
            "serve = \"quantised\"",
        ),
        (
            "unknown",
            &b"[models]\nsrve = \"quantized\"\n"[..],
            "unknown field",
        ),
    ] {
        let (output, out) = process(name, toml);
        assert_eq!(output.status.code(), Some(1), "{name}");
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
        assert_eq!(report["error"]["file"], "kiln.toml", "{name}: {report}");
        let reason = report["error"]["reason"].as_str().unwrap();
        assert!(reason.contains(says), "{name}: {reason}");
        assert!(!out.join("manifest.json").exists(), "{name}");
    }
}
