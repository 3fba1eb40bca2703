//! `kiln-bench animation DIR`: on every animated model, Kiln's animation stage at several
//! tolerances beside gltfpack (`-cc`, `-cc -af 0`, default) and glTF-Transform (`resample` +
//! `meshopt`): animation bytes (as stored, and after gzip -9) against the error of each output
//! measured by the same metric (`animation::metric`: every vertex, 4× the source key rate).
//! Then, per gltfpack setting, Kiln's bytes at an error no larger than that setting's.

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use kiln_stages::animation::metric::{MetricOptions, compare};
use kiln_stages::gltf::{Asset, DirResources, Resources, split_glb};
use kiln_stages::stages::animation::{AnimationOptions, Tolerance, animation_only_variants};
use kiln_stages::stages::geometry::MeshoptCodec;
use serde_json::Value;

use super::{gltf_check_dir, gltfpack, models};

const TOLERANCES: [f64; 7] = [1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 4e-4, 1e-3];
const GLTFPACK: [(&str, &[&str]); 3] = [
    ("gltfpack -cc", &["-cc"]),
    ("gltfpack -cc -af 0", &["-cc", "-af", "0"]),
    ("gltfpack", &[]),
];

/// One output's measurements.
struct Row {
    tool: String,
    bytes: usize,
    gzip: usize,
    /// Max and p99 error over all clips, relative to the diagonal (`None`: not measurable).
    error: Option<(f64, f64)>,
    durations_changed: bool,
    ms: f64,
    note: String,
}

/// The stored bytes of every view animation samplers read (meshopt views: their compressed
/// bytes), concatenated.
fn animation_payload(bytes: &[u8], resources: &dyn Resources) -> Vec<u8> {
    let glb = bytes
        .starts_with(b"glTF")
        .then(|| split_glb(bytes).ok())
        .flatten();
    let asset = Asset::read(bytes, resources).ok();
    let doc: Value = match (&glb, &asset) {
        (Some((json, _)), _) => serde_json::from_slice(json).unwrap_or(Value::Null),
        (None, Some(a)) => a.json.clone(),
        _ => return Vec::new(),
    };
    let mut views = std::collections::BTreeSet::new();
    for animation in doc["animations"].as_array().into_iter().flatten() {
        for sampler in animation["samplers"].as_array().into_iter().flatten() {
            for key in ["input", "output"] {
                if let Some(a) = sampler[key].as_u64()
                    && let Some(v) = doc["accessors"][a as usize]["bufferView"].as_u64()
                {
                    views.insert(v as usize);
                }
            }
        }
    }
    let mut out = Vec::new();
    for v in views {
        let view = &doc["bufferViews"][v];
        let stored = ["EXT_meshopt_compression", "KHR_meshopt_compression"]
            .iter()
            .find_map(|e| view["extensions"].get(*e))
            .unwrap_or(view);
        match (&glb, stored["buffer"].as_u64()) {
            (Some((_, Some(bin))), Some(0)) => {
                let start = stored["byteOffset"].as_u64().unwrap_or(0) as usize;
                let end =
                    (start + stored["byteLength"].as_u64().unwrap_or(0) as usize).min(bin.len());
                out.extend_from_slice(&bin[start.min(end)..end]);
            }
            _ => {
                if let Some(a) = &asset {
                    out.extend_from_slice(&a.views[v]);
                }
            }
        }
    }
    out
}

fn gzip(bytes: &[u8]) -> usize {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(bytes).unwrap();
    e.finish().unwrap().len()
}

fn measure(
    source: &Asset,
    output: &[u8],
    resources: &dyn Resources,
) -> (Option<(f64, f64)>, bool, String) {
    let Ok(out) = Asset::read(output, resources) else {
        return (None, false, "output unreadable".into());
    };
    match compare(source, &out, &MetricOptions::default(), None, 5e-5) {
        Ok((_, clips)) => {
            let max = clips.iter().map(|c| c.max_relative).fold(0.0, f64::max);
            let p99 = clips.iter().map(|c| c.p99_relative).fold(0.0, f64::max);
            let changed = clips
                .iter()
                .any(|c| (c.duration_source - c.duration_output).abs() > 1e-6);
            (Some((max, p99)), changed, String::new())
        }
        Err(e) => (None, false, e.to_string()),
    }
}

impl Row {
    /// An output file's measurements.
    fn measured(
        tool: String,
        output: &[u8],
        source: &Asset,
        resources: &dyn Resources,
        ms: f64,
    ) -> Self {
        let payload = animation_payload(output, resources);
        let (error, durations_changed, note) = measure(source, output, resources);
        Row {
            tool,
            bytes: payload.len(),
            gzip: gzip(&payload),
            error,
            durations_changed,
            ms,
            note,
        }
    }

    /// A tool that produced nothing, and why.
    fn failed(tool: String, ms: f64, note: String) -> Self {
        Row {
            tool,
            bytes: 0,
            gzip: 0,
            error: None,
            durations_changed: false,
            ms,
            note,
        }
    }
}

/// Runs another tool that writes `out`, and measures it.
fn external(
    tool: &str,
    program: &Path,
    args: &[&str],
    source: &Asset,
    resources: &dyn Resources,
    out: &Path,
) -> Row {
    let start = Instant::now();
    let status = Command::new(program).args(args).output();
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    match status {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            let last = String::from_utf8_lossy(&o.stderr)
                .lines()
                .last()
                .unwrap_or("")
                .to_string();
            return Row::failed(tool.into(), ms, format!("failed: {last}"));
        }
        Err(e) => return Row::failed(tool.into(), ms, format!("not run: {e}")),
    }
    match std::fs::read(out) {
        Ok(bytes) => Row::measured(tool.into(), &bytes, source, resources, ms),
        Err(_) => Row::failed(tool.into(), ms, "no output".into()),
    }
}

fn pct(e: Option<(f64, f64)>, which: usize) -> String {
    match e {
        Some(e) => format!("{:.4}%", 100.0 * if which == 0 { e.0 } else { e.1 }),
        None => "n/a".into(),
    }
}

pub fn run(args: &[String]) {
    let dir = Path::new(&args[2]);
    let mut list = Vec::new();
    models(dir, &mut list);
    let out_dir = std::env::temp_dir().join("kiln-bench-animation");
    std::fs::create_dir_all(&out_dir).unwrap();
    let pack = gltfpack();
    let transform = gltf_check_dir().join("transform.mjs");
    // Per gltfpack setting: (Kiln bytes, gltfpack bytes) summed over models where both measured.
    let mut totals: Vec<(usize, usize, usize, usize)> = vec![(0, 0, 0, 0); GLTFPACK.len()];
    // Per gltfpack setting: skinned characters where Kiln at no larger error is over 0.6x.
    let mut misses: Vec<Vec<String>> = vec![Vec::new(); GLTFPACK.len()];
    // Kiln at its default tolerance against gltfpack -cc (bytes), and source : Kiln bytes.
    let mut default_vs_cc = (0usize, 0usize);
    let mut compression = (0usize, 0usize);
    // Source bytes, seconds on one thread, seconds with a thread per core (default tolerance).
    let mut throughput = (0f64, 0f64, 0f64);
    for path in list {
        let bytes = std::fs::read(&path).unwrap();
        let resources = DirResources(path.parent().unwrap().to_owned());
        let Ok(source) = Asset::read(&bytes, &resources) else {
            continue;
        };
        if source.array("animations").is_empty() {
            continue;
        }
        let name = path
            .strip_prefix(dir)
            .unwrap_or(&path)
            .display()
            .to_string();
        let source_payload = animation_payload(&bytes, &resources);
        println!(
            "\n## {name}: {} clips, source animation data {} B (gzip {} B)",
            source.array("animations").len(),
            source_payload.len(),
            gzip(&source_payload)
        );
        let mut rows = Vec::new();
        for tolerance in TOLERANCES {
            // One thread: the speed target is per core (the stage's default is a thread per
            // core, measured once more below).
            let options = AnimationOptions {
                tolerance: Tolerance::Relative(tolerance),
                threads: 1,
                ..AnimationOptions::default()
            };
            let start = Instant::now();
            let result = animation_only_variants(&bytes, &resources, &options, MeshoptCodec::Ext);
            let ms = start.elapsed().as_secs_f64() * 1000.0;
            let tool = format!("kiln {tolerance:.0e}");
            match result {
                Ok((_, meshopt, _)) => {
                    // Kept for inspection (the last model's outputs stay in the temp folder).
                    let _ =
                        std::fs::write(out_dir.join(format!("kiln-{tolerance:.0e}.glb")), &meshopt);
                    if tolerance == AnimationOptions::DEFAULT_TOLERANCE {
                        throughput.0 += source_payload.len() as f64;
                        throughput.1 += ms / 1000.0;
                        let start = Instant::now();
                        let all_cores = AnimationOptions {
                            threads: 0,
                            ..options.clone()
                        };
                        let again = animation_only_variants(
                            &bytes,
                            &resources,
                            &all_cores,
                            MeshoptCodec::Ext,
                        );
                        throughput.2 += start.elapsed().as_secs_f64();
                        // Clips in parallel must give the same file.
                        assert_eq!(
                            again.ok().map(|r| r.1).as_ref(),
                            Some(&meshopt),
                            "{name}: clips compressed in parallel gave another file"
                        );
                    }
                    rows.push(Row::measured(tool, &meshopt, &source, &resources, ms));
                }
                Err(e) => rows.push(Row::failed(tool, ms, e.to_string())),
            }
        }
        if let Some(pack) = &pack {
            for (tool, flags) in GLTFPACK {
                let out = out_dir.join(format!("gltfpack-{}.glb", std::process::id()));
                let _ = std::fs::remove_file(&out);
                let mut a: Vec<&str> =
                    vec!["-i", path.to_str().unwrap(), "-o", out.to_str().unwrap()];
                a.extend_from_slice(flags);
                rows.push(external(tool, pack, &a, &source, &resources, &out));
            }
        }
        if transform.exists() {
            let out = out_dir.join(format!("transform-{}.glb", std::process::id()));
            let _ = std::fs::remove_file(&out);
            let a = [
                transform.to_str().unwrap(),
                path.to_str().unwrap(),
                out.to_str().unwrap(),
            ];
            rows.push(external(
                "glTF-Transform resample+meshopt",
                Path::new("node"),
                &a,
                &source,
                &resources,
                &out,
            ));
        }
        println!(
            "| {:<32} | {:>9} | {:>9} | {:>10} | {:>10} | {:>9} | {:>8} | note",
            "output", "bytes", "gzip", "max err", "p99 err", "durations", "ms"
        );
        println!(
            "|{:-<34}|{:->11}|{:->11}|{:->12}|{:->12}|{:->11}|{:->10}|---",
            "", "", "", "", "", "", ""
        );
        for r in &rows {
            println!(
                "| {:<32} | {:>9} | {:>9} | {:>10} | {:>10} | {:>9} | {:>8.1} | {}",
                r.tool,
                r.bytes,
                r.gzip,
                pct(r.error, 0),
                pct(r.error, 1),
                if r.durations_changed {
                    "CHANGED"
                } else {
                    "same"
                },
                r.ms,
                r.note
            );
        }
        let skinned = !source.array("skins").is_empty();
        let default_tool = format!("kiln {:.0e}", AnimationOptions::DEFAULT_TOLERANCE);
        if let Some(k) = rows.iter().find(|r| r.tool == default_tool && r.bytes > 0) {
            println!(
                "  compression at the default tolerance: {} / {} B = {:.1}:1 (ACL publishes about 20:1 on motion capture at similar precision)",
                source_payload.len(),
                k.bytes,
                source_payload.len() as f64 / k.bytes as f64
            );
            compression.0 += source_payload.len();
            compression.1 += k.bytes;
            if let Some(gp) = rows.iter().find(|r| r.tool == GLTFPACK[0].0 && r.bytes > 0) {
                default_vs_cc.0 += k.bytes;
                default_vs_cc.1 += gp.bytes;
            }
        }
        // Dominance: Kiln at an error no larger than each gltfpack setting's.
        for (i, (tool, _)) in GLTFPACK.iter().enumerate() {
            let Some(gp) = rows.iter().find(|r| r.tool == *tool && r.error.is_some()) else {
                continue;
            };
            let gp_error = gp.error.unwrap().0;
            let best = rows
                .iter()
                .filter(|r| r.tool.starts_with("kiln") && r.error.is_some_and(|e| e.0 <= gp_error))
                .min_by_key(|r| r.bytes);
            if let Some(k) = best {
                println!(
                    "  vs {tool} (max err {:.4}%): {} at {} → {:.2}× its bytes, {:.2}× gzip",
                    100.0 * gp_error,
                    k.tool,
                    pct(k.error, 0),
                    k.bytes as f64 / gp.bytes.max(1) as f64,
                    k.gzip as f64 / gp.gzip.max(1) as f64
                );
                totals[i].0 += k.bytes;
                totals[i].1 += gp.bytes;
                totals[i].2 += k.gzip;
                totals[i].3 += gp.gzip;
                let ratio = k.bytes as f64 / gp.bytes.max(1) as f64;
                if skinned && ratio > 0.6 {
                    misses[i].push(format!("{name} {ratio:.2}"));
                }
            } else if skinned {
                misses[i].push(format!("{name}: no Kiln output at its error"));
            }
        }
    }
    println!("\n## Totals (models where both were measured)");
    for (i, (tool, _)) in GLTFPACK.iter().enumerate() {
        let t = totals[i];
        println!(
            "  Kiln at no larger error vs {tool}: {} / {} B = {:.2}×; gzip {} / {} B = {:.2}×",
            t.0,
            t.1,
            t.0 as f64 / t.1.max(1) as f64,
            t.2,
            t.3,
            t.2 as f64 / t.3.max(1) as f64
        );
    }
    println!(
        "  Compression at the default tolerance: {} / {} B = {:.1}:1 over these models (ACL: about 20:1)",
        compression.0,
        compression.1,
        compression.0 as f64 / compression.1.max(1) as f64
    );
    println!("\n## Targets (issue 17)");
    for (i, (tool, _)) in GLTFPACK.iter().enumerate() {
        let ratio = totals[i].0 as f64 / totals[i].1.max(1) as f64;
        println!(
            "  at no larger error than {tool}, <= 0.6x its bytes in total: {ratio:.2}x {}; on every skinned character: {}{}",
            super::met(totals[i].1 > 0 && ratio <= 0.6),
            super::met(totals[i].1 > 0 && misses[i].is_empty()),
            if misses[i].is_empty() {
                String::new()
            } else {
                format!(" (over: {})", misses[i].join(", "))
            }
        );
    }
    let ratio = default_vs_cc.0 as f64 / default_vs_cc.1.max(1) as f64;
    println!(
        "  at the default tolerance ({:.0e}), <= 1.0x gltfpack -cc's bytes in total: {} / {} B = {ratio:.2}x {}",
        AnimationOptions::DEFAULT_TOLERANCE,
        default_vs_cc.0,
        default_vs_cc.1,
        super::met(default_vs_cc.1 > 0 && ratio <= 1.0)
    );
    let per_core = throughput.0 / throughput.1.max(1e-9) / 1e6;
    println!(
        "  throughput at the default tolerance: {per_core:.2} MB/s of source animation data per core (target >= 10: {}); {:.2} MB/s with a thread per core ({} cores, clips in parallel)",
        super::met(per_core >= 10.0),
        throughput.0 / throughput.2.max(1e-9) / 1e6,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
}
