//! A reader of the VAT format written from `docs/vat.md` alone (not from the encoder): the
//! tests judge every bake with it, and a user's tool can take it as the reference.

use super::textures::read_texture;
use super::{PositionMode, VatEncoding, VatMeta};
use crate::gltf::{Asset, NoResources, accessors};

fn file<'a>(files: &'a [(String, Vec<u8>)], name: &str) -> Result<&'a [u8], String> {
    files
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, b)| b.as_slice())
        .ok_or_else(|| format!("{name} is missing"))
}

/// Positions and normals, frame after frame, vertex after vertex.
pub type Decoded = (Vec<[f32; 3]>, Vec<[f32; 3]>);

/// Positions and normals per frame per vertex, decoded from a bake's files alone (mesh.glb's
/// POSITION and TEXCOORD_1, vat.json, the textures), following `docs/vat.md` step by step.
pub fn decode(files: &[(String, Vec<u8>)]) -> Result<Decoded, String> {
    let meta: VatMeta =
        serde_json::from_slice(file(files, "vat.json")?).map_err(|e| e.to_string())?;
    if meta.format != "kiln-vat" || meta.version != super::FORMAT_VERSION {
        return Err(format!(
            "vat.json: {} version {}, this reader reads kiln-vat version {}",
            meta.format,
            meta.version,
            super::FORMAT_VERSION
        ));
    }
    let asset = Asset::read(file(files, "mesh.glb")?, &NoResources).map_err(|e| e.to_string())?;
    let (mut rest, mut texel) = (Vec::new(), Vec::new());
    for p in asset.array("meshes")[0]["primitives"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let read = |name: &str| -> Result<Vec<f32>, String> {
            let index = p["attributes"][name]
                .as_u64()
                .ok_or_else(|| format!("mesh.glb: a primitive has no {name}"))?;
            Ok(accessors::read_f32(&asset, index as usize)
                .map_err(|e| e.to_string())?
                .1)
        };
        rest.extend(read("POSITION")?.chunks(3).map(|c| [c[0], c[1], c[2]]));
        texel.extend(read("TEXCOORD_1")?.chunks(2).map(|c| [c[0], c[1]]));
    }
    if rest.len() != meta.vertices {
        return Err(format!(
            "mesh.glb has {} vertices, vat.json {}",
            rest.len(),
            meta.vertices
        ));
    }
    let l = meta.layout;
    let (w, r) = (l.width, l.rows_per_frame);
    let mut textures = Vec::new();
    for t in &meta.textures {
        let p = read_texture(file(files, &t.positions)?)?;
        let n = read_texture(file(files, &t.normals)?)?;
        if (p.0, p.1) != (t.width, t.height) || (n.0, n.1) != (t.width, t.normals_height) {
            return Err(format!(
                "{} or {}: size differs from vat.json",
                t.positions, t.normals
            ));
        }
        if p.0 > l.max_size || p.1 > l.max_size || n.1 > l.max_size {
            return Err(format!(
                "{}: larger than the maximum size {}",
                t.positions, l.max_size
            ));
        }
        textures.push((p, n));
    }
    let half = |w: u32| exr::prelude::f16::from_bits(w as u16).to_f32();
    let (mut positions, mut normals) = (Vec::new(), Vec::new());
    for g in 0..meta.frames {
        let i = g / l.frames_per_texture as usize;
        let local = (g % l.frames_per_texture as usize) as u32;
        let frames_here = l.frames_in(i, meta.frames);
        let ((_, _, pw), (_, _, nw)) = &textures[i];
        for v in 0..meta.vertices {
            // The shader's texel: floor(uv * (W, R)).
            let x = (texel[v][0] * w as f32) as u32;
            let row = (texel[v][1] * r as f32) as u32;
            if (x, row) != (v as u32 % w, v as u32 / w) {
                return Err(format!(
                    "TEXCOORD_1 of vertex {v} addresses texel ({x}, {row})"
                ));
            }
            let at = |words: &Vec<u32>, y: u32| {
                let o = ((y * w + x) * 4) as usize;
                [words[o], words[o + 1], words[o + 2], words[o + 3]]
            };
            // Plane p of this frame (docs/vat.md, format 2: planes, then vertex rows, then
            // frames).
            let plane = |p: u32| at(pw, (p * r + row) * frames_here + local);
            let y = row * frames_here + local;
            let t: [f64; 3] = match meta.encoding {
                VatEncoding::Low => plane(0).map(|c| c as f64 / 255.0)[..3].try_into().unwrap(),
                VatEncoding::Medium => {
                    let (hi, lo) = (plane(0), plane(1));
                    [0, 1, 2].map(|a| (hi[a] * 256 + lo[a]) as f64 / 65535.0)
                }
                VatEncoding::High => {
                    let (b2, b1, b0) = (plane(0), plane(1), plane(2));
                    [0, 1, 2].map(|a| (b2[a] * 65536 + b1[a] * 256 + b0[a]) as f64 / 16777215.0)
                }
                VatEncoding::Rgba16 => plane(0).map(|c| c as f64 / 65535.0)[..3]
                    .try_into()
                    .unwrap(),
                VatEncoding::Half => plane(0).map(|c| half(c) as f64)[..3].try_into().unwrap(),
            };
            let value = [0, 1, 2].map(|a| {
                if meta.encoding == VatEncoding::Half {
                    t[a] as f32
                } else {
                    let (lo, hi) = (meta.bounds.min[a], meta.bounds.max[a]);
                    (lo as f64 + t[a] * (hi - lo) as f64) as f32
                }
            });
            positions.push(match meta.mode {
                PositionMode::Absolute => value,
                PositionMode::Relative => [0, 1, 2].map(|a| rest[v][a] + value[a]),
            });
            let n = at(nw, y);
            let o = match meta.encoding {
                VatEncoding::Rgba16 => [n[0], n[1]].map(|c| c as f32 / 65535.0 * 2.0 - 1.0),
                VatEncoding::Half => [half(n[0]), half(n[1])],
                _ => [16 * n[0] + (n[1] >> 4), 256 * (n[1] & 15) + n[2]]
                    .map(|c| c as f32 / 4095.0 * 2.0 - 1.0),
            };
            let mut d = [o[0], o[1], 1.0 - o[0].abs() - o[1].abs()];
            if d[2] < 0.0 {
                let s = |v: f32| if v >= 0.0 { 1.0 } else { -1.0 };
                (d[0], d[1]) = ((1.0 - o[1].abs()) * s(o[0]), (1.0 - o[0].abs()) * s(o[1]));
            }
            let len = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt();
            normals.push(d.map(|c| c / len));
        }
    }
    Ok((positions, normals))
}
