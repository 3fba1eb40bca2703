//! What each fuzz target does with its input (`fuzz/fuzz_targets/`), in one place, so that
//! the fuzzer and the regression test (`worker/tests/fuzz_regressions.rs`, which replays every
//! input the fuzzer ever crashed on, `fuzz/regressions/<target>/`) run the same code.
//!
//! Each function takes arbitrary bytes, runs a stage on them as the pipeline would, and
//! panics only where a property is broken (a variant that does not read back, a path that
//! escapes the build, a forged signature that verifies): an error from the stage is the
//! expected answer to bad input.

use std::io::Write;
use std::path::Path;
use std::sync::OnceLock;

use kiln_common::config::UnpackLimits;
use kiln_common::manifest::Manifest;
use kiln_common::signing::{Jwk, ManifestSignature, ManifestSigner};
use kiln_common::trust::verify_trust_document;

use crate::gltf::{Asset, NoResources};
use crate::stages::animation::{self, AnimationOptions};
use crate::stages::engines::html::{BootEngine, BootLinks, PageInputs, rewrite_page};
use crate::stages::engines::{modules, rules};
use crate::stages::geometry::{self, GeometryOptions, MeshoptCodec};
use crate::stages::vat::{self, VatOptions};
use crate::stages::{PackageFormat, Stage, inventory, unpack};

/// The fuzz targets by name, as `cargo fuzz list` prints them (`fuzz/Cargo.toml`'s bins).
pub const TARGETS: [&str; 11] = [
    "unpack_zip",
    "unpack_tar_gz",
    "inventory",
    "gltf_geometry",
    "animation",
    "vat",
    "engine_detection",
    "page_rewrite",
    "telemetry",
    "manifest_signature",
    "images",
];

/// Runs target `name` on `data`; `scratch` is an empty directory the unpack targets write
/// into (and leave empty). Unknown names panic (a regression folder with a typo).
pub fn run(name: &str, data: &[u8], scratch: &Path) {
    match name {
        "unpack_zip" => unpack_zip(data, scratch),
        "unpack_tar_gz" => unpack_tar_gz(data, scratch),
        "inventory" => gltf_inventory(data),
        "gltf_geometry" => gltf_geometry(data),
        "animation" => animation_stage(data),
        "vat" => vat_stage(data),
        "engine_detection" => engine_detection(data),
        "page_rewrite" => page_rewrite(data),
        "telemetry" => telemetry(data),
        "manifest_signature" => manifest_signature(data),
        "images" => image_stage(data),
        other => panic!("no fuzz target {other:?}"),
    }
}

/// Stage `unpack` on a zip package: a result or a clear error, and nothing written outside
/// the destination.
pub fn unpack_zip(data: &[u8], scratch: &Path) {
    unpack_package(data, PackageFormat::Zip, "package.zip", scratch);
}

/// Stage `unpack` on a tar.gz package. Inputs that are not gzip are taken as a plain tar and
/// gzipped first, so the fuzzer works on the tar layer (headers, pax, GNU long names).
pub fn unpack_tar_gz(data: &[u8], scratch: &Path) {
    let bytes = if data.starts_with(&[0x1f, 0x8b]) {
        data.to_vec()
    } else {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(data).expect("gzip into memory");
        gz.finish().expect("gzip into memory")
    };
    unpack_package(&bytes, PackageFormat::TarGz, "package.tar.gz", scratch);
}

fn unpack_package(bytes: &[u8], format: PackageFormat, name: &str, scratch: &Path) {
    let package = scratch.join(name);
    let dest = scratch.join("dest");
    std::fs::write(&package, bytes).expect("write the package into scratch");
    std::fs::create_dir(&dest).expect("create dest in scratch");
    let limits = UnpackLimits {
        max_total_bytes: 64 << 20,
        ..UnpackLimits::default()
    };
    let input = unpack::Package {
        path: &package,
        format,
        dest: &dest,
    };
    let _ = unpack::Step::run(input, &limits, &mut |_| {});
    let mut names: Vec<_> = std::fs::read_dir(scratch)
        .expect("read scratch")
        .map(|e| e.expect("scratch entry").file_name())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [std::ffi::OsString::from("dest"), name.into()],
        "wrote outside dest"
    );
    std::fs::remove_dir_all(&dest).expect("clean dest");
    std::fs::remove_file(&package).expect("clean the package");
}

/// Stage `inventory`'s reading of a `.gltf`: its external resources, each resolved inside the
/// build or refused.
pub fn gltf_inventory(data: &[u8]) {
    if let Ok(resources) = inventory::gltf_resources(data) {
        for (uri, _) in resources {
            if let Some(path) = inventory::resolve_uri("models/a/model.gltf", &uri) {
                assert!(!path.split('/').any(|s| s == ".."), "{uri:?} → {path:?}");
            }
        }
    }
}

/// The glTF reader and stage `geometry` (which runs the animation stage first): one model's
/// bytes to its variants, or a clear error; what the stage writes, Kiln reads back.
pub fn gltf_geometry(data: &[u8]) {
    model_textures(data);
    if Asset::read(data, &NoResources).is_err() {
        return;
    }
    if let Ok(model) = geometry::optimize_model(data, &NoResources, &GeometryOptions::default()) {
        Asset::read(&model.quantized, &NoResources).expect("quantized variant reads back");
        Asset::read(&model.meshopt, &NoResources).expect("meshopt variant reads back");
        for variant in [&model.quantized, &model.meshopt] {
            let rewritten = model_textures(variant);
            if let Some(out) = rewritten {
                Asset::read(&out, &NoResources).expect("a variant with new textures reads back");
            }
        }
    }
}

/// Stage `images` putting new bytes in place of every image a GLB embeds (as it does in the
/// variants): the rewritten file, where it could be, holds exactly the new bytes there.
fn model_textures(glb: &[u8]) -> Option<Vec<u8>> {
    use crate::stages::images::codec::Format;
    use crate::stages::images::model;
    let (json, bin) = model::read_glb(glb).ok()?;
    let images = model::model_images(&json);
    let webp = b"RIFF\x04\0\0\0WEBP".to_vec();
    let chosen: std::collections::BTreeMap<_, _> = images
        .iter()
        .filter(|i| {
            i.uri.is_some()
                || i.view
                    .is_some_and(|v| model::view_bytes(&json, &bin, v).is_ok())
        })
        .map(|i| (i.index, (webp.clone(), Format::Webp)))
        .collect();
    let out = model::with_textures(json, &bin, &images, &chosen).ok()?;
    let (json, bin) = model::read_glb(&out).expect("a rewritten GLB reads back");
    for image in images.iter().filter(|i| chosen.contains_key(&i.index)) {
        let view = json["images"][image.index]["bufferView"]
            .as_u64()
            .expect("view") as usize;
        assert_eq!(
            model::view_bytes(&json, &bin, view).expect("the view"),
            webp
        );
    }
    Some(out)
}

/// Stage `animation` alone (keyframe reduction and quantization) on one model's bytes.
pub fn animation_stage(data: &[u8]) {
    let _ = animation::animation_only_variants(
        data,
        &NoResources,
        &AnimationOptions::default(),
        MeshoptCodec::Ext,
    );
}

/// Stage `vat`: one model baked into vertex animation textures, or a clear error.
pub fn vat_stage(data: &[u8]) {
    if let Ok(asset) = Asset::read(data, &NoResources) {
        let _ = vat::bake_model(&asset, "model.glb", &VatOptions::default());
    }
}

/// Stage `images` on one file's bytes (PNG, JPEG, WebP or anything else), lossless and
/// lossy, under a small pixel limit: the original kept with a reason, or bytes that decode
/// (the stage itself checks a lossless output shows the source's pixels; here they are
/// decoded once more).
pub fn image_stage(data: &[u8]) {
    use crate::stages::images::{self, ImageOptions, Plan, Role};
    let options = ImageOptions {
        max_pixels: 256 * 256,
        png_level: 1,
        ..ImageOptions::default()
    };
    // As uploaded, as a glTF's texture, and scaled to fit 32 pixels (`[images] max_size`).
    for (role, max_size) in [
        (Role::Standalone, None),
        (Role::GltfTexture, None),
        (Role::Standalone, Some(32)),
    ] {
        let plan = Plan {
            role,
            lossy: true,
            bound: options.min_ssimulacra2,
            data_texture: false,
            max_size,
        };
        let out = images::optimize_image(data, &plan, &options);
        if let Some((bytes, _)) = &out.chosen {
            assert!(bytes.len() < data.len(), "a chosen encoding is smaller");
            let decoded = images::decode_source(bytes, options.max_pixels)
                .expect("a chosen encoding decodes");
            if let Some([w, h]) = out.result.resized {
                assert_eq!(
                    (decoded.width(), decoded.height()),
                    (w, h),
                    "the scaled size"
                );
                assert!(w.max(h) <= 32, "fits max_size");
            } else if out.result.chosen != "webp-lossy" {
                let source = images::decode_source(data, options.max_pixels).expect("source");
                assert!(images::codec::same_pixels(&source, &decoded));
            }
        } else {
            assert!(out.result.kept.is_some(), "a kept image says why");
        }
    }
}

/// Stage `engines`' detection: the shipped rule table on a script's bytes, module sniffing
/// and the static import scan.
pub fn engine_detection(data: &[u8]) {
    static RULES: OnceLock<rules::EngineRules> = OnceLock::new();
    let rules = RULES.get_or_init(|| rules::EngineRules::load(None).expect("shipped rules"));
    let _ = rules.detect("js/engine.js", data);
    let _ = rules::is_module("js/engine.mjs", data);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = modules::imports_of(text);
    }
}

/// Stage `engines`' page rewrite (`engines/html.rs`): a page that loads a library engine, its
/// modules read from the input. Input: the page, then after a NUL byte the source of
/// `main.js` (which the page may import).
pub fn page_rewrite(data: &[u8]) {
    let (page, module) = split_at_byte(data, 0);
    let (Ok(page), Ok(module)) = (std::str::from_utf8(page), std::str::from_utf8(module)) else {
        return;
    };
    let engines = [BootEngine {
        name: "three".into(),
        version: "0.170.0".into(),
        sha256: "00".repeat(32),
        size: 1000,
        url: "https://cdn.example/library/three.js".into(),
        path: "lib/three.module.js".into(),
        global: "THREE".into(),
        module: true,
        build_path: "lib/three.module.js".into(),
    }];
    let links = BootLinks {
        loader: "https://content.example/sdk/kiln-loader.js".into(),
        game: "game".into(),
        manifest: "https://content.example/v1/games/game/manifest".into(),
        telemetry: "https://content.example/v1/telemetry".into(),
        keys: vec![],
        build: "build".into(),
        base: Some("https://content.example/play/game/@build/".into()),
    };
    let read = |path: &str| match path {
        "main.js" | "js/main.js" => Some(module.to_string()),
        "lib/three.module.js" => Some("export const REVISION = '170';".to_string()),
        _ => None,
    };
    let models = ["models/fox.glb".to_string()];
    let assets = ["img/atlas.png".to_string()];
    let inputs = PageInputs {
        engines: &engines,
        links: &links,
        read: &read,
        models: &models,
        assets: &assets,
    };
    let _ = rewrite_page("index.html", page, &inputs);
}

/// The loader's telemetry beacon parser (`common/src/telemetry.rs`), on a beacon body.
pub fn telemetry(data: &[u8]) {
    if let Ok(parsed) = kiln_common::telemetry::parse(data, 50) {
        assert!(parsed.events.len() <= 50);
    }
}

/// Manifests, trust documents and their signatures (`common/src/manifest.rs`,
/// `common/src/signing.rs`, `common/src/trust.rs`): the `Kiln-Signature` header, a JWK, a
/// manifest, and verification. Input: the header line, then
/// the manifest bytes. A forged signature never verifies; the real one over the same bytes
/// does.
pub fn manifest_signature(data: &[u8]) {
    static SIGNER: OnceLock<ManifestSigner> = OnceLock::new();
    let signer = SIGNER.get_or_init(|| ManifestSigner::from_seed([7; 32]));
    let (header, body) = split_at_byte(data, b'\n');
    let _ = serde_json::from_slice::<Manifest>(body);
    if let Ok(jwk) = serde_json::from_slice::<Jwk>(body) {
        let _ = jwk.verifying_key();
    }
    if let Ok(header) = std::str::from_utf8(header)
        && let Some(signature) = ManifestSignature::parse_header(header)
    {
        assert!(!signer.public_jwk().verify(body, &signature) || signature == signer.sign(body));
        let real = signer.sign(body);
        assert!(signer.public_jwk().verify(body, &real));
        // The same bytes as a trust document (`common/src/trust.rs`, the loader's twin): only
        // the pinned root's real signature can make it verify.
        let roots = [signer.public_jwk()];
        let now = chrono::Utc::now();
        if verify_trust_document(body, std::slice::from_ref(&signature), &roots, now).is_ok() {
            assert!(
                signature == real,
                "a forged signature verified a trust document"
            );
        }
        let _ = verify_trust_document(body, &[real], &roots, now);
    }
}

/// `data` before the first `byte`, and after it (empty without one).
fn split_at_byte(data: &[u8], byte: u8) -> (&[u8], &[u8]) {
    match data.iter().position(|&b| b == byte) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[]),
    }
}
