//! glTF 2.0 in and out, for stages that rewrite models.
//!
//! The JSON is kept as a `serde_json::Value` so that everything Kiln does not touch (materials,
//! extensions, extras, names, cameras, lights…) goes through byte-for-byte in meaning. Buffer
//! views are materialised into plain byte vectors on read (decoding meshopt-compressed ones),
//! and packed into one binary chunk on write. Every offset and count from the file is checked
//! before use: a hostile file gets an error naming the object, never a panic or a huge
//! allocation.

pub mod accessors;
pub mod meshopt_codec;

use base64::Engine;
use serde_json::{Value, json};

/// Accessors with more elements than this are refused (no real game model needs them, and a
/// hostile count would otherwise allocate gigabytes).
pub const MAX_ELEMENTS: usize = 1 << 26;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum GltfError {
    #[error("not a glTF file: {0}")]
    Container(String),
    #[error("glTF JSON: {0}")]
    Json(String),
    #[error("{what}: {reason}")]
    Invalid { what: String, reason: String },
    #[error("buffer {index}: {reason}")]
    Buffer { index: usize, reason: String },
}

pub fn invalid(what: impl Into<String>, reason: impl Into<String>) -> GltfError {
    GltfError::Invalid {
        what: what.into(),
        reason: reason.into(),
    }
}

/// A parsed model: its JSON and the bytes of every buffer view.
#[derive(Debug, Clone)]
pub struct Asset {
    pub json: Value,
    /// One entry per `bufferViews[i]`, already decompressed.
    pub views: Vec<Vec<u8>>,
}

/// Where to find external resources (`uri`s relative to the model).
pub trait Resources {
    fn load(&self, uri: &str) -> Option<Vec<u8>>;
}

/// No external files (a GLB that references none, or tests).
pub struct NoResources;

impl Resources for NoResources {
    fn load(&self, _: &str) -> Option<Vec<u8>> {
        None
    }
}

/// Files beside a model on disk (for the command-line tools). URIs that would leave the
/// model's folder are refused.
pub struct DirResources(pub std::path::PathBuf);

impl Resources for DirResources {
    fn load(&self, uri: &str) -> Option<Vec<u8>> {
        let decoded = uri.replace("%20", " ");
        if decoded.contains("..") || decoded.starts_with('/') {
            return None;
        }
        std::fs::read(self.0.join(decoded)).ok()
    }
}

/// Reads a `.glb`/`.gltf` file with its external resources.
pub fn read_path(path: &std::path::Path) -> Result<Asset, GltfError> {
    let bytes = std::fs::read(path)
        .map_err(|e| GltfError::Container(format!("{}: {e}", path.display())))?;
    let dir = path.parent().map(|p| p.to_path_buf()).unwrap_or_default();
    Asset::read(&bytes, &DirResources(dir))
}

/// Splits a GLB into its JSON and binary chunks. Parsed by hand, every length checked: the
/// gltf crate's `Glb::from_slice` panics on some malformed headers (found with the Khronos
/// validator's test files).
pub fn split_glb(bytes: &[u8]) -> Result<(Vec<u8>, Option<Vec<u8>>), GltfError> {
    let bad = |reason: &str| GltfError::Container(reason.to_string());
    let u32_at = |at: usize| -> Option<usize> {
        bytes
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    };
    if bytes.len() < 20 || &bytes[..4] != b"glTF" {
        return Err(bad("GLB header is truncated"));
    }
    if u32_at(4) != Some(2) {
        return Err(bad("GLB version is not 2"));
    }
    let total = u32_at(8).unwrap_or(0);
    if total > bytes.len() {
        return Err(bad("GLB is truncated (header length exceeds the file)"));
    }
    let bytes = &bytes[..total];
    let mut at = 12;
    let mut json = None;
    let mut bin = None;
    while at + 8 <= bytes.len() {
        let length = u32_at(at).ok_or_else(|| bad("chunk header"))?;
        let kind = u32_at(at + 4).ok_or_else(|| bad("chunk header"))?;
        let start = at + 8;
        let end = start
            .checked_add(length)
            .filter(|&e| e <= bytes.len())
            .ok_or_else(|| bad("GLB chunk runs past the end of the file"))?;
        match kind {
            0x4E4F534A if json.is_none() => json = Some(bytes[start..end].to_vec()),
            0x004E4942 if json.is_some() && bin.is_none() => bin = Some(bytes[start..end].to_vec()),
            0x4E4F534A | 0x004E4942 => return Err(bad("GLB chunks out of order or repeated")),
            _ => {}
        }
        at = end.next_multiple_of(4);
    }
    Ok((json.ok_or_else(|| bad("GLB has no JSON chunk"))?, bin))
}

impl Asset {
    /// Reads a `.glb` or `.gltf` from its bytes.
    pub fn read(bytes: &[u8], resources: &dyn Resources) -> Result<Self, GltfError> {
        let (json_bytes, bin) = if bytes.starts_with(b"glTF") {
            split_glb(bytes)?
        } else {
            (bytes.to_vec(), None)
        };
        let json: Value =
            serde_json::from_slice(&json_bytes).map_err(|e| GltfError::Json(e.to_string()))?;
        if !json.is_object() {
            return Err(GltfError::Json("top level is not an object".into()));
        }
        match json.pointer("/asset/version").and_then(Value::as_str) {
            Some(v) if v.starts_with("2.") => {}
            Some(v) => return Err(invalid("asset.version", format!("{v} is not glTF 2.x"))),
            None => return Err(invalid("asset.version", "missing")),
        }
        let buffers = load_buffers(&json, bin, resources)?;
        let views = materialise_views(&json, &buffers)?;
        Ok(Self { json, views })
    }

    pub fn array(&self, name: &str) -> &[Value] {
        self.json
            .get(name)
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }

    pub fn uses_extension(&self, name: &str) -> bool {
        self.array("extensionsUsed").iter().any(|e| e == name)
    }

    /// Writes a GLB: all views packed into the binary chunk, 4-byte aligned.
    pub fn to_glb(&self) -> Vec<u8> {
        let mut json = self.json.clone();
        let mut bin = Vec::new();
        let mut views = Vec::with_capacity(self.views.len());
        for (i, data) in self.views.iter().enumerate() {
            while bin.len() % 4 != 0 {
                bin.push(0);
            }
            let mut view = json["bufferViews"][i].clone();
            let object = view.as_object_mut().expect("buffer views are objects");
            object.insert("buffer".into(), json!(0));
            object.insert("byteOffset".into(), json!(bin.len()));
            object.insert("byteLength".into(), json!(data.len()));
            object.remove("extensions");
            views.push(view);
            bin.extend_from_slice(data);
        }
        while bin.len() % 4 != 0 {
            bin.push(0);
        }
        if views.is_empty() {
            json.as_object_mut().unwrap().remove("bufferViews");
        } else {
            json["bufferViews"] = Value::Array(views);
        }
        if bin.is_empty() {
            json.as_object_mut().unwrap().remove("buffers");
            write_glb(&json, None)
        } else {
            json["buffers"] = json!([{ "byteLength": bin.len() }]);
            write_glb(&json, Some(&bin))
        }
    }
}

/// Assembles a GLB container from JSON and an optional binary chunk.
pub fn write_glb(json: &Value, bin: Option<&[u8]>) -> Vec<u8> {
    let mut json_bytes = serde_json::to_vec(json).expect("JSON serialises");
    while !json_bytes.len().is_multiple_of(4) {
        json_bytes.push(b' ');
    }
    let bin_len = bin.map_or(0, |b| 8 + b.len().next_multiple_of(4));
    let total = 12 + 8 + json_bytes.len() + bin_len;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(b"glTF");
    out.extend_from_slice(&2u32.to_le_bytes());
    out.extend_from_slice(&(total as u32).to_le_bytes());
    out.extend_from_slice(&(json_bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(b"JSON");
    out.extend_from_slice(&json_bytes);
    if let Some(bin) = bin {
        let padded = bin.len().next_multiple_of(4);
        out.extend_from_slice(&(padded as u32).to_le_bytes());
        out.extend_from_slice(b"BIN\0");
        out.extend_from_slice(bin);
        out.resize(out.len() + padded - bin.len(), 0);
    }
    out
}

fn usize_field(object: &Value, field: &str, what: &str) -> Result<Option<usize>, GltfError> {
    match object.get(field) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .map(|n| Some(n as usize))
            .ok_or_else(|| invalid(what, format!("{field} is not a non-negative integer"))),
    }
}

fn required(object: &Value, field: &str, what: &str) -> Result<usize, GltfError> {
    usize_field(object, field, what)?.ok_or_else(|| invalid(what, format!("{field} is missing")))
}

/// Buffers' bytes; `None` for a meshopt fallback buffer that has no data of its own.
fn load_buffers(
    json: &Value,
    bin: Option<Vec<u8>>,
    resources: &dyn Resources,
) -> Result<Vec<Option<Vec<u8>>>, GltfError> {
    let list = json
        .get("buffers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut bin = bin;
    let mut out = Vec::with_capacity(list.len());
    for (index, buffer) in list.iter().enumerate() {
        let what = format!("buffers[{index}]");
        let length = required(buffer, "byteLength", &what)?;
        let is_fallback = buffer
            .pointer("/extensions/EXT_meshopt_compression/fallback")
            .or_else(|| buffer.pointer("/extensions/KHR_meshopt_compression/fallback"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let data = match buffer.get("uri").and_then(Value::as_str) {
            Some(uri) if uri.starts_with("data:") => {
                let (_, payload) = uri
                    .split_once(";base64,")
                    .ok_or_else(|| GltfError::Buffer {
                        index,
                        reason: "data URI is not base64".into(),
                    })?;
                Some(
                    base64::engine::general_purpose::STANDARD
                        .decode(payload)
                        .map_err(|e| GltfError::Buffer {
                            index,
                            reason: format!("data URI: {e}"),
                        })?,
                )
            }
            Some(uri) => Some(resources.load(uri).ok_or_else(|| GltfError::Buffer {
                index,
                reason: format!("external file {uri:?} is not in the build"),
            })?),
            None if index == 0 && bin.is_some() => bin.take(),
            None if is_fallback => None,
            None => {
                return Err(GltfError::Buffer {
                    index,
                    reason: "has no uri and no binary chunk".into(),
                });
            }
        };
        if let Some(data) = &data
            && data.len() < length
        {
            return Err(GltfError::Buffer {
                index,
                reason: format!("holds {} bytes but byteLength is {length}", data.len()),
            });
        }
        out.push(data);
    }
    Ok(out)
}

fn materialise_views(json: &Value, buffers: &[Option<Vec<u8>>]) -> Result<Vec<Vec<u8>>, GltfError> {
    let list = json
        .get("bufferViews")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut views = Vec::with_capacity(list.len());
    for (index, view) in list.iter().enumerate() {
        let what = format!("bufferViews[{index}]");
        let compressed = view
            .pointer("/extensions/EXT_meshopt_compression")
            .or_else(|| view.pointer("/extensions/KHR_meshopt_compression"));
        if let Some(ext) = compressed {
            let source = slice_of(ext, buffers, &what)?;
            views.push(meshopt_codec::decode_view(ext, source, &what)?);
            continue;
        }
        views.push(slice_of(view, buffers, &what)?.to_vec());
    }
    Ok(views)
}

/// The bytes `object` (a buffer view, or a meshopt extension) points at, bounds-checked.
fn slice_of<'a>(
    object: &Value,
    buffers: &'a [Option<Vec<u8>>],
    what: &str,
) -> Result<&'a [u8], GltfError> {
    let buffer = required(object, "buffer", what)?;
    let offset = usize_field(object, "byteOffset", what)?.unwrap_or(0);
    let length = required(object, "byteLength", what)?;
    let data = buffers
        .get(buffer)
        .ok_or_else(|| invalid(what, format!("buffer {buffer} does not exist")))?
        .as_deref()
        .ok_or_else(|| {
            invalid(
                what,
                format!("buffer {buffer} is a fallback buffer with no data"),
            )
        })?;
    let end = offset
        .checked_add(length)
        .filter(|&end| end <= data.len())
        .ok_or_else(|| {
            invalid(
                what,
                format!(
                    "bytes {offset}..{} run past the end of buffer {buffer} ({} bytes)",
                    offset.saturating_add(length),
                    data.len()
                ),
            )
        })?;
    Ok(&data[offset..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glb_round_trip_keeps_json_and_views() {
        let asset = Asset {
            json: json!({"asset": {"version": "2.0"}, "bufferViews": [{"buffer": 0, "byteLength": 3}], "extras": {"keep": true}}),
            views: vec![vec![1, 2, 3]],
        };
        let glb = asset.to_glb();
        let back = Asset::read(&glb, &NoResources).unwrap();
        assert_eq!(back.views, vec![vec![1, 2, 3]]);
        assert_eq!(back.json["extras"]["keep"], true);
    }

    #[test]
    fn hostile_offsets_are_errors() {
        let glb = write_glb(
            &json!({"asset": {"version": "2.0"}, "buffers": [{"byteLength": 8}],
                    "bufferViews": [{"buffer": 0, "byteOffset": 4, "byteLength": 4000000000u64}]}),
            Some(&[0u8; 8]),
        );
        let err = Asset::read(&glb, &NoResources).unwrap_err();
        assert!(
            err.to_string().contains("run past the end of buffer 0"),
            "{err}"
        );
        let err = Asset::read(&glb[..20], &NoResources).unwrap_err();
        assert!(matches!(err, GltfError::Container(_)), "{err}");
        let err = Asset::read(b"{\"asset\":{\"version\":\"1.0\"}}", &NoResources).unwrap_err();
        assert!(err.to_string().contains("not glTF 2"), "{err}");
    }
}
