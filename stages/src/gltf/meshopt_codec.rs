//! `EXT_meshopt_compression` / `KHR_meshopt_compression` buffer views, both ways, through
//! meshoptimizer's own codec (the meshopt crate's FFI, meshoptimizer 1.3).

use serde_json::Value;

use super::{GltfError, invalid};

/// Decoded views larger than this are refused (hostile `count × byteStride`).
const MAX_DECODED_BYTES: usize = 1 << 30;

/// Decodes one compressed view as its extension object describes it.
pub fn decode_view(ext: &Value, source: &[u8], what: &str) -> Result<Vec<u8>, GltfError> {
    let field = |name: &str| {
        ext.get(name)
            .and_then(Value::as_u64)
            .map(|n| n as usize)
            .ok_or_else(|| invalid(what, format!("meshopt {name} missing or not an integer")))
    };
    let stride = field("byteStride")?;
    let count = field("count")?;
    let mode = ext.get("mode").and_then(Value::as_str).unwrap_or("");
    let filter = ext.get("filter").and_then(Value::as_str).unwrap_or("NONE");
    let size = count
        .checked_mul(stride)
        .filter(|&s| s <= MAX_DECODED_BYTES)
        .ok_or_else(|| {
            invalid(
                what,
                format!("meshopt count {count} × stride {stride} is too large"),
            )
        })?;
    let mut out = vec![0u8; size];
    let code = match mode {
        "ATTRIBUTES" => {
            if stride == 0 || stride % 4 != 0 || stride > 256 {
                return Err(invalid(what, format!("meshopt ATTRIBUTES stride {stride}")));
            }
            // SAFETY: `out` holds count × stride bytes; the decoder checks `source` bounds.
            unsafe {
                meshopt::ffi::meshopt_decodeVertexBuffer(
                    out.as_mut_ptr().cast(),
                    count,
                    stride,
                    source.as_ptr(),
                    source.len(),
                )
            }
        }
        "TRIANGLES" | "INDICES" => {
            if stride != 2 && stride != 4 {
                return Err(invalid(what, format!("meshopt {mode} stride {stride}")));
            }
            if mode == "TRIANGLES" && count % 3 != 0 {
                return Err(invalid(
                    what,
                    "meshopt TRIANGLES count is not a multiple of 3",
                ));
            }
            // SAFETY: as above, `out` holds count × stride bytes.
            unsafe {
                if mode == "TRIANGLES" {
                    meshopt::ffi::meshopt_decodeIndexBuffer(
                        out.as_mut_ptr().cast(),
                        count,
                        stride,
                        source.as_ptr(),
                        source.len(),
                    )
                } else {
                    meshopt::ffi::meshopt_decodeIndexSequence(
                        out.as_mut_ptr().cast(),
                        count,
                        stride,
                        source.as_ptr(),
                        source.len(),
                    )
                }
            }
        }
        other => return Err(invalid(what, format!("unknown meshopt mode {other:?}"))),
    };
    if code != 0 {
        return Err(invalid(
            what,
            format!("meshopt data does not decode (code {code})"),
        ));
    }
    // SAFETY (all filters): `out` holds `count` elements of `stride` bytes, as checked above.
    match filter {
        "NONE" => {}
        "OCTAHEDRAL" | "COLOR" => {
            if stride != 4 && stride != 8 {
                return Err(invalid(
                    what,
                    format!("meshopt {filter} filter with stride {stride}"),
                ));
            }
            unsafe {
                if filter == "OCTAHEDRAL" {
                    meshopt::ffi::meshopt_decodeFilterOct(out.as_mut_ptr().cast(), count, stride);
                } else {
                    meshopt::ffi::meshopt_decodeFilterColor(out.as_mut_ptr().cast(), count, stride);
                }
            }
        }
        "QUATERNION" => {
            if stride != 8 {
                return Err(invalid(
                    what,
                    format!("meshopt QUATERNION filter with stride {stride}"),
                ));
            }
            unsafe {
                meshopt::ffi::meshopt_decodeFilterQuat(out.as_mut_ptr().cast(), count, stride)
            };
        }
        "EXPONENTIAL" => {
            if stride % 4 != 0 {
                return Err(invalid(
                    what,
                    format!("meshopt EXPONENTIAL filter with stride {stride}"),
                ));
            }
            unsafe {
                meshopt::ffi::meshopt_decodeFilterExp(out.as_mut_ptr().cast(), count, stride)
            };
        }
        other => return Err(invalid(what, format!("unknown meshopt filter {other:?}"))),
    }
    Ok(out)
}

/// How the `meshopt` variant compresses one buffer view.
#[derive(Debug, Clone)]
pub struct ViewCodec {
    /// `ATTRIBUTES`, `TRIANGLES` or `INDICES`.
    pub mode: &'static str,
    /// `NONE`, `OCTAHEDRAL`, `QUATERNION`, `EXPONENTIAL` or `COLOR`.
    pub filter: &'static str,
    /// Filter-encoded bytes to compress instead of the view's plain bytes (same layout).
    pub filtered: Option<Vec<u8>>,
    /// Element size, for views that (being no vertex attribute) carry no `byteStride`.
    pub stride: Option<usize>,
}

/// Exponential-filter encoding of float data (`components` per element, `bits` of mantissa,
/// 1–24): the filter input, and what a decoder reconstructs from it (plain floats).
pub fn exp_filter(
    values: &[f32],
    components: usize,
    bits: u32,
    shared_component: bool,
) -> (Vec<u8>, Vec<u8>) {
    let mode = if shared_component {
        meshopt::ffi::meshopt_EncodeExpMode_meshopt_EncodeExpSharedComponent
    } else {
        meshopt::ffi::meshopt_EncodeExpMode_meshopt_EncodeExpSeparate
    };
    exp_filter_with(values, components, bits, mode)
}

/// [`exp_filter`] with each value's exponent clamped at 2^0: a value in [0, 1) is rounded to
/// steps of 2^-(bits-1), a larger one to the same number of significant bits (meshoptimizer's
/// `meshopt_EncodeExpClamped`, gltfpack's float texture coordinates).
pub fn exp_filter_clamped(values: &[f32], components: usize, bits: u32) -> (Vec<u8>, Vec<u8>) {
    exp_filter_with(
        values,
        components,
        bits,
        meshopt::ffi::meshopt_EncodeExpMode_meshopt_EncodeExpClamped,
    )
}

fn exp_filter_with(
    values: &[f32],
    components: usize,
    bits: u32,
    mode: meshopt::ffi::meshopt_EncodeExpMode,
) -> (Vec<u8>, Vec<u8>) {
    let components = components.max(1);
    let count = values.len() / components;
    let stride = components * 4;
    let mut filtered = vec![0u8; count * stride];
    // SAFETY: `filtered` holds count × stride bytes; `values` count × components floats.
    unsafe {
        meshopt::ffi::meshopt_encodeFilterExp(
            filtered.as_mut_ptr().cast(),
            count,
            stride,
            bits.clamp(1, 24) as i32,
            values.as_ptr(),
            mode,
        );
    }
    let mut decoded = filtered.clone();
    // SAFETY: as above.
    unsafe { meshopt::ffi::meshopt_decodeFilterExp(decoded.as_mut_ptr().cast(), count, stride) };
    (filtered, decoded)
}

/// Decodes EXPONENTIAL-filter data (4-byte components) to floats.
pub fn exp_decode(filtered: &[u8]) -> Vec<f32> {
    let mut decoded = filtered.to_vec();
    let count = decoded.len() / 4;
    // SAFETY: `decoded` holds `count` elements of 4 bytes.
    unsafe { meshopt::ffi::meshopt_decodeFilterExp(decoded.as_mut_ptr().cast(), count, 4) };
    decoded
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// Quaternion-filter encoding of unit quaternions (4 floats each, `bits` 4–16): the filter
/// input, and the decoded normalised 16-bit quaternions (8 bytes each).
pub fn quat_filter(quaternions: &[f32], bits: u32) -> (Vec<u8>, Vec<u8>) {
    let count = quaternions.len() / 4;
    let mut filtered = vec![0u8; count * 8];
    // SAFETY: `filtered` holds count × 8 bytes; the input count × 4 floats.
    unsafe {
        meshopt::ffi::meshopt_encodeFilterQuat(
            filtered.as_mut_ptr().cast(),
            count,
            8,
            bits.clamp(4, 16) as i32,
            quaternions.as_ptr(),
        );
    }
    let mut decoded = filtered.clone();
    // SAFETY: as above.
    unsafe { meshopt::ffi::meshopt_decodeFilterQuat(decoded.as_mut_ptr().cast(), count, 8) };
    (filtered, decoded)
}

/// Encodes an attribute stream (`stride` bytes per element) in ATTRIBUTES mode.
pub fn encode_attributes(data: &[u8], stride: usize, level: i32, version: i32) -> Vec<u8> {
    assert!(
        stride > 0
            && stride.is_multiple_of(4)
            && stride <= 256
            && data.len().is_multiple_of(stride)
    );
    let count = data.len() / stride;
    // SAFETY: the bound is the encoder's own worst case; the encoder writes at most that much.
    unsafe {
        let bound = meshopt::ffi::meshopt_encodeVertexBufferBound(count, stride);
        let mut out = vec![0u8; bound];
        let size = meshopt::ffi::meshopt_encodeVertexBufferLevel(
            out.as_mut_ptr(),
            out.len(),
            data.as_ptr().cast(),
            count,
            stride,
            level,
            version,
        );
        out.truncate(size);
        out
    }
}

/// Encodes a triangle list's indices in TRIANGLES mode.
pub fn encode_triangles(indices: &[u32], vertex_count: usize) -> Vec<u8> {
    meshopt::encode_index_buffer(indices, vertex_count).expect("index encoding cannot fail")
}

/// Encodes any index list (points, lines, strips, animation-free data) in INDICES mode.
pub fn encode_index_sequence(indices: &[u32], vertex_count: usize) -> Vec<u8> {
    meshopt::encode_index_sequence(indices, vertex_count).expect("index encoding cannot fail")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn attributes_round_trip_through_the_reference_decoder() {
        let data: Vec<u8> = (0..1200u32)
            .flat_map(|i| (i * 7 % 1000).to_le_bytes())
            .collect();
        for version in [0, 1] {
            let encoded = encode_attributes(&data, 12, 2, version);
            let ext = json!({"byteStride": 12, "count": 400, "mode": "ATTRIBUTES"});
            assert_eq!(decode_view(&ext, &encoded, "t").unwrap(), data);
        }
    }

    #[test]
    fn triangles_round_trip_and_garbage_is_an_error() {
        let indices: Vec<u32> = vec![0, 1, 2, 2, 1, 3, 3, 1, 4];
        let encoded = encode_triangles(&indices, 5);
        let ext = json!({"byteStride": 4, "count": 9, "mode": "TRIANGLES"});
        let decoded = decode_view(&ext, &encoded, "t").unwrap();
        let back: Vec<u32> = decoded
            .chunks(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(back, indices);
        assert!(decode_view(&ext, &encoded[..encoded.len() / 2], "t").is_err());
        let huge = json!({"byteStride": 256, "count": 1u64 << 40, "mode": "ATTRIBUTES"});
        assert!(
            decode_view(&huge, &encoded, "t")
                .unwrap_err()
                .to_string()
                .contains("too large")
        );
    }
}
