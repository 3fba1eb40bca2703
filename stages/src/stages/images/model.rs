//! Textures of the geometry stage's model variants (`*.quantized.glb`, `*.meshopt.glb`).
//!
//! Each image a variant uses, embedded or referenced by URI (a `.gltf`'s `tex.png` beside it,
//! or a `data:` URI), is re-encoded like a standalone image (lossless WebP or an optimised
//! PNG; bounded lossy WebP where lossy is on for the model's path and every slot that samples
//! the image is a colour slot) and put into the variant's binary chunk without touching its
//! geometry ([`crate::gltf::relayout`]): a variant carries its textures, one request. A WebP is declared the glTF
//! way: `EXT_texture_webp`, required, on every texture that samples it. The model's own file
//! (the `original` variant) is left as uploaded: it is what a device that cannot decode WebP
//! falls back to (`kiln.model` does on a failed decode), and the original is always published.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::codec::Format;
use crate::gltf::cleanup::add_extension;
use crate::gltf::{GltfError, invalid, relayout, split_glb};

/// The WebP texture extension the variants declare when a texture became WebP.
pub const WEBP_EXTENSION: &str = "EXT_texture_webp";
/// The Basis Universal (KTX2) texture extension the `ktx2` variant declares.
pub const BASISU_EXTENSION: &str = "KHR_texture_basisu";

/// Material slots whose texture holds colour (sRGB): the only ones that may be perceptually
/// lossy. Every other slot (normal, occlusion, metallic-roughness, clearcoat, transmission,
/// thickness…) holds data.
const COLOUR_SLOTS: &[&str] = &[
    "baseColorTexture",
    "emissiveTexture",
    "diffuseTexture",
    "sheenColorTexture",
    "specularColorTexture",
];

/// Texture extensions that already choose an image format; their images are left alone.
const FORMAT_EXTENSIONS: &[&str] = &["EXT_texture_webp", "EXT_texture_avif", "KHR_texture_basisu"];

/// An image of a model, where its bytes are, and where the model samples it.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelImage {
    /// Its index in `images`.
    pub index: usize,
    /// Its `name`, if it has one.
    pub name: Option<String>,
    /// The buffer view holding its bytes (an image in the binary chunk).
    pub view: Option<usize>,
    /// Its URI (an image beside the model, or a `data:` URI) when it has no view.
    pub uri: Option<String>,
    /// The material slots that sample it (`materials[0].pbrMetallicRoughness.baseColorTexture`
    /// shortened to `baseColorTexture`), sorted, without repeats.
    pub slots: Vec<String>,
}

impl ModelImage {
    /// Sampled only by colour slots (and at least one): lossy may apply.
    pub fn colour_only(&self) -> bool {
        !self.slots.is_empty()
            && self
                .slots
                .iter()
                .all(|s| COLOUR_SLOTS.contains(&s.as_str()))
    }
}

/// The images of a GLB the stage may re-encode: in a buffer view or at a URI, not behind a
/// texture extension that already picked their format.
pub fn model_images(json: &Value) -> Vec<ModelImage> {
    let textures = json.get("textures").and_then(Value::as_array);
    let textures = textures.map_or(&[][..], Vec::as_slice);
    let mut blocked = BTreeSet::new();
    for texture in textures {
        let source = texture.get("source").and_then(Value::as_u64);
        match texture.get("extensions") {
            None => {}
            Some(Value::Object(exts)) => {
                for (name, ext) in exts {
                    if FORMAT_EXTENSIONS.contains(&name.as_str()) {
                        blocked.extend(source);
                        blocked.extend(ext.get("source").and_then(Value::as_u64));
                    }
                }
            }
            // Not an object: no extension can be added there; its image is left alone.
            Some(_) => blocked.extend(source),
        }
    }
    let mut slots: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    for material in json
        .get("materials")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        texture_slots(material, "", &mut |slot, texture| {
            if let Some(image) = textures
                .get(texture as usize)
                .and_then(|t| t.get("source"))
                .and_then(Value::as_u64)
            {
                slots.entry(image).or_default().insert(slot.to_string());
            }
        });
    }
    json.get("images")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
        .filter_map(|(index, image)| {
            let view = image.get("bufferView").and_then(Value::as_u64);
            let uri = image.get("uri").and_then(Value::as_str);
            if view.is_some() == uri.is_some() || blocked.contains(&(index as u64)) {
                return None;
            }
            Some(ModelImage {
                index,
                name: image
                    .get("name")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                view: view.map(|v| v as usize),
                uri: uri.map(str::to_string),
                slots: slots
                    .remove(&(index as u64))
                    .unwrap_or_default()
                    .into_iter()
                    .collect(),
            })
        })
        .collect()
}

/// Calls `found(slot, texture)` for every texture reference (`{"index": n, …}` under a key)
/// in a material, extensions included.
fn texture_slots(value: &Value, key: &str, found: &mut dyn FnMut(&str, u64)) {
    match value {
        Value::Object(object) => {
            if !key.is_empty()
                && let Some(texture) = object.get("index").and_then(Value::as_u64)
            {
                found(key, texture);
            }
            for (k, v) in object {
                texture_slots(v, k, found);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| texture_slots(v, key, found)),
        _ => {}
    }
}

/// The bytes of view `view` of a GLB's binary chunk (a plain view: images never are
/// meshopt-compressed).
pub fn view_bytes<'a>(json: &Value, bin: &'a [u8], view: usize) -> Result<&'a [u8], GltfError> {
    let what = format!("bufferViews[{view}]");
    let v = json
        .pointer(&format!("/bufferViews/{view}"))
        .ok_or_else(|| invalid(&what, "does not exist"))?;
    let count = |key: &str| {
        v.get(key)
            .map_or(Some(0), Value::as_u64)
            .map(|n| n as usize)
    };
    if count("buffer") != Some(0) || v.get("extensions").is_some() {
        return Err(invalid(&what, "is not a plain view of the binary chunk"));
    }
    let start = count("byteOffset").ok_or_else(|| invalid(&what, "byteOffset"))?;
    let length = count("byteLength").ok_or_else(|| invalid(&what, "byteLength"))?;
    start
        .checked_add(length)
        .and_then(|end| bin.get(start..end))
        .ok_or_else(|| invalid(&what, "runs past the binary chunk"))
}

/// A GLB's JSON and binary chunk.
pub fn read_glb(glb: &[u8]) -> Result<(Value, Vec<u8>), GltfError> {
    let (json, bin) = split_glb(glb)?;
    let json = serde_json::from_slice(&json).map_err(|e| GltfError::Json(e.to_string()))?;
    Ok((json, bin.unwrap_or_default()))
}

/// The bytes chosen for a model's images, by image index, with their format.
pub type Chosen = BTreeMap<usize, (Vec<u8>, Format)>;

/// The variant (its JSON and binary chunk, as [`read_glb`] gives them) with each image of
/// `chosen` (image index → new bytes and their format) in its binary chunk: in place of its
/// bytes where it had a view, in a new view where it had a URI (the URI removed). A WebP gets
/// `image/webp` and every texture sampling it `EXT_texture_webp` (required), a KTX2
/// `image/ktx2` and `KHR_texture_basisu` (required); a PNG or JPEG stays core glTF.
pub fn with_textures(
    mut json: Value,
    bin: &[u8],
    images: &[ModelImage],
    chosen: &Chosen,
) -> Result<Vec<u8>, GltfError> {
    let mut views: BTreeMap<usize, usize> = BTreeMap::new();
    let mut referenced = Vec::new();
    for image in images.iter().filter(|i| chosen.contains_key(&i.index)) {
        match image.view {
            Some(view) => {
                views.insert(image.index, view);
            }
            None => referenced.push(image.index),
        }
    }
    if !json.is_object() {
        return Err(GltfError::Json("top level is not an object".into()));
    }
    // A URI image gets an empty view at the end of the chunk, which the relayout fills.
    if !referenced.is_empty() {
        if json
            .get("buffers")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
        {
            json["buffers"] = json!([{ "byteLength": 0 }]);
        }
        if !json["buffers"][0].is_object() || json["buffers"][0].get("uri").is_some() {
            return Err(invalid("buffers[0]", "is not the GLB's binary chunk"));
        }
        if !json.get("bufferViews").is_some_and(Value::is_array) {
            json["bufferViews"] = json!([]);
        }
        for index in referenced {
            let list = json["bufferViews"].as_array_mut().expect("an array");
            views.insert(index, list.len());
            list.push(json!({ "buffer": 0, "byteOffset": bin.len(), "byteLength": 0 }));
            let image = json["images"][index]
                .as_object_mut()
                .ok_or_else(|| invalid(format!("images[{index}]"), "is not an object"))?;
            image.remove("uri");
            image.insert("bufferView".into(), json!(views[&index]));
        }
    }
    let mut required = BTreeSet::new();
    for (&index, (_, format)) in chosen {
        let (mime, extension) = match format {
            Format::Webp => ("image/webp", Some(WEBP_EXTENSION)),
            Format::Ktx2 => ("image/ktx2", Some(BASISU_EXTENSION)),
            Format::Png => ("image/png", None),
            Format::Jpeg => ("image/jpeg", None),
            _ => continue,
        };
        json["images"][index]["mimeType"] = json!(mime);
        let Some(extension) = extension else {
            continue;
        };
        required.insert(extension);
        for texture in json
            .get_mut("textures")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if texture.get("source").and_then(Value::as_u64) == Some(index as u64) {
                let object = texture.as_object_mut().expect("textures are objects");
                object.remove("source");
                let exts = object.entry("extensions").or_insert_with(|| json!({}));
                exts[extension] = json!({ "source": index });
            }
        }
    }
    for extension in required {
        add_extension(&mut json, extension, true);
    }
    let replacements: BTreeMap<usize, &[u8]> = views
        .iter()
        .map(|(index, view)| (*view, chosen[index].0.as_slice()))
        .collect();
    relayout::relayout(json, bin, &replacements)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `data:` URI image (and a file one) moves into the binary chunk as WebP: the URI gone,
    /// a view holding the bytes, the texture pointing at it through `EXT_texture_webp`.
    #[test]
    fn a_uri_image_moves_into_the_chunk() {
        use base64::Engine;

        use crate::gltf::data_uri;
        let png = b"\x89PNG\r\n\x1a\n pretend".to_vec();
        let uri = format!(
            "data:image/png;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(&png)
        );
        assert_eq!(data_uri(&uri), Some(Ok(png)));
        assert!(matches!(data_uri("data:image/png,%89PNG"), Some(Err(_))));
        assert_eq!(data_uri("tex.png"), None);
        let glb = crate::gltf::Asset {
            json: json!({
                "asset": { "version": "2.0" },
                "buffers": [{ "byteLength": 4 }],
                "bufferViews": [{ "buffer": 0, "byteLength": 4 }],
                "images": [{ "uri": uri }, { "uri": "tex.png" }],
                "textures": [{ "source": 0 }, { "source": 1 }],
                "materials": [{ "pbrMetallicRoughness": { "baseColorTexture": { "index": 0 } } }],
            }),
            views: vec![vec![1, 2, 3, 4]],
        }
        .to_glb();
        let (json, bin) = read_glb(&glb).unwrap();
        let images = model_images(&json);
        assert_eq!(images.len(), 2);
        let webp = b"RIFF\x04\0\0\0WEBPmore".to_vec();
        let chosen = BTreeMap::from([
            (0, (webp.clone(), Format::Webp)),
            (1, (b"png".to_vec(), Format::Png)),
        ]);
        let out = with_textures(json, &bin, &images, &chosen).unwrap();
        let (json, bin) = read_glb(&out).unwrap();
        for (i, bytes, mime) in [(0, &webp[..], "image/webp"), (1, b"png", "image/png")] {
            let image = &json["images"][i];
            assert!(image.get("uri").is_none(), "{image}");
            assert_eq!(image["mimeType"], mime);
            let view = image["bufferView"].as_u64().unwrap() as usize;
            assert_eq!(view_bytes(&json, &bin, view).unwrap(), bytes);
        }
        assert_eq!(view_bytes(&json, &bin, 0).unwrap(), [1, 2, 3, 4]);
        assert_eq!(
            json["textures"][0],
            json!({ "extensions": { "EXT_texture_webp": { "source": 0 } } })
        );
        assert_eq!(json["textures"][1], json!({ "source": 1 }));
        assert_eq!(json["extensionsRequired"], json!(["EXT_texture_webp"]));
    }

    #[test]
    fn slots_say_which_images_are_colour_and_which_data() {
        let json = json!({
            "images": [
                { "bufferView": 0 }, { "bufferView": 1 }, { "bufferView": 2 },
                { "uri": "outside.png" }, { "bufferView": 3 }, { "bufferView": 4 },
                { "uri": "both.png", "bufferView": 5 },
            ],
            "textures": [
                { "source": 0 }, { "source": 1 }, { "source": 2 }, { "source": 3 },
                { "source": 4, "extensions": { "KHR_texture_basisu": { "source": 5 } } },
            ],
            "materials": [
                { "pbrMetallicRoughness": { "baseColorTexture": { "index": 0 },
                                            "metallicRoughnessTexture": { "index": 1 } },
                  "normalTexture": { "index": 1 }, "emissiveTexture": { "index": 2 } },
                // The same image as colour in one material and as data in another.
                { "extensions": { "KHR_materials_sheen": { "sheenColorTexture": { "index": 2 },
                                                            "sheenRoughnessTexture": { "index": 2 } } } },
            ],
        });
        let images = model_images(&json);
        let got: Vec<_> = images
            .iter()
            .map(|i| (i.index, i.slots.join(","), i.colour_only()))
            .collect();
        assert_eq!(
            got,
            [
                (0, "baseColorTexture".to_string(), true),
                (
                    1,
                    "metallicRoughnessTexture,normalTexture".to_string(),
                    false
                ),
                (
                    2,
                    "emissiveTexture,sheenColorTexture,sheenRoughnessTexture".to_string(),
                    false
                ),
                (3, String::new(), false),
            ]
        );
        assert_eq!(images[3].uri.as_deref(), Some("outside.png"));
        assert_eq!(images[0].view, Some(0));
    }
}
