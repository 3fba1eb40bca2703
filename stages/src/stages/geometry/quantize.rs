//! Quantization grids and integer packing: position grids per frame of meshes, a UV grid per
//! material (its scale moved into `KHR_texture_transform`), and the unorm/snorm arithmetic
//! every attribute uses.

use super::*;
use glam::{DMat4, DVec3};

/// One quantization grid for positions: `real = offset + scale × q`.
#[derive(Debug, Clone)]
pub(super) struct Grid {
    pub(super) offset: [f32; 3],
    pub(super) scale: f32,
}

/// A file's position grids. Meshes that scene nodes place in the same frame (the same
/// world transform at rest) share a grid, so seams between them stay closed; skinned meshes
/// share one (their vertices are in the skeleton's space) with its own extent over `bits`.
/// Every other grid's step is the same length in the world at rest: the one `bits` give the
/// whole scene's bounding box, so a part its node scales up 100× or places far from its own
/// origin is as precise in the world as the rest (or its own extent over `bits` where that
/// is coarser, so it fits).
#[derive(Debug, Clone, Default)]
pub(super) struct PositionGrids {
    /// Per mesh, its grid (`None`: the mesh has no positions).
    pub(super) of_mesh: Vec<Option<Grid>>,
    /// Per mesh, the largest factor its nodes scale it by at rest (1 for skinned meshes and
    /// meshes no scene node places).
    pub(super) mesh_scale: Vec<f64>,
    /// The scene's bounding-box diagonal at rest: the reference for relative errors.
    pub(super) world_diagonal: f64,
}

/// Where a mesh's vertices are: the frame its grid is shared in.
#[derive(Debug, Clone, PartialEq)]
enum Frame {
    /// Placed by scene nodes that all have this world matrix at rest.
    Placed([f64; 16]),
    /// Placed by scene nodes with different world matrices: a grid of its own.
    Instanced(usize),
    /// Drawn by a skinned node, or by no scene node: as stored.
    AsStored,
}

pub(super) fn position_grids(asset: &Asset, bits: u32) -> Result<PositionGrids, GltfError> {
    let meshes = asset.array("meshes");
    let mut bounds: Vec<Option<([f32; 3], [f32; 3])>> = vec![None; meshes.len()];
    let mut positions: Vec<Vec<f32>> = vec![Vec::new(); meshes.len()];
    for (m, mesh) in meshes.iter().enumerate() {
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
                let (min, max) =
                    bounds[m].get_or_insert(([f32::INFINITY; 3], [f32::NEG_INFINITY; 3]));
                for a in 0..3 {
                    min[a] = min[a].min(v[a]);
                    max[a] = max[a].max(v[a]);
                }
            }
            positions[m].extend_from_slice(&values);
        }
    }
    // Per mesh, its frame and the world matrices that place it (as stored: the identity).
    let (frames, placements): (Vec<Frame>, Vec<Vec<DMat4>>) = mesh_placements(asset)?
        .into_iter()
        .enumerate()
        .map(|(m, placed)| match placed {
            Some(matrices) if !matrices.is_empty() => {
                let first = matrices[0].to_cols_array();
                let frame = if matrices.iter().all(|w| w.to_cols_array() == first) {
                    Frame::Placed(first)
                } else {
                    Frame::Instanced(m)
                };
                (frame, matrices)
            }
            _ => (Frame::AsStored, vec![DMat4::IDENTITY]),
        })
        .unzip();
    let mesh_scale: Vec<f64> = placements
        .iter()
        .map(|matrices| {
            let longest = |w: &DMat4| {
                [w.x_axis, w.y_axis, w.z_axis]
                    .iter()
                    .map(|a| a.truncate().length())
                    .fold(0.0, f64::max)
            };
            let scale = matrices.iter().map(longest).fold(0.0, f64::max);
            if scale.is_finite() && scale > 0.0 {
                scale
            } else {
                1.0
            }
        })
        .collect();
    // The scene's box over the meshes nodes place; skinned meshes count only when there is
    // nothing else (their stored coordinates may be in other units than the world).
    let mut world_min = [f64::INFINITY; 3];
    let mut world_max = [f64::NEG_INFINITY; 3];
    for skinned in [false, true] {
        for m in (0..meshes.len()).filter(|&m| (frames[m] == Frame::AsStored) == skinned) {
            for w in &placements[m] {
                for v in positions[m].chunks_exact(3) {
                    let p = w.transform_point3(DVec3::new(v[0] as f64, v[1] as f64, v[2] as f64));
                    for (a, c) in p.to_array().into_iter().enumerate() {
                        if c.is_finite() {
                            world_min[a] = world_min[a].min(c);
                            world_max[a] = world_max[a].max(c);
                        }
                    }
                }
            }
        }
        if world_min[0] <= world_max[0] {
            break;
        }
    }
    let levels = ((1u32 << bits) - 1) as f32;
    let world_extent = (0..3)
        .map(|a| world_max[a] - world_min[a])
        .filter(|e| e.is_finite())
        .fold(0.0, f64::max);
    let world_step = world_extent / levels as f64;
    let world_diagonal = (0..3)
        .map(|a| world_max[a] - world_min[a])
        .filter(|e| e.is_finite())
        .map(|e| e * e)
        .sum::<f64>()
        .sqrt();
    // Meshes in one frame, in the order their first mesh comes.
    let mut groups: Vec<(Frame, Vec<usize>)> = Vec::new();
    for m in (0..meshes.len()).filter(|&m| bounds[m].is_some()) {
        match groups.iter_mut().find(|(f, _)| *f == frames[m]) {
            Some((_, members)) => members.push(m),
            None => groups.push((frames[m].clone(), vec![m])),
        }
    }
    let mut of_mesh = vec![None; meshes.len()];
    for (frame, members) in &groups {
        let mut min = [f32::INFINITY; 3];
        let mut max = [f32::NEG_INFINITY; 3];
        for &m in members {
            let (lo, hi) = bounds[m].expect("groups hold meshes with positions");
            for a in 0..3 {
                min[a] = min[a].min(lo[a]);
                max[a] = max[a].max(hi[a]);
            }
        }
        let scale = members.iter().map(|&m| mesh_scale[m]).fold(0.0, f64::max);
        let own = (0..3).map(|a| max[a] - min[a]).fold(0f32, f32::max) / levels;
        let world = (world_step / scale) as f32;
        // The world step where it fits the group's extent in `bits`, else the group's own.
        // Skinned meshes keep their own: the skeleton, not a node, scales them into the world
        // (often by 100, from a centimetre rig), and the error budget measures them posed.
        let step = if *frame != Frame::AsStored && world.is_finite() {
            own.max(world)
        } else {
            own
        };
        let grid = Grid {
            offset: min,
            scale: if step > 0.0 { step } else { 1.0 },
        };
        for &m in members {
            of_mesh[m] = Some(grid.clone());
        }
    }
    Ok(PositionGrids {
        of_mesh,
        mesh_scale,
        world_diagonal,
    })
}

/// Per mesh, the world matrices at rest of the scene nodes that place it; `None` for a mesh
/// a skinned node draws (its vertices are in the skeleton's space).
fn mesh_placements(asset: &Asset) -> Result<Vec<Option<Vec<DMat4>>>, GltfError> {
    let world = crate::animation::rig::rest_world(asset)?;
    let count = asset.array("meshes").len();
    let mut placed: Vec<Option<Vec<DMat4>>> = vec![Some(Vec::new()); count];
    for (node, world) in asset.array("nodes").iter().zip(&world) {
        let Some(m) = node
            .get("mesh")
            .and_then(Value::as_u64)
            .map(|m| m as usize)
            .filter(|&m| m < count)
        else {
            continue;
        };
        if node.get("skin").is_some() {
            placed[m] = None;
        } else if let (Some(list), Some(world)) = (&mut placed[m], world) {
            list.push(*world);
        }
    }
    Ok(placed)
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
            // Clamped: a negative weight, or one far above a small total, would otherwise
            // saturate and overflow the sum below (unsigned normalized storage holds 0..=max).
            .map(|w| (((w / total) * max as f32).round() as i32).clamp(0, max))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Weights a hostile file can hold: each stored weight stays in the storage's range (the
    /// fuzzer found 4 × i32::MAX overflowing the sum), and a set with a negative weight still
    /// sums to exactly `max`.
    #[test]
    fn hostile_weights_stay_in_the_storage_range() {
        for max in [unorm_max(8), unorm_max(16)] {
            let q = quantize_weights(&[-2.0, 3.0, 0.0, 0.0], &[1.0], true, max);
            assert!(q.iter().all(|w| (0..=max).contains(w)), "{q:?}");
            assert_eq!(q.iter().sum::<i32>(), max, "{q:?}");
            let q = quantize_weights(&[1e30, 1e30, 1.0, f32::NAN], &[1e-30], true, max);
            assert!(q.iter().all(|w| (0..=max).contains(w)), "{q:?}");
        }
    }
}
