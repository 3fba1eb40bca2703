//! `kiln-bench images DIR`: the images stage on every PNG and JPEG under DIR, and every PNG
//! and JPEG a `.glb` under DIR embeds (once per content: a texture also beside its `.gltf`
//! twin is counted once), beside `cwebp` (Debian's `webp` package), in the same run, as ratios:
//! - lossless: Kiln's choice (lossless WebP or optimised PNG, pixel-checked) against
//!   `cwebp -lossless -exact` (PNG sources; a JPEG stays as it is in both);
//! - bounded lossy: Kiln's smallest WebP at ssimulacra2 ≥ 80 against the smallest cwebp
//!   quality (`-q Q -m 4 -sharp_yuv -alpha_q 100`) that reaches the same score, both scored
//!   by the same code on what the player sees;
//! - encode time of each, and GPU memory as RGBA8 with mipmaps (`--ktx2`: the KTX2 variant's textures, see ktx2.rs).
//!
//! Targets (issue 32): lossless total ≤ 1.00× cwebp; bounded lossy ≤ 1.00× cwebp at equal
//! ssimulacra2, per image; encode time within 2× of the anchor. Each is printed `met` or
//! `NOT met` with the images that miss it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use kiln_stages::stages::images::codec::Format;
use kiln_stages::stages::images::{self, ImageOptions, Plan, Role, model, score};

/// Every PNG and JPEG under `dir`, sorted.
fn images_under(dir: &Path, out: &mut Vec<PathBuf>) {
    super::files_under(
        dir,
        &|name| {
            let name = name.to_ascii_lowercase();
            [".png", ".jpg", ".jpeg"].iter().any(|e| name.ends_with(e))
        },
        out,
    );
}

/// `cwebp ARGS -o OUT SRC`: the output's bytes and the seconds it took.
fn cwebp(src: &Path, args: &[&str], out: &Path) -> Option<(Vec<u8>, f64)> {
    let start = Instant::now();
    let status = Command::new("cwebp")
        .args(args)
        .arg("-quiet")
        .arg(src)
        .arg("-o")
        .arg(out)
        .status()
        .ok()?;
    let secs = start.elapsed().as_secs_f64();
    status
        .success()
        .then(|| (std::fs::read(out).ok(), secs))
        .and_then(|(b, s)| Some((b?, s)))
}

/// The smallest cwebp lossy output whose ssimulacra2 reaches `target` (bisection over the
/// quality, as Kiln's own search): (bytes, quality, score, seconds for the whole search).
fn cwebp_at_score(
    src: &Path,
    source: &image::RgbaImage,
    target: f64,
    out: &Path,
) -> Option<(u64, u32, f64, f64)> {
    let (mut lo, mut hi) = (30u32, 100u32);
    let mut best: Option<(u64, u32, f64)> = None;
    let mut secs = 0.0;
    while lo <= hi {
        let q = (lo + hi) / 2;
        let qs = q.to_string();
        let (bytes, s) = cwebp(
            src,
            &["-q", &qs, "-m", "4", "-sharp_yuv", "-alpha_q", "100"],
            out,
        )?;
        secs += s;
        let decoded = image::load_from_memory(&bytes).ok()?.to_rgba8();
        let score = score::score(source, &decoded).ok()?.ssimulacra2;
        if score >= target {
            let n = bytes.len() as u64;
            if best.is_none_or(|(b, _, _)| n < b) {
                best = Some((n, q, score));
            }
            if q == 0 {
                break;
            }
            hi = q - 1;
        } else {
            lo = q + 1;
        }
    }
    best.map(|(b, q, s)| (b, q, s, secs))
}

struct Row {
    name: String,
    source: u64,
    kiln_lossless: u64,
    kiln_lossless_choice: String,
    kiln_lossless_secs: f64,
    cwebp_lossless: Option<(u64, f64)>,
    /// Kiln lossy: bytes, score, seconds; cwebp at the same score: bytes, quality, score.
    kiln_lossy: Option<(u64, f64, f64)>,
    cwebp_lossy: Option<(u64, u32, f64, f64)>,
    gpu_bytes: u64,
}

/// The images a `.glb` under `dir` embeds, each written to `scratch` (cwebp reads files):
/// `(name, file)`, the name `model.glb#images/N`.
fn embedded_under(dir: &Path, scratch: &Path) -> Vec<(String, PathBuf)> {
    let mut glbs = Vec::new();
    super::files_under(
        dir,
        &|name| name.to_ascii_lowercase().ends_with(".glb"),
        &mut glbs,
    );
    let mut out = Vec::new();
    for glb in glbs {
        let Ok(bytes) = std::fs::read(&glb) else {
            continue;
        };
        let Ok((json, bin)) = model::read_glb(&bytes) else {
            continue;
        };
        let name = glb.strip_prefix(dir).unwrap_or(&glb).display().to_string();
        for image in model::model_images(&json) {
            let Some(Ok(data)) = image.view.map(|v| model::view_bytes(&json, &bin, v)) else {
                continue;
            };
            let ext = match Format::sniff(data) {
                Format::Png => "png",
                Format::Jpeg => "jpg",
                _ => continue,
            };
            let file = scratch.join(format!("embedded-{}.{ext}", out.len()));
            std::fs::write(&file, data).expect("scratch file");
            out.push((format!("{name}#images/{}", image.index), file));
        }
    }
    out
}

pub fn run(args: &[String]) {
    let dir = PathBuf::from(&args[2]);
    let scratch = std::env::temp_dir().join(format!("kiln-bench-images-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("scratch dir");
    let mut files = Vec::new();
    images_under(&dir, &mut files);
    let mut paths: Vec<(String, PathBuf)> = files
        .into_iter()
        .map(|p| (p.strip_prefix(&dir).unwrap_or(&p).display().to_string(), p))
        .collect();
    paths.extend(embedded_under(&dir, &scratch));
    // Each content once (a `.glb` often embeds the texture its `.gltf` twin references).
    let mut seen = std::collections::HashSet::new();
    paths.retain(|(_, p)| std::fs::read(p).is_ok_and(|b| seen.insert(b)));
    if paths.is_empty() {
        eprintln!("kiln-bench images: no PNG or JPEG under {}", dir.display());
        std::process::exit(1);
    }
    if args.iter().any(|a| a == "--ktx2") {
        super::ktx2::run(&dir, paths);
        let _ = std::fs::remove_dir_all(&scratch);
        return;
    }
    let has_cwebp = Command::new("cwebp")
        .arg("-version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_cwebp {
        eprintln!(
            "kiln-bench images: cwebp not found (Debian's webp package): the anchor columns stay empty"
        );
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            std::process::exit(1);
        }
    }
    let options = ImageOptions {
        estimate_lossy: false,
        ..ImageOptions::default()
    };
    let lossy_only = ImageOptions {
        lossless: false,
        ..options.clone()
    };
    let mut rows = Vec::new();
    for (name, path) in paths {
        let path = &path;
        let bytes = std::fs::read(path).expect("read image");
        let plan = |lossy| Plan {
            role: Role::Standalone,
            lossy,
            bound: options.min_ssimulacra2,
            data_texture: false,
            max_size: None,
        };
        let start = Instant::now();
        let lossless = images::optimize_image(&bytes, &plan(false), &options);
        let lossless_secs = start.elapsed().as_secs_f64();
        let Some(width) = lossless.result.width else {
            eprintln!("{name}: {}", lossless.result.kept.unwrap_or_default());
            continue;
        };
        let height = lossless.result.height.unwrap_or(0);
        // The lossy search alone (the lossless candidates are known from the run above): it
        // counts where it beats them, as the stage would choose it.
        let start = Instant::now();
        let lossy = images::optimize_image(&bytes, &plan(true), &lossy_only);
        let lossy_secs = start.elapsed().as_secs_f64();
        let kiln_lossy = (lossy.result.chosen == "webp-lossy"
            && lossy.result.bytes_after < lossless.result.bytes_after)
            .then(|| {
                (
                    lossy.result.bytes_after,
                    lossy.result.ssimulacra2.unwrap_or(0.0),
                    lossy_secs,
                )
            });
        let is_png = lossless.result.source_format == images::codec::Format::Png;
        let out = scratch.join("anchor.webp");
        let cwebp_lossless = if has_cwebp && is_png {
            cwebp(path, &["-lossless", "-exact"], &out).map(|(b, s)| (b.len() as u64, s))
        } else if has_cwebp {
            // A JPEG: both keep it as it is in lossless mode.
            Some((bytes.len() as u64, 0.0))
        } else {
            None
        };
        let cwebp_lossy = match (&kiln_lossy, has_cwebp) {
            (Some((_, s2, _)), true) => {
                let source = images::decode_source(&bytes, options.max_pixels)
                    .expect("decoded above")
                    .to_rgba8();
                cwebp_at_score(path, &source, *s2, &out)
            }
            _ => None,
        };
        rows.push(Row {
            name,
            source: bytes.len() as u64,
            kiln_lossless: lossless.result.bytes_after,
            kiln_lossless_choice: lossless.result.chosen.clone(),
            kiln_lossless_secs: lossless_secs,
            cwebp_lossless,
            kiln_lossy,
            cwebp_lossy,
            gpu_bytes: u64::from(width) * u64::from(height) * 4 * 4 / 3,
        });
    }
    let _ = std::fs::remove_dir_all(&scratch);
    print_table(&rows);
}

fn ratio(a: u64, b: u64) -> String {
    if b == 0 {
        "-".into()
    } else {
        format!("{:.3}", a as f64 / b as f64)
    }
}

fn print_table(rows: &[Row]) {
    println!(
        "{:<46} {:>9} | {:>9} {:>13} {:>9} {:>6} | {:>9} {:>6} {:>9} {:>6} {:>6} | {:>6} {:>6}",
        "image",
        "source",
        "kiln",
        "choice",
        "cwebp-ll",
        "ratio",
        "kiln-lsy",
        "s2",
        "cwebp@s2",
        "q",
        "ratio",
        "t-kiln",
        "t-cweb"
    );
    let (mut src, mut kl, mut cl, mut gpu) = (0u64, 0u64, 0u64, 0u64);
    let (mut ky, mut cy) = (0u64, 0u64);
    let mut lossy_misses = Vec::new();
    let mut time_misses = Vec::new();
    for r in rows {
        src += r.source;
        kl += r.kiln_lossless;
        gpu += r.gpu_bytes;
        if let Some((c, _)) = r.cwebp_lossless {
            cl += c;
        }
        let anchor_secs = r.cwebp_lossless.map_or(0.0, |(_, s)| s);
        if anchor_secs > 0.0 && r.kiln_lossless_secs > 2.0 * anchor_secs {
            time_misses.push(format!(
                "{} ({:.2} s vs {:.2} s)",
                r.name, r.kiln_lossless_secs, anchor_secs
            ));
        }
        let (lossy_cols, lossy_ratio) = match (&r.kiln_lossy, &r.cwebp_lossy) {
            (Some((k, s2, _)), Some((c, q, _, _))) => {
                ky += k;
                cy += c;
                if k > c {
                    lossy_misses.push(format!("{} ({k} vs {c})", r.name));
                }
                (format!("{k:>9} {s2:>6.1} {c:>9} {q:>6}"), ratio(*k, *c))
            }
            (Some((k, s2, _)), None) => (
                format!("{k:>9} {s2:>6.1} {:>9} {:>6}", "-", "-"),
                "-".into(),
            ),
            _ => (
                format!("{:>9} {:>6} {:>9} {:>6}", "kept", "-", "-", "-"),
                "-".into(),
            ),
        };
        println!(
            "{:<46} {:>9} | {:>9} {:>13} {:>9} {:>6} | {lossy_cols} {:>6} | {:>6.2} {:>6.2}",
            truncate(&r.name, 46),
            r.source,
            r.kiln_lossless,
            r.kiln_lossless_choice,
            r.cwebp_lossless.map_or("-".into(), |(c, _)| c.to_string()),
            r.cwebp_lossless
                .map_or("-".into(), |(c, _)| ratio(r.kiln_lossless, c)),
            lossy_ratio,
            r.kiln_lossless_secs,
            anchor_secs,
        );
    }
    println!(
        "{:<46} {:>9} | {:>9} {:>13} {:>9} {:>6} | {:>9} {:>6} {:>9} {:>6} {:>6} |",
        format!("total ({} images)", rows.len()),
        src,
        kl,
        format!(
            "{:.1} % saved",
            100.0 * (1.0 - kl as f64 / src.max(1) as f64)
        ),
        cl,
        ratio(kl, cl),
        ky,
        "",
        cy,
        "",
        ratio(ky, cy),
    );
    println!(
        "GPU memory as RGBA8 with mipmaps: {:.1} MiB (unchanged: no KTX2 variants yet)",
        gpu as f64 / (1 << 20) as f64
    );
    let met = super::met;
    println!(
        "target lossless total <= 1.00x cwebp -lossless -exact: {} ({})",
        met(cl > 0 && kl <= cl),
        ratio(kl, cl)
    );
    println!(
        "target bounded lossy <= 1.00x cwebp at equal ssimulacra2, per image: {}{}",
        met(lossy_misses.is_empty() && cy > 0),
        if lossy_misses.is_empty() {
            String::new()
        } else {
            format!(": {}", lossy_misses.join(", "))
        }
    );
    println!(
        "target lossless encode time within 2x cwebp: {}{}",
        met(time_misses.is_empty()),
        if time_misses.is_empty() {
            String::new()
        } else {
            format!(": {}", time_misses.join(", "))
        }
    );
    assert!(!rows.is_empty(), "the benchmark produced data");
}

/// `s` cut to its last `n - 1` characters behind an ellipsis, where longer than `n`.
pub fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let tail: String = s
            .chars()
            .rev()
            .take(n - 1)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        format!("…{tail}")
    }
}
