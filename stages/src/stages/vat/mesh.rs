//! The baked mesh's `mesh.glb`: the mesh in its rest pose (model space), materials and
//! textures kept, skin and morph data dropped, `TEXCOORD_1` addressing each vertex's texel.

use super::*;

/// From a baked mesh's folder (`<model>.vat/<mesh>/`) back to its model's folder: how the
/// mesh's `mesh.glb` reaches the textures the model references by URI.
pub const MESH_TO_MODEL: &str = "../../";

/// The mesh node as a static mesh in its rest pose (model space), with `TEXCOORD_1`
/// addressing each vertex's texel; materials and their textures kept.
pub(super) fn mesh_glb(
    asset: &Asset,
    rig: &Rig,
    node: usize,
    frames: &Frames,
    layout: &Layout,
) -> Result<Vec<u8>, VatError> {
    let mesh_index = rig.nodes[node].mesh.expect("a mesh node");
    let source_mesh = &asset.array("meshes")[mesh_index];
    let mut out = Asset {
        json: json!({"asset": {"version": "2.0", "generator": "Kiln VAT"}}),
        views: Vec::new(),
    };
    // Materials and everything they reference, as they are.
    for key in ["materials", "textures", "samplers"] {
        if let Some(v) = asset.json.get(key) {
            out.json[key] = v.clone();
        }
    }
    if let Some(images) = asset.json.get("images").and_then(Value::as_array) {
        let mut copied = Vec::new();
        for image in images {
            let mut image = image.clone();
            // An image the model references by URI stays where it is: the mesh is written two
            // folders down, `<model>.vat/<mesh>/mesh.glb`, so the reference climbs back up.
            if let Some(uri) = image.get("uri").and_then(Value::as_str)
                && !uri.starts_with("data:")
            {
                image["uri"] = json!(format!("{MESH_TO_MODEL}{uri}"));
            }
            if let Some(view) = image.get("bufferView").and_then(Value::as_u64) {
                let data = asset.views.get(view as usize).cloned().unwrap_or_default();
                image["bufferView"] = json!(accessors::push_view(&mut out, data, None, None));
            }
            copied.push(image);
        }
        out.json["images"] = Value::Array(copied);
    }
    let dropped = [
        "EXT_meshopt_compression",
        "KHR_meshopt_compression",
        "KHR_mesh_quantization",
        "KHR_draco_mesh_compression",
    ];
    for key in ["extensionsUsed", "extensionsRequired"] {
        if let Some(list) = asset.json.get(key).and_then(Value::as_array) {
            let kept: Vec<Value> = list
                .iter()
                .filter(|e| !dropped.contains(&e.as_str().unwrap_or("")))
                .cloned()
                .collect();
            if !kept.is_empty() {
                out.json[key] = Value::Array(kept);
            }
        }
    }
    let mut primitives = Vec::new();
    let mut first_vertex = 0usize;
    for (p, primitive) in source_mesh["primitives"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let count = rig.meshes[mesh_index].primitives[p].positions.len();
        if count == 0 {
            continue;
        }
        let range = first_vertex..first_vertex + count;
        first_vertex += count;
        let mut attributes = serde_json::Map::new();
        let rest: Vec<f32> = frames.rest[range.clone()]
            .iter()
            .flatten()
            .copied()
            .collect();
        attributes.insert(
            "POSITION".into(),
            json!(accessors::push_floats(
                &mut out,
                &rest,
                3,
                Some(accessors::ARRAY_BUFFER),
                true
            )),
        );
        let normals: Vec<f32> = frames.rest_normals[range.clone()]
            .iter()
            .flatten()
            .copied()
            .collect();
        // Without NORMAL a glTF mesh is shaded flat: keep it that way.
        if primitive.pointer("/attributes/NORMAL").is_some() {
            attributes.insert(
                "NORMAL".into(),
                json!(accessors::push_floats(
                    &mut out,
                    &normals,
                    3,
                    Some(accessors::ARRAY_BUFFER),
                    false
                )),
            );
        }
        for name in ["TEXCOORD_0", "COLOR_0"] {
            if let Some(a) = primitive
                .pointer(&format!("/attributes/{name}"))
                .and_then(Value::as_u64)
            {
                let (l, values) = accessors::read_f32(asset, a as usize)?;
                if l.count == count {
                    attributes.insert(
                        name.into(),
                        json!(accessors::push_floats(
                            &mut out,
                            &values,
                            l.components,
                            Some(accessors::ARRAY_BUFFER),
                            false
                        )),
                    );
                }
            }
        }
        let texel: Vec<f32> = range
            .clone()
            .flat_map(|v| {
                let (col, row) = (v as u32 % layout.width, v as u32 / layout.width);
                [
                    (col as f32 + 0.5) / layout.width as f32,
                    (row as f32 + 0.5) / layout.rows_per_frame as f32,
                ]
            })
            .collect();
        let texel =
            accessors::push_floats(&mut out, &texel, 2, Some(accessors::ARRAY_BUFFER), false);
        attributes.insert("TEXCOORD_1".into(), json!(texel));
        // glTF numbers a semantic's sets from 0 without gaps (the validator's
        // MESH_PRIMITIVE_INDEXED_SEMANTIC_CONTINUITY): a mesh without UVs of its own gets the
        // texel coordinates as set 0 too, the same accessor, no bytes added.
        attributes
            .entry("TEXCOORD_0")
            .or_insert_with(|| json!(texel));
        let mut prim = json!({"attributes": attributes});
        let mode = primitive.get("mode").and_then(Value::as_u64).unwrap_or(4);
        if mode != 4 {
            prim["mode"] = json!(mode);
        }
        if let Some(m) = primitive.get("material") {
            prim["material"] = m.clone();
        }
        if let Some(a) = primitive.get("indices").and_then(Value::as_u64) {
            let indices = accessors::read_indices(asset, a as usize, count)?;
            let data: Vec<u8> = indices.iter().flat_map(|i| i.to_le_bytes()).collect();
            let view =
                accessors::push_view(&mut out, data, None, Some(accessors::ELEMENT_ARRAY_BUFFER));
            prim["indices"] = json!(accessors::push_accessor(
                &mut out,
                json!({"bufferView": view, "componentType": accessors::UNSIGNED_INT,
                    "count": indices.len(), "type": "SCALAR"})
            ));
        }
        primitives.push(prim);
    }
    let name = source_mesh
        .get("name")
        .cloned()
        .unwrap_or_else(|| json!("vat"));
    out.json["meshes"] = json!([{"name": name, "primitives": primitives}]);
    let node_name = asset.array("nodes")[node]
        .get("name")
        .cloned()
        .unwrap_or_else(|| name.clone());
    out.json["nodes"] = json!([{"name": node_name, "mesh": 0,
        "extras": {"kiln_vat": "vat.json"}}]);
    out.json["scenes"] = json!([{"nodes": [0]}]);
    out.json["scene"] = json!(0);
    Ok(out.to_glb())
}
