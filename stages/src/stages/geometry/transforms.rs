//! Node transforms: the position grid's dequantization placed on the mesh nodes (or baked
//! into skins' inverse bind matrices), with the matrix and quaternion arithmetic it needs.

use super::*;

/// Puts `real = offset + scale × q` of each mesh's grid (`grids`, per mesh) where glTF
/// applies it: the inverse bind matrices of skinned meshes (every skinned mesh is on one
/// grid), and a child node carrying the mesh for everything else.
pub(super) fn place_dequantization(
    asset: &mut Asset,
    grids: &[Option<Grid>],
) -> Result<(), GltfError> {
    // Column-major D = translate(o) · scale(s).
    let dequantization = |grid: &Grid| -> [f32; 16] {
        let (s, o) = (grid.scale, grid.offset);
        [
            s, 0., 0., 0., 0., s, 0., 0., 0., 0., s, 0., o[0], o[1], o[2], 1.,
        ]
    };
    let node_count = asset.array("nodes").len();
    // Nodes whose translation/rotation/scale an animation drives can't absorb D themselves.
    let animated: BTreeSet<u64> = asset
        .array("animations")
        .iter()
        .flat_map(|a| a["channels"].as_array().cloned().unwrap_or_default())
        .filter(|c| c["target"]["path"] != "weights")
        .filter_map(|c| c["target"]["node"].as_u64())
        .collect();
    let mut skins_done = BTreeSet::new();
    let mut moved: BTreeMap<usize, usize> = BTreeMap::new();
    for n in 0..node_count {
        let node = asset.json["nodes"][n].clone();
        let Some(mesh) = node.get("mesh").cloned() else {
            continue;
        };
        let Some(grid) = mesh
            .as_u64()
            .and_then(|m| grids.get(m as usize))
            .and_then(Option::as_ref)
        else {
            continue;
        };
        let d = dequantization(grid);
        if let Some(skin) = node.get("skin").and_then(Value::as_u64) {
            let skin = skin as usize;
            if skins_done.insert(skin) {
                premultiply_inverse_binds(asset, skin, &d)?;
            }
            continue;
        }
        // A leaf node that no animation moves takes D into its own transform: M' = M · D.
        let leaf = node
            .get("children")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty);
        if leaf
            && !animated.contains(&(n as u64))
            && bake_into_node(&mut asset.json["nodes"][n], &d)
        {
            continue;
        }
        // Otherwise a child node holds the mesh with the dequantization transform, so the
        // node's own transform, animations and children are untouched.
        let (s, o) = (grid.scale, grid.offset);
        let mut child =
            json!({"mesh": mesh, "translation": floats(&o), "scale": floats(&[s, s, s])});
        if let Some(weights) = node.get("weights") {
            child["weights"] = weights.clone();
        }
        let child_index = asset.array("nodes").len();
        let what = format!("nodes[{n}]");
        let nodes = asset
            .json
            .get_mut("nodes")
            .and_then(Value::as_array_mut)
            .ok_or_else(|| invalid("nodes", "is not an array"))?;
        nodes.push(child);
        let parent = nodes[n]
            .as_object_mut()
            .ok_or_else(|| invalid(&what, "is not an object"))?;
        parent.remove("mesh");
        parent.remove("weights");
        let children = parent.entry("children").or_insert_with(|| json!([]));
        children
            .as_array_mut()
            .ok_or_else(|| invalid(format!("{what}.children"), "is not an array"))?
            .push(json!(child_index));
        moved.insert(n, child_index);
    }
    // Morph weight animations follow the mesh to its new node.
    if let Some(animations) = asset
        .json
        .get_mut("animations")
        .and_then(Value::as_array_mut)
    {
        for animation in animations {
            for channel in animation["channels"].as_array_mut().into_iter().flatten() {
                let target = &mut channel["target"];
                if target["path"] == "weights"
                    && let Some(node) = target["node"].as_u64()
                    && let Some(child) = moved.get(&(node as usize))
                {
                    target["node"] = json!(child);
                }
            }
        }
    }
    Ok(())
}

/// `node`'s transform becomes `M · D` (D = translate(o) · uniform scale(s)); false if the
/// node's transform can't be read.
pub(super) fn bake_into_node(node: &mut Value, d: &[f32; 16]) -> bool {
    let Some(object) = node.as_object_mut() else {
        return false;
    };
    if let Some(matrix) = object.get("matrix").and_then(Value::as_array) {
        let m: Vec<f32> = matrix
            .iter()
            .filter_map(|v| v.as_f64().map(|x| x as f32))
            .collect();
        if m.len() != 16 {
            return false;
        }
        object.insert("matrix".into(), floats(&mat4_mul(&m, d)));
        return true;
    }
    let triple = |key: &str, default: [f32; 3]| -> Option<[f32; 3]> {
        match object.get(key) {
            None => Some(default),
            Some(v) => {
                let a = v.as_array()?;
                Some([
                    a.first()?.as_f64()? as f32,
                    a.get(1)?.as_f64()? as f32,
                    a.get(2)?.as_f64()? as f32,
                ])
            }
        }
    };
    let (Some(t), Some(sc)) = (triple("translation", [0.0; 3]), triple("scale", [1.0; 3])) else {
        return false;
    };
    let q: [f32; 4] = match object.get("rotation").and_then(Value::as_array) {
        None => [0.0, 0.0, 0.0, 1.0],
        Some(a) if a.len() == 4 => {
            let v: Vec<f32> = a
                .iter()
                .filter_map(|x| x.as_f64().map(|x| x as f32))
                .collect();
            if v.len() != 4 {
                return false;
            }
            [v[0], v[1], v[2], v[3]]
        }
        Some(_) => return false,
    };
    // T' = T + R(S ⊙ o), R' = R, S' = S · s.
    let (o, s) = ([d[12], d[13], d[14]], d[0]);
    let v = [sc[0] * o[0], sc[1] * o[1], sc[2] * o[2]];
    let r = rotate(q, v);
    object.insert(
        "translation".into(),
        floats(&[t[0] + r[0], t[1] + r[1], t[2] + r[2]]),
    );
    object.insert("scale".into(), floats(&[sc[0] * s, sc[1] * s, sc[2] * s]));
    true
}

/// Rotates `v` by the unit quaternion `q` (x, y, z, w).
pub(super) fn rotate(q: [f32; 4], v: [f32; 3]) -> [f32; 3] {
    let (x, y, z, w) = (q[0], q[1], q[2], q[3]);
    // v' = v + 2w(u × v) + 2 u × (u × v), with u = (x, y, z).
    let c1 = [
        y * v[2] - z * v[1],
        z * v[0] - x * v[2],
        x * v[1] - y * v[0],
    ];
    let c2 = [
        y * c1[2] - z * c1[1],
        z * c1[0] - x * c1[2],
        x * c1[1] - y * c1[0],
    ];
    [
        v[0] + 2.0 * (w * c1[0] + c2[0]),
        v[1] + 2.0 * (w * c1[1] + c2[1]),
        v[2] + 2.0 * (w * c1[2] + c2[2]),
    ]
}

pub(super) fn premultiply_inverse_binds(
    asset: &mut Asset,
    skin: usize,
    d: &[f32; 16],
) -> Result<(), GltfError> {
    let what = format!("skins[{skin}]");
    let joints = asset.json["skins"][skin]["joints"]
        .as_array()
        .map_or(0, Vec::len);
    let matrices: Vec<f32> = match asset.json["skins"][skin]
        .get("inverseBindMatrices")
        .and_then(Value::as_u64)
    {
        Some(index) => {
            let (layout, values) = accessors::read_f32(asset, index as usize)?;
            if layout.components != 16 || layout.count < joints {
                return Err(invalid(
                    &what,
                    "inverseBindMatrices is not one MAT4 per joint",
                ));
            }
            values
        }
        None => (0..joints)
            .flat_map(|_| {
                [
                    1., 0., 0., 0., 0., 1., 0., 0., 0., 0., 1., 0., 0., 0., 0., 1.,
                ]
            })
            .collect(),
    };
    let product: Vec<f32> = matrices.chunks(16).flat_map(|m| mat4_mul(m, d)).collect();
    let count = product.len() / 16;
    let view = push_view(asset, pack_floats(&product), None, None);
    let index = push_accessor(
        asset,
        json!({"bufferView": view, "componentType": FLOAT, "count": count, "type": "MAT4"}),
    );
    asset.json["skins"][skin]["inverseBindMatrices"] = json!(index);
    Ok(())
}

/// Column-major 4×4 product `a · b`.
pub(super) fn mat4_mul(a: &[f32], b: &[f32; 16]) -> [f32; 16] {
    let mut out = [0f32; 16];
    for col in 0..4 {
        for row in 0..4 {
            out[col * 4 + row] = (0..4).map(|k| a[k * 4 + row] * b[col * 4 + k]).sum();
        }
    }
    out
}
