//! Quantization grids and integer packing: one position grid per file, a UV grid per
//! material (its scale moved into `KHR_texture_transform`), and the unorm/snorm arithmetic
//! every attribute uses.

use super::*;

/// One quantization grid for all positions of a file: `real = offset + scale × q`.
#[derive(Debug, Clone)]
pub(super) struct Grid {
    pub(super) offset: [f32; 3],
    pub(super) scale: f32,
    pub(super) diagonal: f64,
}

pub(super) fn position_grid(asset: &Asset, bits: u32) -> Result<Option<Grid>, GltfError> {
    let mut min = [f32::INFINITY; 3];
    let mut max = [f32::NEG_INFINITY; 3];
    for (m, mesh) in asset.array("meshes").iter().enumerate() {
        for (p, primitive) in mesh["primitives"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let Some(index) = primitive
                .pointer("/attributes/POSITION")
                .and_then(Value::as_u64)
            else {
                continue;
            };
            let (layout, values) = accessors::read_f32(asset, index as usize)?;
            if layout.components != 3 {
                return Err(invalid(
                    format!("meshes[{m}].primitives[{p}]"),
                    "POSITION is not VEC3",
                ));
            }
            for v in values.chunks_exact(3) {
                if v.iter().any(|c| !c.is_finite()) {
                    return Err(invalid(
                        format!("meshes[{m}].primitives[{p}].POSITION"),
                        "holds NaN or infinite values",
                    ));
                }
                for a in 0..3 {
                    min[a] = min[a].min(v[a]);
                    max[a] = max[a].max(v[a]);
                }
            }
        }
    }
    if min[0] > max[0] {
        return Ok(None);
    }
    let extent = (0..3).map(|a| max[a] - min[a]).fold(0f32, f32::max);
    let levels = ((1u32 << bits) - 1) as f32;
    let scale = if extent > 0.0 { extent / levels } else { 1.0 };
    let diagonal = (0..3)
        .map(|a| ((max[a] - min[a]) as f64).powi(2))
        .sum::<f64>()
        .sqrt();
    Ok(Some(Grid {
        offset: min,
        scale,
        diagonal,
    }))
}

/// A material's texture coordinate range: `uv = offset + extent × q / (2^bits − 1)`.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct UvGrid {
    pub(super) offset: [f32; 2],
    pub(super) extent: [f32; 2],
}

/// UV bounds per material (all texcoord sets of all primitives that use it), keyed by the
/// material index (`None`: primitives without a material, which sample no texture).
pub(super) fn uv_grids(asset: &Asset) -> Result<HashMap<Option<u64>, UvGrid>, GltfError> {
    let mut bounds: HashMap<Option<u64>, ([f32; 2], [f32; 2])> = HashMap::new();
    for (m, mesh) in asset.array("meshes").iter().enumerate() {
        for (p, primitive) in mesh["primitives"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            // Without a material there is no texture to carry the scale: normalised UVs there.
            let Some(key) = primitive.get("material").and_then(Value::as_u64).map(Some) else {
                continue;
            };
            for (name, index) in primitive["attributes"].as_object().into_iter().flatten() {
                if !name.starts_with("TEXCOORD_") {
                    continue;
                }
                let Some(index) = index.as_u64() else {
                    continue;
                };
                let (layout, values) = accessors::read_f32(asset, index as usize)?;
                if layout.components != 2 {
                    continue;
                }
                if values.iter().any(|v| !v.is_finite()) {
                    return Err(invalid(
                        format!("meshes[{m}].primitives[{p}].{name}"),
                        "holds NaN or infinite values",
                    ));
                }
                let entry = bounds
                    .entry(key)
                    .or_insert(([f32::INFINITY; 2], [f32::NEG_INFINITY; 2]));
                for uv in values.chunks_exact(2) {
                    for ((lo, hi), &v) in entry.0.iter_mut().zip(entry.1.iter_mut()).zip(uv) {
                        *lo = lo.min(v);
                        *hi = hi.max(v);
                    }
                }
            }
        }
    }
    Ok(bounds
        .into_iter()
        .map(|(key, (min, max))| {
            (
                key,
                UvGrid {
                    offset: min,
                    extent: [max[0] - min[0], max[1] - min[1]],
                },
            )
        })
        .collect())
}

/// Puts each material's UV dequantization into every texture it samples, composed with the
/// material's own KHR_texture_transform. Returns whether any texture got one.
pub(super) fn apply_texture_transforms(
    json: &mut Value,
    grids: &HashMap<Option<u64>, UvGrid>,
    bits: u32,
) -> bool {
    let levels = ((1u32 << bits) - 1) as f32;
    let mut any = false;
    let Some(materials) = json.get_mut("materials").and_then(Value::as_array_mut) else {
        return false;
    };
    for (index, material) in materials.iter_mut().enumerate() {
        let Some(grid) = grids.get(&Some(index as u64)) else {
            continue;
        };
        let q_scale = [grid.extent[0] / levels, grid.extent[1] / levels];
        any |= compose_in_texture_infos(material, grid.offset, q_scale);
    }
    any
}

/// Walks a material's JSON; every texture info (an object with `index` under a key ending in
/// `Texture`) gets `E ∘ Q`, where `E` is its existing transform and `Q` the dequantization.
pub(super) fn compose_in_texture_infos(
    value: &mut Value,
    q_offset: [f32; 2],
    q_scale: [f32; 2],
) -> bool {
    let mut any = false;
    if let Some(object) = value.as_object_mut() {
        for (key, child) in object.iter_mut() {
            if (key.ends_with("Texture") || key.ends_with("texture"))
                && child.get("index").is_some()
            {
                let Some(info) = child.as_object_mut() else {
                    continue;
                };
                let extensions = info.entry("extensions").or_insert_with(|| json!({}));
                if !extensions.is_object() {
                    // The reader refuses such files; never index into a non-object.
                    *extensions = json!({});
                }
                let existing = extensions
                    .get("KHR_texture_transform")
                    .cloned()
                    .unwrap_or(json!({}));
                let pair = |v: &Value, default: f32| -> [f32; 2] {
                    [
                        v.get(0)
                            .and_then(Value::as_f64)
                            .map_or(default, |x| x as f32),
                        v.get(1)
                            .and_then(Value::as_f64)
                            .map_or(default, |x| x as f32),
                    ]
                };
                let e_offset = pair(&existing["offset"], 0.0);
                let e_scale = pair(&existing["scale"], 1.0);
                let rotation = existing["rotation"].as_f64().unwrap_or(0.0) as f32;
                let (sin, cos) = rotation.sin_cos();
                let scaled = [e_scale[0] * q_offset[0], e_scale[1] * q_offset[1]];
                let offset = [
                    e_offset[0] + cos * scaled[0] - sin * scaled[1],
                    e_offset[1] + sin * scaled[0] + cos * scaled[1],
                ];
                let mut transform = existing.clone();
                transform["offset"] = floats(&offset);
                transform["scale"] = floats(&[e_scale[0] * q_scale[0], e_scale[1] * q_scale[1]]);
                extensions["KHR_texture_transform"] = transform;
                any = true;
            } else {
                any |= compose_in_texture_infos(child, q_offset, q_scale);
            }
        }
    }
    any
}

/// `v` in `[0, 1]` on a `bits` grid, stored in a normalised integer of `storage_bits` (8 or
/// 16) by bit replication (`k << s | k >> r`, like 5-to-8-bit color expansion): exact at both
/// ends, and the low bits repeat the high ones instead of being rounding noise, which would
/// cost compression.
pub(super) fn unorm(v: f32, bits: u32, storage_bits: u32) -> u32 {
    let levels = ((1u32 << bits) - 1) as f32;
    let k = (v.clamp(0.0, 1.0) * levels).round() as u32;
    expand(k, bits, storage_bits)
}

/// Signed counterpart of [`unorm`]: the magnitude is replicated, the sign kept.
pub(super) fn snorm(v: f32, bits: u32, storage_bits: u32) -> i32 {
    let levels = ((1u32 << (bits - 1)) - 1) as f32;
    let m = (v.clamp(-1.0, 1.0).abs() * levels).round() as u32;
    let magnitude = expand(m, bits - 1, storage_bits - 1) as i32;
    if v < 0.0 { -magnitude } else { magnitude }
}

/// Widens a `from`-bit integer to `to` bits so that all-ones maps to all-ones.
pub(super) fn expand(k: u32, from: u32, to: u32) -> u32 {
    if from >= to {
        return k;
    }
    let mut out = 0u32;
    let mut filled = 0;
    while filled < to {
        let shift = to as i32 - filled as i32 - from as i32;
        out |= if shift >= 0 { k << shift } else { k >> -shift };
        filled += from;
    }
    out & ((1u32 << to) - 1)
}

pub(super) fn storage_bits(bits: u32) -> u32 {
    if bits <= 8 { 8 } else { 16 }
}

/// Packs `count` elements of `components` integers into 4-byte-aligned elements.
pub(super) fn pack_ints(values: &[i32], components: usize, storage: u32) -> (Vec<u8>, usize) {
    let size = (storage / 8) as usize;
    let stride = (components * size).next_multiple_of(4);
    let mut out = Vec::with_capacity(values.len() / components.max(1) * stride);
    for element in values.chunks(components) {
        let start = out.len();
        for &v in element {
            if size == 1 {
                out.push(v as u8);
            } else {
                out.extend_from_slice(&(v as u16).to_le_bytes());
            }
        }
        out.resize(start + stride, 0);
    }
    (out, stride)
}

/// Per-axis bounds of quantized positions (three u16 at the start of each element).
pub(super) fn u16_bounds(bytes: &[u8], stride: usize) -> (Vec<f32>, Vec<f32>) {
    let mut min = [f32::INFINITY; 3];
    let mut max = [f32::NEG_INFINITY; 3];
    for element in bytes.chunks(stride) {
        for axis in 0..3 {
            let v = u16::from_le_bytes([element[2 * axis], element[2 * axis + 1]]) as f32;
            min[axis] = min[axis].min(v);
            max[axis] = max[axis].max(v);
        }
    }
    if bytes.is_empty() {
        return (vec![0.0; 3], vec![0.0; 3]);
    }
    (min.to_vec(), max.to_vec())
}

/// f32 values as JSON numbers in their shortest form (`0.1`, not `0.10000000149011612`;
/// `16383`, not `16383.0`): the JSON is part of what every player downloads.
pub(super) fn floats(values: &[f32]) -> Value {
    Value::Array(
        values
            .iter()
            .map(|&v| {
                if v.fract() == 0.0 && v.abs() < 1e15 {
                    json!(v as i64)
                } else {
                    v.to_string()
                        .parse::<f64>()
                        .ok()
                        .and_then(serde_json::Number::from_f64)
                        .map_or(Value::Null, Value::Number)
                }
            })
            .collect(),
    )
}

/// Skin weights as normalised bytes that sum to exactly 255 across all sets: rounding error
/// goes to the largest weight of the first set.
pub(super) fn quantize_weights(
    values: &[f32],
    totals: &[f32],
    first_set: bool,
    max: i32,
) -> Vec<i32> {
    let mut out = Vec::with_capacity(values.len());
    for (v, chunk) in values.chunks(4).enumerate() {
        let total = totals.get(v).copied().filter(|t| *t > 0.0).unwrap_or(1.0);
        let q: Vec<i32> = chunk
            .iter()
            .map(|w| ((w / total) * max as f32).round() as i32)
            .collect();
        out.extend(q);
    }
    if first_set {
        // Fix the sum (of this set; other sets are rounded on their own and small).
        for chunk in out.chunks_mut(4) {
            let sum: i32 = chunk.iter().sum();
            if sum != max && sum > 0 {
                let (largest, _) = chunk.iter().enumerate().max_by_key(|(_, w)| **w).unwrap();
                chunk[largest] = (chunk[largest] + max - sum).clamp(0, max);
            }
        }
    }
    out
}

/// Skin weights are stored in 8 or 16 bits (glTF allows normalized bytes or shorts).
pub(super) fn weight_storage(bits: u32) -> u32 {
    if bits > 8 { 16 } else { 8 }
}

/// The largest value of an unsigned normalized integer of `storage` bits.
pub(super) fn unorm_max(storage: u32) -> i32 {
    (1i32 << storage) - 1
}
