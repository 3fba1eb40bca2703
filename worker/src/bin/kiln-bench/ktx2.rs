//! `kiln-bench images DIR --ktx2`: the `ktx2` variant's texture search on every PNG and JPEG
//! under DIR and every one a `.glb` under DIR embeds (each content once): per texture, what
//! the search chose (ETC1S or UASTC), its bytes raw and after brotli against the source, its
//! measure on each GPU format a device class gets (ASTC 4×4, BC7, ETC2: ssimulacra2 for colour,
//! the 99th-percentile angle for normal maps, PSNR for other data), GPU memory against RGBA8
//! (mipmaps included in both) and encode time.
//!
//! Target (issue 32): GPU memory ≥ 4× smaller than RGBA8 for the textures the variant holds as
//! KTX2, each at its bound on every format. The anchors the issue names (glTF-Transform's
//! `etc1s`/`uastc`) run KTX-Software's `ktx` binary, which neither npm nor Debian installs:
//! see docs/images.md.

use std::path::{Path, PathBuf};
use std::time::Instant;

use kiln_stages::stages::images::ktx2::{self, Bound, GpuFormat};
use kiln_stages::stages::images::{self, ImageOptions};

struct Row {
    name: String,
    size: (u32, u32),
    source: u64,
    report: ktx2::Ktx2Report,
    rgba8: u64,
    secs: f64,
}

/// The bound a texture is held to, from its name: data by the stage's own name rule, a normal
/// map by its name too (in a model the slots decide).
fn bound_for(name: &str, options: &ImageOptions) -> (bool, Bound) {
    let lower = name.to_ascii_lowercase();
    let normal = lower.contains("normal") || lower.contains("_nrm");
    let data = images::looks_like_data(name);
    images::ktx2_bound(data, normal, options.min_ssimulacra2, options)
}

pub fn run(dir: &Path, paths: Vec<(String, PathBuf)>) {
    let options = ImageOptions::default();
    let mut rows = Vec::new();
    for (name, path) in paths {
        let bytes = std::fs::read(&path).expect("read image");
        let rgba = match images::decode_source(&bytes, options.max_pixels) {
            Ok(image) => image.to_rgba8(),
            Err(e) => {
                eprintln!("{name}: {e}");
                continue;
            }
        };
        let (srgb, bound) = bound_for(&name, &options);
        let start = Instant::now();
        let (_, report) = ktx2::choose(&rgba, srgb, bound);
        rows.push(Row {
            name,
            size: rgba.dimensions(),
            source: bytes.len() as u64,
            rgba8: images::rgba8_gpu_bytes(rgba.width(), rgba.height()),
            report,
            secs: start.elapsed().as_secs_f64(),
        });
    }
    println!("\nKTX2 (Basis Universal) textures under {}", dir.display());
    println!(
        "{:<58} {:>11} {:>17} {:>9} {:>9} {:>9} {:>19} {:>8} {:>9} {:>7}",
        "texture",
        "size",
        "chosen",
        "source",
        "ktx2",
        "ktx2+br",
        "astc/bc7/etc2",
        "etc1s",
        "gpu vs 8",
        "enc s"
    );
    let (mut source, mut brotli, mut gpu, mut rgba8, mut held, mut secs) = (0, 0, 0, 0, 0, 0.0);
    let mut missed = Vec::new();
    for r in &rows {
        let scores = GpuFormat::ALL
            .iter()
            .map(|f| {
                r.report
                    .scores
                    .get(f.name())
                    .map_or("-".into(), |s| format!("{s:.1}"))
            })
            .collect::<Vec<_>>()
            .join("/");
        let made = r.report.chosen != "none";
        // What ETC1S at quality 128 (the first candidate for colour) reached, the lower of
        // ASTC and BC7.
        let etc1s = r
            .report
            .candidates
            .iter()
            .find(|c| c.encoding.contains("etc1s q128"))
            .and_then(|c| {
                ["astc", "bc7"]
                    .iter()
                    .filter_map(|f| c.scores.get(f))
                    .copied()
                    .reduce(f64::min)
            })
            .map_or("-".into(), |s| format!("{s:.1}"));
        println!(
            "{:<58} {:>11} {:>17} {:>9} {:>9} {:>9} {:>19} {:>8} {:>9} {:>7.1}",
            super::images::truncate(&r.name, 58),
            format!("{}x{}", r.size.0, r.size.1),
            r.report.chosen.trim_start_matches("ktx2 "),
            r.source,
            if made {
                r.report.bytes.to_string()
            } else {
                "-".into()
            },
            if made {
                r.report.brotli_bytes.to_string()
            } else {
                "-".into()
            },
            scores,
            etc1s,
            if made {
                format!("{:.2}x", r.rgba8 as f64 / r.report.gpu_bytes as f64)
            } else {
                "-".into()
            },
            r.secs
        );
        secs += r.secs;
        if made {
            held += 1;
            source += r.source;
            brotli += r.report.brotli_bytes;
            gpu += r.report.gpu_bytes;
            rgba8 += r.rgba8;
        } else {
            let why = r.report.candidates.last().and_then(|c| c.rejected.clone());
            missed.push(format!("{} ({})", r.name, why.unwrap_or_default()));
        }
    }
    println!(
        "{held} of {} textures held as KTX2 within their bounds; those: source {source} B, KTX2 after brotli {brotli} B ({:.2}x the source), GPU {:.1} MiB against {:.1} MiB as RGBA8 ({:.2}x smaller); encode {secs:.1} s in all",
        rows.len(),
        brotli as f64 / source.max(1) as f64,
        gpu as f64 / 1048576.0,
        rgba8 as f64 / 1048576.0,
        rgba8 as f64 / gpu.max(1) as f64,
    );
    let met = held > 0 && rgba8 >= 4 * gpu - gpu / 100;
    println!(
        "target GPU memory >= 4x smaller than RGBA8 (the KTX2 textures): {}",
        if met { "met" } else { "NOT met" }
    );
    for m in &missed {
        println!("  not held as KTX2 (kept as WebP/PNG in the variant): {m}");
    }
    assert!(!rows.is_empty(), "no texture measured");
}
