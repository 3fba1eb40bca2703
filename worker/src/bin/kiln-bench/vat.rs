//! `kiln-bench vat DIR`: per animated model, the VAT stage's bake speed (vertex-frames per
//! second on one core, against the 50 M target), texture bytes and measured error of every
//! encoding, what `auto` picks, and the source's skin + animation bytes beside the VAT's
//! mesh + texture bytes (seed 002's comparison).

use std::path::Path;
use std::time::Instant;

use kiln_stages::gltf::{self, Asset};
use kiln_stages::stages::vat::{self, EncodingChoice, Frames, VatEncoding, VatOptions};

const TARGET_VERTEX_FRAMES_PER_SECOND: f64 = 50e6;

/// Bytes of an accessor's elements, tightly packed.
fn accessor_bytes(asset: &Asset, index: Option<u64>) -> u64 {
    let Some(a) = index.and_then(|i| asset.array("accessors").get(i as usize)) else {
        return 0;
    };
    let count = a["count"].as_u64().unwrap_or(0);
    let components = a["type"]
        .as_str()
        .and_then(gltf::accessors::components_of)
        .unwrap_or(0) as u64;
    let size = a["componentType"]
        .as_u64()
        .and_then(gltf::accessors::component_size)
        .unwrap_or(0) as u64;
    count * components * size
}

/// (skin + morph bytes, animation bytes) of the source.
fn source_bytes(asset: &Asset) -> (u64, u64) {
    let mut skin = 0;
    for mesh in asset.array("meshes") {
        for p in mesh["primitives"].as_array().into_iter().flatten() {
            if let Some(attributes) = p["attributes"].as_object() {
                for (name, a) in attributes {
                    if name.starts_with("JOINTS_") || name.starts_with("WEIGHTS_") {
                        skin += accessor_bytes(asset, a.as_u64());
                    }
                }
            }
            for t in p["targets"].as_array().into_iter().flatten() {
                for a in t.as_object().into_iter().flat_map(|o| o.values()) {
                    skin += accessor_bytes(asset, a.as_u64());
                }
            }
        }
    }
    for s in asset.array("skins") {
        skin += accessor_bytes(asset, s["inverseBindMatrices"].as_u64());
    }
    let mut animation = 0;
    for a in asset.array("animations") {
        for s in a["samplers"].as_array().into_iter().flatten() {
            animation += accessor_bytes(asset, s["input"].as_u64());
            animation += accessor_bytes(asset, s["output"].as_u64());
        }
    }
    (skin, animation)
}

pub fn run(args: &[String]) {
    let dir = Path::new(&args[2]);
    let mut files = Vec::new();
    super::models(dir, &mut files);
    println!(
        "VAT bake (30 fps, relative positions, default tolerance 2.5e-4 of the diagonal); \
         speed on one core, target {:.0} M vertex-frames/s",
        TARGET_VERTEX_FRAMES_PER_SECOND / 1e6
    );
    println!(
        "{:<28} {:>6} {:>6} {:>9} {:>8} {:>6} | {:>9} {:>9} {:>9} {:>9} {:>9} | {:>8} {:>6} | {:>9} {:>9} {:>9} {:>9}",
        "model",
        "verts",
        "frames",
        "eval ms",
        "Mvf/s",
        "×tgt",
        "low B",
        "medium B",
        "high B",
        "rgba16 B",
        "half B",
        "auto",
        "ok",
        "skin B",
        "anim B",
        "mesh B",
        "VAT B"
    );
    println!(
        "{:<28} {:>6} {:>6} {:>9} {:>8} {:>6} | {:>9} {:>9} {:>9} {:>9} {:>9} |",
        "", "", "", "", "", "", "err/diag", "", "", "", ""
    );
    let (mut total_vf, mut total_seconds) = (0f64, 0f64);
    let (mut under, mut measured): (Vec<String>, usize) = (Vec::new(), 0);
    for path in files {
        let name = path
            .strip_prefix(dir)
            .unwrap_or(&path)
            .to_string_lossy()
            .chars()
            .take(28)
            .collect::<String>();
        let asset = match gltf::read_path(&path) {
            Ok(a) => a,
            Err(_) => continue,
        };
        let (rig, clips, nodes) = match vat::prepare(&asset) {
            Ok(p) => p,
            // Not animated, or not skinned / morphed: not a VAT input.
            Err(_) => continue,
        };
        let options = VatOptions::default();
        if std::env::var_os("KILN_BENCH_PROFILE").is_some() {
            profile(&rig, &clips, nodes[0]);
        }
        // Evaluation speed: the best run over every bakeable mesh, posed together as the
        // stage does; seven runs, and more until they took 50 ms (a bake of a few vertices
        // takes tens of microseconds, where seven runs measure the timer's and the machine's
        // noise more than the bake).
        let mut seconds = f64::INFINITY;
        let mut vertex_frames = 0f64;
        let (mut vertices, mut frame_count) = (0, 0);
        let measuring = Instant::now();
        let mut runs = 0;
        while runs < 7 || measuring.elapsed().as_secs_f64() < 0.05 {
            runs += 1;
            let started = Instant::now();
            let all = vat::evaluate_all(&rig, &clips, &nodes, options.frame_rate);
            seconds = seconds.min(started.elapsed().as_secs_f64());
            vertex_frames = all.iter().map(|f| (f.vertices * f.count()) as f64).sum();
            vertices = all.iter().map(|f| f.vertices).sum();
            frame_count = all.first().map_or(0, Frames::count);
        }
        total_vf += vertex_frames;
        total_seconds += seconds;
        // Every encoding, fixed; then auto among all five to check its choice.
        let mut bytes = Vec::new();
        let mut errors = Vec::new();
        let mut absolute = Vec::new();
        for encoding in VatEncoding::ALL {
            let o = VatOptions {
                encoding: EncodingChoice::Fixed(encoding),
                ..options.clone()
            };
            let worst = |b: &vat::VatBake, f: fn(&vat::VatMeshReport) -> f64| {
                b.report.meshes.iter().map(f).fold(0.0, f64::max)
            };
            match vat::bake_model(&asset, "bench", &o) {
                Ok(b) => {
                    bytes.push(b.report.meshes.iter().map(|m| m.texture_bytes).sum::<u64>());
                    errors.push(worst(&b, |m| m.position_max_relative));
                    absolute.push(worst(&b, |m| m.position_max));
                }
                Err(_) => {
                    bytes.push(0);
                    errors.push(f64::NAN);
                    absolute.push(f64::NAN);
                }
            }
        }
        let (auto_name, auto_ok, mesh_bytes, vat_bytes) =
            match vat::bake_model(&asset, "bench", &options) {
                Ok(b) => {
                    let tolerance = b.meshes[0].meta.tolerance;
                    let auto_bytes: u64 = b.report.meshes.iter().map(|m| m.texture_bytes).sum();
                    // No larger than the smallest of all five encodings that meets the tolerance.
                    let smallest = (0..5)
                        .filter(|&i| bytes[i] > 0 && absolute[i] <= tolerance)
                        .map(|i| bytes[i])
                        .min();
                    let ok = smallest.is_none_or(|s| auto_bytes <= s);
                    (
                        b.report.meshes[0].encoding.name().to_string(),
                        if ok { "yes" } else { "no" },
                        b.report.meshes.iter().map(|m| m.mesh_bytes).sum::<u64>(),
                        auto_bytes,
                    )
                }
                Err(e) => (format!("error: {e}"), "-", 0, 0),
            };
        let (skin, animation) = source_bytes(&asset);
        let rate = vertex_frames / seconds;
        if rate < TARGET_VERTEX_FRAMES_PER_SECOND {
            under.push(format!("{name} {:.1} M ({vertices} vertices)", rate / 1e6));
        }
        measured += 1;
        println!(
            "{:<28} {:>6} {:>6} {:>9.2} {:>8.1} {:>6.2} | {:>9} {:>9} {:>9} {:>9} {:>9} | {:>8} {:>6} | {:>9} {:>9} {:>9} {:>9}",
            name,
            vertices,
            frame_count,
            seconds * 1e3,
            rate / 1e6,
            rate / TARGET_VERTEX_FRAMES_PER_SECOND,
            bytes[0],
            bytes[1],
            bytes[2],
            bytes[3],
            bytes[4],
            auto_name,
            auto_ok,
            skin,
            animation,
            mesh_bytes,
            vat_bytes
        );
        println!(
            "{:<28} {:>6} {:>6} {:>9} {:>8} {:>6} | {:>9.2e} {:>9.2e} {:>9.2e} {:>9.2e} {:>9.2e} |",
            "", "", "", "", "", "", errors[0], errors[1], errors[2], errors[3], errors[4]
        );
    }
    if total_seconds > 0.0 {
        println!(
            "all models: {:.1} M vertex-frames/s on one core ({:.2}× the 50 M target)",
            total_vf / total_seconds / 1e6,
            total_vf / total_seconds / TARGET_VERTEX_FRAMES_PER_SECOND
        );
        println!(
            "every model >= 50 M vertex-frames/s: {} ({} of {measured} models){}",
            super::met(under.is_empty()),
            measured - under.len(),
            if under.is_empty() {
                String::new()
            } else {
                format!("; under: {}", under.join(", "))
            }
        );
    }
    assert!(measured > 0, "the VAT benchmark baked no model");
}

/// Where evaluation time goes (KILN_BENCH_PROFILE=1): posing, deforming, storing.
pub fn profile(
    rig: &kiln_stages::animation::Rig,
    clips: &[kiln_stages::animation::Clip],
    node: usize,
) {
    use kiln_stages::animation::Deformer;
    let deformer = Deformer::new(rig, node);
    let mut pose = rig.rest_pose();
    let v = deformer.vertices;
    let (mut p, mut n) = (vec![[0.0; 3]; v], vec![[0.0; 3]; v]);
    let (mut t_pose, mut t_deform, mut t_store) = (0f64, 0f64, 0f64);
    let mut store: Vec<[f32; 3]> = Vec::new();
    let mut frames = 0;
    for _ in 0..5 {
        store.clear();
        for clip in clips {
            let d = clip.range().1;
            for f in 0..vat::clip_frames(d, 30.0) {
                let a = Instant::now();
                rig.pose_at(clip, (f as f64 / 30.0).min(d), &mut pose);
                let b = Instant::now();
                deformer.deform(rig, &pose, &mut p, &mut n);
                let c = Instant::now();
                store.extend_from_slice(&p);
                store.extend_from_slice(&n);
                t_pose += (b - a).as_secs_f64();
                t_deform += (c - b).as_secs_f64();
                t_store += c.elapsed().as_secs_f64();
                frames += 1;
            }
        }
    }
    let vf = (frames * deformer.vertices) as f64;
    eprintln!(
        "  profile: pose {:.1} ns/vf, deform {:.1} ns/vf, store {:.1} ns/vf",
        t_pose / vf * 1e9,
        t_deform / vf * 1e9,
        t_store / vf * 1e9
    );
}
