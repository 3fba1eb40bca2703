//! glTF 2.0 in and out, for stages that rewrite models.
//!
//! The JSON is kept as a `serde_json::Value` so that everything Kiln does not touch (materials,
//! extensions, extras, names, cameras, lights…) goes through byte-for-byte in meaning. Buffer
//! views are materialised into plain byte vectors on read (decoding meshopt-compressed ones),
//! and packed into one binary chunk on write. Every offset and count from the file is checked
//! before use: a hostile file gets an error naming the object, never a panic or a huge
//! allocation.

pub mod accessors;
pub mod cleanup;
pub mod meshopt_codec;
pub mod meshopt_write;
pub mod relayout;

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

/// The bytes of a `data:` URI (`None` for any other URI); one that is not base64 is an error.
pub fn data_uri(uri: &str) -> Option<Result<Vec<u8>, String>> {
    if !uri.starts_with("data:") {
        return None;
    }
    let Some((_, payload)) = uri.split_once(";base64,") else {
        return Some(Err("data URI is not base64".into()));
    };
    Some(
        base64::engine::general_purpose::STANDARD
            .decode(payload)
            .map_err(|e| format!("data URI: {e}")),
    )
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
        check_shape(&json)?;
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
            write_glb(json, None)
        } else {
            json["buffers"] = json!([{ "byteLength": bin.len() }]);
            write_glb(json, Some(&bin))
        }
    }
}

/// Assembles a GLB container from JSON and an optional binary chunk.
pub fn write_glb(mut json: Value, bin: Option<&[u8]>) -> Vec<u8> {
    shortest_numbers(&mut json);
    let mut json_bytes = serde_json::to_vec(&json).expect("JSON serialises");
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

/// Numbers that are single-precision floats (every value Kiln computes from the buffers, and
/// every source number a reader stores as one) are written with the fewest digits that read
/// back as the same `f32`: `0.1` instead of `0.10000000149011612`, 9 characters fewer per
/// number in accessor bounds, transforms and dequantization scales. Numbers no `f32` equals
/// (a source's `0.123456789012`) are left as written.
pub fn shortest_numbers(value: &mut Value) {
    match value {
        Value::Number(n) => {
            if n.is_f64()
                && let Some(x) = n.as_f64()
                && let single = x as f32
                && f64::from(single) == x
                && let Ok(short) = single.to_string().parse::<f64>()
                && let Some(short) = serde_json::Number::from_f64(short)
            {
                *n = short;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(shortest_numbers),
        Value::Object(map) => map.values_mut().for_each(shortest_numbers),
        _ => {}
    }
}

/// Runs one model's work, turning a panic (a bug in Kiln that a hostile file found) into that
/// model's error, "internal error reading this model: …", so the build goes on without it.
pub fn guard_model<T>(work: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)) {
        Ok(result) => result,
        Err(payload) => Err(format!(
            "internal error reading this model: {}",
            panic_message(payload.as_ref())
        )),
    }
}

/// The text a panic was raised with.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic without a message".into())
}

/// Top-level arrays of objects, and what each element may point at.
const OBJECT_ARRAYS: &[&str] = &[
    "accessors",
    "animations",
    "buffers",
    "bufferViews",
    "cameras",
    "images",
    "materials",
    "meshes",
    "nodes",
    "samplers",
    "scenes",
    "skins",
    "textures",
];

/// Checks the JSON has the shape the glTF schema gives it wherever Kiln's stages read or
/// write: lists are lists, objects are objects, and every index into another list (nodes,
/// meshes, skins, accessors, buffer views, samplers) names an element that exists. A
/// hostile file gets an error naming the place, and the stages can index the JSON freely.
fn check_shape(json: &Value) -> Result<(), GltfError> {
    let len = |name: &str| json.get(name).and_then(Value::as_array).map_or(0, Vec::len);
    for name in OBJECT_ARRAYS {
        if let Some(list) = json.get(*name) {
            let list = list
                .as_array()
                .ok_or_else(|| invalid(*name, "is not an array"))?;
            for (i, item) in list.iter().enumerate() {
                if !item.is_object() {
                    return Err(invalid(format!("{name}[{i}]"), "is not an object"));
                }
            }
        }
    }
    for name in ["extensionsUsed", "extensionsRequired"] {
        if let Some(list) = json.get(name) {
            let ok = list
                .as_array()
                .is_some_and(|l| l.iter().all(Value::is_string));
            if !ok {
                return Err(invalid(name, "is not an array of strings"));
            }
        }
    }
    check_extensions(json, "")?;
    let (nodes, meshes, skins, accessors, views) = (
        len("nodes"),
        len("meshes"),
        len("skins"),
        len("accessors"),
        len("bufferViews"),
    );
    let index = |v: &Value, what: &str, field: &str, target: &str, count: usize| {
        check_index(v.get(field), &format!("{what}.{field}"), target, count)
    };
    let index_list = |v: &Value, what: &str, field: &str, target: &str, count: usize| {
        let Some(list) = v.get(field) else {
            return Ok(());
        };
        let list = list
            .as_array()
            .ok_or_else(|| invalid(format!("{what}.{field}"), "is not an array"))?;
        for (k, item) in list.iter().enumerate() {
            check_index(Some(item), &format!("{what}.{field}[{k}]"), target, count)?;
        }
        Ok(())
    };
    let numbers = |v: &Value, what: &str, field: &str, want: Option<usize>| {
        let Some(list) = v.get(field) else {
            return Ok(());
        };
        let ok = list
            .as_array()
            .is_some_and(|l| l.iter().all(Value::is_number) && want.is_none_or(|n| l.len() == n));
        if ok {
            Ok(())
        } else {
            Err(invalid(
                format!("{what}.{field}"),
                match want {
                    Some(n) => format!("is not an array of {n} numbers"),
                    None => "is not an array of numbers".into(),
                },
            ))
        }
    };
    let each = |name: &str| {
        json.get(name)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
    };
    check_index(json.get("scene"), "scene", "scene", len("scenes"))?;
    for (i, scene) in each("scenes").enumerate() {
        index_list(scene, &format!("scenes[{i}]"), "nodes", "node", nodes)?;
    }
    for (i, node) in each("nodes").enumerate() {
        let what = format!("nodes[{i}]");
        index_list(node, &what, "children", "node", nodes)?;
        index(node, &what, "mesh", "mesh", meshes)?;
        index(node, &what, "skin", "skin", skins)?;
        index(node, &what, "camera", "camera", len("cameras"))?;
        numbers(node, &what, "matrix", Some(16))?;
        numbers(node, &what, "translation", Some(3))?;
        numbers(node, &what, "rotation", Some(4))?;
        numbers(node, &what, "scale", Some(3))?;
        numbers(node, &what, "weights", None)?;
    }
    for (i, mesh) in each("meshes").enumerate() {
        let what = format!("meshes[{i}]");
        numbers(mesh, &what, "weights", None)?;
        let primitives = mesh
            .get("primitives")
            .and_then(Value::as_array)
            .ok_or_else(|| invalid(format!("{what}.primitives"), "is not an array"))?;
        for (p, primitive) in primitives.iter().enumerate() {
            let what = format!("{what}.primitives[{p}]");
            if !primitive.is_object() {
                return Err(invalid(what, "is not an object"));
            }
            let attributes = primitive
                .get("attributes")
                .and_then(Value::as_object)
                .ok_or_else(|| invalid(format!("{what}.attributes"), "is not an object"))?;
            for (name, v) in attributes {
                check_index(
                    Some(v),
                    &format!("{what}.attributes.{name}"),
                    "accessor",
                    accessors,
                )?;
            }
            index(primitive, &what, "indices", "accessor", accessors)?;
            index(primitive, &what, "material", "material", len("materials"))?;
            if let Some(mode) = primitive.get("mode") {
                check_index(Some(mode), &format!("{what}.mode"), "mode", 7)?;
            }
            if let Some(targets) = primitive.get("targets") {
                let targets = targets
                    .as_array()
                    .ok_or_else(|| invalid(format!("{what}.targets"), "is not an array"))?;
                for (t, target) in targets.iter().enumerate() {
                    let target = target.as_object().ok_or_else(|| {
                        invalid(format!("{what}.targets[{t}]"), "is not an object")
                    })?;
                    for (name, v) in target {
                        check_index(
                            Some(v),
                            &format!("{what}.targets[{t}].{name}"),
                            "accessor",
                            accessors,
                        )?;
                    }
                }
            }
        }
    }
    for (i, accessor) in each("accessors").enumerate() {
        let what = format!("accessors[{i}]");
        index(accessor, &what, "bufferView", "bufferView", views)?;
        if let Some(sparse) = accessor.get("sparse") {
            for part in ["indices", "values"] {
                let object = sparse
                    .get(part)
                    .filter(|p| p.is_object())
                    .ok_or_else(|| invalid(format!("{what}.sparse.{part}"), "is not an object"))?;
                check_index(
                    Some(object.get("bufferView").unwrap_or(&Value::Null)),
                    &format!("{what}.sparse.{part}.bufferView"),
                    "bufferView",
                    views,
                )?;
            }
        }
    }
    for (i, image) in each("images").enumerate() {
        index(
            image,
            &format!("images[{i}]"),
            "bufferView",
            "bufferView",
            views,
        )?;
    }
    for (i, skin) in each("skins").enumerate() {
        let what = format!("skins[{i}]");
        let joints = skin
            .get("joints")
            .ok_or_else(|| invalid(format!("{what}.joints"), "is missing"))?;
        if !joints.is_array() {
            return Err(invalid(format!("{what}.joints"), "is not an array"));
        }
        index_list(skin, &what, "joints", "node", nodes)?;
        index(skin, &what, "skeleton", "node", nodes)?;
        index(skin, &what, "inverseBindMatrices", "accessor", accessors)?;
    }
    for (i, animation) in each("animations").enumerate() {
        let what = format!("animations[{i}]");
        let list = |field: &str| {
            animation
                .get(field)
                .and_then(Value::as_array)
                .ok_or_else(|| invalid(format!("{what}.{field}"), "is not an array"))
        };
        let samplers = list("samplers")?;
        for (s, sampler) in samplers.iter().enumerate() {
            let what = format!("{what}.samplers[{s}]");
            if !sampler.is_object() {
                return Err(invalid(what, "is not an object"));
            }
            for field in ["input", "output"] {
                check_index(
                    Some(sampler.get(field).unwrap_or(&Value::Null)),
                    &format!("{what}.{field}"),
                    "accessor",
                    accessors,
                )?;
            }
        }
        for (c, channel) in list("channels")?.iter().enumerate() {
            let what = format!("{what}.channels[{c}]");
            if !channel.is_object() {
                return Err(invalid(what, "is not an object"));
            }
            check_index(
                Some(channel.get("sampler").unwrap_or(&Value::Null)),
                &format!("{what}.sampler"),
                "sampler",
                samplers.len(),
            )?;
            let target = channel
                .get("target")
                .filter(|t| t.is_object())
                .ok_or_else(|| invalid(format!("{what}.target"), "is not an object"))?;
            index(target, &what, "node", "node", nodes)?;
            if !target.get("path").is_some_and(Value::is_string) {
                return Err(invalid(format!("{what}.target.path"), "is not a string"));
            }
        }
    }
    Ok(())
}

/// An optional index field: absent, or an integer below `count`.
fn check_index(
    value: Option<&Value>,
    what: &str,
    target: &str,
    count: usize,
) -> Result<(), GltfError> {
    match value {
        None => Ok(()),
        Some(v) => match v.as_u64() {
            Some(i) if (i as usize) < count && i <= u32::MAX as u64 => Ok(()),
            Some(i) => Err(invalid(what, format!("{target} {i} does not exist"))),
            None => Err(invalid(what, "is not a non-negative integer")),
        },
    }
}

/// Every `extensions` member anywhere in the JSON (except inside `extras`, which belong to
/// the application) is an object.
fn check_extensions(value: &Value, path: &str) -> Result<(), GltfError> {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let here = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                if key == "extras" {
                    continue;
                }
                if key == "extensions" && !child.is_object() {
                    return Err(invalid(here, "is not an object"));
                }
                check_extensions(child, &here)?;
            }
            Ok(())
        }
        Value::Array(list) => {
            for (i, child) in list.iter().enumerate() {
                check_extensions(child, &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
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
        let uri = buffer.get("uri").and_then(Value::as_str);
        let data = match uri.map(|uri| (uri, data_uri(uri))) {
            Some((_, Some(decoded))) => {
                Some(decoded.map_err(|reason| GltfError::Buffer { index, reason })?)
            }
            Some((uri, None)) => Some(resources.load(uri).ok_or_else(|| GltfError::Buffer {
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
    fn single_precision_numbers_are_written_short_and_read_back_the_same() {
        let tenth = f64::from(0.1f32);
        let source = json!({"asset": {"version": "2.0"},
            "extras": {"f32": [tenth, f64::from(-1.0e-30f32), f64::from(3.4e38f32), 2.5, 7],
                       "f64": 0.123456789012}});
        let glb = write_glb(source.clone(), None);
        let (text, _) = split_glb(&glb).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("[0.1,-1e-30,3.4e+38,2.5,7]"), "{text}");
        assert!(text.contains("0.123456789012"), "{text}");
        let back: Value = serde_json::from_str(text.trim_end()).unwrap();
        for (i, read) in back["extras"]["f32"].as_array().unwrap().iter().enumerate() {
            let written = source["extras"]["f32"][i].as_f64().unwrap();
            assert_eq!(read.as_f64().unwrap() as f32, written as f32, "number {i}");
        }
        assert_eq!(back["extras"]["f64"], source["extras"]["f64"]);
    }

    #[test]
    fn hostile_offsets_are_errors() {
        let glb = write_glb(
            json!({"asset": {"version": "2.0"}, "buffers": [{"byteLength": 8}],
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
