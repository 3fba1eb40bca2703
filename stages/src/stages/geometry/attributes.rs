//! One primitive's vertex attributes: welding, vertex cache and fetch order, and each
//! attribute quantized (with the meshopt filter input its variant compresses).

use super::*;

pub(super) struct PrimitiveOut {
    pub(super) primitive: Value,
    pub(super) triangles_before: u64,
    pub(super) triangles_after: u64,
    pub(super) vertices_before: u64,
    pub(super) vertices_after: u64,
    pub(super) max_position_error: f64,
    pub(super) normal_error: (f64, f64),
    pub(super) sparse_targets: u64,
    pub(super) dropped_targets: u64,
    /// Where each source vertex is in the output (`u32::MAX`: no triangle used it, dropped).
    pub(super) output_of: Vec<u32>,
}

/// A float attribute stream: `count × components`.
pub(super) struct Stream {
    pub(super) name: String,
    pub(super) components: usize,
    pub(super) values: Vec<f32>,
    pub(super) source: Layout,
}

/// The quantization grids one primitive is written on.
pub(super) struct Grids<'a> {
    pub(super) position: &'a Option<Grid>,
    pub(super) uv: Option<&'a UvGrid>,
}

pub(super) fn process_primitive(
    source: &Asset,
    asset: &mut Asset,
    primitive: &Value,
    grids: Grids<'_>,
    options: &GeometryOptions,
    what: &str,
    codecs: &mut HashMap<usize, ViewCodec>,
) -> Result<PrimitiveOut, GltfError> {
    let (grid, uv) = (grids.position, grids.uv);
    let mode = primitive.get("mode").and_then(Value::as_u64).unwrap_or(4);
    let attributes = primitive
        .get("attributes")
        .and_then(Value::as_object)
        .ok_or_else(|| invalid(what, "attributes missing"))?;
    let mut streams = Vec::new();
    for (name, index) in attributes {
        let index = index
            .as_u64()
            .ok_or_else(|| invalid(what, format!("{name} is not an index")))?
            as usize;
        let (layout, values) = accessors::read_f32(source, index)?;
        streams.push(Stream {
            name: name.clone(),
            components: layout.components,
            values,
            source: layout,
        });
    }
    let vertex_count = streams
        .first()
        .map_or(0, |s| s.values.len() / s.components.max(1));
    if streams
        .iter()
        .any(|s| s.values.len() != vertex_count * s.components)
    {
        return Err(invalid(what, "attributes have different counts"));
    }
    let targets_json = primitive
        .get("targets")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut targets: Vec<Vec<Stream>> = Vec::new();
    for (t, target) in targets_json.iter().enumerate() {
        let mut list = Vec::new();
        for (name, index) in target.as_object().into_iter().flatten() {
            let index = index
                .as_u64()
                .ok_or_else(|| invalid(what, format!("targets[{t}].{name} is not an index")))?
                as usize;
            let (layout, values) = accessors::read_f32(source, index)?;
            if values.len() != vertex_count * layout.components {
                return Err(invalid(
                    what,
                    format!("targets[{t}].{name} has a different count"),
                ));
            }
            list.push(Stream {
                name: name.clone(),
                components: layout.components,
                values,
                source: layout,
            });
        }
        targets.push(list);
    }
    let mut indices = match primitive.get("indices").and_then(Value::as_u64) {
        Some(index) => Some(accessors::read_indices(
            source,
            index as usize,
            vertex_count,
        )?),
        None => None,
    };
    let triangles_before = if mode == 4 {
        indices.as_ref().map_or(vertex_count, Vec::len) as u64 / 3
    } else {
        0
    };
    // Quantize first, per source vertex: vertices that differ only below the quantization
    // step become identical and are merged below (what the output can express decides).
    let weight_sets: Vec<String> = streams
        .iter()
        .filter(|s| s.name.starts_with("WEIGHTS_"))
        .map(|s| s.name.clone())
        .collect();
    let weights_total: Option<Vec<f32>> = (!weight_sets.is_empty()).then(|| {
        let mut total = vec![0f32; vertex_count];
        for s in streams.iter().filter(|s| s.name.starts_with("WEIGHTS_")) {
            for (v, chunk) in s.values.chunks(4).enumerate() {
                total[v] += chunk.iter().sum::<f32>();
            }
        }
        total
    });
    let weight_max = unorm_max(weight_storage(options.weight_bits)) as f32;
    // A joint whose weight quantizes to zero does not matter: storing 0 there lets more
    // vertices merge and compresses better (and the validator stops warning about it).
    for set in 0.. {
        let (Some(j), Some(w)) = (
            streams
                .iter()
                .position(|s| s.name == format!("JOINTS_{set}")),
            streams
                .iter()
                .position(|s| s.name == format!("WEIGHTS_{set}")),
        ) else {
            break;
        };
        if streams[j].components != 4 || streams[w].components != 4 {
            break;
        }
        let totals = weights_total.as_deref().unwrap_or(&[]);
        let weights = streams[w].values.clone();
        for (v, joints) in streams[j].values.chunks_mut(4).enumerate() {
            let total = totals.get(v).copied().filter(|t| *t > 0.0).unwrap_or(1.0);
            for k in 0..4 {
                if (weights[v * 4 + k] / total * weight_max).round() == 0.0 {
                    joints[k] = 0.0;
                }
            }
        }
    }
    let mut encoded = Vec::with_capacity(streams.len());
    for stream in &streams {
        encoded.push(encode_attribute(
            stream,
            &stream.values,
            grid,
            uv,
            options,
            weights_total.as_deref(),
            &weight_sets,
        )?);
    }

    let mut original_of: Vec<u32> = (0..vertex_count as u32).collect();
    let mut output_of: Vec<u32> = original_of.clone();
    let mut new_count = vertex_count;

    // Only triangle lists are reordered; other modes keep their order, and are quantized.
    if mode == 4 && vertex_count > 0 {
        let list = indices
            .take()
            .unwrap_or_else(|| (0..vertex_count as u32).collect());
        if list.len() % 3 != 0 {
            return Err(invalid(what, "triangle list length is not a multiple of 3"));
        }
        // Merge vertices whose stored bytes (both variants') and morph deltas are equal.
        let mut seen: HashMap<Vec<u8>, u32> = HashMap::with_capacity(vertex_count);
        let mut first: Vec<u32> = Vec::new();
        let mut remap = vec![u32::MAX; vertex_count];
        for &v in &list {
            let v = v as usize;
            if remap[v] != u32::MAX {
                continue;
            }
            let mut key = Vec::new();
            for e in &encoded {
                key.extend_from_slice(&e.bytes[v * e.stride..(v + 1) * e.stride]);
                if let Some(f) = &e.filtered {
                    key.extend_from_slice(&f[v * e.stride..(v + 1) * e.stride]);
                }
            }
            for t in targets.iter().flatten() {
                for x in &t.values[v * t.components..(v + 1) * t.components] {
                    key.extend_from_slice(&x.to_bits().to_le_bytes());
                }
            }
            let next = first.len() as u32;
            let id = *seen.entry(key).or_insert(next);
            if id == next {
                first.push(v as u32);
            }
            remap[v] = id;
        }
        let unique = first.len();
        let list: Vec<u32> = list.iter().map(|&v| remap[v as usize]).collect();
        // Strip-friendly order: the index codec and the vertex deltas compress better.
        let list = meshopt::optimize_vertex_cache_strip(&list, unique);
        let fetch = meshopt::optimize_vertex_fetch_remap(&list, unique);
        let used = fetch.iter().filter(|&&f| f != u32::MAX).count();
        let mut order = vec![0u32; used];
        for (old, &new) in fetch.iter().enumerate() {
            if new != u32::MAX {
                order[new as usize] = first[old];
            }
        }
        indices = Some(list.iter().map(|&i| fetch[i as usize]).collect());
        output_of = remap
            .iter()
            .map(|&id| {
                if id == u32::MAX {
                    u32::MAX
                } else {
                    fetch[id as usize]
                }
            })
            .collect();
        original_of = order;
        new_count = used;
    }
    let pick = |s: &Stream| -> Vec<f32> {
        let n = s.components;
        original_of
            .iter()
            .flat_map(|&o| s.values[o as usize * n..o as usize * n + n].iter().copied())
            .collect()
    };
    let pick_rows = |bytes: &[u8], stride: usize| -> Vec<u8> {
        original_of
            .iter()
            .flat_map(|&o| {
                bytes[o as usize * stride..(o as usize + 1) * stride]
                    .iter()
                    .copied()
            })
            .collect()
    };

    let mut out = primitive.clone();
    let mut attrs = serde_json::Map::new();
    let mut max_position_error = 0f64;
    let mut normal_error = (0f64, 0f64);
    for (stream, encoded) in streams.iter().zip(encoded) {
        if let Some(e) = encoded.position_error {
            max_position_error = max_position_error.max(e);
        }
        if let Some(e) = encoded.normal_error {
            normal_error.0 = normal_error.0.max(e.0);
            normal_error.1 = normal_error.1.max(e.1);
        }
        let bytes = pick_rows(&encoded.bytes, encoded.stride);
        let filtered = encoded
            .filtered
            .as_deref()
            .map(|f| pick_rows(f, encoded.stride));
        let mut accessor = encoded.accessor;
        if stream.name == "POSITION" {
            // Bounds of the vertices kept (unreferenced ones are gone).
            let (min, max) = u16_bounds(&bytes, encoded.stride);
            accessor["min"] = floats(&min);
            accessor["max"] = floats(&max);
        }
        let view = push_view(asset, bytes, Some(encoded.stride), Some(ARRAY_BUFFER));
        accessor["bufferView"] = json!(view);
        accessor["count"] = json!(new_count);
        let index = push_accessor(asset, accessor);
        codecs.insert(
            view,
            ViewCodec {
                mode: "ATTRIBUTES",
                filter: encoded.filter,
                filtered,
                stride: None,
            },
        );
        attrs.insert(stream.name.clone(), json!(index));
    }
    out["attributes"] = Value::Object(attrs);

    let mut sparse_targets = 0;
    let mut dropped_targets = 0;
    if !targets.is_empty() {
        let mut new_targets = Vec::new();
        for target in &targets {
            let mut object = serde_json::Map::new();
            for stream in target {
                let values = pick(stream);
                let (index, kind) = encode_target(asset, stream, &values, grid, options, codecs)?;
                match kind {
                    TargetKind::Sparse => sparse_targets += 1,
                    TargetKind::Zero => dropped_targets += 1,
                    TargetKind::Dense => {}
                }
                object.insert(stream.name.clone(), json!(index));
            }
            new_targets.push(Value::Object(object));
        }
        out["targets"] = Value::Array(new_targets);
    }

    if let Some(list) = indices {
        // 16-bit indices up to 65534: 65535 is the primitive restart index in WebGL 2.
        let (bytes, component_type, stride) = if new_count <= 65_535 {
            (
                list.iter()
                    .flat_map(|&i| (i as u16).to_le_bytes())
                    .collect::<Vec<u8>>(),
                UNSIGNED_SHORT,
                2,
            )
        } else {
            (
                list.iter().flat_map(|&i| i.to_le_bytes()).collect(),
                UNSIGNED_INT,
                4,
            )
        };
        let _ = stride;
        let view = push_view(asset, bytes, None, Some(ELEMENT_ARRAY_BUFFER));
        let index = push_accessor(
            asset,
            json!({"bufferView": view, "componentType": component_type, "count": list.len(), "type": "SCALAR"}),
        );
        codecs.insert(
            view,
            ViewCodec {
                mode: if mode == 4 { "TRIANGLES" } else { "INDICES" },
                filter: "NONE",
                filtered: None,
                stride: None,
            },
        );
        out["indices"] = json!(index);
    }
    let triangles_after = if mode == 4 {
        out.get("indices")
            .and_then(Value::as_u64)
            .map_or(new_count as u64 / 3, |i| {
                asset.array("accessors")[i as usize]["count"]
                    .as_u64()
                    .unwrap_or(0)
                    / 3
            })
    } else {
        0
    };
    Ok(PrimitiveOut {
        primitive: out,
        triangles_before,
        triangles_after,
        vertices_before: vertex_count as u64,
        vertices_after: new_count as u64,
        max_position_error,
        normal_error,
        sparse_targets,
        dropped_targets,
        output_of,
    })
}

pub(super) struct EncodedAttribute {
    pub(super) accessor: Value,
    pub(super) bytes: Vec<u8>,
    pub(super) stride: usize,
    pub(super) filter: &'static str,
    pub(super) filtered: Option<Vec<u8>>,
    pub(super) position_error: Option<f64>,
    pub(super) normal_error: Option<(f64, f64)>,
}

pub(super) fn encode_attribute(
    stream: &Stream,
    values: &[f32],
    grid: &Option<Grid>,
    uv: Option<&UvGrid>,
    options: &GeometryOptions,
    weights_total: Option<&[f32]>,
    weight_sets: &[String],
) -> Result<EncodedAttribute, GltfError> {
    let name = stream.name.as_str();
    let n = stream.components;
    let float = |values: &[f32]| {
        let mut accessor = json!({"componentType": FLOAT, "type": accessors::type_name(n)});
        if name == "POSITION" {
            let (min, max) = min_max(values, n);
            accessor["min"] = floats(&min);
            accessor["max"] = floats(&max);
        }
        // Float data stays float; the meshopt variant stores it with the exponential filter.
        let filtered = exp_filter(values, n);
        EncodedAttribute {
            accessor,
            bytes: pack_floats(values),
            stride: n * 4,
            filter: "EXPONENTIAL",
            filtered: Some(filtered),
            position_error: None,
            normal_error: None,
        }
    };
    match name {
        "POSITION" => {
            let grid = grid.as_ref().expect("positions imply a grid");
            let mut q = Vec::with_capacity(values.len());
            let mut error = 0f64;
            for v in values.chunks(3) {
                let mut d2 = 0f64;
                for (&c, &offset) in v.iter().zip(&grid.offset) {
                    let i = ((c - offset) / grid.scale).round().clamp(0.0, 65535.0) as i32;
                    let back = offset + i as f32 * grid.scale;
                    d2 += ((back - c) as f64).powi(2);
                    q.push(i);
                }
                error = error.max(d2.sqrt());
            }
            let (bytes, stride) = pack_ints(&q, 3, 16);
            let (min, max) = min_max(&q.iter().map(|&i| i as f32).collect::<Vec<_>>(), 3);
            Ok(EncodedAttribute {
                accessor: json!({"componentType": UNSIGNED_SHORT, "type": "VEC3", "min": min, "max": max}),
                bytes,
                stride,
                filter: "NONE",
                filtered: None,
                position_error: Some(error),
                normal_error: None,
            })
        }
        "NORMAL" | "TANGENT" if n == 3 || n == 4 => {
            let bits = if name == "NORMAL" {
                options.normal_bits
            } else {
                options.tangent_bits
            };
            let storage = storage_bits(bits);
            let mut q = Vec::with_capacity(values.len());
            let mut unit = Vec::with_capacity(values.len() / n);
            for v in values.chunks(n) {
                let len = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
                let norm = if len > 0.0 {
                    [v[0] / len, v[1] / len, v[2] / len]
                } else {
                    [0.0, 0.0, 1.0]
                };
                for c in norm {
                    q.push(snorm(c, bits, storage));
                }
                let w = if n == 4 {
                    if v[3] < 0.0 { -1.0 } else { 1.0 }
                } else {
                    0.0
                };
                if n == 4 {
                    q.push(snorm(w, bits, storage));
                }
                unit.push([norm[0], norm[1], norm[2], w]);
            }
            let (bytes, stride) = pack_ints(&q, n, storage);
            let max_value = ((1u32 << (storage - 1)) - 1) as f32;
            let plain_error = unit
                .iter()
                .zip(q.chunks(n))
                .map(|(u, s)| {
                    angle_deg(
                        u,
                        &[
                            s[0] as f32 / max_value,
                            s[1] as f32 / max_value,
                            s[2] as f32 / max_value,
                        ],
                    )
                })
                .fold(0f64, f64::max);
            // The meshopt variant stores octahedral-encoded values (4 components, w kept).
            let oct = oct_filter(&unit, bits, storage);
            debug_assert_eq!(oct.decoded.len(), bytes.len());
            let component_type = if storage == 8 { BYTE } else { SHORT };
            Ok(EncodedAttribute {
                accessor: json!({"componentType": component_type, "normalized": true, "type": accessors::type_name(n)}),
                // Element strides agree: 3 or 4 components of 1 or 2 bytes pad to 4 or 8.
                bytes: if n == 3 {
                    oct_plain_normals(&oct.decoded, stride)
                } else {
                    bytes
                },
                stride,
                filter: "OCTAHEDRAL",
                filtered: Some(oct.filtered),
                position_error: None,
                normal_error: Some((plain_error.max(oct.max_error), oct.max_error)),
            })
        }
        _ if name.starts_with("TEXCOORD_") && n == 2 && uv.is_some() => {
            // Plain integers on the material's grid: small values, no rounding noise.
            let uv = uv.expect("checked");
            let bits = options.texcoord_bits;
            let levels = ((1u32 << bits) - 1) as f32;
            let q: Vec<i32> = values
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    let axis = i % 2;
                    if uv.extent[axis] > 0.0 {
                        ((v - uv.offset[axis]) / uv.extent[axis] * levels)
                            .round()
                            .clamp(0.0, levels) as i32
                    } else {
                        0
                    }
                })
                .collect();
            let storage = storage_bits(bits);
            let (bytes, stride) = pack_ints(&q, 2, storage);
            let component_type = if storage == 8 {
                UNSIGNED_BYTE
            } else {
                UNSIGNED_SHORT
            };
            Ok(EncodedAttribute {
                accessor: json!({"componentType": component_type, "type": "VEC2"}),
                bytes,
                stride,
                filter: "NONE",
                filtered: None,
                position_error: None,
                normal_error: None,
            })
        }
        _ if name.starts_with("TEXCOORD_") && n == 2 => {
            if values.iter().all(|v| (0.0..=1.0).contains(v)) {
                let bits = options.texcoord_bits;
                let storage = storage_bits(bits);
                let q: Vec<i32> = values
                    .iter()
                    .map(|&v| unorm(v, bits, storage) as i32)
                    .collect();
                let (bytes, stride) = pack_ints(&q, 2, storage);
                let component_type = if storage == 8 {
                    UNSIGNED_BYTE
                } else {
                    UNSIGNED_SHORT
                };
                Ok(EncodedAttribute {
                    accessor: json!({"componentType": component_type, "normalized": true, "type": "VEC2"}),
                    bytes,
                    stride,
                    filter: "NONE",
                    filtered: None,
                    position_error: None,
                    normal_error: None,
                })
            } else {
                // Outside [0, 1], and no material to carry a dequantization transform: floats
                // rounded by the EXPONENTIAL filter to the texture coordinate precision
                // (exponents clamped at 2^0: steps of 2^-bits in [0, 1) as on a material's
                // grid, the same significant bits above). Both variants store the rounded
                // floats, so vertices equal once rounded weld. (gltfpack writes zeros there;
                // a game may draw such a mesh with a material it assigns in code.)
                let (filtered, rounded) =
                    meshopt_codec::exp_filter_clamped(values, 2, options.texcoord_bits + 1);
                Ok(EncodedAttribute {
                    accessor: json!({"componentType": FLOAT, "type": "VEC2"}),
                    bytes: rounded,
                    stride: 8,
                    filter: "EXPONENTIAL",
                    filtered: Some(filtered),
                    position_error: None,
                    normal_error: None,
                })
            }
        }
        _ if name.starts_with("COLOR_") && (n == 3 || n == 4) => {
            let bits = options.color_bits;
            let storage = storage_bits(bits);
            let q: Vec<i32> = values
                .iter()
                .map(|&v| unorm(v, bits, storage) as i32)
                .collect();
            let (bytes, stride) = pack_ints(&q, n, storage);
            let component_type = if storage == 8 {
                UNSIGNED_BYTE
            } else {
                UNSIGNED_SHORT
            };
            // KHR_meshopt_compression's color filter (YCoCg) compresses colors better.
            let (filter, filtered) = if options.codec == MeshoptCodec::Khr {
                let rgba: Vec<[f32; 4]> = values
                    .chunks(n)
                    .map(|c| [c[0], c[1], c[2], if n == 4 { c[3] } else { 1.0 }])
                    .collect();
                ("COLOR", Some(color_filter(&rgba, bits, stride)))
            } else {
                ("NONE", None)
            };
            Ok(EncodedAttribute {
                accessor: json!({"componentType": component_type, "normalized": true, "type": accessors::type_name(n)}),
                bytes,
                stride,
                filter,
                filtered,
                position_error: None,
                normal_error: None,
            })
        }
        _ if name.starts_with("JOINTS_") && n == 4 => {
            let max = values.iter().fold(0f32, |m, &v| m.max(v));
            let storage = if max < 256.0 { 8 } else { 16 };
            let q: Vec<i32> = values.iter().map(|&v| v as i32).collect();
            let (bytes, stride) = pack_ints(&q, 4, storage);
            Ok(EncodedAttribute {
                accessor: json!({"componentType": if storage == 8 { UNSIGNED_BYTE } else { UNSIGNED_SHORT }, "type": "VEC4"}),
                bytes,
                stride,
                filter: "NONE",
                filtered: None,
                position_error: None,
                normal_error: None,
            })
        }
        _ if name.starts_with("WEIGHTS_") && n == 4 => {
            let totals = weights_total.unwrap_or(&[]);
            let first_set = weight_sets.first().is_some_and(|s| s == name);
            let storage = weight_storage(options.weight_bits);
            let q = quantize_weights(values, totals, first_set, unorm_max(storage));
            let (bytes, stride) = pack_ints(&q, 4, storage);
            let component_type = if storage == 8 {
                UNSIGNED_BYTE
            } else {
                UNSIGNED_SHORT
            };
            Ok(EncodedAttribute {
                accessor: json!({"componentType": component_type, "normalized": true, "type": "VEC4"}),
                bytes,
                stride,
                filter: "NONE",
                filtered: None,
                position_error: None,
                normal_error: None,
            })
        }
        _ => {
            // Attributes this stage does not quantize keep their source type when it is
            // already an integer one, else stay float.
            if stream.source.component_type != FLOAT {
                let q: Vec<i32> = values.iter().map(|&v| v as i32).collect();
                let storage = if matches!(stream.source.component_type, BYTE | UNSIGNED_BYTE) {
                    8
                } else {
                    16
                };
                if !stream.source.normalized && stream.source.component_type != UNSIGNED_INT {
                    let (bytes, stride) = pack_ints(&q, n, storage);
                    return Ok(EncodedAttribute {
                        accessor: json!({"componentType": stream.source.component_type, "type": accessors::type_name(n)}),
                        bytes,
                        stride,
                        filter: "NONE",
                        filtered: None,
                        position_error: None,
                        normal_error: None,
                    });
                }
            }
            Ok(float(values))
        }
    }
}

pub(super) fn angle_deg(a: &[f32; 4], b: &[f32; 3]) -> f64 {
    let lb = (b[0] * b[0] + b[1] * b[1] + b[2] * b[2]).sqrt().max(1e-12);
    let dot = ((a[0] * b[0] + a[1] * b[1] + a[2] * b[2]) / lb).clamp(-1.0, 1.0);
    (dot as f64).acos().to_degrees()
}

/// Octahedral encoding of unit vectors for the meshopt variant, decoded once to measure it.
pub(super) struct Octahedral {
    /// Filter input: what the meshopt variant compresses.
    pub(super) filtered: Vec<u8>,
    /// What a decoder reconstructs from it (xyz, and w as given).
    pub(super) decoded: Vec<u8>,
    /// Largest angle between a source vector and its decoded one, in degrees.
    pub(super) max_error: f64,
}

pub(super) fn oct_filter(unit: &[[f32; 4]], bits: u32, storage: u32) -> Octahedral {
    let stride = if storage == 8 { 4 } else { 8 };
    let mut filtered = vec![0u8; unit.len() * stride];
    // SAFETY: `filtered` holds unit.len() elements of `stride` bytes; `unit` is 4 floats each.
    unsafe {
        meshopt::ffi::meshopt_encodeFilterOct(
            filtered.as_mut_ptr().cast(),
            unit.len(),
            stride,
            bits as i32,
            unit.as_ptr().cast(),
        );
    }
    let mut decoded = filtered.clone();
    // SAFETY: as above.
    unsafe {
        meshopt::ffi::meshopt_decodeFilterOct(decoded.as_mut_ptr().cast(), unit.len(), stride)
    };
    let max_value = ((1u32 << (storage - 1)) - 1) as f32;
    let read = |e: &[u8], c: usize| -> f32 {
        if storage == 8 {
            e[c] as i8 as f32 / max_value
        } else {
            i16::from_le_bytes([e[2 * c], e[2 * c + 1]]) as f32 / max_value
        }
    };
    let max_error = unit
        .iter()
        .zip(decoded.chunks(stride))
        .map(|(u, e)| angle_deg(u, &[read(e, 0), read(e, 1), read(e, 2)]))
        .fold(0f64, f64::max);
    Octahedral {
        filtered,
        decoded,
        max_error,
    }
}

/// For VEC3 normals the quantized variant stores exactly what the octahedral decoder
/// produces, so both variants hold the same normals (and the meshopt fallback is exact).
/// The decoder keeps w, which is padding here: it is cleared.
pub(super) fn oct_plain_normals(decoded: &[u8], stride: usize) -> Vec<u8> {
    let mut plain = decoded.to_vec();
    let size = stride / 4;
    for element in plain.chunks_mut(stride) {
        element[3 * size..].fill(0);
    }
    plain
}

/// Color-filter input (KHR_meshopt_compression) for RGBA in `[0, 1]`; `stride` is 4 or 8.
pub(super) fn color_filter(rgba: &[[f32; 4]], bits: u32, stride: usize) -> Vec<u8> {
    let mut out = vec![0u8; rgba.len() * stride];
    // SAFETY: `out` holds rgba.len() elements of `stride` (4 or 8) bytes; input is 4 floats each.
    unsafe {
        meshopt::ffi::meshopt_encodeFilterColor(
            out.as_mut_ptr().cast(),
            rgba.len(),
            stride,
            bits as i32,
            rgba.as_ptr().cast(),
        );
    }
    out
}

/// Exponential-filter input for float data in the meshopt variant (24-bit mantissa: lossless
/// enough for geometry that stays float).
pub(super) fn exp_filter(values: &[f32], components: usize) -> Vec<u8> {
    meshopt_codec::exp_filter(values, components, 24, false).0
}
