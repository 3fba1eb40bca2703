//! The error budget on delivered files: rigs where quantizing the geometry alone (8-bit
//! weights, 14-bit positions) would break the animation tolerance.

use super::*;
use crate::animation::metric::MetricOptions;
use crate::animation::test_models::{set, skinned_tube};
use serde_json::json;

/// The delivered error of one variant, measured again here from its bytes.
fn delivered(source: &Asset, bytes: &[u8], map: &VertexMap, tolerance: f64) -> DeliveredError {
    let delivered = Asset::read(bytes, &NoResources).unwrap();
    delivered_error(
        source,
        &delivered,
        map,
        &MetricOptions::default(),
        tolerance,
    )
    .unwrap()
}

fn tolerance_of(source: &Asset) -> f64 {
    let rig = Rig::read(source, MetricOptions::default().shell).unwrap();
    AnimationOptions::DEFAULT_TOLERANCE * rig.diagonal
}

/// Checks `source` as the stage sees it: optimised with the default options, both variants
/// hold the tolerance at every sample (measured here again), and the report says so.
fn holds_budget(source: &Asset) -> DeliveredBudget {
    let tolerance = tolerance_of(source);
    let model = optimize_model(&source.to_glb(), &NoResources, &GeometryOptions::default())
        .expect("optimised within the budget");
    let budget = model
        .report
        .delivered
        .clone()
        .expect("the budget is reported");
    for bytes in [&model.quantized, &model.meshopt] {
        let e = delivered(source, bytes, &model.vertex_map, tolerance);
        assert!(e.measured > 1000, "{e:?}");
        assert_eq!(e.within_share, 1.0, "{e:?} {budget:?}");
        assert!(e.max <= tolerance, "{e:?} {budget:?}");
    }
    assert!(
        budget.quantized_max_relative <= budget.tolerance_relative,
        "{budget:?}"
    );
    assert!(
        budget.meshopt_max_relative <= budget.tolerance_relative,
        "{budget:?}"
    );
    budget
}

/// What the geometry did before the budget: 8-bit weights and 14-bit positions, animation
/// given the whole tolerance. Its delivered error, relative to the tolerance.
fn unbudgeted(source: &Asset) -> f64 {
    let model = build_variants(source, &GeometryOptions::default()).unwrap();
    let tolerance = tolerance_of(source);
    delivered(source, &model.quantized, &model.vertex_map, tolerance).max / tolerance
}

/// The tube's vertices carry 1 % of their weight on a joint 3 units away that turns 30°:
/// an 8-bit weight moves them by up to 0.2 % of that joint's sweep, far beyond 5e-5 of the
/// tube's diagonal.
fn small_weights_on_a_far_bone() -> Asset {
    let mut tube = skinned_tube(12, 9);
    // Joint 1 ("tip") 3 units up; every vertex: 99 % root, 1 % tip.
    set(&mut tube, "/nodes/1/translation", json!([0.0, 3.0, 0.0]));
    let weights = tube.json["meshes"][0]["primitives"][0]["attributes"]["WEIGHTS_0"]
        .as_u64()
        .unwrap() as usize;
    let (_, values) = accessors::read_f32(&tube, weights).unwrap();
    let mut skewed = values.clone();
    for w in skewed.chunks_mut(4) {
        w.copy_from_slice(&[0.99, 0.01, 0.0, 0.0]);
    }
    let view = tube.json["accessors"][weights]["bufferView"]
        .as_u64()
        .unwrap() as usize;
    tube.views[view] = skewed.iter().flat_map(|x| x.to_le_bytes()).collect();
    // The inverse bind of the tip matches its new place.
    let ibm = tube.json["skins"][0]["inverseBindMatrices"]
        .as_u64()
        .unwrap() as usize;
    let ibm_view = tube.json["accessors"][ibm]["bufferView"].as_u64().unwrap() as usize;
    let (_, mut m) = accessors::read_f32(&tube, ibm).unwrap();
    m[16 + 13] = -3.0;
    tube.views[ibm_view] = m.iter().flat_map(|x| x.to_le_bytes()).collect();
    Asset::read(&tube.to_glb(), &NoResources).unwrap()
}

#[test]
fn small_weights_on_far_bones_get_16_bit_weights() {
    let source = small_weights_on_a_far_bone();
    let before = unbudgeted(&source);
    assert!(
        before > 1.0,
        "8-bit weights alone exceed the tolerance: {before}×"
    );
    let budget = holds_budget(&source);
    assert_eq!(budget.weight_bits, 16, "{budget:?}");
}

/// A large ground (420 units) skinned to the small animated tube's root: skinned meshes
/// share one position grid, so 14 bits over the ground's extent are the tube's step too
/// (here 0.83 of the tolerance; how much of a step the rounding takes depends on where the
/// grid falls, 0.47–0.89 for grounds of 400–670 units).
fn small_moving_part_in_a_large_scene() -> Asset {
    let mut tube = skinned_tube(12, 9);
    let ground: Vec<f32> = vec![-210.0, 0.0, -210.0, 210.0, 0.0, -210.0, 0.0, 0.0, 210.0];
    let accessor = accessors::push_floats(&mut tube, &ground, 3, None, true);
    // Skinned to the tube's root: skinned meshes share one grid over their own extent.
    let joints = accessors::push_view(&mut tube, vec![0u8; 12], None, None);
    let joints = accessors::push_accessor(
        &mut tube,
        json!({"bufferView": joints, "componentType": 5121, "count": 3, "type": "VEC4"}),
    );
    let weights =
        accessors::push_floats(&mut tube, &[1.0, 0.0, 0.0, 0.0].repeat(3), 4, None, false);
    tube.json["meshes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "ground", "primitives": [
            {"attributes": {"POSITION": accessor, "JOINTS_0": joints, "WEIGHTS_0": weights}}
        ]}));
    tube.json["nodes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "ground", "mesh": 1, "skin": 0}));
    tube.json["scenes"][0]["nodes"]
        .as_array_mut()
        .unwrap()
        .push(json!(3));
    Asset::read(&tube.to_glb(), &NoResources).unwrap()
}

#[test]
fn a_small_moving_part_in_a_large_scene_gets_more_position_bits() {
    let source = small_moving_part_in_a_large_scene();
    let before = unbudgeted(&source);
    assert!(
        before > GEOMETRY_SHARE,
        "14-bit positions take most of the tolerance: {before}×"
    );
    let budget = holds_budget(&source);
    assert!(budget.position_bits > 14, "{budget:?}");
}

/// The tube without its morph target and with rigid skinning (each vertex on one joint):
/// 8-bit weights are exact; only positions may need more bits.
#[test]
fn a_rigid_rig_keeps_its_bits() {
    let mut tube = skinned_tube(12, 9);
    let weights = tube.json["meshes"][0]["primitives"][0]["attributes"]["WEIGHTS_0"]
        .as_u64()
        .unwrap() as usize;
    let (_, mut values) = accessors::read_f32(&tube, weights).unwrap();
    for w in values.chunks_mut(4) {
        let upper = if w[1] >= 0.5 { 1.0 } else { 0.0 };
        w.copy_from_slice(&[1.0 - upper, upper, 0.0, 0.0]);
    }
    let view = tube.json["accessors"][weights]["bufferView"]
        .as_u64()
        .unwrap() as usize;
    tube.views[view] = values.iter().flat_map(|x| x.to_le_bytes()).collect();
    tube.json["meshes"][0]["primitives"][0]
        .as_object_mut()
        .unwrap()
        .remove("targets");
    tube.json["meshes"][0]
        .as_object_mut()
        .unwrap()
        .remove("weights");
    tube.json["animations"].as_array_mut().unwrap().truncate(1);
    let tube = Asset::read(&tube.to_glb(), &NoResources).unwrap();
    let budget = holds_budget(&tube);
    assert_eq!(
        (budget.weight_bits, budget.morph_bits),
        (8, 8),
        "{budget:?}"
    );
}

/// The tube as built: its weights blend over the middle (an 8-bit weight is off by up to
/// 1/510 of a 60° bend) and its bulge is a morph target of 0.05 units: more bits for both.
#[test]
fn blended_weights_and_morph_targets_get_more_bits() {
    let source = skinned_tube(12, 9);
    assert!(unbudgeted(&source) > 1.0);
    let budget = holds_budget(&source);
    assert!(
        budget.weight_bits == 16 && budget.morph_bits > 8,
        "{budget:?}"
    );
}
