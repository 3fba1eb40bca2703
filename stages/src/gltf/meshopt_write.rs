//! Writes an asset as a meshopt-compressed GLB (`EXT_meshopt_compression` or
//! `KHR_meshopt_compression`): each buffer view with a chosen codec is encoded (attributes,
//! triangles or index sequences, with their filters), with an uncompressed fallback buffer
//! the extension lets loaders skip. Shared by the geometry stage and the animation sub-pass.

use std::collections::HashMap;

use serde::Serialize;
use serde_json::{Value, json};

use super::cleanup::add_extension;
use super::meshopt_codec::{self, ViewCodec};
use super::{Asset, accessors};

/// The vertex codec's level when none is chosen (0–3; codec version 1 only).
pub const DEFAULT_VERTEX_LEVEL: i32 = 2;

/// Which meshopt extension the `meshopt` variant uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MeshoptCodec {
    /// `EXT_meshopt_compression`: vertex codec v0; the widest loader support.
    Ext,
    /// `KHR_meshopt_compression`: vertex codec v1 and the color filter; smaller.
    Khr,
}

impl MeshoptCodec {
    pub fn extension(self) -> &'static str {
        match self {
            Self::Ext => "EXT_meshopt_compression",
            Self::Khr => "KHR_meshopt_compression",
        }
    }
}

/// The `meshopt` variant: geometry views compressed, everything else as in `quantized`.
pub fn write_meshopt(
    asset: &Asset,
    codecs: &HashMap<usize, ViewCodec>,
    codec: MeshoptCodec,
    vertex_level: i32,
) -> Vec<u8> {
    let extension = codec.extension();
    let version = match codec {
        MeshoptCodec::Ext => 0,
        MeshoptCodec::Khr => 1,
    };
    let mut json = asset.json.clone();
    let mut bin: Vec<u8> = Vec::new();
    let mut fallback_len = 0usize;
    let mut views = Vec::with_capacity(asset.views.len());
    let mut any = false;
    for (i, data) in asset.views.iter().enumerate() {
        let mut view = json["bufferViews"][i].clone();
        let object = view.as_object_mut().expect("object");
        object.remove("extensions");
        let codec = codecs.get(&i);
        let stride = object
            .get("byteStride")
            .and_then(Value::as_u64)
            .map(|s| s as usize)
            .or(codec.and_then(|c| c.stride));
        let compressed = codec.and_then(|codec| {
            let count_of = |s: usize| data.len() / s;
            match codec.mode {
                "ATTRIBUTES" => {
                    let stride = stride?;
                    if data.is_empty() || stride % 4 != 0 || stride > 256 {
                        return None;
                    }
                    let input = codec.filtered.as_deref().unwrap_or(data);
                    let filter = codec.filter;
                    Some((
                        meshopt_codec::encode_attributes(input, stride, vertex_level, version),
                        stride,
                        count_of(stride),
                        filter,
                    ))
                }
                "TRIANGLES" | "INDICES" => {
                    let index_size = if json_component_size(&json, i) == 4 {
                        4
                    } else {
                        2
                    };
                    let indices: Vec<u32> = data
                        .chunks(index_size)
                        .map(|c| {
                            if index_size == 2 {
                                u16::from_le_bytes([c[0], c[1]]) as u32
                            } else {
                                u32::from_le_bytes([c[0], c[1], c[2], c[3]])
                            }
                        })
                        .collect();
                    let vertex_count = indices.iter().max().map_or(0, |m| *m as usize + 1);
                    let encoded = if codec.mode == "TRIANGLES" && indices.len().is_multiple_of(3) {
                        meshopt_codec::encode_triangles(&indices, vertex_count)
                    } else {
                        meshopt_codec::encode_index_sequence(&indices, vertex_count)
                    };
                    let mode = if codec.mode == "TRIANGLES" && indices.len().is_multiple_of(3) {
                        "TRIANGLES"
                    } else {
                        "INDICES"
                    };
                    Some((
                        encoded,
                        index_size,
                        indices.len(),
                        if mode == "TRIANGLES" {
                            "TRIANGLES"
                        } else {
                            "INDICES"
                        },
                    ))
                }
                _ => None,
            }
        });
        while !bin.len().is_multiple_of(4) {
            bin.push(0);
        }
        match compressed {
            Some((encoded, stride, count, filter_or_mode)) => {
                any = true;
                let (mode, filter) = match codec.map(|c| c.mode) {
                    Some("ATTRIBUTES") => ("ATTRIBUTES", filter_or_mode),
                    _ => (filter_or_mode, "NONE"),
                };
                fallback_len = fallback_len.next_multiple_of(4);
                object.insert("buffer".into(), json!(1));
                object.insert("byteOffset".into(), json!(fallback_len));
                object.insert("byteLength".into(), json!(data.len()));
                let mut ext = json!({
                    "buffer": 0, "byteOffset": bin.len(), "byteLength": encoded.len(),
                    "byteStride": stride, "count": count, "mode": mode,
                });
                if filter != "NONE" {
                    ext["filter"] = json!(filter);
                }
                object.insert("extensions".into(), json!({ extension: ext }));
                fallback_len += data.len();
                bin.extend_from_slice(&encoded);
            }
            None => {
                object.insert("buffer".into(), json!(0));
                object.insert("byteOffset".into(), json!(bin.len()));
                object.insert("byteLength".into(), json!(data.len()));
                bin.extend_from_slice(data);
            }
        }
        views.push(view);
    }
    while !bin.len().is_multiple_of(4) {
        bin.push(0);
    }
    if !views.is_empty() {
        json["bufferViews"] = Value::Array(views);
    }
    let mut buffers = vec![json!({ "byteLength": bin.len() })];
    if any {
        buffers.push(json!({ "byteLength": fallback_len.next_multiple_of(4), "extensions": { extension: { "fallback": true } } }));
        add_extension(&mut json, extension, true);
    }
    if bin.is_empty() && !any {
        json.as_object_mut().unwrap().remove("buffers");
        return super::write_glb(json, None);
    }
    json["buffers"] = Value::Array(buffers);
    super::write_glb(json, Some(&bin))
}

/// Component size of the (index) accessor that uses view `view`.
fn json_component_size(json: &Value, view: usize) -> usize {
    json.get("accessors")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|a| a["bufferView"].as_u64() == Some(view as u64))
        .and_then(|a| a["componentType"].as_u64())
        .and_then(accessors::component_size)
        .unwrap_or(2)
}
