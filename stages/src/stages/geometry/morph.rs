//! Morph targets: quantized deltas, as sparse accessors where that is smaller, targets that
//! move nothing dropped.

use super::*;

pub(super) enum TargetKind {
    Dense,
    Sparse,
    Zero,
}

/// One morph target attribute: deltas on the position grid (coarsened to `morph_bits`), as a
/// zero accessor, a sparse one or a dense one, whichever is smallest.
pub(super) fn encode_target(
    asset: &mut Asset,
    stream: &Stream,
    values: &[f32],
    grid: &Option<Grid>,
    options: &GeometryOptions,
    codecs: &mut HashMap<usize, ViewCodec>,
) -> Result<(usize, TargetKind), GltfError> {
    let n = stream.components.min(3);
    let count = values.len() / stream.components.max(1);
    let deltas: Vec<f32> = values
        .chunks(stream.components)
        .flat_map(|c| c[..n].iter().copied())
        .collect();
    let (ints, component_type, normalized): (Vec<i32>, u64, bool) =
        match (stream.name.as_str(), grid) {
            ("POSITION", Some(grid)) => {
                // In i64 with saturating steps: a hostile delta can be any f32 (`as` saturates,
                // NaN is 0), and its grid units need not fit an i32.
                let max = deltas
                    .iter()
                    .map(|d| ((d / grid.scale).round() as i64).unsigned_abs())
                    .max()
                    .unwrap_or(0);
                if max > 32_767 && deltas.iter().all(|d| d.is_finite()) {
                    // Deltas beyond a short in grid units (a target moving vertices by more
                    // than half the model at 16-bit positions): floats in grid units, exact,
                    // instead of clamped.
                    let units: Vec<f32> = deltas.iter().map(|d| d / grid.scale).collect();
                    let index = accessors::push_floats(asset, &units, n, None, true);
                    return Ok((index, TargetKind::Dense));
                }
                let limit = (1u64 << (options.morph_bits - 1)) - 1;
                let step = max.div_ceil(limit).max(1) as i64;
                let q: Vec<i32> = deltas
                    .iter()
                    .map(|d| {
                        ((d / grid.scale / step as f32).round() as i64)
                            .saturating_mul(step)
                            .clamp(-32767, 32767) as i32
                    })
                    .collect();
                let wide = q.iter().any(|v| v.abs() > 127);
                (q, if wide { SHORT } else { BYTE }, false)
            }
            _ => {
                if deltas.iter().any(|d| d.abs() > 1.0) {
                    return Ok((
                        dense_float_target(asset, &deltas, n, codecs),
                        TargetKind::Dense,
                    ));
                }
                let bits = options.morph_bits.max(8);
                let storage = storage_bits(bits);
                let q: Vec<i32> = deltas.iter().map(|&d| snorm(d, bits, storage)).collect();
                (q, if storage == 8 { BYTE } else { SHORT }, true)
            }
        };
    let storage = if component_type == BYTE { 8 } else { 16 };
    let as_float = |v: i32| {
        if normalized {
            v as f32 / if storage == 8 { 127.0 } else { 32767.0 }
        } else {
            v as f32
        }
    };
    let float_values: Vec<f32> = ints.iter().map(|&v| as_float(v)).collect();
    let (min, max) = min_max(&float_values, n);
    let mut accessor =
        json!({"componentType": component_type, "type": accessors::type_name(n), "count": count});
    if normalized {
        accessor["normalized"] = json!(true);
    }
    if stream.name == "POSITION" {
        accessor["min"] = json!(
            min.iter()
                .map(|v| if v.is_finite() { *v } else { 0.0 })
                .collect::<Vec<_>>()
        );
        accessor["max"] = json!(
            max.iter()
                .map(|v| if v.is_finite() { *v } else { 0.0 })
                .collect::<Vec<_>>()
        );
    }
    let nonzero: Vec<usize> = (0..count)
        .filter(|&v| ints[v * n..v * n + n].iter().any(|&x| x != 0))
        .collect();
    if nonzero.is_empty() {
        // An accessor without a buffer view reads as zeros: the target costs no bytes.
        if stream.name == "POSITION" {
            accessor["min"] = json!([0.0, 0.0, 0.0]);
            accessor["max"] = json!([0.0, 0.0, 0.0]);
        }
        return Ok((push_accessor(asset, accessor), TargetKind::Zero));
    }
    let (dense, stride) = pack_ints(&ints, n, storage);
    let element = stride;
    let index_size = if count <= 65_536 { 2 } else { 4 };
    let sparse_bytes = nonzero.len() * (index_size.max(4) + element) + 16;
    if options.sparse_morph_targets && sparse_bytes < dense.len() {
        let index_bytes: Vec<u8> = if index_size == 2 {
            nonzero
                .iter()
                .flat_map(|&i| (i as u16).to_le_bytes())
                .collect()
        } else {
            nonzero
                .iter()
                .flat_map(|&i| (i as u32).to_le_bytes())
                .collect()
        };
        let picked: Vec<i32> = nonzero
            .iter()
            .flat_map(|&v| ints[v * n..v * n + n].iter().copied())
            .collect();
        // Sparse values are tightly packed (no byteStride allowed on their view).
        let values_bytes: Vec<u8> = picked
            .iter()
            .flat_map(|&v| {
                if storage == 8 {
                    vec![v as u8]
                } else {
                    (v as u16).to_le_bytes().to_vec()
                }
            })
            .collect();
        let index_view = push_view(asset, index_bytes, None, None);
        let values_view = push_view(asset, values_bytes, None, None);
        accessor["sparse"] = json!({
            "count": nonzero.len(),
            "indices": {"bufferView": index_view, "componentType": if index_size == 2 { UNSIGNED_SHORT } else { UNSIGNED_INT }},
            "values": {"bufferView": values_view},
        });
        return Ok((push_accessor(asset, accessor), TargetKind::Sparse));
    }
    let view = push_view(asset, dense, Some(stride), Some(ARRAY_BUFFER));
    accessor["bufferView"] = json!(view);
    codecs.insert(
        view,
        ViewCodec {
            mode: "ATTRIBUTES",
            filter: "NONE",
            filtered: None,
            stride: None,
        },
    );
    Ok((push_accessor(asset, accessor), TargetKind::Dense))
}

pub(super) fn dense_float_target(
    asset: &mut Asset,
    deltas: &[f32],
    n: usize,
    codecs: &mut HashMap<usize, ViewCodec>,
) -> usize {
    let view = push_view(asset, pack_floats(deltas), Some(n * 4), Some(ARRAY_BUFFER));
    codecs.insert(
        view,
        ViewCodec {
            mode: "ATTRIBUTES",
            filter: "EXPONENTIAL",
            filtered: Some(exp_filter(deltas, n)),
            stride: None,
        },
    );
    push_accessor(
        asset,
        json!({"bufferView": view, "componentType": FLOAT, "type": accessors::type_name(n), "count": deltas.len() / n}),
    )
}
