//! The animation evaluator against three.js' own sampling (GLTFLoader + AnimationMixer +
//! getVertexPosition, `tests/gltf-check/anim.mjs`), on every animated model of the corpus.

mod support;

use std::ffi::OsStr;

use kiln_worker::animation::metric::{read_clips, sample_times};
use kiln_worker::animation::Rig;
use kiln_worker::gltf::read_path;

/// At most this many times per clip (spread over the whole clip, ends and keys included).
const TIMES_PER_CLIP: usize = 40;

#[test]
fn evaluator_agrees_with_three_js_to_1e5_of_the_model_size() {
    let dir = tempfile::tempdir().unwrap();
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
        let spec = serde_json::json!({"clips": times.iter().enumerate()
            .map(|(i, t)| serde_json::json!({"index": i, "times": t})).collect::<Vec<_>>()});
        let spec_path = dir.path().join("times.json");
        let bin_path = dir.path().join("out.bin");
        std::fs::write(&spec_path, spec.to_string()).unwrap();
        let summary = support::node_json(
            "anim.mjs",
            &[OsStr::new("sample"), model.as_os_str(), spec_path.as_os_str(), bin_path.as_os_str()],
        );
        let vertices = summary["vertices"].as_u64().unwrap() as usize;
        let three: Vec<f32> = std::fs::read(&bin_path)
            .unwrap()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let mut pose = rig.rest_pose();
        let mut points = Vec::new();
        let mut at = 0;
        let mut worst: f64 = 0.0;
        for (clip, times) in clips.iter().zip(&times) {
            for &t in times {
                rig.pose_at(clip, t, &mut pose);
                rig.points(&pose, &mut points);
                let shells = 6 * rig.shell_nodes.len();
                assert_eq!(points.len() - shells, vertices, "{}: vertex count", model.display());
                for p in &points[..vertices] {
                    let q = &three[at..at + 3];
                    at += 3;
                    let d = ((p.x - q[0] as f64).powi(2) + (p.y - q[1] as f64).powi(2) + (p.z - q[2] as f64).powi(2)).sqrt();
                    worst = worst.max(d);
                }
            }
        }
        assert_eq!(at, three.len(), "{}: sample count", model.display());
        let relative = worst / rig.diagonal;
        report.push(format!("{}: {vertices} vertices, max |kiln − three| = {relative:.2e} of the diagonal", model.display()));
        assert!(relative <= 1e-5, "{}", report.last().unwrap());
        checked += 1;
    }
    eprintln!("{}", report.join("\n"));
    assert!(checked > 0);
}
