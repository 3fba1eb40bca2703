//! The VAT stage on models built in code. Decoding here is written from `docs/vat.md`, not
//! shared with the stage, so a format slip on either side fails.

use serde_json::json;

use super::*;
use crate::animation::test_models::{Builder, skinned_tube};
use crate::ir::TreeFile;

fn fixed(encoding: VatEncoding, mode: PositionMode) -> VatOptions {
    VatOptions {
        encoding: EncodingChoice::Fixed(encoding),
        mode,
        ..VatOptions::default()
    }
}

/// Bakes, decodes from the files, and checks every vertex at every frame against the f64
/// reference evaluator (`Rig::points`): within the encoding's bound, the report's measured
/// error the real one.
fn check_bake(asset: &Asset, options: &VatOptions) -> VatBake {
    let bake = bake_model(asset, "tube.glb", options).unwrap();
    let (rig, clips, _) = prepare(asset).unwrap();
    let mut pose = rig.rest_pose();
    let mut reference = Vec::new();
    for mesh in &bake.meshes {
        let meta = &mesh.meta;
        let (positions, normals) = reader::decode(&mesh.files).unwrap();
        let mut worst = 0f64;
        let mut worst_normal = 0f64;
        for clip in &meta.clips {
            let source = clips.iter().find(|c| c.name == clip.name).unwrap();
            for f in 0..clip.frames {
                let t = (f as f64 / meta.frame_rate).min(clip.duration);
                rig.pose_at(source, t, &mut pose);
                rig.points(&pose, &mut reference);
                let g = clip.first_frame + f;
                for v in 0..meta.vertices {
                    let p = positions[g * meta.vertices + v];
                    let e = (glam::DVec3::from_array(p.map(f64::from)) - reference[v]).length();
                    worst = worst.max(e);
                }
            }
        }
        let frames = evaluate(&rig, &clips, meta.node, meta.frame_rate);
        for (a, b) in normals.iter().zip(&frames.normals) {
            worst_normal = worst_normal.max(textures::angle(a, b).to_degrees());
        }
        let e = &meta.error;
        // f32 evaluation differs from the f64 reference by rounding only.
        let rounding = 1e-6 * rig.diagonal;
        assert!(
            worst <= e.position_bound + rounding,
            "{:?}: decoded error {worst:.3e} over the bound {:.3e}",
            meta.encoding,
            e.position_bound
        );
        assert!(
            (worst - e.position_max).abs() <= rounding,
            "{:?}: reported {:.6e}, decoded {worst:.6e}",
            meta.encoding,
            e.position_max
        );
        assert!(worst_normal <= e.normal_bound_degrees, "{worst_normal}°");
        assert!((worst_normal - e.normal_max_degrees).abs() < 1e-3);
    }
    bake
}

#[test]
fn every_encoding_and_mode_decodes_within_its_bound() {
    let asset = skinned_tube(12, 20);
    let mut errors = BTreeMap::new();
    for encoding in VatEncoding::ALL {
        for mode in [PositionMode::Absolute, PositionMode::Relative] {
            let bake = check_bake(&asset, &fixed(encoding, mode));
            let meta = &bake.meshes[0].meta;
            assert_eq!(meta.vertices, 240);
            // Bend: 1 s at 30 fps → 31 frames; Pulse: 0.5 s → 16.
            assert_eq!(
                meta.clips
                    .iter()
                    .map(|c| (c.name.as_str(), c.first_frame, c.frames, c.looping))
                    .collect::<Vec<_>>(),
                [("Bend", 0, 31, true), ("Pulse", 31, 16, true)]
            );
            errors.insert(
                (encoding.name(), mode == PositionMode::Relative),
                meta.error,
            );
        }
    }
    // More bits, less error; relative offsets are more precise than absolute positions.
    let e = |name, relative| errors[&(name, relative)].position_max;
    assert!(e("low", false) > e("medium", false) && e("medium", false) > e("high", false));
    assert!(e("low", true) < e("low", false) && e("medium", true) < e("medium", false));
}

#[test]
fn auto_takes_the_smallest_encoding_that_meets_the_tolerance() {
    let asset = skinned_tube(12, 20);
    for tolerance in [1e-1, 2.5e-4, 1e-6, 1e-9] {
        let options = VatOptions {
            tolerance,
            candidates: VatEncoding::ALL.to_vec(),
            ..VatOptions::default()
        };
        let bake = check_bake(&asset, &options);
        let meta = &bake.meshes[0].meta;
        assert_eq!(meta.candidates.len(), 5);
        let passing: Vec<_> = meta
            .candidates
            .iter()
            .filter(|c| c.meets_tolerance)
            .collect();
        let chosen = meta
            .candidates
            .iter()
            .find(|c| c.encoding == meta.encoding)
            .unwrap();
        match passing.iter().map(|c| c.bytes).min() {
            Some(smallest) => assert!(chosen.meets_tolerance && chosen.bytes <= smallest),
            // None meets it: the most precise one, with a warning.
            None => {
                let best = meta
                    .candidates
                    .iter()
                    .map(|c| c.position_max)
                    .fold(f64::INFINITY, f64::min);
                assert_eq!(chosen.position_max, best);
                assert!(!bake.report.meshes[0].warnings.is_empty());
            }
        }
        for c in &meta.candidates {
            assert_eq!(c.meets_tolerance, c.position_max <= meta.tolerance);
        }
    }
}

/// Vertex counts just over a power of two (OpenVAT #4), rows wrapping, frames split over
/// several textures of at most the maximum size: every vertex still decodes to itself.
#[test]
fn layouts_wrap_rows_and_split_frames_without_smearing() {
    let asset = skinned_tube(257, 2);
    let options = VatOptions {
        width: Some(256),
        max_size: 2048,
        frame_rate: 400.0,
        ..fixed(VatEncoding::High, PositionMode::Relative)
    };
    let bake = check_bake(&asset, &options);
    let meta = &bake.meshes[0].meta;
    assert_eq!(meta.vertices, 514);
    assert_eq!(meta.layout.width, 256);
    assert_eq!(meta.layout.rows_per_frame, 3);
    // 3 planes × 3 rows = 9 rows a frame: 227 frames a texture; 401 + 201 frames.
    assert_eq!(meta.layout.frames_per_texture, 227);
    assert_eq!(meta.frames, 602);
    assert_eq!(meta.textures.len(), 3);
    assert_eq!(meta.textures[2].first_frame, 454);
    assert_eq!(meta.textures[2].frames, 148);
    // The shaders address texture i with i = frame / frames_per_texture.
    let glsl = shaders::glsl(meta);
    assert!(glsl.contains("vatPositions2") && glsl.contains("#define VAT_FRAMES_PER_TEXTURE 227"));
}

/// Format 2 stores planes, then vertex rows, then frames: in a texture of `n` frames, plane `p`
/// of vertex `v` at local frame `l` is row `(p * R + v / W) * n + l` (docs/vat.md). Decoded here
/// by hand from the PNG words, over several textures (the last holding fewer frames) with
/// three rows per frame, against the evaluator.
#[test]
fn position_planes_are_plane_major() {
    let asset = skinned_tube(257, 2);
    let options = VatOptions {
        width: Some(256),
        max_size: 2048,
        frame_rate: 400.0,
        ..fixed(VatEncoding::Medium, PositionMode::Relative)
    };
    let bake = check_bake(&asset, &options);
    let mesh = &bake.meshes[0];
    let meta = &mesh.meta;
    assert_eq!(meta.version, 2);
    let l = meta.layout;
    assert_eq!(
        (l.rows_per_frame, l.planes, l.frames_per_texture),
        (3, 2, 341)
    );
    assert_eq!(meta.textures.len(), 2);
    assert_eq!(meta.textures[1].frames, meta.frames - 341);
    let (rig, clips, _) = prepare(&asset).unwrap();
    let frames = evaluate(&rig, &clips, meta.node, meta.frame_rate);
    let (w, r) = (l.width as usize, l.rows_per_frame as usize);
    let mut checked = 0;
    for (i, t) in meta.textures.iter().enumerate() {
        let bytes = &mesh
            .files
            .iter()
            .find(|(name, _)| *name == t.positions)
            .unwrap()
            .1;
        let (width, height, words) = textures::read_texture(bytes).unwrap();
        let n = t.frames;
        assert_eq!((width as usize, height as usize), (w, 2 * n * r));
        for local in 0..n {
            let g = i * l.frames_per_texture as usize + local;
            for v in 0..meta.vertices {
                let texel = |plane: usize| {
                    let y = (plane * r + v / w) * n + local;
                    let o = (y * w + v % w) * 4;
                    [words[o], words[o + 1], words[o + 2]]
                };
                let (hi, lo) = (texel(0), texel(1));
                let decoded: [f64; 3] = [0, 1, 2].map(|a| {
                    let t = (hi[a] * 256 + lo[a]) as f64 / 65535.0;
                    let (min, max) = (meta.bounds.min[a] as f64, meta.bounds.max[a] as f64);
                    frames.rest[v][a] as f64 + min + t * (max - min)
                });
                let expected = frames.positions[g * meta.vertices + v].map(f64::from);
                let e =
                    (glam::DVec3::from_array(decoded) - glam::DVec3::from_array(expected)).length();
                assert!(
                    e <= meta.error.position_bound + 1e-6 * rig.diagonal,
                    "texture {i} frame {g} vertex {v}: off by {e:e}"
                );
                checked += 1;
            }
        }
    }
    assert_eq!(checked, meta.frames * meta.vertices);
}

#[test]
fn bad_models_get_a_clear_error_and_no_output() {
    let tube = skinned_tube(8, 4);
    let bake = |asset: &Asset, options: &VatOptions| bake_model(asset, "m.glb", options);
    let defaults = VatOptions::default();

    let mut still = tube.clone();
    still.json["animations"] = json!([]);
    assert_eq!(bake(&still, &defaults).unwrap_err(), VatError::NoAnimation);

    // A rigid mesh moved by its node only: nothing skinned, no morph targets.
    let mut b = Builder::new();
    let position = b.floats(&[0., 0., 0., 1., 0., 0., 0., 1., 0.], "VEC3", true);
    b.asset.json["nodes"] = json!([{"mesh": 0}]);
    b.asset.json["scenes"] = json!([{"nodes": [0]}]);
    b.asset.json["meshes"] = json!([{"primitives": [{"attributes": {"POSITION": position}}]}]);
    b.clip(
        "Slide",
        &[(
            0,
            "translation",
            "LINEAR",
            &[0.0, 1.0],
            &[0., 0., 0., 1., 0., 0.],
        )],
    );
    let err = bake(&b.finish(), &defaults).unwrap_err();
    assert_eq!(err, VatError::NothingToBake { meshes: 1 });
    assert!(err.to_string().contains("no skinned mesh"), "{err}");

    // A clip whose only key is at 0.
    let mut b = Builder::new();
    b.asset = tube.clone();
    b.clip(
        "Pose",
        &[(1, "rotation", "LINEAR", &[0.0], &[0., 0., 0., 1.])],
    );
    let err = bake(&b.finish(), &defaults).unwrap_err();
    assert_eq!(
        err,
        VatError::ZeroLengthClip {
            clip: "Pose".into()
        }
    );

    // 2 560 vertices one per row cannot fit 2 048 rows.
    let wide = skinned_tube(64, 40);
    let narrow = VatOptions {
        width: Some(1),
        max_size: 2048,
        ..defaults.clone()
    };
    let err = bake(&wide, &narrow).unwrap_err();
    assert!(
        matches!(err, VatError::DoesNotFit { vertices: 2560, .. }),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("more than the maximum texture size 2048")
    );

    for bad in [
        VatOptions {
            frame_rate: 0.0,
            ..defaults.clone()
        },
        VatOptions {
            max_size: 1000,
            ..defaults.clone()
        },
        VatOptions {
            tolerance: f64::NAN,
            ..defaults.clone()
        },
    ] {
        assert!(matches!(
            bake(&tube, &bad).unwrap_err(),
            VatError::Options(_)
        ));
    }
}

/// In a build: a model that can't be baked is reported and nothing is written for it; the
/// good one is baked under `<model>.vat/`.
#[test]
fn the_stage_bakes_what_the_build_selects_and_reports_what_it_cannot() {
    let dir = tempfile::tempdir().unwrap();
    let good = skinned_tube(8, 4).to_glb();
    let mut still = skinned_tube(8, 4);
    still.json["animations"] = json!([]);
    std::fs::create_dir_all(dir.path().join("m")).unwrap();
    std::fs::write(dir.path().join("m/good.glb"), &good).unwrap();
    std::fs::write(dir.path().join("m/still.glb"), still.to_glb()).unwrap();
    let tree = FileTree {
        root: dir.path().to_path_buf(),
        files: vec![
            TreeFile {
                path: "m/good.glb".into(),
                size: good.len() as u64,
            },
            TreeFile {
                path: "m/still.glb".into(),
                size: 1,
            },
        ],
    };
    let (inventory, _) = crate::stages::inventory::Step::run(&tree, &(), &mut |_| {}).unwrap();
    let selection = selection_of(
        Some("[vat]\nfiles = [\"*\"]\n[vat.file.\"m/good.glb\"]\nencoding = \"low\"\n"),
        &VatSelection::default(),
    )
    .unwrap();
    let (tree, report) = bake_tree(&tree, &inventory, &selection).unwrap();
    assert_eq!(report.models.len(), 2);
    assert_eq!(report.models[0].baked, ["m/good.vat/tube/vat.json"]);
    assert_eq!(
        report.models[0].report.as_ref().unwrap().meshes[0].encoding,
        VatEncoding::Low
    );
    assert_eq!(
        report.models[1].error.as_deref(),
        Some("the model has no animation to bake")
    );
    assert!(tree.contains("m/good.vat/tube/mesh.glb"));
    assert!(tree.contains("m/good.vat/tube/positions-0.png"));
    assert!(!dir.path().join("m/still.vat").exists());
    // Sorted for every later stage.
    assert!(tree.files.windows(2).all(|w| w[0].path < w[1].path));
}

/// A build's `kiln.toml` read as the pipeline reads it, its `[vat]` applied.
fn selection_of(kiln_toml: Option<&str>, base: &VatSelection) -> Result<VatSelection, String> {
    let config = crate::build_config::BuildConfig::parse(kiln_toml.unwrap_or(""))?;
    build_selection(config.vat.as_ref(), base)
}

#[test]
fn build_settings_are_checked() {
    let base = VatSelection::default();
    assert_eq!(selection_of(None, &base).unwrap(), base);
    assert_eq!(selection_of(Some("[models]\n"), &base).unwrap(), base);
    // An unknown section is an error naming it (it used to be ignored).
    assert!(
        selection_of(Some("[other]\nx = 1\n"), &base)
            .unwrap_err()
            .contains("other")
    );
    let s = selection_of(
        Some("[vat]\nfiles = [\"a.glb\"]\nmode = \"absolute\"\nframe_rate = 24\n"),
        &base,
    )
    .unwrap();
    assert_eq!(s.files, ["a.glb"]);
    assert_eq!(s.options_for("a.glb").unwrap().frame_rate, 24.0);
    assert!(s.options_for("b.glb").is_none());
    for (bad, why) in [
        ("[vat]\nencoding = \"ultra\"\n", "encoding \"ultra\""),
        ("[vat]\nmax_size = 1024\n", "maximum texture size 1024"),
        ("[vat]\nframes = 3\n", "unknown field"),
        ("[vat\n", "kiln.toml"),
    ] {
        let err = selection_of(Some(bad), &base).unwrap_err();
        assert!(err.contains(why), "{bad:?}: {err}");
    }
}

/// The shipped GLSL and WGSL parse and validate with naga, for every encoding and mode, one
/// texture or several, with and without interpolation; a broken chunk does not.
#[test]
fn shaders_validate_with_naga() {
    let asset = skinned_tube(16, 8);
    for encoding in VatEncoding::ALL {
        for mode in [PositionMode::Absolute, PositionMode::Relative] {
            for max_size in [4096, 2048] {
                let options = VatOptions {
                    max_size,
                    width: Some(1),
                    frame_rate: if max_size == 2048 { 200.0 } else { 30.0 },
                    ..fixed(encoding, mode)
                };
                let bake = bake_model(&asset, "tube.glb", &options).unwrap();
                let meta = &bake.meshes[0].meta;
                let text = |n: &str| {
                    String::from_utf8(
                        bake.meshes[0]
                            .files
                            .iter()
                            .find(|f| f.0 == n)
                            .unwrap()
                            .1
                            .clone(),
                    )
                    .unwrap()
                };
                for interpolate in [false, true] {
                    validate_glsl(&text("vat.glsl"), interpolate)
                        .unwrap_or_else(|e| panic!("{encoding:?} {mode:?} {max_size}: {e}"));
                }
                validate_wgsl(&text("vat.wgsl"))
                    .unwrap_or_else(|e| panic!("{encoding:?} {mode:?} {max_size}: {e}"));
                if max_size == 2048 {
                    assert!(
                        meta.textures.len() > 1,
                        "{encoding:?}: {}",
                        meta.textures.len()
                    );
                }
            }
        }
    }
    let good = shaders::glsl(
        &bake_model(&asset, "t", &VatOptions::default())
            .unwrap()
            .meshes[0]
            .meta,
    );
    assert!(validate_glsl(&good.replace("vec3 hi", "vec2 hi"), false).is_err());
    let good = shaders::wgsl(
        &bake_model(&asset, "t", &VatOptions::default())
            .unwrap()
            .meshes[0]
            .meta,
    );
    assert!(validate_wgsl(&good.replace("-> vec3<f32>", "-> vec2<f32>")).is_err());
}

/// The chunk inside a vertex shader the way three.js uses it. naga reads Vulkan GLSL 450,
/// which has no combined `sampler2D` uniforms: each becomes a texture and a sampler with a
/// binding, and its name a macro for the combined sampler. The functions are kept verbatim.
fn validate_glsl(chunk: &str, interpolate: bool) -> Result<(), String> {
    let mut binding = 0;
    let chunk: String = chunk
        .lines()
        .map(|line| {
            let Some(rest) = line.strip_prefix("uniform ") else {
                return format!("{line}\n");
            };
            let (kind, name) = rest.trim_end_matches(';').split_once(' ').unwrap();
            let texture = if kind == "usampler2D" {
                "utexture2D"
            } else {
                "texture2D"
            };
            binding += 2;
            format!(
                "layout(set = 0, binding = {}) uniform {texture} {name}_t;\n\
                 layout(set = 0, binding = {binding}) uniform sampler {name}_s;\n\
                 #define {name} {kind}({name}_t, {name}_s)\n",
                binding - 1
            )
        })
        .collect();
    let source = format!(
        "#version 450\n{}{chunk}\n\
         layout(location = 0) in vec3 position;\nlayout(location = 1) in vec2 uv1;\n\
         layout(location = 2) in vec4 vatClip;\nlayout(location = 0) out vec3 vNormal;\n\
         void main() {{\n\
         \x20 VatFrame f = vatFrame(vatClip.x, vatClip.y, vatClip.z, vatClip.w);\n\
         \x20 vNormal = vatNormal(uv1, f);\n\
         \x20 gl_Position = vec4(vatPosition(uv1, position, f), 1.0);\n}}\n",
        if interpolate {
            "#define VAT_INTERPOLATE\n"
        } else {
            ""
        }
    );
    let module = naga::front::glsl::Frontend::default()
        .parse(
            &naga::front::glsl::Options::from(naga::ShaderStage::Vertex),
            &source,
        )
        .map_err(|e| format!("{e:?}"))?;
    naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::default(),
    )
    .validate(&module)
    .map_err(|e| format!("{e:?}"))?;
    Ok(())
}

fn validate_wgsl(source: &str) -> Result<(), String> {
    let module = naga::front::wgsl::parse_str(source).map_err(|e| e.emit_to_string(source))?;
    naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::default(),
    )
    .validate(&module)
    .map_err(|e| format!("{e:?}"))?;
    Ok(())
}

/// A mesh without NORMAL is shaded flat by glTF: its VAT mesh has no NORMAL either and says
/// so, and its baked normals are the smooth ones computed from its triangles.
#[test]
fn a_mesh_without_normals_stays_flat() {
    let mut asset = skinned_tube(12, 6);
    asset.json["meshes"][0]["primitives"][0]["attributes"]
        .as_object_mut()
        .unwrap()
        .remove("NORMAL");
    let bake = check_bake(&asset, &VatOptions::default());
    let meta = &bake.meshes[0].meta;
    assert!(meta.flat_shading);
    let glb = &bake.meshes[0]
        .files
        .iter()
        .find(|f| f.0 == "mesh.glb")
        .unwrap()
        .1;
    let mesh = Asset::read(glb, &crate::gltf::NoResources).unwrap();
    assert!(mesh.json["meshes"][0]["primitives"][0]["attributes"]["NORMAL"].is_null());
    assert!(
        !bake_model(&skinned_tube(12, 6), "t", &VatOptions::default())
            .unwrap()
            .meshes[0]
            .meta
            .flat_shading
    );
}
