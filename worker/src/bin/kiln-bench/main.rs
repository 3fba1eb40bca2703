//! `kiln-bench`: Kiln's stages beside the anchor tools, in one run, as ratios.
//!
//! - `kiln-bench geometry DIR [--khr] [--drop-unused] [--keep-nodes] [--keep OUT]`: the
//!   geometry stage vs gltfpack (`--keep-nodes`: gltfpack with `-kn`, keeping the nodes as
//!   Kiln does; `--keep OUT`: both tools' files written to OUT);
//! - `kiln-bench animation DIR`: the animation stage at several tolerances vs gltfpack and
//!   glTF-Transform, bytes against error measured by the same metric;
//! - `kiln-bench vat DIR`: the VAT stage's bake speed against its target, and texture bytes
//!   and measured error per encoding beside the source's skin and animation bytes;
//! - `kiln-bench images DIR`: the images stage vs `cwebp` lossless and at equal ssimulacra2;
//!   `--ktx2`: the `ktx2` variant's Basis Universal textures, scored per GPU format.
//!
//! gltfpack and glTF-Transform come from npm (`worker/tests/gltf-check`, `npm ci` there);
//! `KILN_GLTFPACK` may point at another gltfpack.

mod animation;
mod geometry;
mod images;
mod ktx2;
mod vat;

use std::path::{Path, PathBuf};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("geometry") if args.len() >= 3 => geometry::run(&args),
        Some("animation") if args.len() >= 3 => animation::run(&args),
        Some("vat") if args.len() >= 3 => vat::run(&args),
        Some("images") if args.len() >= 3 => images::run(&args),
        _ => {
            eprintln!(
                "usage: kiln-bench geometry DIR [--khr] [--drop-unused] [--keep-nodes] [--keep OUT]\n       kiln-bench animation DIR\n       kiln-bench vat DIR\n       kiln-bench images DIR [--ktx2]"
            );
            std::process::exit(2);
        }
    }
}

/// How a target line reads: `met` or `NOT met`.
fn met(ok: bool) -> &'static str {
    if ok { "met" } else { "NOT met" }
}

/// Every model file under `dir`, sorted.
fn models(dir: &Path, out: &mut Vec<PathBuf>) {
    files_under(
        dir,
        &|name| name.ends_with(".glb") || name.ends_with(".gltf"),
        out,
    );
}

/// Every file under `dir` whose name `keep` accepts, sorted, outside `invalid/` (malformed
/// inputs are for the bad-input tests, not the benchmarks) and `node_modules/`.
fn files_under(dir: &Path, keep: &dyn Fn(&str) -> bool, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if path.is_dir() {
            if name != "invalid" && name != "node_modules" {
                files_under(&path, keep, out);
            }
        } else if keep(&name) {
            out.push(path);
        }
    }
}

fn gltf_check_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gltf-check")
}

fn gltfpack() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("KILN_GLTFPACK") {
        return Some(PathBuf::from(p));
    }
    let here = gltf_check_dir().join("node_modules/.bin/gltfpack");
    here.exists().then_some(here)
}
