//! Replaces the bytes of some buffer views of a GLB and lays its binary chunk out again,
//! every other byte range (plain views and `EXT_/KHR_meshopt_compression` streams) moved as it
//! is, never decoded: the images stage puts re-encoded textures into the geometry stage's
//! variants this way, whatever compression their geometry has.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{GltfError, invalid, write_glb};

const MESHOPT: [&str; 2] = ["EXT_meshopt_compression", "KHR_meshopt_compression"];

/// What points at a range of the binary chunk: a view itself, or a view's meshopt stream.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Owner {
    View(usize),
    Meshopt(usize, &'static str),
}

#[derive(Debug)]
struct Region {
    start: usize,
    end: usize,
    owner: Owner,
}

/// A GLB of `json` and the binary chunk `old`, with view `i`'s bytes replaced by
/// `replacements[i]` (each such view must be a plain view of the binary chunk sharing its bytes
/// with no other).
pub fn relayout(
    mut json: Value,
    old: &[u8],
    replacements: &BTreeMap<usize, &[u8]>,
) -> Result<Vec<u8>, GltfError> {
    if !json.is_object() {
        return Err(GltfError::Json("top level is not an object".into()));
    }
    let views = json
        .get("bufferViews")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let in_chunk = json
        .pointer("/buffers/0")
        .is_some_and(|b| b.is_object() && b.get("uri").is_none());
    let number = |v: &Value, key: &str, what: &str| -> Result<usize, GltfError> {
        match v.get(key) {
            None => Ok(0),
            Some(n) => n
                .as_u64()
                .map(|n| n as usize)
                .ok_or_else(|| invalid(what, format!("{key} is not a count"))),
        }
    };
    let mut regions = Vec::new();
    for (i, view) in views.iter().enumerate() {
        let what = format!("bufferViews[{i}]");
        let mut range = |v: &Value, owner: Owner| -> Result<(), GltfError> {
            if !v.is_object() {
                return Err(invalid(&what, "is not an object"));
            }
            if number(v, "buffer", &what)? != 0 || !in_chunk {
                return Ok(());
            }
            let start = number(v, "byteOffset", &what)?;
            let end = start
                .checked_add(number(v, "byteLength", &what)?)
                .filter(|&e| e <= old.len())
                .ok_or_else(|| invalid(&what, "runs past the binary chunk"))?;
            regions.push(Region { start, end, owner });
            Ok(())
        };
        range(view, Owner::View(i))?;
        for ext in MESHOPT {
            if let Some(stream) = view.pointer(&format!("/extensions/{ext}")) {
                range(stream, Owner::Meshopt(i, ext))?;
            }
        }
    }
    for &i in replacements.keys() {
        let plain = regions.iter().any(|r| r.owner == Owner::View(i))
            && !regions
                .iter()
                .any(|r| matches!(r.owner, Owner::Meshopt(v, _) if v == i));
        if !plain {
            return Err(invalid(
                format!("bufferViews[{i}]"),
                "is not a plain view of the binary chunk",
            ));
        }
    }
    // Ranges that overlap move together (their offsets relative to each other kept).
    regions.sort_by_key(|r| (r.start, r.end));
    let mut spans: Vec<(usize, usize, Vec<Region>)> = Vec::new();
    for r in regions {
        match spans.last_mut() {
            Some((_, end, members)) if r.start < *end => {
                *end = (*end).max(r.end);
                members.push(r);
            }
            _ => spans.push((r.start, r.end, vec![r])),
        }
    }
    let mut bin: Vec<u8> = Vec::with_capacity(old.len());
    let mut json_views = views;
    for (start, end, members) in &spans {
        // The same position modulo 4 as before keeps every accessor's alignment.
        while bin.len() % 4 != start % 4 {
            bin.push(0);
        }
        let at = bin.len();
        let replaced = members.iter().find_map(|m| match m.owner {
            Owner::View(i) => replacements.get(&i).map(|bytes| (i, bytes)),
            Owner::Meshopt(..) => None,
        });
        if let Some((i, bytes)) = replaced {
            if members.len() > 1 {
                return Err(invalid(
                    format!("bufferViews[{i}]"),
                    "shares its bytes with another view",
                ));
            }
            bin.extend_from_slice(bytes);
            json_views[i]["byteOffset"] = json!(at);
            json_views[i]["byteLength"] = json!(bytes.len());
            continue;
        }
        bin.extend_from_slice(&old[*start..*end]);
        for m in members {
            let offset = json!(at + (m.start - start));
            match m.owner {
                Owner::View(i) => json_views[i]["byteOffset"] = offset,
                Owner::Meshopt(i, ext) => json_views[i]["extensions"][ext]["byteOffset"] = offset,
            }
        }
    }
    while !bin.len().is_multiple_of(4) {
        bin.push(0);
    }
    if !json_views.is_empty() {
        json["bufferViews"] = Value::Array(json_views);
    }
    if in_chunk {
        json["buffers"][0]["byteLength"] = json!(bin.len());
        Ok(write_glb(json, Some(&bin)))
    } else {
        Ok(write_glb(json, None))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::gltf::meshopt_codec::ViewCodec;
    use crate::gltf::meshopt_write::{MeshoptCodec, write_meshopt};
    use crate::gltf::{Asset, NoResources};

    /// A triangle with an embedded "image" view between its attribute and index views.
    fn asset() -> Asset {
        let positions: Vec<u8> = [0f32, 0., 0., 1., 0., 0., 0., 1., 0., 1., 1., 0.]
            .iter()
            .flat_map(|f| f.to_le_bytes())
            .collect();
        let indices: Vec<u8> = [0u16, 1, 2, 2, 1, 3]
            .iter()
            .flat_map(|i| i.to_le_bytes())
            .collect();
        let json = json!({
            "asset": { "version": "2.0" },
            "buffers": [{ "byteLength": 0 }],
            "bufferViews": [
                { "buffer": 0, "byteLength": positions.len(), "byteStride": 12, "target": 34962 },
                { "buffer": 0, "byteLength": 5 },
                { "buffer": 0, "byteLength": indices.len(), "target": 34963 },
            ],
            "accessors": [
                { "bufferView": 0, "componentType": 5126, "count": 4, "type": "VEC3",
                  "min": [0, 0, 0], "max": [1, 1, 0] },
                { "bufferView": 2, "componentType": 5123, "count": 6, "type": "SCALAR" },
            ],
            "images": [{ "bufferView": 1, "mimeType": "image/png" }],
            "meshes": [{ "primitives": [{ "attributes": { "POSITION": 0 }, "indices": 1 }] }],
        });
        Asset {
            json,
            views: vec![positions, b"image".to_vec(), indices],
        }
    }

    fn codecs() -> HashMap<usize, ViewCodec> {
        let codec = |mode, stride| ViewCodec {
            mode,
            filter: "NONE",
            filtered: None,
            stride,
        };
        HashMap::from([
            (0, codec("ATTRIBUTES", Some(12))),
            (2, codec("TRIANGLES", None)),
        ])
    }

    /// A GLB's JSON and binary chunk.
    fn parse(glb: &[u8]) -> (Value, Vec<u8>) {
        let (json, bin) = crate::gltf::split_glb(glb).unwrap();
        (
            serde_json::from_slice(&json).unwrap(),
            bin.unwrap_or_default(),
        )
    }

    #[test]
    fn a_view_of_a_meshopt_glb_is_replaced_and_the_geometry_still_decodes() {
        let asset = asset();
        let codecs = codecs();
        for glb in [
            asset.to_glb(),
            write_meshopt(&asset, &codecs, MeshoptCodec::Ext, 2),
        ] {
            let longer = b"a longer image, not a multiple of four";
            let (mut json, bin) = parse(&glb);
            json["images"][0]["mimeType"] = json!("image/webp");
            let replaced = relayout(json, &bin, &BTreeMap::from([(1, &longer[..])])).unwrap();
            let back = Asset::read(&replaced, &NoResources).unwrap();
            assert_eq!(back.views[0], asset.views[0]);
            assert_eq!(back.views[1], longer);
            assert_eq!(back.views[2], asset.views[2]);
            assert_eq!(back.json["images"][0]["mimeType"], "image/webp");
            // Nothing changed stays the same bytes when nothing is replaced.
            let (json, bin) = parse(&glb);
            let same = relayout(json, &bin, &BTreeMap::new()).unwrap();
            assert_eq!(Asset::read(&same, &NoResources).unwrap().views, asset.views);
        }
    }

    #[test]
    fn views_it_cannot_replace_are_refused() {
        let asset = asset();
        let codecs = codecs();
        let (json, bin) = parse(&write_meshopt(&asset, &codecs, MeshoptCodec::Ext, 2));
        // A meshopt-compressed view, and a view that does not exist.
        for view in [0, 7] {
            let err = relayout(json.clone(), &bin, &BTreeMap::from([(view, &[1u8][..])]));
            assert!(err.is_err(), "{view}");
        }
        // Two views over the same bytes.
        let (mut json, bin) = parse(&asset.to_glb());
        json["bufferViews"][2]["byteOffset"] = json["bufferViews"][1]["byteOffset"].clone();
        json["bufferViews"][2]["byteLength"] = json!(4);
        let err = relayout(json, &bin, &BTreeMap::from([(1, &[1u8][..])])).unwrap_err();
        assert!(err.to_string().contains("shares"), "{err}");
        // A view past the chunk.
        let (json, bin) = parse(&asset.to_glb());
        let err = relayout(json, &bin[..10], &BTreeMap::new());
        assert!(err.is_err());
    }
}
