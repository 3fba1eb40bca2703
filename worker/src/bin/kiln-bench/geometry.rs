//! `kiln-bench geometry DIR [--khr] [--drop-unused] [--keep-nodes] [--keep OUT]`: Kiln's geometry stage beside gltfpack on
//! every model under DIR (`--drop-unused`: Kiln with `drop_unused_attributes`, which gltfpack
//! does by default; off by default in Kiln; `--keep OUT`: both tools' files written to OUT),
//! same bit settings, same run: brotli -11 sizes of whole files (Kiln's as delivered, with the
//! animation pass) and of geometry alone, wall time, position error; then issue 17's targets,
//! each `met` or `NOT met` with the models that miss it.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use kiln_stages::gltf::{Asset, DirResources as Dir};

use super::{gltfpack, met, models};
use kiln_stages::stages::geometry::{GeometryOptions, MeshoptCodec, optimize_model};

/// The GLB with the bytes of some views zeroed (embedded images; with `animations`, also
/// animation data), so compressed sizes compare what the stage under test produces: textures
/// are one tool's embed and the other's reference, animations are issue 4's stage.
/// The JSON chunk is kept byte for byte (it is part of what each tool writes).
fn zeroed(glb: &[u8], animations: bool) -> Vec<u8> {
    let Ok((json, Some(bin))) = kiln_stages::gltf::split_glb(glb) else {
        return glb.to_vec();
    };
    // The binary chunk's data follows the 12-byte header, the JSON chunk and its own header.
    let bin_start = 12 + 8 + json.len() + 8;
    let mut out = glb.to_vec();
    let bin = &mut out[bin_start..bin_start + bin.len()];
    let Ok(doc) = serde_json::from_slice::<serde_json::Value>(&json) else {
        return glb.to_vec();
    };
    let mut views: Vec<u64> = doc["images"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["bufferView"].as_u64())
        .collect();
    if animations {
        for animation in doc["animations"].as_array().into_iter().flatten() {
            for sampler in animation["samplers"].as_array().into_iter().flatten() {
                for key in ["input", "output"] {
                    if let Some(a) = sampler[key].as_u64()
                        && let Some(v) = doc["accessors"][a as usize]["bufferView"].as_u64()
                    {
                        views.push(v);
                    }
                }
            }
        }
    }
    for v in views {
        let view = &doc["bufferViews"][v as usize];
        // A meshopt-compressed view's bytes are where its extension says.
        let stored = ["EXT_meshopt_compression", "KHR_meshopt_compression"]
            .iter()
            .find_map(|e| view["extensions"].get(*e))
            .unwrap_or(view);
        if stored["buffer"].as_u64() != Some(0) {
            continue;
        }
        let start = stored["byteOffset"].as_u64().unwrap_or(0) as usize;
        let end = (start + stored["byteLength"].as_u64().unwrap_or(0) as usize).min(bin.len());
        bin[start.min(end)..end].fill(0);
    }
    out
}

/// Max position error (relative to the bbox diagonal) of `output` against `source`, measured
/// by the outside checker (`tests/gltf-check/check.mjs`, three.js in Node).
fn measured_error(source: &Path, output: &Path) -> Option<f64> {
    let check = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gltf-check/check.mjs");
    let out = std::process::Command::new("node")
        .arg(check)
        .arg("--reference")
        .arg(source)
        .arg(output)
        .arg("--no-objects")
        .output()
        .ok()?;
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    report["outputs"][0]["compare"]["max_position_error_rel"].as_f64()
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
fn non_image_bytes(bytes: &[u8], asset: Option<&Asset>) -> usize {
    let Some(asset) = asset else {
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

pub fn run(args: &[String]) {
    let khr = args.iter().any(|a| a == "--khr");
    let drop_unused = args.iter().any(|a| a == "--drop-unused");
    // gltfpack keeps the scene's nodes (-kn) as Kiln does, instead of merging meshes into
    // fewer nodes: the fair anchor for scenes whose nodes games move by name.
    let keep_nodes = args.iter().any(|a| a == "--keep-nodes");
    // `--keep DIR`: both tools' files per model are kept there, to look into.
    let keep = args
        .iter()
        .position(|a| a == "--keep")
        .and_then(|i| args.get(i + 1))
        .map(std::path::PathBuf::from);
    // Equal bits: gltfpack -vn 10 stores tangents as 8-bit octahedral, so tangents get 8
    // bits here (Kiln's own default for tangents is 12).
    let defaults = GeometryOptions::default();
    let options = GeometryOptions {
        codec: if khr {
            MeshoptCodec::Khr
        } else {
            MeshoptCodec::Ext
        },
        tangent_bits: 8,
        // Geometry only: animations are the animation benchmark's.
        animation: None,
        drop_unused_attributes: drop_unused,
        ..defaults.clone()
    };
    // The file a player gets: the same, with the animation pass and its error budget on.
    let delivered_options = GeometryOptions {
        animation: defaults.animation.clone(),
        ..options.clone()
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
    if list.is_empty() {
        eprintln!(
            "kiln-bench geometry: no .glb or .gltf model under {}",
            args[2]
        );
        std::process::exit(1);
    }
    let out_dir = std::env::temp_dir().join("kiln-bench");
    std::fs::create_dir_all(&out_dir).unwrap();
    let pack = gltfpack();
    println!(
        "{:<44} {:>9} | {:>8} {:>8} {:>6} | {:>8} {:>8} {:>6} | {:>7} {:>7} {:>5} | {:>8} {:>8}",
        "model",
        "input",
        "kiln.br",
        "gp.br",
        "ratio",
        "geo.kiln",
        "geo.gp",
        "ratio",
        "kiln ms",
        "gp ms",
        "ratio",
        "kiln err",
        "gp err"
    );
    let mut rows: Vec<Row> = Vec::new();
    for path in list {
        let name = path
            .strip_prefix(&args[2])
            .unwrap_or(&path)
            .display()
            .to_string();
        let bytes = std::fs::read(&path).unwrap();
        let resources = Dir(path.parent().unwrap().to_owned());
        let source = Asset::read(&bytes, &resources).ok();
        let input = non_image_bytes(&bytes, source.as_ref());
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
        // The delivered file differs only where the model has animations.
        let animated = source
            .as_ref()
            .is_some_and(|a| !a.array("animations").is_empty());
        let delivered = if animated {
            match optimize_model(&bytes, &resources, &delivered_options) {
                Ok(model) => model.meshopt,
                Err(e) => {
                    println!("{name:<44} {input:>9}  kiln (delivered): {e}");
                    continue;
                }
            }
        } else {
            kiln.meshopt.clone()
        };
        // Written beside the source so the checker resolves external images.
        let kiln_file = path.with_file_name(format!(".kiln-bench-{}.glb", std::process::id()));
        std::fs::write(&kiln_file, &kiln.meshopt).unwrap();
        let kiln_err = measured_error(&path, &kiln_file);
        let _ = std::fs::remove_file(&kiln_file);
        let Some(pack) = &pack else {
            println!(
                "{name:<44} {input:>9} | {:>8}",
                brotli(&zeroed(&delivered, false))
            );
            continue;
        };
        // Per process: two benchmarks at once (CI beside a developer's run) must not read
        // each other's half-written file.
        let out = out_dir.join(format!("gltfpack-{}.glb", std::process::id()));
        let start = Instant::now();
        let status = std::process::Command::new(pack)
            .args(["-i", path.to_str().unwrap(), "-o", out.to_str().unwrap()])
            .args(["-vp", &vp, "-vt", &vt, "-vn", &vn, "-vc", &vc])
            .arg(if khr { "-cz" } else { "-cc" })
            .args(keep_nodes.then_some("-kn"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
        let gp_ms = start.elapsed().as_secs_f64() * 1000.0;
        if !status.is_ok_and(|s| s.success()) {
            println!("{name:<44} {input:>9}  gltfpack failed");
            continue;
        }
        let gp = std::fs::read(&out).unwrap();
        if let Some(dir) = &keep {
            let stem = name.replace(['/', '\\'], "_");
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join(format!("{stem}.kiln.glb")), &delivered).unwrap();
            std::fs::write(dir.join(format!("{stem}.gltfpack.glb")), &gp).unwrap();
        }
        let gp_err = measured_error(&path, &out);
        let row = Row {
            name,
            whole: (
                brotli(&zeroed(&delivered, false)),
                brotli(&zeroed(&gp, false)),
            ),
            geometry: (
                brotli(&zeroed(&kiln.meshopt, true)),
                brotli(&zeroed(&gp, true)),
            ),
            errors: (kiln_err, gp_err),
        };
        let err = |e: Option<f64>| e.map_or("-".to_string(), |e| format!("{e:.2e}"));
        let ((k_all, g_all), (k_geo, g_geo)) = (row.whole, row.geometry);
        println!(
            "{:<44} {input:>9} | {k_all:>8} {g_all:>8} {:>6.3} | {k_geo:>8} {g_geo:>8} {:>6.3} | {kiln_ms:>7.1} {gp_ms:>7.1} {:>5.2} | {:>8} {:>8}",
            row.name,
            k_all as f64 / g_all as f64,
            k_geo as f64 / g_geo as f64,
            kiln_ms / gp_ms,
            err(kiln_err),
            err(gp_err),
        );
        rows.push(row);
    }
    if !rows.is_empty() {
        summarise(&rows);
    }
    if pack.is_none() {
        println!(
            "(gltfpack not found: run `npm install` in worker/tests/gltf-check or set KILN_GLTFPACK)"
        );
    }
}

/// One model's brotli sizes, Kiln's first: whole files (Kiln's as delivered, animation pass
/// included) and geometry only (both tools' animation data zeroed); and the checker's error.
struct Row {
    name: String,
    whole: (usize, usize),
    geometry: (usize, usize),
    errors: (Option<f64>, Option<f64>),
}

/// Issue 17's geometry targets, each printed as met or with the models that miss it: every
/// model at most 1.00× gltfpack and the total under 0.95×, whole files and geometry only;
/// the error never larger than gltfpack's on the outside checker.
fn summarise(rows: &[Row]) {
    println!();
    for (what, pick) in [
        (
            "whole files (Kiln as delivered)",
            (|r: &Row| r.whole) as fn(&Row) -> (usize, usize),
        ),
        ("geometry only (animation data zeroed)", |r: &Row| {
            r.geometry
        }),
    ] {
        let (k, g): (usize, usize) = rows
            .iter()
            .map(pick)
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
        let mean = (rows
            .iter()
            .map(|r| {
                let (k, g) = pick(r);
                (k as f64 / g as f64).ln()
            })
            .sum::<f64>()
            / rows.len() as f64)
            .exp();
        let misses: Vec<String> = rows
            .iter()
            .filter(|r| pick(r).0 > pick(r).1)
            .map(|r| format!("{} {:.3}", r.name, pick(r).0 as f64 / pick(r).1 as f64))
            .collect();
        let total = k as f64 / g as f64;
        println!(
            "{what}: total {k} vs {g} bytes = {total:.3} (target < 0.95: {}); geometric mean {mean:.3}",
            met(total < 0.95)
        );
        println!(
            "  every model <= 1.00x: {} ({} of {} models at or under)",
            met(misses.is_empty()),
            rows.len() - misses.len(),
            rows.len()
        );
        if !misses.is_empty() {
            println!("  over: {}", misses.join(", "));
        }
    }
    let larger: Vec<String> = rows
        .iter()
        .filter_map(|r| match r.errors {
            // Float printing noise on inputs gltfpack had quantized already.
            (Some(k), Some(g)) if k > g + 1e-7 => Some(format!("{} {k:.2e} vs {g:.2e}", r.name)),
            _ => None,
        })
        .collect();
    let measured = rows
        .iter()
        .filter(|r| r.errors.0.is_some() && r.errors.1.is_some())
        .count();
    println!(
        "error never larger than gltfpack's: {} ({} of {measured} measured){}",
        met(larger.is_empty()),
        measured - larger.len(),
        if larger.is_empty() {
            String::new()
        } else {
            format!("; larger: {}", larger.join(", "))
        }
    );
    assert!(!rows.is_empty(), "the benchmark compared no model");
}
