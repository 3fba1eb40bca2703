//! Small animated models built in code for unit tests of the evaluator and the VAT stage.

use serde_json::{Value, json};

use crate::gltf::accessors::{
    ELEMENT_ARRAY_BUFFER, UNSIGNED_SHORT, components_of, push_accessor, push_floats, push_view,
};
use crate::gltf::{Asset, NoResources};

/// One channel of a clip: node, path, interpolation, key times, key values.
pub type ChannelSpec<'a> = (usize, &'a str, &'a str, &'a [f32], &'a [f32]);

/// A model under construction: JSON plus one buffer view per accessor.
pub struct Builder {
    pub asset: Asset,
}

impl Builder {
    pub fn new() -> Self {
        Self {
            asset: Asset {
                json: json!({"asset": {"version": "2.0"}, "scene": 0, "animations": []}),
                views: Vec::new(),
            },
        }
    }

    pub fn floats(&mut self, values: &[f32], kind: &str, bounds: bool) -> usize {
        let components = components_of(kind).unwrap();
        push_floats(&mut self.asset, values, components, None, bounds)
    }

    pub fn shorts(&mut self, values: &[u16], kind: &str, target: Option<u64>) -> usize {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let view = push_view(&mut self.asset, data, None, target);
        let components = components_of(kind).unwrap();
        push_accessor(
            &mut self.asset,
            json!({"bufferView": view, "componentType": UNSIGNED_SHORT,
                "count": values.len() / components, "type": kind}),
        )
    }

    /// Adds a clip with one channel per `(node, path, interpolation, times, values)`.
    pub fn clip(&mut self, name: &str, channels: &[ChannelSpec<'_>]) {
        let mut samplers = Vec::new();
        let mut targets = Vec::new();
        for (i, (node, path, interpolation, times, values)) in channels.iter().enumerate() {
            let input = self.floats(times, "SCALAR", true);
            let kind = match *path {
                "rotation" => "VEC4",
                "weights" => "SCALAR",
                _ => "VEC3",
            };
            let output = self.floats(values, kind, false);
            samplers
                .push(json!({"input": input, "output": output, "interpolation": interpolation}));
            targets.push(json!({"sampler": i, "target": {"node": node, "path": path}}));
        }
        self.asset.json["animations"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": name, "samplers": samplers, "channels": targets}));
    }

    /// Through a GLB and back: what a file would hold.
    pub fn finish(&self) -> Asset {
        Asset::read(&self.asset.to_glb(), &NoResources).unwrap()
    }
}

impl Default for Builder {
    fn default() -> Self {
        Self::new()
    }
}

/// A tube 2 units tall of `rings` rings of `around` vertices, skinned to a root joint and a
/// joint at y = 1 (weights blend over the middle), with normals, UVs, indices, a material and
/// one morph target (a bulge along the normals). Clips: "Bend" (1 s, the upper joint rotates
/// 60° about Z and back, LINEAR) and "Pulse" (0.5 s, the bulge's weight 0 → 1 → 0).
pub fn skinned_tube(around: usize, rings: usize) -> Asset {
    let mut b = Builder::new();
    let (mut positions, mut normals, mut uvs, mut joints, mut weights, mut bulge) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for r in 0..rings {
        let y = 2.0 * r as f32 / (rings - 1) as f32;
        let upper = ((y - 0.7) / 0.6).clamp(0.0, 1.0);
        for a in 0..around {
            let angle = std::f32::consts::TAU * a as f32 / around as f32;
            let (s, c) = angle.sin_cos();
            positions.extend([0.2 * c, y, 0.2 * s]);
            normals.extend([c, 0.0, s]);
            uvs.extend([a as f32 / around as f32, y / 2.0]);
            joints.extend([0u16, 1, 0, 0]);
            weights.extend([1.0 - upper, upper, 0.0, 0.0]);
            bulge.extend([0.05 * c, 0.0, 0.05 * s]);
        }
    }
    let mut indices = Vec::new();
    for r in 0..rings - 1 {
        for a in 0..around {
            let i = |r: usize, a: usize| (r * around + a % around) as u16;
            indices.extend([i(r, a), i(r + 1, a), i(r, a + 1)]);
            indices.extend([i(r, a + 1), i(r + 1, a), i(r + 1, a + 1)]);
        }
    }
    let position = b.floats(&positions, "VEC3", true);
    let normal = b.floats(&normals, "VEC3", false);
    let uv = b.floats(&uvs, "VEC2", false);
    let joint = b.shorts(&joints, "VEC4", None);
    let weight = b.floats(&weights, "VEC4", false);
    let target = b.floats(&bulge, "VEC3", true);
    let index = b.shorts(&indices, "SCALAR", Some(ELEMENT_ARRAY_BUFFER));
    let ibm: Vec<f32> = [0.0f32, -1.0]
        .iter()
        .flat_map(|ty| {
            let mut m = [0.0f32; 16];
            m[0] = 1.0;
            m[5] = 1.0;
            m[10] = 1.0;
            m[15] = 1.0;
            m[13] = *ty;
            m
        })
        .collect();
    let ibm = b.floats(&ibm, "MAT4", false);
    let j = &mut b.asset.json;
    j["nodes"] = json!([
        {"name": "root", "children": [1]},
        {"name": "tip", "translation": [0, 1, 0]},
        {"name": "tube", "mesh": 0, "skin": 0}
    ]);
    j["scenes"] = json!([{"nodes": [0, 2]}]);
    j["skins"] = json!([{"joints": [0, 1], "inverseBindMatrices": ibm}]);
    j["materials"] =
        json!([{"name": "tube", "pbrMetallicRoughness": {"baseColorFactor": [0.8, 0.3, 0.2, 1]}}]);
    j["meshes"] = json!([{"name": "tube", "weights": [0.0], "primitives": [{
        "attributes": {"POSITION": position, "NORMAL": normal, "TEXCOORD_0": uv,
                       "JOINTS_0": joint, "WEIGHTS_0": weight},
        "targets": [{"POSITION": target}],
        "indices": index, "material": 0}]}]);
    let half = std::f32::consts::FRAC_PI_6.sin();
    let cos = std::f32::consts::FRAC_PI_6.cos();
    let bend_times = [0.0f32, 0.5, 1.0];
    let bend_values = [
        0.0f32, 0.0, 0.0, 1.0, 0.0, 0.0, half, cos, 0.0, 0.0, 0.0, 1.0,
    ];
    b.clip(
        "Bend",
        &[(1, "rotation", "LINEAR", &bend_times, &bend_values)],
    );
    b.clip(
        "Pulse",
        &[(2, "weights", "LINEAR", &[0.0, 0.25, 0.5], &[0.0, 1.0, 0.0])],
    );
    b.finish()
}

/// A node's JSON value, for tests that edit a model.
pub fn set(asset: &mut Asset, pointer: &str, value: Value) {
    *asset.json.pointer_mut(pointer).unwrap() = value;
}
