//! `drop_unused_attributes` (off by default): vertex attributes no material of the primitive
//! reads, dropped before anything else, as gltfpack does without `-kv`. Off by default because
//! games often assign materials in code, and then a texture set the file's material does not
//! name may still be read.
//!
//! What counts as used, per primitive, over its material and the materials its
//! `KHR_materials_variants` mappings name (no material: glTF's default material, which reads
//! no texture):
//! - `TEXCOORD_n`: some texture of those materials samples set `n` (`texCoord`, default 0, or
//!   the `KHR_texture_transform` override);
//! - `TANGENT`: some material has a normal map (`normalTexture`, a clearcoat normal texture)
//!   or anisotropy, which reads tangents;
//! - `COLOR_n` for `n ≥ 1`: never (the core material multiplies only `COLOR_0`).
//!
//! `POSITION`, `NORMAL`, `COLOR_0`, skinning sets and application attributes (`_NAME`) stay.
//! Morph targets lose the same attributes as their primitive.

use super::*;

/// Texture sets and tangent use of one material (and what it nests: extensions' textures).
#[derive(Default)]
struct Reads {
    texcoords: BTreeSet<u64>,
    tangents: bool,
}

fn collect(value: &Value, key: Option<&str>, reads: &mut Reads) {
    match value {
        Value::Object(map) => {
            // A textureInfo: an object with an `index` whose key names a texture.
            if key.is_some_and(|k| k.ends_with("Texture") || k == "texture")
                && map.get("index").is_some_and(Value::is_u64)
            {
                let set = map
                    .get("extensions")
                    .and_then(|e| e.get("KHR_texture_transform"))
                    .and_then(|t| t.get("texCoord"))
                    .or_else(|| map.get("texCoord"))
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                reads.texcoords.insert(set);
                if key.is_some_and(|k| k == "normalTexture" || k == "clearcoatNormalTexture") {
                    reads.tangents = true;
                }
            }
            if key == Some("KHR_materials_anisotropy") {
                reads.tangents = true;
            }
            for (k, v) in map {
                collect(v, Some(k), reads);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect(v, key, reads)),
        _ => {}
    }
}

/// Whether a primitive whose materials read `reads` needs attribute `name`.
fn used(name: &str, reads: &Reads) -> bool {
    if let Some(set) = name.strip_prefix("TEXCOORD_") {
        return set
            .parse::<u64>()
            .is_ok_and(|n| reads.texcoords.contains(&n));
    }
    if name == "TANGENT" {
        return reads.tangents;
    }
    if let Some(set) = name.strip_prefix("COLOR_") {
        return set == "0";
    }
    true
}

/// Drops the attributes no material of their primitive reads; returns their names per mesh
/// (`"meshes[m].primitives[p].NAME"`), in order. Accessors left unused are collected later.
pub(super) fn drop_unused_attributes(asset: &mut Asset) -> Vec<String> {
    // What each material reads, once (primitives share materials).
    let material_reads: Vec<Reads> = asset
        .array("materials")
        .iter()
        .map(|material| {
            let mut reads = Reads::default();
            collect(material, None, &mut reads);
            reads
        })
        .collect();
    let reads_of = |indices: &[u64]| {
        let mut reads = Reads::default();
        for r in indices
            .iter()
            .filter_map(|&m| material_reads.get(m as usize))
        {
            reads.texcoords.extend(&r.texcoords);
            reads.tangents |= r.tangents;
        }
        reads
    };
    let mut dropped = Vec::new();
    let Some(meshes) = asset.json.get_mut("meshes").and_then(Value::as_array_mut) else {
        return dropped;
    };
    for (m, mesh) in meshes.iter_mut().enumerate() {
        let Some(primitives) = mesh.get_mut("primitives").and_then(Value::as_array_mut) else {
            continue;
        };
        for (p, primitive) in primitives.iter_mut().enumerate() {
            let mut indices: Vec<u64> = primitive["material"].as_u64().into_iter().collect();
            let mappings = primitive
                .pointer("/extensions/KHR_materials_variants/mappings")
                .and_then(Value::as_array);
            for mapping in mappings.into_iter().flatten() {
                indices.extend(mapping["material"].as_u64());
            }
            let reads = reads_of(&indices);
            let Some(attributes) = primitive
                .get_mut("attributes")
                .and_then(Value::as_object_mut)
            else {
                continue;
            };
            let unused: Vec<String> = attributes
                .keys()
                .filter(|name| !used(name, &reads))
                .cloned()
                .collect();
            for name in &unused {
                attributes.remove(name);
                dropped.push(format!("meshes[{m}].primitives[{p}].{name}"));
            }
            for target in primitive
                .get_mut("targets")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                if let Some(target) = target.as_object_mut() {
                    target.retain(|name, _| !unused.contains(name));
                }
            }
        }
    }
    dropped
}

#[cfg(test)]
mod tests {
    use super::*;

    fn primitive(attributes: &[&str], material: Option<Value>) -> Value {
        let mut p = json!({"attributes": {}});
        for (i, name) in attributes.iter().enumerate() {
            p["attributes"][*name] = json!(i);
        }
        if let Some(m) = material {
            p["material"] = m;
        }
        p
    }

    fn kept(asset: &Asset, mesh: usize, primitive: usize) -> Vec<String> {
        asset.json["meshes"][mesh]["primitives"][primitive]["attributes"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect()
    }

    /// Each rule, including the cases that must keep an attribute: a texture on set 1, a
    /// KHR_texture_transform override, a normal map inside an extension, a variant's material.
    #[test]
    fn attributes_no_material_reads_are_dropped_and_the_rest_kept() {
        let all = [
            "POSITION",
            "NORMAL",
            "TANGENT",
            "TEXCOORD_0",
            "TEXCOORD_1",
            "COLOR_0",
            "COLOR_1",
            "JOINTS_0",
            "WEIGHTS_0",
            "_BATCHID",
        ];
        let mut asset = Asset {
            json: json!({
                "materials": [
                    {"pbrMetallicRoughness": {"baseColorFactor": [1, 0, 0, 1]}},
                    {"pbrMetallicRoughness": {"baseColorTexture": {"index": 0, "texCoord": 1}},
                     "normalTexture": {"index": 1}},
                    {"emissiveTexture": {"index": 0, "extensions":
                        {"KHR_texture_transform": {"texCoord": 1}}}},
                    {"extensions": {"KHR_materials_clearcoat":
                        {"clearcoatNormalTexture": {"index": 1}}}},
                    {"occlusionTexture": {"index": 2}}
                ],
                "meshes": [{"primitives": [
                    primitive(&all, None),
                    primitive(&all, Some(json!(0))),
                    primitive(&all, Some(json!(1))),
                    primitive(&all, Some(json!(2))),
                    primitive(&all, Some(json!(3))),
                    primitive(&all, Some(json!(0))),
                ]}],
            }),
            views: vec![],
        };
        asset.json["meshes"][0]["primitives"][5]["extensions"] =
            json!({"KHR_materials_variants": {"mappings": [{"material": 4, "variants": [0]}]}});
        asset.json["meshes"][0]["primitives"][1]["targets"] =
            json!([{"POSITION": 1, "TANGENT": 2, "TEXCOORD_0": 3}]);
        let dropped = drop_unused_attributes(&mut asset);
        let always = [
            "COLOR_0",
            "JOINTS_0",
            "NORMAL",
            "POSITION",
            "WEIGHTS_0",
            "_BATCHID",
        ];
        let with = |extra: &[&str]| {
            let mut v: Vec<String> = always.iter().chain(extra).map(|s| s.to_string()).collect();
            v.sort();
            v
        };
        assert_eq!(kept(&asset, 0, 0), with(&[]), "no material");
        assert_eq!(kept(&asset, 0, 1), with(&[]), "no texture");
        assert_eq!(
            kept(&asset, 0, 2),
            with(&["TANGENT", "TEXCOORD_0", "TEXCOORD_1"]),
            "base colour on set 1, normal map on set 0"
        );
        assert_eq!(
            kept(&asset, 0, 3),
            with(&["TEXCOORD_1"]),
            "transform's texCoord"
        );
        assert_eq!(
            kept(&asset, 0, 4),
            with(&["TANGENT", "TEXCOORD_0"]),
            "clearcoat normal map"
        );
        assert_eq!(
            kept(&asset, 0, 5),
            with(&["TEXCOORD_0"]),
            "a variant's material"
        );
        assert_eq!(
            asset.json["meshes"][0]["primitives"][1]["targets"][0],
            json!({"POSITION": 1}),
            "targets lose what their primitive loses"
        );
        assert!(dropped.contains(&"meshes[0].primitives[0].COLOR_1".to_string()));
        assert_eq!(dropped.len(), 4 + 4 + 1 + 3 + 2 + 3, "{dropped:?}");
    }
}
