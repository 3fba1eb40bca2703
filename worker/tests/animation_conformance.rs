//! The animation evaluator against three.js' own sampling (GLTFLoader + AnimationMixer +
//! getVertexPosition, `tests/gltf-check/anim.mjs`), on every animated model of the corpus.

mod support;

use std::ffi::OsStr;

use kiln_stages::animation::Rig;
use kiln_stages::animation::metric::{read_clips, sample_times};
use kiln_stages::gltf::read_path;

/// At most this many times per clip (spread over the whole clip, ends and keys included).
const TIMES_PER_CLIP: usize = 40;

#[test]
fn evaluator_agrees_with_three_js_to_5e7_of_the_model_size() {
    let mut checked = 0;
    let mut report = Vec::new();
    for model in support::models() {
        let asset = read_path(&model).unwrap();
        if asset.array("animations").is_empty() {
            continue;
        }
        let rig = Rig::read(&asset, 0.015).unwrap();
        let clips = read_clips(&asset).unwrap();
        let times: Vec<Vec<f64>> = clips
            .iter()
            .map(|c| {
                let all = sample_times(c, 4.0);
                let step = all.len().div_ceil(TIMES_PER_CLIP).max(1);
                let mut picked: Vec<f64> = all.iter().copied().step_by(step).collect();
                if picked.last() != all.last() {
                    picked.push(*all.last().unwrap());
                }
                picked
            })
            .collect();
        let (vertices, three) = support::three_sample(&model, &times);
        let mut pose = rig.rest_pose();
        let mut points = Vec::new();
        let mut at = 0;
        let mut worst: f64 = 0.0;
        for (clip, times) in clips.iter().zip(&times) {
            for &t in times {
                rig.pose_at(clip, t, &mut pose);
                rig.points(&pose, &mut points);
                let shells = 6 * rig.shell_nodes.len();
                assert_eq!(
                    points.len() - shells,
                    vertices,
                    "{}: vertex count",
                    model.display()
                );
                for p in &points[..vertices] {
                    let q = &three[at..at + 3];
                    at += 3;
                    let d = ((p.x - q[0] as f64).powi(2)
                        + (p.y - q[1] as f64).powi(2)
                        + (p.z - q[2] as f64).powi(2))
                    .sqrt();
                    worst = worst.max(d);
                }
            }
        }
        assert_eq!(at, three.len(), "{}: sample count", model.display());
        let relative = worst / rig.diagonal;
        report.push(format!(
            "{}: {vertices} vertices, max |kiln − three| = {relative:.2e} of the diagonal",
            model.display()
        ));
        // The README's figure: agreement within 5e-7 of the diagonal (f32 three.js against
        // f64 here; the corpus' worst is 2.5e-7).
        assert!(relative <= 5e-7, "{}", report.last().unwrap());
        checked += 1;
    }
    eprintln!("{}", report.join("\n"));
    assert!(checked > 0);
    if support::shared_assets().is_dir() {
        assert!(checked >= 15, "only {checked} animated models checked");
    }
}

/// The stage alone (geometry untouched) on every animated model: our metric and three.js'
/// own sampling of both variants (plain and meshopt, decoded by three's meshopt decoder) agree
/// that every sample is within the tolerance; clip durations are unchanged.
#[test]
fn stage_output_is_within_tolerance_by_our_metric_and_by_three_js() {
    use kiln_stages::animation::metric::{MetricOptions, compare};
    use kiln_stages::gltf::{Asset, DirResources};
    use kiln_stages::stages::animation::{AnimationOptions, animation_only_variants};
    use kiln_stages::stages::geometry::MeshoptCodec;
    let dir = tempfile::tempdir().unwrap();
    let options = AnimationOptions::default();
    let tolerance = 5e-5;
    let mut lines = Vec::new();
    for (n, model) in support::models().iter().enumerate() {
        let source = read_path(model).unwrap();
        if source.array("animations").is_empty() {
            continue;
        }
        let bytes = std::fs::read(model).unwrap();
        let resources = DirResources(model.parent().unwrap().to_owned());
        let (plain, meshopt, report) =
            animation_only_variants(&bytes, &resources, &options, MeshoptCodec::Ext).unwrap();
        for (variant, data) in [("plain", &plain), ("meshopt", &meshopt)] {
            let out = dir.path().join(format!("{n}.{variant}.glb"));
            std::fs::write(&out, data).unwrap();
            let output = Asset::read(data, &resources).unwrap();
            let (rig, clips) =
                compare(&source, &output, &MetricOptions::default(), None, tolerance)
                    .unwrap_or_else(|e| panic!("{}: {variant}: {e}", model.display()));
            for c in &clips {
                assert!(
                    c.max <= tolerance * rig.diagonal,
                    "{}: {variant}: clip {} max {:.3e} of the diagonal",
                    model.display(),
                    c.name,
                    c.max_relative
                );
                assert_eq!(
                    c.duration_source,
                    c.duration_output,
                    "{}: duration",
                    model.display()
                );
            }
            let three = support::node_json(
                "anim.mjs",
                &[
                    OsStr::new("compare"),
                    model.as_os_str(),
                    out.as_os_str(),
                    OsStr::new("--tolerance"),
                    OsStr::new("5e-5"),
                ],
            );
            assert_eq!(
                three["ok"],
                true,
                "{}: {variant}: three.js says {three}",
                model.display()
            );
            lines.push(format!(
                "{} {variant}: {} → {} bytes, three.js max {:.2e} of the diagonal",
                model.display(),
                report.bytes_before,
                report.bytes_after,
                three["max_rel"].as_f64().unwrap()
            ));
        }
    }
    eprintln!("{}", lines.join("\n"));
}

/// The pipeline's variants (animation stage, then geometry) keep the animation within the
/// tolerance: measured on the source's vertices with each variant's animations (the geometry
/// stage moves meshes into child nodes and reorders vertices; the metric maps nodes back).
#[test]
fn pipeline_variants_keep_the_animation_bound() {
    use kiln_stages::animation::metric::{MetricOptions, compare};
    use kiln_stages::gltf::{Asset, DirResources};
    use kiln_stages::stages::geometry::{GeometryOptions, optimize_model};
    for model in support::models() {
        let source = read_path(&model).unwrap();
        if source.array("animations").is_empty() {
            continue;
        }
        let bytes = std::fs::read(&model).unwrap();
        let resources = DirResources(model.parent().unwrap().to_owned());
        let out = optimize_model(&bytes, &resources, &GeometryOptions::default()).unwrap();
        let report = out
            .report
            .animation
            .as_ref()
            .expect("the animation stage ran");
        for (variant, data) in [("quantized", &out.quantized), ("meshopt", &out.meshopt)] {
            let output = Asset::read(data, &resources).unwrap();
            let (rig, clips) = compare(&source, &output, &MetricOptions::default(), None, 5e-5)
                .unwrap_or_else(|e| panic!("{}: {variant}: {e}", model.display()));
            for (c, r) in clips.iter().zip(&report.clips) {
                assert!(
                    c.max <= 5e-5 * rig.diagonal,
                    "{}: {variant}: {} {:.3e}",
                    model.display(),
                    c.name,
                    c.max_relative
                );
                assert_eq!(c.duration_source, c.duration_output);
                // The report tells the truth.
                assert!(
                    (c.max - r.max_error).abs() <= 1e-6 * rig.diagonal,
                    "{}: report {} vs measured {}",
                    model.display(),
                    r.max_error,
                    c.max
                );
            }
        }
    }
}

/// One error budget for the file a player gets: on every animated model, each delivered
/// variant (animation pass, then quantized positions, skin weights and morph targets) is
/// measured against the source with its own vertices, weights and transforms; every sample of
/// every point is within the animation tolerance, and the stage's report says what was measured.
#[test]
fn delivered_variants_hold_the_tolerance_on_every_animated_model() {
    use kiln_stages::animation::metric::{MetricOptions, delivered_error};
    use kiln_stages::gltf::{Asset, DirResources};
    use kiln_stages::stages::geometry::{GeometryOptions, optimize_model};
    let mut checked = 0;
    let mut table = Vec::new();
    for model in support::models() {
        let source = read_path(&model).unwrap();
        if source.array("animations").is_empty() {
            continue;
        }
        let bytes = std::fs::read(&model).unwrap();
        let resources = DirResources(model.parent().unwrap().to_owned());
        let out = optimize_model(&bytes, &resources, &GeometryOptions::default())
            .unwrap_or_else(|e| panic!("{}: {e}", model.display()));
        let budget = out
            .report
            .delivered
            .as_ref()
            .expect("the budget is reported");
        let rig =
            kiln_stages::animation::Rig::read(&source, MetricOptions::default().shell).unwrap();
        let tolerance = 5e-5 * rig.diagonal;
        for (variant, data, reported) in [
            ("quantized", &out.quantized, budget.quantized_max_relative),
            ("meshopt", &out.meshopt, budget.meshopt_max_relative),
        ] {
            let output = Asset::read(data, &resources).unwrap();
            let e = delivered_error(
                &source,
                &output,
                &out.vertex_map,
                &MetricOptions::default(),
                tolerance,
            )
            .unwrap_or_else(|e| panic!("{}: {variant}: {e}", model.display()));
            let name = model.file_name().unwrap().to_string_lossy();
            assert!(e.measured > 0, "{name}: {variant}: nothing measured");
            assert_eq!(e.within_share, 1.0, "{name}: {variant}: {e:?}");
            assert!(e.max <= tolerance, "{name}: {variant}: {e:?}");
            assert!(
                (e.max_relative - reported).abs() <= 1e-9,
                "{name}: {variant}: report {reported} vs {e:?}"
            );
        }
        table.push(format!(
            "{:<28} max {:.2e} (geometry {:.2e}, animation given {:.2e}) bits p{} w{} m{}, {} attempt(s)",
            model.file_name().unwrap().to_string_lossy(),
            budget.quantized_max_relative.max(budget.meshopt_max_relative),
            budget.geometry_relative,
            budget.animation_tolerance_relative,
            budget.position_bits,
            budget.weight_bits,
            budget.morph_bits,
            budget.attempts
        ));
        checked += 1;
    }
    eprintln!("{}", table.join("\n"));
    assert!(checked > 0);
    if support::shared_assets().is_dir() {
        assert!(checked >= 15, "only {checked} animated models checked");
    }
}
