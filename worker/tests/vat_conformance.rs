//! The VAT stage judged from outside: baked frames against three.js' own skinning
//! (GLTFLoader + AnimationMixer + SkinnedMesh.getVertexPosition, `tests/gltf-check/anim.mjs`),
//! the files decoded by the format's reader on every animated model of the corpus, the
//! `kiln-worker vat` command, and the VAT rendered beside the skinned original in headless
//! Chromium (`tests/gltf-check/vat-render.mjs`).

mod support;

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

use kiln_stages::gltf::read_path;
use kiln_stages::stages::vat::{self, VatOptions, reader};

/// Frames compared with three.js per clip (spread over the clip, both ends included).
const FRAMES_PER_CLIP: usize = 24;

#[test]
fn baked_frames_agree_with_three_js_and_decode_within_their_bound() {
    let mut report = Vec::new();
    let mut checked = 0;
    for model in support::models() {
        let asset = read_path(&model).unwrap();
        let Ok((rig, clips, nodes)) = vat::prepare(&asset) else {
            continue;
        };
        let options = VatOptions::default();
        let bake = vat::bake_model(&asset, "model", &options).unwrap();
        // The frames three.js is asked for: a spread of each clip's VAT frames.
        let picked: Vec<Vec<usize>> = bake.meshes[0]
            .meta
            .clips
            .iter()
            .map(|c| {
                let step = c.frames.div_ceil(FRAMES_PER_CLIP).max(1);
                let mut f: Vec<usize> = (0..c.frames).step_by(step).collect();
                if f.last() != Some(&(c.frames - 1)) {
                    f.push(c.frames - 1);
                }
                f
            })
            .collect();
        let meta0 = &bake.meshes[0].meta;
        let times: Vec<Vec<f64>> = meta0
            .clips
            .iter()
            .zip(&picked)
            .map(|(c, f)| {
                f.iter()
                    .map(|&f| (f as f64 / meta0.frame_rate).min(c.duration))
                    .collect()
            })
            .collect();
        let (all_vertices, three) = support::three_sample(&model, &times);
        let offset_of = |node: usize| -> usize {
            rig.mesh_nodes
                .iter()
                .take_while(|&&n| n != node)
                .map(|&n| {
                    rig.meshes[rig.nodes[n].mesh.unwrap()]
                        .primitives
                        .iter()
                        .map(|p| p.positions.len())
                        .sum::<usize>()
                })
                .sum()
        };
        let (mut evaluated_worst, mut decoded_worst) = (0f64, 0f64);
        for (mesh, &node) in bake.meshes.iter().zip(&nodes) {
            let meta = &mesh.meta;
            assert_eq!(meta.node, node);
            let frames = vat::evaluate(&rig, &clips, node, meta.frame_rate);
            let (decoded, _) =
                reader::decode(&mesh.files).unwrap_or_else(|e| panic!("{}: {e}", model.display()));
            let offset = offset_of(node);
            let mut sample = 0;
            for (clip, frames_of_clip) in meta.clips.iter().zip(&picked) {
                for &f in frames_of_clip {
                    let g = clip.first_frame + f;
                    for v in 0..meta.vertices {
                        let at = (sample * all_vertices + offset + v) * 3;
                        let q = [three[at], three[at + 1], three[at + 2]];
                        let e = vat::distance(&frames.positions[g * meta.vertices + v], &q);
                        let d = vat::distance(&decoded[g * meta.vertices + v], &q);
                        evaluated_worst = evaluated_worst.max(e / rig.diagonal);
                        decoded_worst = decoded_worst.max(d);
                    }
                    sample += 1;
                }
            }
            // Decoded positions are within the encoding's bound of three.js' (plus the
            // evaluator's own agreement); the reported error is within the tolerance.
            assert!(
                decoded_worst <= meta.error.position_bound + 1e-5 * rig.diagonal,
                "{}: decoded vs three {decoded_worst:.3e}, bound {:.3e}",
                model.display(),
                meta.error.position_bound
            );
            assert!(meta.error.position_max <= meta.error.position_bound);
        }
        assert!(
            evaluated_worst <= 1e-5,
            "{}: {evaluated_worst:.3e}",
            model.display()
        );
        let m = &bake.report.meshes[0];
        report.push(format!(
            "{}: {} mesh(es), {} vertices × {} frames, {}: evaluator vs three.js {evaluated_worst:.2e} \
             of the diagonal, decoded max error {:.2e} of the diagonal, normals {:.3}°",
            model.file_name().unwrap().to_string_lossy(),
            bake.meshes.len(),
            m.vertices,
            m.frames,
            m.encoding.name(),
            m.position_max_relative,
            m.normal_max_degrees
        ));
        checked += 1;
    }
    eprintln!("{}", report.join("\n"));
    assert!(checked > 0);
}

fn fox() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/sample-game/assets/Fox.glb")
}

/// Copies a model's folder (files only, not sub-folders: a model's resources sit beside it).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        if entry.path().is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

fn kiln_worker(args: &[&OsStr], data_dir: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kiln-worker"))
        .args(args)
        .env("KILN_DATA_DIR", data_dir)
        .output()
        .unwrap()
}

/// `kiln-worker vat` writes what docs/vat.md lists, and says why it can't bake a model.
#[test]
fn the_vat_command_bakes_and_refuses_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("baked");
    let run = kiln_worker(
        &[
            OsStr::new("vat"),
            fox().as_os_str(),
            OsStr::new("--out"),
            out.as_os_str(),
            OsStr::new("--json"),
        ],
        dir.path(),
    );
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    let folder = report["meshes"][0]["folder"].as_str().unwrap();
    for name in [
        "mesh.glb",
        "positions-0.png",
        "normals-0.png",
        "vat.json",
        "vat.glsl",
        "vat.wgsl",
    ] {
        assert!(out.join(folder).join(name).exists(), "{name}");
    }
    // The Khronos validator accepts the mesh.
    let validated = support::node_json(
        "check.mjs",
        &[out.join(folder).join("mesh.glb").as_os_str()],
    );
    let output = &validated["outputs"][0];
    assert_eq!(output["validator"]["numErrors"], 0, "{output}");

    // A model without animation: exit 2, the reason, nothing written.
    let still = dir.path().join("still");
    let cube = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/static-triangle.gltf");
    let run = kiln_worker(
        &[
            OsStr::new("vat"),
            cube.as_os_str(),
            OsStr::new("--out"),
            still.as_os_str(),
        ],
        dir.path(),
    );
    assert_eq!(run.status.code(), Some(2));
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("has no animation to bake"), "{err}");
    assert!(!still.exists());
    // Bad options: named.
    let run = kiln_worker(
        &[
            OsStr::new("vat"),
            fox().as_os_str(),
            OsStr::new("--out"),
            still.as_os_str(),
            OsStr::new("--encoding"),
            OsStr::new("ultra"),
        ],
        dir.path(),
    );
    assert_eq!(run.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&run.stderr).contains("encoding \"ultra\""));
    assert!(!still.exists());
}

/// Every mesh the VAT command bakes from the corpus is a valid glTF to the Khronos validator
/// (not only the Fox's): e.g. a mesh without UVs of its own still numbers its texture
/// coordinate sets from 0 (RobotExpressive has seven such meshes).
#[test]
fn every_vat_mesh_of_the_corpus_passes_the_validator() {
    let dir = tempfile::tempdir().unwrap();
    let mut meshes = Vec::new();
    let mut baked_models = 0;
    for (m, model) in support::models().iter().enumerate() {
        // The model's folder copied, baked beside the model as the pipeline does
        // (`<model>.vat/<mesh>/`), so textures it references by URI resolve from the mesh.
        let copy = dir.path().join(format!("model{m}"));
        copy_dir(model.parent().unwrap(), &copy);
        let model = copy.join(model.file_name().unwrap());
        let out = model.with_extension("vat");
        let run = kiln_worker(
            &[
                OsStr::new("vat"),
                model.as_os_str(),
                OsStr::new("--out"),
                out.as_os_str(),
            ],
            dir.path(),
        );
        match run.status.code() {
            // Nothing to bake (no animation, or nothing skinned or morphed): said, not written.
            Some(2) => continue,
            Some(0) => {}
            _ => panic!(
                "{}: {}",
                model.display(),
                String::from_utf8_lossy(&run.stderr)
            ),
        }
        baked_models += 1;
        for entry in std::fs::read_dir(&out).unwrap().flatten() {
            let glb = entry.path().join("mesh.glb");
            if glb.exists() {
                meshes.push(glb);
            }
        }
    }
    let args: Vec<&OsStr> = meshes.iter().map(|p| p.as_os_str()).collect();
    let validated = support::node_json("check.mjs", &args);
    let outputs = validated["outputs"].as_array().unwrap();
    assert_eq!(outputs.len(), meshes.len(), "{validated}");
    for (mesh, output) in meshes.iter().zip(outputs) {
        assert_eq!(
            output["validator"]["numErrors"],
            0,
            "{}: {output}",
            mesh.display()
        );
    }
    eprintln!(
        "{} VAT meshes of {baked_models} models: 0 validator errors",
        meshes.len()
    );
    // The Fox alone bakes one mesh; the corpus has dozens.
    assert!(!meshes.is_empty());
    if support::shared_assets().is_dir() {
        assert!(baked_models >= 10, "only {baked_models} models baked");
    }
}

/// Renders the skinned original (three.js' GLTFLoader + AnimationMixer) and its VAT (mesh.glb,
/// textures, the shipped vat.glsl) at the same frames in headless Chromium: the images match;
/// with the bounds or the texel addressing deliberately wrong they do not.
#[test]
fn the_vat_renders_like_the_skinned_original_in_chromium() {
    let dir = tempfile::tempdir().unwrap();
    // (model, extra bake arguments, clips): the Fox also 500 texels wide, so each frame spans
    // four rows (the shaders' row arithmetic for R > 1).
    let mut bakes = vec![
        (fox(), vec![], vec!["Survey", "Run"]),
        (fox(), vec!["--width", "500"], vec!["Run"]),
    ];
    let cesium = support::shared_assets().join("CesiumMan/CesiumMan.glb");
    if cesium.exists() {
        bakes.push((cesium, vec![], vec!["0"]));
    } else {
        support::require_corpus();
        eprintln!("{} is not here: rendering the Fox only", cesium.display());
    }
    for (m, (model, extra, clips)) in bakes.iter().enumerate() {
        let out = dir.path().join(format!("bake{m}"));
        let mut args = vec![
            OsStr::new("vat"),
            model.as_os_str(),
            OsStr::new("--out"),
            out.as_os_str(),
        ];
        args.extend(extra.iter().map(OsStr::new));
        let run = kiln_worker(&args, dir.path());
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        if !extra.is_empty() {
            let meta: serde_json::Value = serde_json::from_slice(
                &std::fs::read(out.join("fox/vat.json")).unwrap_or_else(|e| panic!("{e}")),
            )
            .unwrap();
            assert_eq!(meta["layout"]["rows_per_frame"], 4, "{}", meta["layout"]);
        }
        for &clip in clips {
            let render = |broken: &str| -> f64 {
                let result = support::node_json(
                    "vat-render.mjs",
                    &[
                        model.as_os_str(),
                        out.as_os_str(),
                        OsStr::new("--clip"),
                        OsStr::new(clip),
                        OsStr::new("--break"),
                        OsStr::new(broken),
                    ],
                );
                // Times on stored frames: the VAT holds exactly those poses.
                result["overall"]["on_frame_max_frac_over"]
                    .as_f64()
                    .unwrap_or_else(|| panic!("{result}"))
            };
            let good = render("none");
            let bounds = render("bounds");
            let uv = render("uv");
            eprintln!(
                "{} {clip}: pixels differing > 16/255: {good:.2e} (bounds broken {bounds:.3}, texels broken {uv:.3})",
                model.file_name().unwrap().to_string_lossy()
            );
            assert!(good <= 5e-3, "{clip}: {good}");
            assert!(bounds > 0.2 && uv > 0.2, "{clip}: {bounds} {uv}");
        }
    }
}
