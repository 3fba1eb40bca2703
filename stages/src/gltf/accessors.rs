//! Reading accessors (any component type, normalised or not, strided, sparse) as floats or
//! indices, and appending new accessors and views.

use serde_json::{Value, json};

use super::{Asset, GltfError, MAX_ELEMENTS, invalid};

pub const BYTE: u64 = 5120;
pub const UNSIGNED_BYTE: u64 = 5121;
pub const SHORT: u64 = 5122;
pub const UNSIGNED_SHORT: u64 = 5123;
pub const UNSIGNED_INT: u64 = 5125;
pub const FLOAT: u64 = 5126;

pub const ARRAY_BUFFER: u64 = 34962;
pub const ELEMENT_ARRAY_BUFFER: u64 = 34963;

/// What an accessor holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Layout {
    pub count: usize,
    pub components: usize,
    pub component_type: u64,
    pub normalized: bool,
}

pub fn component_size(component_type: u64) -> Option<usize> {
    match component_type {
        BYTE | UNSIGNED_BYTE => Some(1),
        SHORT | UNSIGNED_SHORT => Some(2),
        UNSIGNED_INT | FLOAT => Some(4),
        _ => None,
    }
}

pub fn components_of(kind: &str) -> Option<usize> {
    match kind {
        "SCALAR" => Some(1),
        "VEC2" => Some(2),
        "VEC3" => Some(3),
        "VEC4" | "MAT2" => Some(4),
        "MAT3" => Some(9),
        "MAT4" => Some(16),
        _ => None,
    }
}

pub fn type_name(components: usize) -> &'static str {
    match components {
        1 => "SCALAR",
        2 => "VEC2",
        3 => "VEC3",
        4 => "VEC4",
        9 => "MAT3",
        _ => "MAT4",
    }
}

fn accessor(asset: &Asset, index: usize) -> Result<&Value, GltfError> {
    asset
        .array("accessors")
        .get(index)
        .ok_or_else(|| invalid(format!("accessors[{index}]"), "does not exist"))
}

pub fn layout(asset: &Asset, index: usize) -> Result<Layout, GltfError> {
    let what = format!("accessors[{index}]");
    let a = accessor(asset, index)?;
    let count = a
        .get("count")
        .and_then(Value::as_u64)
        .ok_or_else(|| invalid(&what, "count missing"))? as usize;
    if count > MAX_ELEMENTS {
        return Err(invalid(
            &what,
            format!("count {count} is larger than Kiln accepts ({MAX_ELEMENTS})"),
        ));
    }
    let components = a
        .get("type")
        .and_then(Value::as_str)
        .and_then(components_of)
        .ok_or_else(|| invalid(&what, "type missing or unknown"))?;
    let component_type = a
        .get("componentType")
        .and_then(Value::as_u64)
        .filter(|t| component_size(*t).is_some())
        .ok_or_else(|| invalid(&what, "componentType missing or unknown"))?;
    Ok(Layout {
        count,
        components,
        component_type,
        normalized: a
            .get("normalized")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    })
}

/// One component as a float, normalised per the glTF spec where the accessor says so.
fn component(bytes: &[u8], component_type: u64, normalized: bool) -> f32 {
    match component_type {
        BYTE => {
            let v = bytes[0] as i8 as f32;
            if normalized { (v / 127.0).max(-1.0) } else { v }
        }
        UNSIGNED_BYTE => {
            let v = bytes[0] as f32;
            if normalized { v / 255.0 } else { v }
        }
        SHORT => {
            let v = i16::from_le_bytes([bytes[0], bytes[1]]) as f32;
            if normalized {
                (v / 32767.0).max(-1.0)
            } else {
                v
            }
        }
        UNSIGNED_SHORT => {
            let v = u16::from_le_bytes([bytes[0], bytes[1]]) as f32;
            if normalized { v / 65535.0 } else { v }
        }
        UNSIGNED_INT => u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as f32,
        _ => f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
    }
}

/// Reads `count × components` values from a view, checking every offset first.
fn read_elements(
    asset: &Asset,
    view_index: usize,
    byte_offset: usize,
    layout: Layout,
    what: &str,
) -> Result<Vec<f32>, GltfError> {
    let view = asset
        .views
        .get(view_index)
        .ok_or_else(|| invalid(what, format!("bufferView {view_index} does not exist")))?;
    let size = component_size(layout.component_type).unwrap_or(4);
    let element = size * layout.components;
    let stride = asset.array("bufferViews")[view_index]
        .get("byteStride")
        .and_then(Value::as_u64)
        .map_or(element, |s| s as usize);
    if stride < element {
        return Err(invalid(
            what,
            format!("byteStride {stride} is smaller than an element ({element})"),
        ));
    }
    if layout.count > 0 {
        let end = byte_offset
            .checked_add((layout.count - 1).saturating_mul(stride))
            .and_then(|v| v.checked_add(element))
            .unwrap_or(usize::MAX);
        if end > view.len() {
            return Err(invalid(
                what,
                format!(
                    "needs bytes up to {end} but bufferView {view_index} has {}",
                    view.len()
                ),
            ));
        }
    }
    let mut out = Vec::with_capacity(layout.count * layout.components);
    for i in 0..layout.count {
        let base = byte_offset + i * stride;
        for c in 0..layout.components {
            let at = base + c * size;
            out.push(component(
                &view[at..at + size],
                layout.component_type,
                layout.normalized,
            ));
        }
    }
    Ok(out)
}

/// The accessor's values as floats (`count × components`), sparse substitution applied.
pub fn read_f32(asset: &Asset, index: usize) -> Result<(Layout, Vec<f32>), GltfError> {
    let what = format!("accessors[{index}]");
    let layout = layout(asset, index)?;
    let a = accessor(asset, index)?;
    let offset = a.get("byteOffset").and_then(Value::as_u64).unwrap_or(0) as usize;
    let mut values = match a.get("bufferView").and_then(Value::as_u64) {
        Some(view) => read_elements(asset, view as usize, offset, layout, &what)?,
        // No bytes back a view-less accessor: its size alone is capped, not a buffer.
        None if layout.count.saturating_mul(layout.components) > MAX_ELEMENTS => {
            return Err(invalid(
                &what,
                format!(
                    "count {} × {} components without a bufferView is larger than Kiln accepts ({MAX_ELEMENTS} values)",
                    layout.count, layout.components
                ),
            ));
        }
        None => vec![0.0; layout.count * layout.components],
    };
    if let Some(sparse) = a.get("sparse") {
        let count = sparse.get("count").and_then(Value::as_u64).unwrap_or(0) as usize;
        if count > layout.count {
            return Err(invalid(&what, "sparse count exceeds accessor count"));
        }
        let idx = &sparse["indices"];
        let index_layout = Layout {
            count,
            components: 1,
            component_type: idx
                .get("componentType")
                .and_then(Value::as_u64)
                .unwrap_or(0),
            normalized: false,
        };
        if !matches!(
            index_layout.component_type,
            UNSIGNED_BYTE | UNSIGNED_SHORT | UNSIGNED_INT
        ) {
            return Err(invalid(&what, "sparse indices componentType"));
        }
        let view = |o: &Value| {
            o.get("bufferView")
                .and_then(Value::as_u64)
                .map(|v| v as usize)
        };
        let off = |o: &Value| o.get("byteOffset").and_then(Value::as_u64).unwrap_or(0) as usize;
        let indices = read_elements(
            asset,
            view(idx).ok_or_else(|| invalid(&what, "sparse indices bufferView"))?,
            off(idx),
            index_layout,
            &format!("{what}.sparse.indices"),
        )?;
        let vals = &sparse["values"];
        let sparse_values = read_elements(
            asset,
            view(vals).ok_or_else(|| invalid(&what, "sparse values bufferView"))?,
            off(vals),
            Layout { count, ..layout },
            &format!("{what}.sparse.values"),
        )?;
        for (k, target) in indices.iter().enumerate() {
            let target = *target as usize;
            if target >= layout.count {
                return Err(invalid(
                    &what,
                    format!("sparse index {target} out of range"),
                ));
            }
            let n = layout.components;
            values[target * n..target * n + n].copy_from_slice(&sparse_values[k * n..k * n + n]);
        }
    }
    Ok((layout, values))
}

/// Index data as `u32`, each checked against `vertex_count`.
pub fn read_indices(
    asset: &Asset,
    index: usize,
    vertex_count: usize,
) -> Result<Vec<u32>, GltfError> {
    let what = format!("accessors[{index}]");
    let (layout, values) = read_f32(asset, index)?;
    if layout.components != 1
        || !matches!(
            layout.component_type,
            UNSIGNED_BYTE | UNSIGNED_SHORT | UNSIGNED_INT
        )
        || layout.normalized
    {
        return Err(invalid(&what, "indices must be unsigned integer scalars"));
    }
    values
        .iter()
        .map(|&v| {
            let i = v as u32;
            if (i as usize) < vertex_count {
                Ok(i)
            } else {
                Err(invalid(
                    &what,
                    format!("index {i} out of range (vertex count {vertex_count})"),
                ))
            }
        })
        .collect()
}

/// Appends a buffer view holding `data`; returns its index.
pub fn push_view(
    asset: &mut Asset,
    data: Vec<u8>,
    stride: Option<usize>,
    target: Option<u64>,
) -> usize {
    let mut view = json!({ "buffer": 0, "byteLength": data.len() });
    if let Some(stride) = stride {
        view["byteStride"] = json!(stride);
    }
    if let Some(target) = target {
        view["target"] = json!(target);
    }
    let views = asset
        .json
        .as_object_mut()
        .expect("object")
        .entry("bufferViews")
        .or_insert_with(|| json!([]));
    views.as_array_mut().expect("array").push(view);
    asset.views.push(data);
    asset.views.len() - 1
}

/// Little-endian bytes of floats, as a buffer view holds them.
pub fn pack_floats(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Per-component minimum and maximum of `components`-wide elements.
pub fn min_max(values: &[f32], components: usize) -> (Vec<f32>, Vec<f32>) {
    let mut min = vec![f32::INFINITY; components];
    let mut max = vec![f32::NEG_INFINITY; components];
    for element in values.chunks(components) {
        for (c, &v) in element.iter().enumerate() {
            min[c] = min[c].min(v);
            max[c] = max[c].max(v);
        }
    }
    (min, max)
}

/// Appends a tightly packed FLOAT accessor (own buffer view, `target` on it) of
/// `components`-wide elements, with `min`/`max` when `bounds`; returns its index.
pub fn push_floats(
    asset: &mut Asset,
    values: &[f32],
    components: usize,
    target: Option<u64>,
    bounds: bool,
) -> usize {
    let view = push_view(asset, pack_floats(values), None, target);
    let mut accessor = json!({"bufferView": view, "componentType": FLOAT,
        "count": values.len() / components, "type": type_name(components)});
    if bounds {
        let (min, max) = min_max(values, components);
        accessor["min"] = json!(min);
        accessor["max"] = json!(max);
    }
    push_accessor(asset, accessor)
}

/// Appends an accessor; returns its index.
pub fn push_accessor(asset: &mut Asset, accessor: Value) -> usize {
    let list = asset
        .json
        .as_object_mut()
        .expect("object")
        .entry("accessors")
        .or_insert_with(|| json!([]));
    let list = list.as_array_mut().expect("array");
    list.push(accessor);
    list.len() - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asset_with(view: Vec<u8>, accessor: Value, stride: Option<usize>) -> Asset {
        let mut v = json!({"buffer": 0, "byteLength": view.len()});
        if let Some(s) = stride {
            v["byteStride"] = json!(s);
        }
        Asset {
            json: json!({"asset": {"version": "2.0"}, "bufferViews": [v], "accessors": [accessor]}),
            views: vec![view],
        }
    }

    #[test]
    fn reads_normalized_strided_and_sparse() {
        // Two VEC2 of normalized shorts with a 8-byte stride.
        let mut bytes = Vec::new();
        for v in [32767i16, -32767, 0, 16384] {
            bytes.extend_from_slice(&v.to_le_bytes());
            if bytes.len() % 8 == 4 {
                bytes.extend_from_slice(&[9, 9, 9, 9]);
            }
        }
        let asset = asset_with(
            bytes,
            json!({"bufferView": 0, "componentType": SHORT, "normalized": true, "count": 2, "type": "VEC2"}),
            Some(8),
        );
        let (_, values) = read_f32(&asset, 0).unwrap();
        assert_eq!(values[0], 1.0);
        assert_eq!(values[1], -1.0);
        assert!((values[3] - 0.5).abs() < 1e-4);
    }

    #[test]
    fn out_of_range_reads_are_errors() {
        let asset = asset_with(
            vec![0; 12],
            json!({"bufferView": 0, "componentType": FLOAT, "count": 2, "type": "VEC3"}),
            None,
        );
        assert!(
            read_f32(&asset, 0)
                .unwrap_err()
                .to_string()
                .contains("needs bytes up to 24")
        );
        let asset = asset_with(
            vec![5, 0, 1, 0],
            json!({"bufferView": 0, "componentType": UNSIGNED_SHORT, "count": 2, "type": "SCALAR"}),
            None,
        );
        assert!(
            read_indices(&asset, 0, 3)
                .unwrap_err()
                .to_string()
                .contains("index 5 out of range")
        );
        let asset = asset_with(
            vec![],
            json!({"componentType": FLOAT, "count": 1u64 << 40, "type": "MAT4"}),
            None,
        );
        assert!(
            read_f32(&asset, 0)
                .unwrap_err()
                .to_string()
                .contains("larger than Kiln accepts")
        );
    }
}
