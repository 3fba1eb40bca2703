//! `kiln-bench geometry DIR`: Kiln's geometry stage beside gltfpack on every model under DIR,
//! same bit settings, same run; sizes raw / gzip -9 / brotli -11, wall time, position error.
//!
//! gltfpack comes from npm (`worker/tests/gltf-check`, `npm install` there) or `KILN_GLTFPACK`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use kiln_worker::gltf::{Asset, Resources};
use kiln_worker::stages::geometry::{GeometryOptions, MeshoptCodec, optimize_model};

struct Dir(PathBuf);

impl Resources for Dir {
    fn load(&self, uri: &str) -> Option<Vec<u8>> {
        let decoded = uri.replace("%20", " ");
        if decoded.contains("..") || decoded.starts_with('/') {
            return None;
        }
        std::fs::read(self.0.join(decoded)).ok()
    }
}

fn models(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        if path.is_dir() {
            // Malformed inputs are for the bad-input tests, not the benchmark.
            if name != "invalid" && name != "node_modules" {
                models(&path, out);
            }
        } else if name.ends_with(".glb") || name.ends_with(".gltf") {
            out.push(path);
        }
    }
}

/// The GLB with embedded image bytes zeroed, so that compressed sizes compare geometry (and
/// the rest), not textures that one tool embeds and the other references.
fn without_images(glb: &[u8]) -> Vec<u8> {
    let Ok((json, Some(mut bin))) = kiln_worker::gltf::split_glb(glb) else {
        return glb.to_vec();
    };
    let Ok(doc) = serde_json::from_slice::<serde_json::Value>(&json) else {
        return glb.to_vec();
    };
    for image in doc["images"].as_array().into_iter().flatten() {
        let Some(v) = image["bufferView"].as_u64() else {
            continue;
        };
        let view = &doc["bufferViews"][v as usize];
        if view["buffer"].as_u64() != Some(0) {
            continue;
        }
        let start = view["byteOffset"].as_u64().unwrap_or(0) as usize;
        let end = (start + view["byteLength"].as_u64().unwrap_or(0) as usize).min(bin.len());
        bin[start.min(end)..end].fill(0);
    }
    kiln_worker::gltf::write_glb(&doc, Some(&bin))
}

fn gzip(bytes: &[u8]) -> usize {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(9));
    e.write_all(bytes).unwrap();
    e.finish().unwrap().len()
}

fn brotli(bytes: &[u8]) -> usize {
    let mut out = Vec::new();
    {
        let mut w = brotli::CompressorWriter::new(&mut out, 64 * 1024, 11, 22);
        w.write_all(bytes).unwrap();
    }
    out.len()
}

/// Non-image bytes of a model: what geometry compression can act on.
fn non_image_bytes(bytes: &[u8], resources: &dyn Resources) -> usize {
    let Ok(asset) = Asset::read(bytes, resources) else {
        return bytes.len();
    };
    let image_views: std::collections::BTreeSet<u64> = asset
        .array("images")
        .iter()
        .filter_map(|i| i["bufferView"].as_u64())
        .collect();
    let images: usize = image_views
        .iter()
        .map(|&v| asset.views.get(v as usize).map_or(0, Vec::len))
        .sum();
    let json = serde_json::to_vec(&asset.json)
        .map(|j| j.len())
        .unwrap_or(0);
    json + asset.views.iter().map(Vec::len).sum::<usize>() - images
}

fn gltfpack() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("KILN_GLTFPACK") {
        return Some(PathBuf::from(p));
    }
    let here =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gltf-check/node_modules/.bin/gltfpack");
    here.exists().then_some(here)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 || args[1] != "geometry" {
        eprintln!("usage: kiln-bench geometry DIR [--khr]");
        std::process::exit(2);
    }
    let khr = args.iter().any(|a| a == "--khr");
    // Equal bits: gltfpack's -vn applies to normals and tangents alike, so tangents get the
    // normal bits here (Kiln's own default for tangents is 12).
    let defaults = GeometryOptions::default();
    let options = GeometryOptions {
        codec: if khr {
            MeshoptCodec::Khr
        } else {
            MeshoptCodec::Ext
        },
        tangent_bits: defaults.normal_bits,
        ..defaults
    };
    let bits = |b: u32| b.to_string();
    let (vp, vt, vn, vc) = (
        bits(options.position_bits),
        bits(options.texcoord_bits),
        bits(options.normal_bits),
        bits(options.color_bits),
    );
    let mut list = Vec::new();
    models(Path::new(&args[2]), &mut list);
    let out_dir = std::env::temp_dir().join("kiln-bench");
    std::fs::create_dir_all(&out_dir).unwrap();
    let pack = gltfpack();
    println!(
        "{:<44} {:>9} {:>9} {:>9} {:>6} {:>8} {:>8} {:>6} {:>8} {:>8} {:>6} {:>7} {:>7} {:>6} {:>9}",
        "model",
        "input",
        "kiln",
        "gltfpack",
        "ratio",
        "kiln.gz",
        "gp.gz",
        "ratio",
        "kiln.br",
        "gp.br",
        "ratio",
        "kiln ms",
        "gp ms",
        "ratio",
        "kiln err"
    );
    let mut log_ratio = (0f64, 0usize);
    for path in list {
        let name = path
            .strip_prefix(&args[2])
            .unwrap_or(&path)
            .display()
            .to_string();
        let bytes = std::fs::read(&path).unwrap();
        let resources = Dir(path.parent().unwrap().to_owned());
        let input = non_image_bytes(&bytes, &resources);
        let start = Instant::now();
        let result = optimize_model(&bytes, &resources, &options);
        let kiln_ms = start.elapsed().as_secs_f64() * 1000.0;
        let kiln = match result {
            Ok(model) => model,
            Err(e) => {
                println!("{name:<44} {input:>9}  kiln: {e}");
                continue;
            }
        };
        let kiln_bytes = non_image_bytes(&kiln.meshopt, &resources);
        let (gp_bytes, gp_gz, gp_br, gp_ms) = match &pack {
            Some(pack) => {
                let out = out_dir.join("gltfpack.glb");
                let start = Instant::now();
                let status = std::process::Command::new(pack)
                    .args(["-i", path.to_str().unwrap(), "-o", out.to_str().unwrap()])
                    .args(["-vp", &vp, "-vt", &vt, "-vn", &vn, "-vc", &vc])
                    .arg(if khr { "-cz" } else { "-cc" })
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .status();
                let ms = start.elapsed().as_secs_f64() * 1000.0;
                match status {
                    Ok(s) if s.success() => {
                        let b = std::fs::read(&out).unwrap();
                        let stripped = without_images(&b);
                        (
                            non_image_bytes(&b, &resources),
                            gzip(&stripped),
                            brotli(&stripped),
                            ms,
                        )
                    }
                    _ => (0, 0, 0, ms),
                }
            }
            None => (0, 0, 0, 0.0),
        };
        let stripped = without_images(&kiln.meshopt);
        let (k_gz, k_br) = (gzip(&stripped), brotli(&stripped));
        let ratio = |a: usize, b: usize| {
            if b > 0 {
                format!("{:.3}", a as f64 / b as f64)
            } else {
                "-".into()
            }
        };
        if gp_br > 0 {
            log_ratio.0 += (k_br as f64 / gp_br as f64).ln();
            log_ratio.1 += 1;
        }
        println!(
            "{name:<44} {input:>9} {kiln_bytes:>9} {gp_bytes:>9} {:>6} {k_gz:>8} {gp_gz:>8} {:>6} {k_br:>8} {gp_br:>8} {:>6} {kiln_ms:>7.1} {gp_ms:>7.1} {:>6} {:>9.2e}",
            ratio(kiln_bytes, gp_bytes),
            ratio(k_gz, gp_gz),
            ratio(k_br, gp_br),
            if gp_ms > 0.0 {
                format!("{:.2}", kiln_ms / gp_ms)
            } else {
                "-".into()
            },
            kiln.report.max_position_error_relative,
        );
    }
    if log_ratio.1 > 0 {
        println!(
            "geometric mean kiln/gltfpack after brotli: {:.3} over {} models",
            (log_ratio.0 / log_ratio.1 as f64).exp(),
            log_ratio.1
        );
    }
    if pack.is_none() {
        println!(
            "(gltfpack not found: run `npm install` in worker/tests/gltf-check or set KILN_GLTFPACK)"
        );
    }
}
