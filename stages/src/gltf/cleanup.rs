//! Whole-document glTF housekeeping the model stages share: the extension lists, and
//! dropping accessors and buffer views nothing references any more (renumbering every
//! reference, and the meshopt codecs chosen per view with them).

use std::collections::{BTreeSet, HashMap};

use serde_json::{Value, json};

use super::Asset;
use super::meshopt_codec::ViewCodec;

pub fn add_extension(json: &mut Value, name: &str, required: bool) {
    for list in ["extensionsUsed", "extensionsRequired"] {
        if list == "extensionsRequired" && !required {
            continue;
        }
        let Some(object) = json.as_object_mut() else {
            return;
        };
        let entry = object.entry(list).or_insert_with(|| json!([]));
        if !entry.is_array() {
            // The reader refuses such files; a list that is not one is replaced, not indexed.
            *entry = json!([]);
        }
        if let Some(array) = entry.as_array_mut()
            && !array.iter().any(|e| e == name)
        {
            array.push(json!(name));
        }
    }
}

pub fn remove_extension(json: &mut Value, name: &str) {
    for list in ["extensionsUsed", "extensionsRequired"] {
        if let Some(array) = json.get_mut(list).and_then(Value::as_array_mut) {
            array.retain(|e| e != name);
            if array.is_empty()
                && let Some(object) = json.as_object_mut()
            {
                object.remove(list);
            }
        }
    }
}

/// Drops accessors and views nothing refers to any more (the source's geometry), renumbering
/// every reference. Returns the codec table under the new view numbers.
pub fn collect_garbage(
    asset: &mut Asset,
    codecs: HashMap<usize, ViewCodec>,
) -> HashMap<usize, ViewCodec> {
    let json = &mut asset.json;
    // Input meshopt extensions are decoded away: views are plain now.
    remove_extension(json, "EXT_meshopt_compression");
    remove_extension(json, "KHR_meshopt_compression");
    if let Some(buffers) = json.get_mut("buffers").and_then(Value::as_array_mut) {
        for b in buffers {
            if let Some(ext) = b.get_mut("extensions").and_then(Value::as_object_mut) {
                ext.remove("EXT_meshopt_compression");
                ext.remove("KHR_meshopt_compression");
            }
        }
    }
    let mut used_accessors = BTreeSet::new();
    visit_accessor_refs(json, &mut |v| {
        if let Some(i) = v.as_u64() {
            used_accessors.insert(i as usize);
        }
    });
    let accessor_map: HashMap<usize, usize> = used_accessors
        .iter()
        .enumerate()
        .map(|(new, &old)| (old, new))
        .collect();
    let old_accessors = json
        .get("accessors")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let accessors: Vec<Value> = used_accessors
        .iter()
        .map(|&i| old_accessors[i].clone())
        .collect();

    let mut used_views = BTreeSet::new();
    for a in &accessors {
        for pointer in [
            "/bufferView",
            "/sparse/indices/bufferView",
            "/sparse/values/bufferView",
        ] {
            if let Some(v) = a.pointer(pointer).and_then(Value::as_u64) {
                used_views.insert(v as usize);
            }
        }
    }
    for image in json
        .get("images")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(v) = image["bufferView"].as_u64() {
            used_views.insert(v as usize);
        }
    }
    let view_map: HashMap<usize, usize> = used_views
        .iter()
        .enumerate()
        .map(|(new, &old)| (old, new))
        .collect();
    visit_accessor_refs(json, &mut |v| {
        if let Some(i) = v.as_u64() {
            *v = json!(accessor_map[&(i as usize)]);
        }
    });
    let mut accessors = accessors;
    for a in &mut accessors {
        for pointer in [
            "/bufferView",
            "/sparse/indices/bufferView",
            "/sparse/values/bufferView",
        ] {
            if let Some(v) = a.pointer_mut(pointer)
                && let Some(i) = v.as_u64()
            {
                *v = json!(view_map[&(i as usize)]);
            }
        }
    }
    for image in json
        .get_mut("images")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(i) = image["bufferView"].as_u64() {
            image["bufferView"] = json!(view_map[&(i as usize)]);
        }
    }
    let old_views = json
        .get("bufferViews")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let views_json: Vec<Value> = used_views.iter().map(|&i| old_views[i].clone()).collect();
    let views_data: Vec<Vec<u8>> = used_views
        .iter()
        .map(|&i| std::mem::take(&mut asset.views[i]))
        .collect();
    set_array(json, "accessors", accessors);
    set_array(json, "bufferViews", views_json);
    asset.views = views_data;
    codecs
        .into_iter()
        .filter_map(|(old, codec)| view_map.get(&old).map(|&new| (new, codec)))
        .collect()
}

/// Calls `f` on every place that names an accessor: primitive attributes, indices and morph
/// targets, inverse bind matrices, animation sampler inputs and outputs.
pub fn visit_accessor_refs(json: &mut Value, f: &mut dyn FnMut(&mut Value)) {
    for mesh in items_mut(json, "meshes") {
        for p in items_mut(mesh, "primitives") {
            if let Some(attributes) = p.get_mut("attributes").and_then(Value::as_object_mut) {
                attributes.values_mut().for_each(&mut *f);
            }
            if let Some(indices) = p.get_mut("indices") {
                f(indices);
            }
            for t in items_mut(p, "targets") {
                t.as_object_mut()
                    .into_iter()
                    .flat_map(|o| o.values_mut())
                    .for_each(&mut *f);
            }
        }
    }
    for skin in items_mut(json, "skins") {
        if let Some(ibm) = skin.get_mut("inverseBindMatrices") {
            f(ibm);
        }
    }
    for animation in items_mut(json, "animations") {
        for sampler in items_mut(animation, "samplers") {
            for key in ["input", "output"] {
                if let Some(v) = sampler.get_mut(key) {
                    f(v);
                }
            }
        }
    }
}

/// The elements of the array at `object[key]` (none if it is missing or not an array).
pub fn items_mut<'a>(object: &'a mut Value, key: &str) -> impl Iterator<Item = &'a mut Value> {
    object
        .get_mut(key)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
}

pub fn set_array(json: &mut Value, name: &str, items: Vec<Value>) {
    let object = json.as_object_mut().expect("object");
    if items.is_empty() {
        object.remove(name);
    } else {
        object.insert(name.into(), Value::Array(items));
    }
}
