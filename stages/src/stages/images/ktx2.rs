//! GPU textures: Basis Universal (ETC1S or UASTC) in a KTX2 container, for model variants'
//! `KHR_texture_basisu`.
//!
//! A device never samples the Basis data itself: its loader (three.js' `KTX2Loader`)
//! transcodes it to what the GPU reads — ASTC 4×4 on most phones, BC7 on desktops, ETC2
//! (ETC1 for opaque ETC1S) on older phones. So a candidate is scored after transcoding to
//! each of the three and decoding those blocks back to pixels (`texture2ddecoder`, not the
//! transcoder that made them): it must meet the bound on ASTC and BC7 ([`REQUIRED`]), and says
//! whether it does on ETC2.
//!
//! The encoder is Binomial's (the `basis-universal` crate); it writes `.basis` files, whose
//! slices, codebooks and tables this module moves into a KTX2 container as the KTX2 spec's
//! BasisLZ (ETC1S) and UASTC sections lay them out, with mipmaps.

use std::collections::BTreeMap;
use std::time::Instant;

use basis_universal::{
    BasisTextureFormat, ColorSpace, Compressor, CompressorParams, TranscodeParameters, Transcoder,
    TranscoderTextureFormat,
};
use image::RgbaImage;
use serde::Serialize;

use super::score;

/// What a texture must keep on the GPU formats it is sent to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Bound {
    /// Colour: ssimulacra2 at least this (the images stage's bound), on what the player sees.
    Colour { min_ssimulacra2: f64 },
    /// A normal map: the 99th percentile of the angle between source and delivered normals
    /// at most this many degrees.
    Normal { max_degrees: f64 },
    /// Other data (occlusion, roughness, metalness…): PSNR of every channel at least this.
    Data { min_psnr: f64 },
}

/// The default angular bound for normal maps (99th percentile, degrees): a shading
/// difference below what a viewer notices on a lit surface.
pub const NORMAL_MAX_DEGREES: f64 = 4.0;
/// The default PSNR bound for other data textures (dB, per channel).
pub const DATA_MIN_PSNR: f64 = 40.0;
/// Textures with more pixels (past 4096×4096) are left out of the KTX2 variant: the encoder's
/// rate-distortion pass takes minutes on them (39 s on a 2048² texture here).
pub const MAX_PIXELS: u64 = 4096 * 4096;

impl Bound {
    /// The bound's own number (ssimulacra2, degrees or dB).
    fn value(self) -> f64 {
        match self {
            Bound::Colour { min_ssimulacra2 } => min_ssimulacra2,
            Bound::Normal { max_degrees } => max_degrees,
            Bound::Data { min_psnr } => min_psnr,
        }
    }

    fn measure(self) -> &'static str {
        match self {
            Bound::Colour { .. } => "ssimulacra2",
            Bound::Normal { .. } => "normal_degrees_p99",
            Bound::Data { .. } => "psnr",
        }
    }

    /// The measure of `delivered` against `source`, and whether it keeps the bound.
    fn check(self, source: &RgbaImage, delivered: &RgbaImage) -> Result<(f64, bool), String> {
        Ok(match self {
            Bound::Colour { min_ssimulacra2 } => {
                let s = score::score(source, delivered)?.ssimulacra2;
                (s, s >= min_ssimulacra2)
            }
            Bound::Normal { max_degrees } => {
                let d = normal_degrees_p99(source, delivered);
                (d, d <= max_degrees)
            }
            Bound::Data { min_psnr } => {
                let p = channel_psnr(source, delivered);
                (p, p >= min_psnr)
            }
        })
    }
}

/// One encoding tried for the KTX2 variant.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ktx2Candidate {
    pub encoding: String,
    pub bytes: u64,
    /// After brotli, as the CDN sends it (UASTC's rate-distortion optimisation makes the
    /// blocks compress better without changing their size).
    pub brotli_bytes: u64,
    /// The measure on each GPU format.
    pub scores: BTreeMap<&'static str, f64>,
    /// The formats it keeps the bound on.
    pub formats: Vec<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rejected: Option<String>,
}

/// What the KTX2 variant holds for one texture.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ktx2Report {
    /// The chosen encoding (`ktx2 etc1s q128`, `ktx2 uastc rdo 1`…), or `none` when no
    /// candidate kept the bound (the variant then carries the texture as its other variants
    /// do).
    pub chosen: String,
    pub bytes: u64,
    pub brotli_bytes: u64,
    /// `ssimulacra2`, `normal_degrees_p99` or `psnr`, and the bound it was held to.
    pub measure: &'static str,
    pub bound: f64,
    /// The chosen one's measure per GPU format, and the formats it keeps the bound on (a
    /// device whose format is not among them is not sent the `ktx2` variant).
    pub scores: BTreeMap<&'static str, f64>,
    pub formats: Vec<&'static str>,
    /// GPU memory of every level at 8 bits per pixel (ASTC 4×4, BC7, ETC2 RGBA).
    pub gpu_bytes: u64,
    pub encode_ms: u64,
    pub candidates: Vec<Ktx2Candidate>,
    /// Why the variant does not hold this texture as KTX2 (when it does not).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

impl Ktx2Report {
    /// No KTX2 for this texture, for a reason outside the search.
    pub fn not_made(why: &str) -> Self {
        Self {
            chosen: "none".into(),
            bytes: 0,
            brotli_bytes: 0,
            measure: "",
            bound: 0.0,
            scores: BTreeMap::new(),
            formats: Vec::new(),
            gpu_bytes: 0,
            encode_ms: 0,
            candidates: Vec::new(),
            why: Some(why.to_string()),
        }
    }
}

/// The KTX2 texture for `rgba` that keeps `bound` on the [`REQUIRED`] GPU formats (and says
/// whether ETC2 too), the smallest after brotli of the encodings tried: for colour, ETC1S at
/// quality 128, then 64 if that held, else 255 if 128 came within 3 points, then UASTC with
/// rate-distortion optimisation, then plain UASTC; for data, the UASTC two only. `None` with
/// the reasons when none held.
pub fn choose(rgba: &RgbaImage, srgb: bool, bound: Bound) -> (Option<Vec<u8>>, Ktx2Report) {
    let start = Instant::now();
    let mut candidates: Vec<Ktx2Candidate> = Vec::new();
    // The kept candidate smallest after brotli: its bytes and its index in `candidates`.
    let mut best: Option<(Vec<u8>, usize)> = None;
    // Whether the candidate was kept, and its lowest measure on the required formats.
    let mut try_mode = |mode: Mode| -> (bool, f64) {
        let (candidate, ktx2) = attempt(rgba, srgb, bound, mode);
        let kept = candidate.rejected.is_none();
        let lowest = REQUIRED
            .iter()
            .filter_map(|f| candidate.scores.get(f.name()))
            .fold(f64::INFINITY, |a, b| a.min(*b));
        if let Some(ktx2) = ktx2.filter(|_| kept) {
            let smaller = best
                .as_ref()
                .is_none_or(|(_, i)| candidate.brotli_bytes < candidates[*i].brotli_bytes);
            if smaller {
                best = Some((ktx2, candidates.len()));
            }
        }
        candidates.push(candidate);
        (kept, lowest)
    };
    if let Bound::Colour { min_ssimulacra2 } = bound {
        let (held, lowest) = try_mode(Mode::Etc1s { quality: 128 });
        if held {
            try_mode(Mode::Etc1s { quality: 64 });
        } else {
            // ETC1S' quality level sizes its codebooks; past 128 it gains a point or two at
            // most, so 255 is tried only when 128 came close.
            let held = lowest >= min_ssimulacra2 - 3.0 && try_mode(Mode::Etc1s { quality: 255 }).0;
            if !held && !try_mode(Mode::Uastc { rdo: Some(1.0) }).0 {
                try_mode(Mode::Uastc { rdo: None });
            }
        }
    } else if !try_mode(Mode::Uastc { rdo: Some(1.0) }).0 {
        try_mode(Mode::Uastc { rdo: None });
    }
    let gpu_bytes = gpu_bytes_8bpp(rgba.width(), rgba.height());
    let chosen = best.as_ref().map(|(_, i)| candidates[*i].clone());
    for (i, c) in candidates.iter_mut().enumerate() {
        if c.rejected.is_none() && best.as_ref().is_some_and(|(_, b)| *b != i) {
            c.rejected = Some("larger after brotli than the chosen one".into());
        }
    }
    let bytes = best.map(|(bytes, _)| bytes);
    let report = Ktx2Report {
        chosen: chosen
            .as_ref()
            .map_or("none".into(), |c| c.encoding.clone()),
        bytes: chosen.as_ref().map_or(0, |c| c.bytes),
        brotli_bytes: chosen.as_ref().map_or(0, |c| c.brotli_bytes),
        measure: bound.measure(),
        bound: bound.value(),
        formats: chosen
            .as_ref()
            .map(|c| c.formats.clone())
            .unwrap_or_default(),
        scores: chosen.map(|c| c.scores).unwrap_or_default(),
        gpu_bytes,
        encode_ms: start.elapsed().as_millis() as u64,
        candidates,
        why: bytes
            .is_none()
            .then(|| "no encoding kept the bound on ASTC and BC7".into()),
    };
    (bytes, report)
}

/// One candidate: encoded, put in its container, scored on each GPU format. Kept when it
/// holds the bound on the [`REQUIRED`] formats; `formats` says every one it holds on.
fn attempt(
    rgba: &RgbaImage,
    srgb: bool,
    bound: Bound,
    mode: Mode,
) -> (Ktx2Candidate, Option<Vec<u8>>) {
    let mut candidate = Ktx2Candidate {
        encoding: mode.label(),
        bytes: 0,
        brotli_bytes: 0,
        scores: BTreeMap::new(),
        formats: Vec::new(),
        rejected: None,
    };
    let ktx2 = encode(rgba, mode, srgb).and_then(|basis| {
        let ktx2 = to_ktx2(&basis)?;
        candidate.bytes = ktx2.len() as u64;
        candidate.brotli_bytes = brotli_size(&ktx2);
        let mut short = Vec::new();
        for format in GpuFormat::ALL {
            let (value, kept) = bound.check(rgba, &transcoded(&basis, format)?)?;
            candidate.scores.insert(format.name(), round2(value));
            if kept {
                candidate.formats.push(format.name());
            } else if REQUIRED.contains(&format) {
                short.push(format!(
                    "{} {:.2} on {}",
                    bound.measure(),
                    value,
                    format.name()
                ));
            }
        }
        if short.is_empty() {
            Ok(ktx2)
        } else {
            Err(format!("{} does not keep the bound", short.join(", ")))
        }
    });
    match ktx2 {
        Ok(ktx2) => (candidate, Some(ktx2)),
        Err(why) => {
            candidate.rejected = Some(why);
            (candidate, None)
        }
    }
}

/// The size after brotli at the quality the origin uses for large files (5, `encode`'s
/// `brotli_large_quality`, which a stage may not import): a fast estimate to compare candidates
/// by.
fn brotli_size(data: &[u8]) -> u64 {
    let mut out = Vec::new();
    let params = brotli::enc::BrotliEncoderParams {
        quality: 5,
        lgwin: 22,
        ..Default::default()
    };
    match brotli::BrotliCompress(&mut &data[..], &mut out, &params) {
        Ok(n) => n as u64,
        Err(_) => data.len() as u64,
    }
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

/// GPU memory of a texture and its mipmaps (down to 1×1) at 16 bytes per 4×4 block.
pub fn gpu_bytes_8bpp(width: u32, height: u32) -> u64 {
    let (mut w, mut h, mut total) = (u64::from(width.max(1)), u64::from(height.max(1)), 0);
    loop {
        total += w.div_ceil(4) * h.div_ceil(4) * 16;
        if w == 1 && h == 1 {
            return total;
        }
        (w, h) = ((w / 2).max(1), (h / 2).max(1));
    }
}

/// The 99th percentile of the angle (degrees) between the normals two normal maps encode.
fn normal_degrees_p99(source: &RgbaImage, delivered: &RgbaImage) -> f64 {
    let normal = |p: &image::Rgba<u8>| {
        let v = [0, 1, 2].map(|c| f64::from(p.0[c]) / 255.0 * 2.0 - 1.0);
        let len = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt().max(1e-9);
        v.map(|c| c / len)
    };
    let mut angles: Vec<f64> = source
        .pixels()
        .zip(delivered.pixels())
        .map(|(a, b)| {
            let (a, b) = (normal(a), normal(b));
            let dot = (a[0] * b[0] + a[1] * b[1] + a[2] * b[2]).clamp(-1.0, 1.0);
            dot.acos().to_degrees()
        })
        .collect();
    if angles.is_empty() {
        return 0.0;
    }
    let k = ((angles.len() - 1) as f64 * 0.99).round() as usize;
    let (_, p99, _) = angles.select_nth_unstable_by(k, f64::total_cmp);
    *p99
}

/// The lowest PSNR (dB) of the four channels; 99 where identical.
fn channel_psnr(source: &RgbaImage, delivered: &RgbaImage) -> f64 {
    (0..4)
        .map(|c| {
            let (sum, n) =
                source
                    .pixels()
                    .zip(delivered.pixels())
                    .fold((0f64, 0f64), |(s, n), (a, b)| {
                        let d = f64::from(a.0[c]) - f64::from(b.0[c]);
                        (s + d * d, n + 1.0)
                    });
            let mse = sum / n.max(1.0);
            if mse == 0.0 {
                99.0
            } else {
                10.0 * (255.0 * 255.0 / mse).log10()
            }
        })
        .fold(f64::INFINITY, f64::min)
}

/// The GPU formats device classes get, in the order the report lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuFormat {
    Astc4x4,
    Bc7,
    Etc2,
}

/// The formats a KTX2 texture must keep its bound on: ASTC (every current phone GPU) and BC7
/// (desktops). ETC2 (older phones) is scored too; a variant whose textures fall short on it
/// says so (its `formats`), and the loader does not send it to such devices.
pub const REQUIRED: [GpuFormat; 2] = [GpuFormat::Astc4x4, GpuFormat::Bc7];

impl GpuFormat {
    pub const ALL: [GpuFormat; 3] = [GpuFormat::Astc4x4, GpuFormat::Bc7, GpuFormat::Etc2];

    pub fn name(self) -> &'static str {
        match self {
            GpuFormat::Astc4x4 => "astc",
            GpuFormat::Bc7 => "bc7",
            GpuFormat::Etc2 => "etc2",
        }
    }

    fn transcoder_format(self) -> TranscoderTextureFormat {
        match self {
            GpuFormat::Astc4x4 => TranscoderTextureFormat::ASTC_4x4_RGBA,
            GpuFormat::Bc7 => TranscoderTextureFormat::BC7_RGBA,
            GpuFormat::Etc2 => TranscoderTextureFormat::ETC2_RGBA,
        }
    }

    /// The transcoded blocks decoded to RGBA.
    fn decode(self, blocks: &[u8], width: u32, height: u32) -> Result<RgbaImage, String> {
        let (w, h) = (width as usize, height as usize);
        let mut out = vec![0u32; w * h];
        match self {
            GpuFormat::Astc4x4 => texture2ddecoder::decode_astc_4_4(blocks, w, h, &mut out),
            GpuFormat::Bc7 => texture2ddecoder::decode_bc7(blocks, w, h, &mut out),
            GpuFormat::Etc2 => texture2ddecoder::decode_etc2_rgba8(blocks, w, h, &mut out),
        }
        .map_err(|e| format!("{} blocks do not decode: {e}", self.name()))?;
        // texture2ddecoder packs each pixel as the little-endian bytes B, G, R, A.
        let pixels = out
            .iter()
            .flat_map(|p| {
                let [b, g, r, a] = p.to_le_bytes();
                [r, g, b, a]
            })
            .collect();
        RgbaImage::from_raw(width, height, pixels).ok_or_else(|| "wrong pixel count".into())
    }
}

/// How the Basis data is encoded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    /// ETC1S at a quality level (1–255): small, supercompressed (BasisLZ).
    Etc1s { quality: u32 },
    /// UASTC at the default pack level, with rate-distortion optimisation at this λ (`None`:
    /// none; larger is smaller and worse).
    Uastc { rdo: Option<f32> },
}

impl Mode {
    pub fn label(self) -> String {
        match self {
            Mode::Etc1s { quality } => format!("ktx2 etc1s q{quality}"),
            Mode::Uastc { rdo: None } => "ktx2 uastc".into(),
            Mode::Uastc { rdo: Some(l) } => format!("ktx2 uastc rdo {l}"),
        }
    }
}

/// An encoded texture: the `.basis` file the encoder wrote and what the KTX2 needs to know.
pub struct Basis {
    pub data: Vec<u8>,
    pub srgb: bool,
}

/// Encodes `rgba` (mipmapped down to 1×1) as Basis `mode`. `srgb`: the texture holds colour
/// (mipmaps filtered and the data tagged sRGB); else linear data.
pub fn encode(rgba: &RgbaImage, mode: Mode, srgb: bool) -> Result<Basis, String> {
    let (width, height) = rgba.dimensions();
    if width.max(height) > basis_universal::TEXTURE_DIMENSION_MAX {
        return Err(format!(
            "{width}×{height} is larger than Basis Universal's limit"
        ));
    }
    let space = if srgb {
        ColorSpace::Srgb
    } else {
        ColorSpace::Linear
    };
    let mut params = CompressorParams::new();
    params.set_print_status_to_stdout(false);
    params.set_color_space(space);
    params.set_mip_color_space(space);
    params.set_generate_mipmaps(true);
    params.set_mipmap_smallest_dimension(1);
    match mode {
        Mode::Etc1s { quality } => {
            params.set_basis_format(BasisTextureFormat::ETC1S);
            params.set_etc1s_quality_level(quality.clamp(
                basis_universal::ETC1S_QUALITY_MIN,
                basis_universal::ETC1S_QUALITY_MAX,
            ));
        }
        Mode::Uastc { rdo } => {
            params.set_basis_format(BasisTextureFormat::UASTC4x4);
            params.set_uastc_quality_level(basis_universal::UASTC_QUALITY_DEFAULT);
            params.set_rdo_uastc(rdo);
        }
    }
    params
        .source_image_mut(0)
        .init(rgba.as_raw(), width, height, 4);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(4)) as u32;
    let mut compressor = Compressor::new(threads);
    // SAFETY: `params` outlives `compressor`'s use of it (both end in this function), and
    // holds one image of the size given.
    unsafe {
        if !compressor.init(&params) {
            return Err("the Basis encoder refused its parameters".into());
        }
        compressor
            .process()
            .map_err(|e| format!("the Basis encoder failed: {e:?}"))?;
    }
    Ok(Basis {
        data: compressor.basis_file().to_vec(),
        srgb,
    })
}

/// The base level transcoded to `format` and decoded to pixels (what that device samples).
pub fn transcoded(basis: &Basis, format: GpuFormat) -> Result<RgbaImage, String> {
    let mut transcoder = Transcoder::new();
    transcoder
        .prepare_transcoding(&basis.data)
        .map_err(|_| "the transcoder cannot read the Basis data".to_string())?;
    let info = transcoder
        .image_level_description(&basis.data, 0, 0)
        .ok_or("no base level")?;
    let blocks = transcoder
        .transcode_image_level(
            &basis.data,
            format.transcoder_format(),
            TranscodeParameters {
                image_index: 0,
                level_index: 0,
                ..Default::default()
            },
        )
        .map_err(|e| format!("cannot transcode to {}: {e:?}", format.name()))?;
    transcoder.end_transcoding();
    format.decode(&blocks, info.original_width, info.original_height)
}

// ---- .basis → KTX2 ------------------------------------------------------------------------

/// A little-endian reader over a `.basis` file's packed fields.
struct Fields<'a> {
    data: &'a [u8],
}

impl Fields<'_> {
    fn uint(&self, offset: usize, len: usize) -> Result<u64, String> {
        let bytes = self
            .data
            .get(offset..offset + len)
            .ok_or("the Basis file is truncated")?;
        Ok(bytes
            .iter()
            .rev()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
    }

    fn range(&self, offset: u64, len: u64) -> Result<&[u8], String> {
        let start = usize::try_from(offset).map_err(|_| "offset out of range")?;
        let end = start
            .checked_add(usize::try_from(len).map_err(|_| "length out of range")?)
            .ok_or("length out of range")?;
        self.data
            .get(start..end)
            .ok_or_else(|| "a section lies outside the Basis file".into())
    }
}

/// One slice of a `.basis` file: a level's colour (or, for ETC1S with alpha, alpha) data.
struct Slice<'a> {
    level: u32,
    alpha: bool,
    width: u32,
    height: u32,
    data: &'a [u8],
}

// The `.basis` header's packed fields: (offset, length) in bytes.
const SIG: (usize, usize) = (0, 2);
const HEADER_SIZE: (usize, usize) = (4, 2);
const TOTAL_SLICES: (usize, usize) = (14, 3);
const TOTAL_IMAGES: (usize, usize) = (17, 3);
const TEX_FORMAT: (usize, usize) = (20, 1);
const TOTAL_ENDPOINTS: (usize, usize) = (39, 2);
const ENDPOINT_CB: (usize, usize, usize) = (41, 4, 3);
const TOTAL_SELECTORS: (usize, usize) = (48, 2);
const SELECTOR_CB: (usize, usize, usize) = (50, 4, 3);
const TABLES: (usize, usize, usize) = (57, 4, 4);
const SLICE_DESCS: (usize, usize) = (65, 4);
const SLICE_DESC_SIZE: usize = 23;
const BASIS_SIG: u64 = ((b'B' as u64) << 8) | b's' as u64;

const KTX2_IDENTIFIER: [u8; 12] = [
    0xAB, b'K', b'T', b'X', b' ', b'2', b'0', 0xBB, b'\r', b'\n', 0x1A, b'\n',
];
const SUPERCOMPRESSION_NONE: u32 = 0;
const SUPERCOMPRESSION_BASISLZ: u32 = 1;
// Khronos Data Format colour models and channel ids.
const MODEL_ETC1S: u8 = 163;
const MODEL_UASTC: u8 = 166;
const CHANNEL_ETC1S_RGB: u8 = 0;
const CHANNEL_ETC1S_AAA: u8 = 15;
const CHANNEL_UASTC_RGB: u8 = 0;
const CHANNEL_UASTC_RGBA: u8 = 3;
const TRANSFER_LINEAR: u8 = 1;
const TRANSFER_SRGB: u8 = 2;
const PRIMARIES_BT709: u8 = 1;

/// The KTX2 file holding `basis`'s one image and its mipmaps: BasisLZ for ETC1S (the
/// codebooks and tables as supercompression global data), plain UASTC blocks otherwise.
pub fn to_ktx2(basis: &Basis) -> Result<Vec<u8>, String> {
    let f = Fields { data: &basis.data };
    if f.uint(SIG.0, SIG.1)? != BASIS_SIG {
        return Err("not a Basis file".into());
    }
    if f.uint(HEADER_SIZE.0, HEADER_SIZE.1)? != 77 {
        return Err("unexpected Basis header size".into());
    }
    if f.uint(TOTAL_IMAGES.0, TOTAL_IMAGES.1)? != 1 {
        return Err("a Basis file of more than one image".into());
    }
    let uastc = match f.uint(TEX_FORMAT.0, TEX_FORMAT.1)? {
        0 => false,
        1 => true,
        other => return Err(format!("unknown Basis texture format {other}")),
    };
    let total_slices = f.uint(TOTAL_SLICES.0, TOTAL_SLICES.1)? as usize;
    let descs = f.uint(SLICE_DESCS.0, SLICE_DESCS.1)? as usize;
    let mut slices = Vec::with_capacity(total_slices);
    let mut alpha_flags = false;
    for i in 0..total_slices {
        let at = descs + i * SLICE_DESC_SIZE;
        // The "has alpha" flag marks ETC1S's alpha slices; a UASTC slice holds both and is
        // flagged when the image has alpha.
        let flagged = f.uint(at + 4, 1)? & 1 != 0;
        alpha_flags |= flagged;
        slices.push(Slice {
            level: f.uint(at + 3, 1)? as u32,
            alpha: flagged && !uastc,
            width: f.uint(at + 5, 2)? as u32,
            height: f.uint(at + 7, 2)? as u32,
            data: f.range(f.uint(at + 13, 4)?, f.uint(at + 17, 4)?)?,
        });
    }
    let levels = slices
        .iter()
        .map(|s| s.level + 1)
        .max()
        .ok_or("no slices")?;
    let base = slices
        .iter()
        .find(|s| s.level == 0 && !s.alpha)
        .ok_or("no base level")?;
    let (width, height) = (base.width, base.height);
    let has_alpha = alpha_flags;

    // Each level's bytes (for ETC1S: the colour slice, then the alpha slice) and, for ETC1S,
    // where in the level each slice starts.
    let mut level_data: Vec<Vec<u8>> = vec![Vec::new(); levels as usize];
    let mut image_descs = vec![[0u32; 5]; levels as usize];
    for level in 0..levels {
        for alpha in [false, true] {
            let Some(slice) = slices.iter().find(|s| s.level == level && s.alpha == alpha) else {
                continue;
            };
            let data = &mut level_data[level as usize];
            let d = &mut image_descs[level as usize];
            let (offset, len) = (data.len() as u32, slice.data.len() as u32);
            if alpha {
                (d[3], d[4]) = (offset, len);
            } else {
                (d[1], d[2]) = (offset, len);
            }
            data.extend_from_slice(slice.data);
        }
    }

    let sgd = if uastc {
        Vec::new()
    } else {
        let endpoints = f.range(
            f.uint(ENDPOINT_CB.0, ENDPOINT_CB.1)?,
            f.uint(ENDPOINT_CB.0 + ENDPOINT_CB.1, ENDPOINT_CB.2)?,
        )?;
        let selectors = f.range(
            f.uint(SELECTOR_CB.0, SELECTOR_CB.1)?,
            f.uint(SELECTOR_CB.0 + SELECTOR_CB.1, SELECTOR_CB.2)?,
        )?;
        let tables = f.range(
            f.uint(TABLES.0, TABLES.1)?,
            f.uint(TABLES.0 + TABLES.1, TABLES.2)?,
        )?;
        let mut sgd = Vec::new();
        put16(
            &mut sgd,
            f.uint(TOTAL_ENDPOINTS.0, TOTAL_ENDPOINTS.1)? as u16,
        );
        put16(
            &mut sgd,
            f.uint(TOTAL_SELECTORS.0, TOTAL_SELECTORS.1)? as u16,
        );
        put32(&mut sgd, endpoints.len() as u32);
        put32(&mut sgd, selectors.len() as u32);
        put32(&mut sgd, tables.len() as u32);
        put32(&mut sgd, 0); // extendedByteLength
        for d in &image_descs {
            for v in d {
                put32(&mut sgd, *v);
            }
        }
        sgd.extend_from_slice(endpoints);
        sgd.extend_from_slice(selectors);
        sgd.extend_from_slice(tables);
        sgd
    };

    let dfd = data_format_descriptor(uastc, has_alpha, basis.srgb);
    let kvd = key_values(&[("KTXwriter", "Kiln")]);

    // Layout: header (80), level index, DFD, KVD, SGD (8-aligned), then the levels from the
    // smallest to the base, each aligned (16 bytes for plain UASTC blocks, 1 for BasisLZ).
    let header_len = 80;
    let index_len = 24 * levels as usize;
    let dfd_offset = header_len + index_len;
    let kvd_offset = dfd_offset + dfd.len();
    let mut sgd_offset = kvd_offset + kvd.len();
    if !sgd.is_empty() {
        sgd_offset = sgd_offset.next_multiple_of(8);
    }
    let align = if uastc { 16 } else { 1 };
    let mut at = sgd_offset + sgd.len();
    let mut level_at = vec![0usize; levels as usize];
    for level in (0..levels as usize).rev() {
        at = at.next_multiple_of(align);
        level_at[level] = at;
        at += level_data[level].len();
    }

    let mut out = Vec::with_capacity(at);
    out.extend_from_slice(&KTX2_IDENTIFIER);
    put32(&mut out, 0); // vkFormat: VK_FORMAT_UNDEFINED (Basis)
    put32(&mut out, 1); // typeSize
    put32(&mut out, width);
    put32(&mut out, height);
    put32(&mut out, 0); // pixelDepth
    put32(&mut out, 0); // layerCount
    put32(&mut out, 1); // faceCount
    put32(&mut out, levels);
    put32(
        &mut out,
        if uastc {
            SUPERCOMPRESSION_NONE
        } else {
            SUPERCOMPRESSION_BASISLZ
        },
    );
    put32(&mut out, dfd_offset as u32);
    put32(&mut out, dfd.len() as u32);
    put32(&mut out, if kvd.is_empty() { 0 } else { kvd_offset as u32 });
    put32(&mut out, kvd.len() as u32);
    put64(&mut out, if sgd.is_empty() { 0 } else { sgd_offset as u64 });
    put64(&mut out, sgd.len() as u64);
    for level in 0..levels as usize {
        let len = level_data[level].len() as u64;
        put64(&mut out, level_at[level] as u64);
        put64(&mut out, len);
        // BasisLZ levels have no defined uncompressed length; plain ones are their own.
        put64(&mut out, if uastc { len } else { 0 });
    }
    out.extend_from_slice(&dfd);
    out.extend_from_slice(&kvd);
    out.resize(sgd_offset, 0);
    out.extend_from_slice(&sgd);
    for level in (0..levels as usize).rev() {
        out.resize(level_at[level], 0);
        out.extend_from_slice(&level_data[level]);
    }
    Ok(out)
}

/// The KTX2 data format descriptor: one basic block, 4×4 texel blocks, one sample per
/// channel (ETC1S: RGB, and AAA with alpha; UASTC: RGB or RGBA in one 128-bit sample).
fn data_format_descriptor(uastc: bool, alpha: bool, srgb: bool) -> Vec<u8> {
    let samples: Vec<(u16, u8, u8)> = match (uastc, alpha) {
        // (bit offset, bit length - 1, channel id)
        (false, false) => vec![(0, 63, CHANNEL_ETC1S_RGB)],
        (false, true) => vec![(0, 63, CHANNEL_ETC1S_RGB), (64, 63, CHANNEL_ETC1S_AAA)],
        (true, false) => vec![(0, 127, CHANNEL_UASTC_RGB)],
        (true, true) => vec![(0, 127, CHANNEL_UASTC_RGBA)],
    };
    let block_len = 24 + 16 * samples.len();
    let mut dfd = Vec::with_capacity(4 + block_len);
    put32(&mut dfd, (4 + block_len) as u32); // dfdTotalSize
    put32(&mut dfd, 0); // vendorId 0 (Khronos), descriptorType 0 (basic)
    put16(&mut dfd, 2); // versionNumber (KDF 1.3)
    put16(&mut dfd, block_len as u16);
    dfd.push(if uastc { MODEL_UASTC } else { MODEL_ETC1S });
    dfd.push(PRIMARIES_BT709);
    dfd.push(if srgb { TRANSFER_SRGB } else { TRANSFER_LINEAR });
    dfd.push(0); // flags: straight alpha
    dfd.extend_from_slice(&[3, 3, 0, 0]); // texelBlockDimension (4×4, minus one)
    // bytesPlane0..7: a UASTC block is 16 bytes; BasisLZ (supercompressed) says 0.
    dfd.extend_from_slice(&[if uastc { 16 } else { 0 }, 0, 0, 0, 0, 0, 0, 0]);
    for (offset, length, channel) in samples {
        put16(&mut dfd, offset);
        dfd.push(length);
        dfd.push(channel);
        dfd.extend_from_slice(&[0, 0, 0, 0]); // samplePosition
        put32(&mut dfd, 0); // sampleLower
        put32(&mut dfd, u32::MAX); // sampleUpper
    }
    dfd
}

/// Key/value data: each entry's length, key NUL value NUL, padded to 4 bytes.
fn key_values(pairs: &[(&str, &str)]) -> Vec<u8> {
    let mut kvd = Vec::new();
    for (key, value) in pairs {
        let len = key.len() + 1 + value.len() + 1;
        put32(&mut kvd, len as u32);
        kvd.extend_from_slice(key.as_bytes());
        kvd.push(0);
        kvd.extend_from_slice(value.as_bytes());
        kvd.push(0);
        kvd.resize(kvd.len().next_multiple_of(4), 0);
    }
    kvd
}

fn put16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}
fn put32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}
fn put64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A smooth colour picture with some detail (a gradient, rings and, optionally, alpha).
    fn picture(width: u32, height: u32, alpha: bool) -> RgbaImage {
        RgbaImage::from_fn(width, height, |x, y| {
            let (fx, fy) = (x as f32 / width as f32, y as f32 / height as f32);
            let ring = (((fx - 0.5).hypot(fy - 0.5) * 40.0).sin() * 0.5 + 0.5) * 255.0;
            let a = if alpha { (fx * 255.0) as u8 } else { 255 };
            image::Rgba([(fx * 255.0) as u8, ring as u8, (fy * 255.0) as u8, a])
        })
    }

    /// The KTX2 Kiln writes, read by a reader that is not ours (the pure-Rust `basisu`
    /// crate, a port of Binomial's transcoder): every level there with its size, and the base
    /// level's pixels exactly those Binomial's own transcoder gives for the `.basis` file the
    /// encoder wrote. ETC1S with and without alpha, UASTC with and without, sizes that are
    /// not multiples of 4.
    #[test]
    fn the_container_reads_back_exactly_in_an_independent_reader() {
        let mut checked = 0;
        for (mode, alpha, (w, h)) in [
            (Mode::Etc1s { quality: 128 }, false, (64, 48)),
            (Mode::Etc1s { quality: 128 }, true, (30, 18)),
            (Mode::Uastc { rdo: None }, false, (33, 20)),
            (Mode::Uastc { rdo: Some(1.0) }, true, (64, 64)),
        ] {
            let rgba = picture(w, h, alpha);
            let basis = encode(&rgba, mode, true).unwrap();
            let ktx2 = to_ktx2(&basis).unwrap();
            let reader = basisu::Transcoder::new(&ktx2).expect("an independent reader reads it");
            assert_eq!(reader.base_dimensions(), (w, h), "{mode:?}");
            let levels = 1 + w.max(h).ilog2();
            assert_eq!(reader.level_count(), levels, "{mode:?}");
            assert_eq!(reader.has_alpha(), alpha, "{mode:?}");
            for level in 0..levels {
                let info = reader.image_level_info(level).unwrap();
                assert_eq!(
                    (info.width, info.height),
                    ((w >> level).max(1), (h >> level).max(1))
                );
                reader
                    .transcode(
                        level,
                        basisu::TargetFormat::Astc4x4Rgba,
                        basisu::DecodeFlags::NONE,
                    )
                    .unwrap();
            }
            let theirs = reader
                .transcode(0, basisu::TargetFormat::Rgba32, basisu::DecodeFlags::NONE)
                .unwrap();
            let mut transcoder = Transcoder::new();
            transcoder.prepare_transcoding(&basis.data).unwrap();
            let reference = transcoder
                .transcode_image_level(
                    &basis.data,
                    TranscoderTextureFormat::RGBA32,
                    TranscodeParameters {
                        image_index: 0,
                        level_index: 0,
                        ..Default::default()
                    },
                )
                .unwrap();
            assert_eq!(theirs, reference, "{mode:?}");
            checked += 1;
        }
        assert_eq!(checked, 4);
    }

    /// The header says what the data is: Basis (no Vulkan format), the size, the levels, the
    /// supercompression, and in the data format descriptor the model and sRGB or linear.
    #[test]
    fn the_header_says_etc1s_or_uastc_and_srgb_or_linear() {
        let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        for (mode, srgb, model, scheme) in [
            (
                Mode::Etc1s { quality: 64 },
                true,
                MODEL_ETC1S,
                SUPERCOMPRESSION_BASISLZ,
            ),
            (
                Mode::Uastc { rdo: None },
                false,
                MODEL_UASTC,
                SUPERCOMPRESSION_NONE,
            ),
        ] {
            let ktx2 = to_ktx2(&encode(&picture(16, 8, false), mode, srgb).unwrap()).unwrap();
            assert_eq!(ktx2[..12], KTX2_IDENTIFIER);
            assert_eq!(u32_at(&ktx2, 12), 0, "vkFormat");
            assert_eq!((u32_at(&ktx2, 20), u32_at(&ktx2, 24)), (16, 8));
            assert_eq!(u32_at(&ktx2, 40), 5, "levels 16×8 … 1×1");
            assert_eq!(u32_at(&ktx2, 44), scheme);
            let dfd = u32_at(&ktx2, 48) as usize;
            assert_eq!(ktx2[dfd + 12], model);
            let transfer = if srgb { TRANSFER_SRGB } else { TRANSFER_LINEAR };
            assert_eq!(ktx2[dfd + 14], transfer);
        }
    }

    #[test]
    fn a_picture_gets_etc1s_scored_on_every_gpu_format() {
        let rgba = picture(128, 128, false);
        let (bytes, report) = choose(
            &rgba,
            true,
            Bound::Colour {
                min_ssimulacra2: 50.0,
            },
        );
        let bytes = bytes.expect("a smooth picture keeps a loose bound in ETC1S");
        assert!(report.chosen.starts_with("ktx2 etc1s"), "{report:?}");
        assert_eq!(report.bytes, bytes.len() as u64);
        assert_eq!(report.scores.len(), 3, "{report:?}");
        assert!(report.scores.values().all(|s| *s >= 50.0), "{report:?}");
        assert_eq!(report.formats, ["astc", "bc7", "etc2"], "{report:?}");
        // 128² and its mipmaps: a quarter of RGBA8's memory (the 2×2 and 1×1 levels still
        // take a block each).
        assert_eq!(report.gpu_bytes, gpu_bytes_8bpp(128, 128));
        let rgba8: u64 = (0..8).map(|l| 4 * (128u64 >> l).pow(2)).sum();
        let blocks: u64 = (0..8).map(|l| 16 * (32u64 >> l).max(1).pow(2)).sum();
        assert_eq!(report.gpu_bytes, blocks);
        assert!(rgba8 as f64 / blocks as f64 > 3.99, "{rgba8} {blocks}");
    }

    /// An impossible bound: every candidate tried and rejected with the format that failed,
    /// and no bytes.
    #[test]
    fn a_bound_no_encoding_keeps_is_said_per_candidate() {
        let rgba = picture(32, 32, false);
        let (bytes, report) = choose(
            &rgba,
            true,
            Bound::Colour {
                min_ssimulacra2: 99.9,
            },
        );
        assert!(bytes.is_none());
        assert_eq!(report.chosen, "none");
        // ETC1S 128 far below: no 255; then both UASTC.
        assert_eq!(report.candidates.len(), 3, "{report:?}");
        assert!(
            report.candidates.iter().all(|c| c
                .rejected
                .as_deref()
                .is_some_and(|r| r.contains("does not keep"))),
            "{report:?}"
        );
    }

    /// The control the scores rely on: a delivered texture whose red and blue are swapped
    /// fails the colour bound, a normal map whose X is flipped fails the angular one.
    #[test]
    fn swapped_channels_and_flipped_normals_fail_their_bounds() {
        let rgba = picture(64, 64, false);
        let mut swapped = rgba.clone();
        swapped.pixels_mut().for_each(|p| p.0.swap(0, 2));
        let colour = Bound::Colour {
            min_ssimulacra2: 80.0,
        };
        assert!(!colour.check(&rgba, &swapped).unwrap().1);
        assert!(colour.check(&rgba, &rgba).unwrap().1);
        let normals = bumps(64);
        let mut flipped = normals.clone();
        flipped.pixels_mut().for_each(|p| p.0[0] = 255 - p.0[0]);
        let normal = Bound::Normal {
            max_degrees: NORMAL_MAX_DEGREES,
        };
        assert!(!normal.check(&normals, &flipped).unwrap().1);
        let (same, kept) = normal.check(&normals, &normals).unwrap();
        assert!(same < 1e-3 && kept, "{same}");
    }

    /// A tangent-space normal map of soft bumps.
    fn bumps(size: u32) -> RgbaImage {
        RgbaImage::from_fn(size, size, |x, y| {
            let t = std::f64::consts::TAU / size as f64 * 2.0;
            let (nx, ny) = ((x as f64 * t).sin() * 0.4, (y as f64 * t).cos() * 0.4);
            let nz = (1.0 - nx * nx - ny * ny).sqrt();
            let c = |v: f64| ((v * 0.5 + 0.5) * 255.0).round() as u8;
            image::Rgba([c(nx), c(ny), c(nz), 255])
        })
    }

    #[test]
    fn a_normal_map_gets_uastc_within_its_angle() {
        let (bytes, report) = choose(
            &bumps(64),
            false,
            Bound::Normal {
                max_degrees: NORMAL_MAX_DEGREES,
            },
        );
        assert!(bytes.is_some(), "{report:?}");
        assert!(report.chosen.starts_with("ktx2 uastc"), "{report:?}");
        assert_eq!(report.measure, "normal_degrees_p99");
        for format in REQUIRED {
            assert!(
                report.scores[format.name()] <= NORMAL_MAX_DEGREES,
                "{report:?}"
            );
        }
        // UASTC transcoded to ETC2 loses what ASTC and BC7 keep: measured, and said.
        assert!(report.scores["etc2"] > report.scores["astc"], "{report:?}");
    }
}
