//! Quantizing baked frames into VAT textures (PNG / OpenEXR), measuring the error by decoding
//! exactly as the shaders do (`docs/vat.md`), and reading the files back.

use exr::prelude::f16;

use super::{Bounds, ErrorReport, Frames, Layout, PositionMode, VatEncoding, distance};

/// Maps stored values to texel words and back, for one encoding and set of bounds.
#[derive(Debug, Clone, Copy)]
pub struct PositionCodec {
    pub encoding: VatEncoding,
    pub mode: PositionMode,
    pub min: [f32; 3],
    pub range: [f32; 3],
    /// The values' bounds the codec was made for (their magnitude bounds the rounding).
    pub bounds: Bounds,
}

/// Largest integer of an encoding's position words (`t = q / levels`); 0 for `half`.
fn levels(encoding: VatEncoding) -> u32 {
    match encoding {
        VatEncoding::Low => 255,
        VatEncoding::Medium | VatEncoding::Rgba16 => 65535,
        VatEncoding::High => 16_777_215,
        VatEncoding::Half => 0,
    }
}

impl PositionCodec {
    pub fn new(encoding: VatEncoding, mode: PositionMode, bounds: Bounds) -> Self {
        Self {
            encoding,
            mode,
            min: bounds.min,
            range: [0, 1, 2].map(|a| bounds.max[a] - bounds.min[a]),
            bounds,
        }
    }

    /// The integer word of one component (`half`: its f16 bits).
    pub fn quantize(&self, value: f32, axis: usize) -> u32 {
        let l = levels(self.encoding);
        if l == 0 {
            return f16::from_f32(value).to_bits() as u32;
        }
        let range = self.range[axis] as f64;
        let t = if range > 0.0 {
            ((value as f64 - self.min[axis] as f64) / range).clamp(0.0, 1.0)
        } else {
            0.0
        };
        (t * l as f64).round() as u32
    }

    /// The component a shader decodes from a word (f32 arithmetic, as on the GPU).
    pub fn decode(&self, word: u32, axis: usize) -> f32 {
        let l = levels(self.encoding);
        if l == 0 {
            return f16::from_bits(word as u16).to_f32();
        }
        self.min[axis] + (word as f32 / l as f32) * self.range[axis]
    }

    /// Worst-case distance between a value and its decoded form.
    pub fn bound(&self) -> f64 {
        let l = levels(self.encoding);
        let bounds = &self.bounds;
        let per_axis = |a: usize| {
            if l == 0 {
                let largest = (bounds.min[a].abs()).max(bounds.max[a].abs()) as f64;
                largest * 2f64.powi(-11) + 2f64.powi(-25)
            } else {
                // Half a step, plus f32 rounding of `min + t * range`.
                self.range[a] as f64 / (2.0 * l as f64)
                    + (bounds.min[a].abs().max(bounds.max[a].abs()) as f64) * 2f64.powi(-22)
            }
        };
        (0..3).map(|a| per_axis(a).powi(2)).sum::<f64>().sqrt()
    }
}

/// Octahedral coordinates in [-1, 1]² of a unit vector.
pub fn octahedral(n: [f32; 3]) -> [f32; 2] {
    let s = n[0].abs() + n[1].abs() + n[2].abs();
    if s == 0.0 {
        return [0.0, 0.0];
    }
    let (x, y, z) = (n[0] / s, n[1] / s, n[2] / s);
    if z >= 0.0 {
        [x, y]
    } else {
        let sign = |v: f32| if v >= 0.0 { 1.0 } else { -1.0 };
        [(1.0 - y.abs()) * sign(x), (1.0 - x.abs()) * sign(y)]
    }
}

/// The unit vector of octahedral coordinates (as the shaders decode it).
pub fn from_octahedral(o: [f32; 2]) -> [f32; 3] {
    let mut n = [o[0], o[1], 1.0 - o[0].abs() - o[1].abs()];
    if n[2] < 0.0 {
        let sign = |v: f32| if v >= 0.0 { 1.0 } else { -1.0 };
        let (x, y) = (n[0], n[1]);
        n[0] = (1.0 - y.abs()) * sign(x);
        n[1] = (1.0 - x.abs()) * sign(y);
    }
    let len = (n[0] * n[0] + n[1] * n[1] + n[2] * n[2]).sqrt();
    n.map(|c| c / len)
}

/// Octahedral precision of an encoding's normal texture: the largest word.
fn normal_levels(encoding: VatEncoding) -> u32 {
    match encoding {
        VatEncoding::Low | VatEncoding::Medium | VatEncoding::High => 4095,
        VatEncoding::Rgba16 => 65535,
        VatEncoding::Half => 0,
    }
}

fn quantize_normal(encoding: VatEncoding, o: f32) -> u32 {
    match normal_levels(encoding) {
        0 => f16::from_f32(o).to_bits() as u32,
        l => (((o as f64 * 0.5 + 0.5).clamp(0.0, 1.0)) * l as f64).round() as u32,
    }
}

fn decode_normal_word(encoding: VatEncoding, word: u32) -> f32 {
    match normal_levels(encoding) {
        0 => f16::from_bits(word as u16).to_f32(),
        l => word as f32 / l as f32 * 2.0 - 1.0,
    }
}

/// Worst-case angle (degrees) of an encoding's normals: octahedral decoding stretches an
/// error of δ per coordinate by at most √18 (|p| ≥ 1/√3 on the octahedron, |dp| ≤ √6 δ).
pub fn normal_bound_degrees(encoding: VatEncoding) -> f64 {
    let delta = match normal_levels(encoding) {
        0 => 2f64.powi(-11),
        l => 1.0 / l as f64,
    };
    (18f64.sqrt() * delta + 1e-6).to_degrees()
}

/// One texture pair of an encoded bake (file bytes).
#[derive(Debug, Clone)]
pub struct EncodedTexture {
    pub width: u32,
    pub height: u32,
    pub normals_height: u32,
    pub first_frame: usize,
    pub frames: usize,
    pub positions: Vec<u8>,
    pub normals: Vec<u8>,
}

#[derive(Debug, Clone)]
pub struct Encoded {
    pub encoding: VatEncoding,
    pub textures: Vec<EncodedTexture>,
    pub error: ErrorReport,
}

impl Encoded {
    pub fn bytes(&self) -> u64 {
        self.textures
            .iter()
            .map(|t| (t.positions.len() + t.normals.len()) as u64)
            .sum()
    }
}

/// Texel words of one texture before compression: `channels` words per texel.
struct Raster {
    width: u32,
    height: u32,
    words: Vec<u32>,
}

impl Raster {
    fn new(width: u32, height: u32) -> Self {
        Self {
            width,
            height,
            words: vec![0; (width * height * 4) as usize],
        }
    }

    fn set(&mut self, x: u32, y: u32, texel: [u32; 4]) {
        let i = ((y * self.width + x) * 4) as usize;
        self.words[i..i + 4].copy_from_slice(&texel);
    }
}

/// Quantizes `values` (positions or offsets, per frame per vertex) and the normals of
/// `frames` into textures, measures the decoded error, and compresses the files.
pub fn encode(
    frames: &Frames,
    values: &[[f32; 3]],
    codec: &PositionCodec,
    layout: &Layout,
) -> Result<Encoded, String> {
    let encoding = codec.encoding;
    let v_count = frames.vertices;
    let frame_count = frames.count();
    let k = layout.planes;
    let rows = layout.rows_per_frame;
    let mut error = ErrorReport {
        position_bound: codec.bound(),
        normal_bound_degrees: normal_bound_degrees(encoding),
        ..ErrorReport::default()
    };
    let mut normal_max = 0f64;
    let mut textures = Vec::new();
    let per_texture = layout.frames_per_texture as usize;
    let mut first = 0;
    while first < frame_count {
        let n = per_texture.min(frame_count - first);
        let mut positions = Raster::new(layout.width, n as u32 * k * rows);
        let mut normals = Raster::new(layout.width, n as u32 * rows);
        for l in 0..n {
            let g = first + l;
            for v in 0..v_count {
                let (x, row) = (v as u32 % layout.width, v as u32 / layout.width);
                let value = values[g * v_count + v];
                let words = [0, 1, 2].map(|a| codec.quantize(value[a], a));
                // What the shader gets back: compared with the evaluator's position.
                let decoded = [0, 1, 2].map(|a| codec.decode(words[a], a));
                let position = match codec.mode {
                    PositionMode::Absolute => decoded,
                    PositionMode::Relative => {
                        let r = frames.rest[v];
                        [decoded[0] + r[0], decoded[1] + r[1], decoded[2] + r[2]]
                    }
                };
                error.position_max = error
                    .position_max
                    .max(distance(&position, &frames.positions[g * v_count + v]));
                let y = |plane: u32| layout.position_row(n as u32, l as u32, plane, row);
                let y0 = y(0);
                match encoding {
                    VatEncoding::Low => positions.set(x, y0, texel3(words)),
                    VatEncoding::Medium => {
                        positions.set(x, y0, texel3(words.map(|w| w >> 8)));
                        positions.set(x, y(1), texel3(words.map(|w| w & 255)));
                    }
                    VatEncoding::High => {
                        positions.set(x, y0, texel3(words.map(|w| w >> 16)));
                        positions.set(x, y(1), texel3(words.map(|w| (w >> 8) & 255)));
                        positions.set(x, y(2), texel3(words.map(|w| w & 255)));
                    }
                    VatEncoding::Rgba16 => {
                        positions.set(x, y0, [words[0], words[1], words[2], 65535])
                    }
                    VatEncoding::Half => positions.set(
                        x,
                        y0,
                        [words[0], words[1], words[2], f16::ONE.to_bits() as u32],
                    ),
                }
                let normal = frames.normals[g * v_count + v];
                let o = octahedral(normal);
                let nw = o.map(|c| quantize_normal(encoding, c));
                let decoded = from_octahedral(nw.map(|w| decode_normal_word(encoding, w)));
                if normal != [0.0; 3] {
                    normal_max = normal_max.max(angle(&decoded, &normal));
                }
                let ny = layout.normal_row(n as u32, l as u32, row);
                let texel = match encoding {
                    VatEncoding::Low | VatEncoding::Medium | VatEncoding::High => [
                        nw[0] >> 4,
                        ((nw[0] & 15) << 4) | (nw[1] >> 8),
                        nw[1] & 255,
                        255,
                    ],
                    VatEncoding::Rgba16 => [nw[0], nw[1], 0, 65535],
                    VatEncoding::Half => [nw[0], nw[1], 0, f16::ONE.to_bits() as u32],
                };
                normals.set(x, ny, texel);
            }
        }
        let (positions, normals) = match encoding {
            VatEncoding::Low | VatEncoding::Medium | VatEncoding::High => {
                (png8(&positions)?, png8(&normals)?)
            }
            VatEncoding::Rgba16 => (png16(&positions)?, png16(&normals)?),
            VatEncoding::Half => (exr_half(&positions)?, exr_half(&normals)?),
        };
        textures.push(EncodedTexture {
            width: layout.width,
            height: n as u32 * k * rows,
            normals_height: n as u32 * rows,
            first_frame: first,
            frames: n,
            positions,
            normals,
        });
        first += n;
    }
    error.normal_max_degrees = normal_max.to_degrees();
    Ok(Encoded {
        encoding,
        textures,
        error,
    })
}

/// The angle between two vectors (radians), accurate for tiny angles.
pub fn angle(a: &[f32; 3], b: &[f32; 3]) -> f64 {
    let a = glam::DVec3::from_array(a.map(f64::from));
    let b = glam::DVec3::from_array(b.map(f64::from));
    a.cross(b).length().atan2(a.dot(b))
}

fn texel3(w: [u32; 3]) -> [u32; 4] {
    [w[0], w[1], w[2], 255]
}

/// RGB, 8 bits per channel (no alpha: browsers may premultiply it).
fn png8(r: &Raster) -> Result<Vec<u8>, String> {
    let data: Vec<u8> = r
        .words
        .chunks_exact(4)
        .flat_map(|t| [t[0] as u8, t[1] as u8, t[2] as u8])
        .collect();
    png_bytes(r, png::ColorType::Rgb, png::BitDepth::Eight, &data)
}

/// RGBA, 16 bits per channel, big-endian as PNG stores them.
fn png16(r: &Raster) -> Result<Vec<u8>, String> {
    let data: Vec<u8> = r
        .words
        .iter()
        .flat_map(|&w| (w as u16).to_be_bytes())
        .collect();
    png_bytes(r, png::ColorType::Rgba, png::BitDepth::Sixteen, &data)
}

fn png_bytes(
    r: &Raster,
    color: png::ColorType,
    depth: png::BitDepth,
    data: &[u8],
) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, r.width, r.height);
    encoder.set_color(color);
    encoder.set_depth(depth);
    encoder.set_compression(png::Compression::Balanced);
    let mut writer = encoder.write_header().map_err(|e| e.to_string())?;
    writer.write_image_data(data).map_err(|e| e.to_string())?;
    writer.finish().map_err(|e| e.to_string())?;
    Ok(out)
}

/// RGBA half floats, ZIP-compressed scan lines (what three.js' EXRLoader reads).
fn exr_half(r: &Raster) -> Result<Vec<u8>, String> {
    use exr::prelude::*;
    let width = r.width as usize;
    let half = |w: u32| f16::from_bits(w as u16);
    let pixels = |p: Vec2<usize>| {
        let i = (p.y() * width + p.x()) * 4;
        let t = &r.words[i..i + 4];
        (half(t[0]), half(t[1]), half(t[2]), half(t[3]))
    };
    let encoding = Encoding {
        compression: Compression::ZIP16,
        blocks: Blocks::ScanLines,
        line_order: LineOrder::Increasing,
    };
    let layer = Layer::new(
        (width, r.height as usize),
        LayerAttributes::default(),
        encoding,
        SpecificChannels::rgba(pixels),
    );
    let mut out = std::io::Cursor::new(Vec::new());
    Image::from_layer(layer)
        .write()
        .to_buffered(&mut out)
        .map_err(|e| e.to_string())?;
    Ok(out.into_inner())
}

/// A texture file read back: width, height and 4 words per texel (RGB8 files get alpha
/// 255; half files give f16 bits).
pub fn read_texture(bytes: &[u8]) -> Result<(u32, u32, Vec<u32>), String> {
    if bytes.starts_with(b"\x89PNG") {
        let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
        let mut reader = decoder.read_info().map_err(|e| e.to_string())?;
        let mut buf = vec![0; reader.output_buffer_size().ok_or("PNG too large")?];
        let info = reader.next_frame(&mut buf).map_err(|e| e.to_string())?;
        let data = &buf[..info.buffer_size()];
        let words: Vec<u32> = match (info.color_type, info.bit_depth) {
            (png::ColorType::Rgb, png::BitDepth::Eight) => data
                .chunks_exact(3)
                .flat_map(|c| [c[0] as u32, c[1] as u32, c[2] as u32, 255])
                .collect(),
            (png::ColorType::Rgba, png::BitDepth::Sixteen) => data
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]) as u32)
                .collect(),
            other => return Err(format!("unexpected PNG format {other:?}")),
        };
        return Ok((info.width, info.height, words));
    }
    read_exr(bytes)
}

fn read_exr(bytes: &[u8]) -> Result<(u32, u32, Vec<u32>), String> {
    use exr::prelude::*;
    let image = read()
        .no_deep_data()
        .largest_resolution_level()
        .rgba_channels(
            |size, _| (size.width(), vec![0u32; size.area() * 4]),
            |(width, words): &mut (usize, Vec<u32>),
             p: Vec2<usize>,
             (r, g, b, a): (f16, f16, f16, f16)| {
                let i = (p.y() * *width + p.x()) * 4;
                words[i..i + 4].copy_from_slice(&[r, g, b, a].map(|c| c.to_bits() as u32));
            },
        )
        .first_valid_layer()
        .all_attributes()
        .from_buffered(std::io::Cursor::new(bytes))
        .map_err(|e| e.to_string())?;
    let size = image.layer_data.size;
    let (_, words) = image.layer_data.channel_data.pixels;
    Ok((size.width() as u32, size.height() as u32, words))
}
