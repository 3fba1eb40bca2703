//! The image formats the stage reads and writes: what a file's first bytes say it is, decoding
//! under a pixel limit (`image`, pure Rust: PNG, zune-jpeg, image-webp), lossless PNG
//! optimisation (`oxipng`) and WebP encoding (libwebp through `libwebp-sys`). Decoding our
//! own WebP output goes through `image`'s decoder, not libwebp, so the check that an output
//! shows the source's pixels is made by a second implementation.

use std::io::Cursor;
use std::time::Duration;

use image::{DynamicImage, ImageFormat, ImageReader, Limits};
use serde::Serialize;

/// What a file's bytes are, whatever its name says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Png,
    Jpeg,
    Webp,
    Gif,
    Avif,
    Ktx2,
    Other,
}

impl Format {
    /// By magic number (`keys::image_extension`, which names published images the same way).
    pub fn sniff(bytes: &[u8]) -> Self {
        match kiln_common::keys::image_extension(bytes) {
            Some("png") => Self::Png,
            Some("jpg") => Self::Jpeg,
            Some("webp") => Self::Webp,
            Some("gif") => Self::Gif,
            Some("avif") => Self::Avif,
            Some("ktx2") => Self::Ktx2,
            _ => Self::Other,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Png => "png",
            Self::Jpeg => "jpeg",
            Self::Webp => "webp",
            Self::Gif => "gif",
            Self::Avif => "avif",
            Self::Ktx2 => "ktx2",
            Self::Other => "other",
        }
    }

    fn image_format(self) -> Option<ImageFormat> {
        match self {
            Self::Png => Some(ImageFormat::Png),
            Self::Jpeg => Some(ImageFormat::Jpeg),
            Self::Webp => Some(ImageFormat::WebP),
            _ => None,
        }
    }
}

/// An animated PNG (an `acTL` chunk before the first `IDAT`) or WebP (`ANIM` chunk): engines
/// play these as they are, so the stage keeps them.
pub fn is_animated(format: Format, bytes: &[u8]) -> bool {
    match format {
        Format::Png => png_chunks(bytes).any(|(kind, _)| kind == *b"acTL"),
        Format::Webp => {
            // RIFF chunks after the 12-byte header.
            let mut at = 12usize;
            while at + 8 <= bytes.len() {
                let kind = &bytes[at..at + 4];
                if kind == b"ANIM" || kind == b"ANMF" {
                    return true;
                }
                let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().expect("4")) as usize;
                at = at.saturating_add(8).saturating_add(len + (len & 1));
            }
            false
        }
        _ => false,
    }
}

/// PNG chunks up to the first `IDAT` (the ancillary ones that describe the pixels come first).
fn png_chunks(bytes: &[u8]) -> impl Iterator<Item = ([u8; 4], &[u8])> {
    let mut at = 8usize;
    std::iter::from_fn(move || {
        if at + 8 > bytes.len() {
            return None;
        }
        let len = u32::from_be_bytes(bytes[at..at + 4].try_into().expect("4")) as usize;
        let kind: [u8; 4] = bytes[at + 4..at + 8].try_into().expect("4");
        if kind == *b"IDAT" {
            return None;
        }
        let end = at.checked_add(8)?.checked_add(len)?;
        let data = bytes.get(at + 8..end)?;
        at = end.checked_add(4)?;
        Some((kind, data))
    })
}

/// A PNG whose colours are described by a gamma other than sRGB's and no ICC profile:
/// browsers colour-manage it, and WebP has no way to say the same.
pub fn png_colour_profile(bytes: &[u8]) -> Option<&'static str> {
    if png_chunks(bytes).any(|(kind, _)| kind == *b"iCCP") {
        // A profile wins over gAMA in browsers; the WebP carries the same profile.
        return None;
    }
    let gamma = png_chunks(bytes)
        .find(|(kind, _)| kind == b"gAMA")
        .map(|(_, data)| {
            data.get(..4)
                .map(|g| u32::from_be_bytes(g.try_into().expect("4")))
        });
    // 1/2.2 is what sRGB approximates; browsers treat it as sRGB.
    if gamma.is_some_and(|g| !matches!(g, Some(45000..=46000))) {
        return Some("a gamma other than sRGB's (gAMA)");
    }
    None
}

/// The image's ICC profile (PNG `iCCP`, JPEG `APP2`), if it has one: a WebP made from it
/// carries the same profile ([`with_icc_profile`]), so browsers show the same colours. An sRGB
/// profile (what editors embed by default: "GIMP built-in sRGB", "sRGB IEC61966-2.1") says
/// what an image without one means, so it is left out (`None`: about 700 bytes per image).
/// Only an RGB profile can go with RGB pixels; any other (a CMYK JPEG's, a grey PNG's) is an
/// error.
pub fn icc_profile(format: Format, bytes: &[u8]) -> Result<Option<Vec<u8>>, String> {
    use image::ImageDecoder;
    let mut reader = ImageReader::new(Cursor::new(bytes));
    reader.set_format(format.image_format().ok_or("not a format Kiln decodes")?);
    let mut decoder = reader.into_decoder().map_err(|e| e.to_string())?;
    let profile = decoder.icc_profile().map_err(|e| e.to_string())?;
    match profile {
        Some(p) if p.get(16..20) == Some(b"RGB ") && is_srgb_profile(&p) => Ok(None),
        Some(p) if p.get(16..20) == Some(b"RGB ") => Ok(Some(p)),
        Some(p) => Err(format!(
            "an ICC profile for {:?} colour, which RGB pixels cannot carry",
            String::from_utf8_lossy(p.get(16..20).unwrap_or(b"?")).trim()
        )),
        None => Ok(None),
    }
}

/// Whether an ICC profile's description (`desc` tag, ASCII or UTF-16 `mluc`) names sRGB.
fn is_srgb_profile(profile: &[u8]) -> bool {
    let u32_at = |at: usize| {
        profile
            .get(at..at + 4)
            .map(|b| u32::from_be_bytes(b.try_into().expect("4")) as usize)
    };
    let Some(count) = u32_at(128) else {
        return false;
    };
    (0..count.min(256)).any(|k| {
        let entry = 132 + 12 * k;
        if profile.get(entry..entry + 4) != Some(b"desc") {
            return false;
        }
        let (Some(offset), Some(size)) = (u32_at(entry + 4), u32_at(entry + 8)) else {
            return false;
        };
        let Some(text) = profile.get(offset..offset.saturating_add(size)) else {
            return false;
        };
        memchr::memmem::find(text, b"sRGB").is_some()
            || memchr::memmem::find(text, b"\0s\0R\0G\0B").is_some()
    })
}

/// A WebP with `icc` added as its `ICCP` chunk (libwebp's mux).
pub fn with_icc_profile(webp: &[u8], icc: &[u8]) -> Result<Vec<u8>, String> {
    use libwebp_sys as w;
    let data = w::WebPData {
        bytes: webp.as_ptr(),
        size: webp.len(),
    };
    let chunk = w::WebPData {
        bytes: icc.as_ptr(),
        size: icc.len(),
    };
    // SAFETY: `data` and `chunk` point into slices that outlive the mux (which copies them:
    // copy_data = 1); the mux and the assembled data are freed before returning.
    unsafe {
        let mux = w::WebPMuxCreateInternal(&data, 1, w::WEBP_MUX_ABI_VERSION as i32);
        if mux.is_null() {
            return Err("libwebp mux: cannot read our own WebP".into());
        }
        let set = w::WebPMuxSetChunk(mux, c"ICCP".as_ptr(), &chunk, 1);
        let mut out = w::WebPData::default();
        let assembled = if set == w::WebPMuxError::WEBP_MUX_OK {
            w::WebPMuxAssemble(mux, &mut out)
        } else {
            set
        };
        w::WebPMuxDelete(mux);
        if assembled != w::WebPMuxError::WEBP_MUX_OK || out.bytes.is_null() {
            return Err(format!("libwebp mux: {assembled:?}"));
        }
        let bytes = std::slice::from_raw_parts(out.bytes, out.size).to_vec();
        w::WebPDataClear(&mut out);
        Ok(bytes)
    }
}

/// The image's size from its header, without decoding its pixels.
pub fn dimensions(format: Format, bytes: &[u8]) -> Result<(u32, u32), String> {
    let mut reader = ImageReader::new(Cursor::new(bytes));
    reader.set_format(format.image_format().ok_or("not a format Kiln decodes")?);
    reader.into_dimensions().map_err(|e| e.to_string())
}

/// Decodes the image, refusing more than `max_pixels` (checked on the header first, so a
/// decompression bomb costs nothing) and allocations past what that many pixels need.
pub fn decode(format: Format, bytes: &[u8], max_pixels: u64) -> Result<DynamicImage, String> {
    let (w, h) = dimensions(format, bytes)?;
    if u64::from(w) * u64::from(h) > max_pixels {
        return Err(format!(
            "{w}×{h} pixels is more than the limit of {max_pixels} (images max_pixels)"
        ));
    }
    let mut reader = ImageReader::new(Cursor::new(bytes));
    reader.set_format(format.image_format().ok_or("not a format Kiln decodes")?);
    let mut limits = Limits::default();
    limits.max_image_width = Some(w);
    limits.max_image_height = Some(h);
    // RGBA at 16 bits per channel, with room for a decoder's scratch.
    limits.max_alloc = Some(max_pixels.saturating_mul(8).saturating_add(64 << 20));
    reader.limits(limits);
    reader.decode().map_err(|e| e.to_string())
}

/// Whether two decoded images show exactly the same pixels, alpha and the colour under
/// transparent pixels included (engines that do not premultiply sample it at edges).
pub fn same_pixels(a: &DynamicImage, b: &DynamicImage) -> bool {
    if a.width() != b.width() || a.height() != b.height() {
        return false;
    }
    let deep = |i: &DynamicImage| {
        matches!(
            i,
            DynamicImage::ImageLuma16(_)
                | DynamicImage::ImageLumaA16(_)
                | DynamicImage::ImageRgb16(_)
                | DynamicImage::ImageRgba16(_)
                | DynamicImage::ImageRgb32F(_)
                | DynamicImage::ImageRgba32F(_)
        )
    };
    if deep(a) || deep(b) {
        a.to_rgba16().as_raw() == b.to_rgba16().as_raw()
    } else {
        a.to_rgba8().as_raw() == b.to_rgba8().as_raw()
    }
}

/// The size a `width`×`height` image is scaled to so that neither side exceeds `max_size`,
/// its aspect kept (each side at least 1); `None` when it already fits.
pub fn fitted_size(width: u32, height: u32, max_size: u32) -> Option<(u32, u32)> {
    let longest = width.max(height);
    if longest <= max_size || max_size == 0 {
        return None;
    }
    let scale = |side: u32| {
        ((u64::from(side) * u64::from(max_size) + u64::from(longest) / 2) / u64::from(longest))
            .clamp(1, u64::from(max_size)) as u32
    };
    Some((scale(width), scale(height)))
}

/// `source` scaled down to fit `max_size` ([`fitted_size`]) and the size it was scaled to; as it
/// is where no size is set or it already fits.
pub fn fit(source: DynamicImage, max_size: Option<u32>) -> (DynamicImage, Option<(u32, u32)>) {
    match max_size.and_then(|m| fitted_size(source.width(), source.height(), m)) {
        Some((w, h)) => (
            DynamicImage::ImageRgba8(resize(&source.to_rgba8(), w, h)),
            Some((w, h)),
        ),
        None => (source, None),
    }
}

/// The image scaled to `width`×`height` (Lanczos3 on straight RGBA, the filter image editors
/// and gltfpack's `-ts` use for downscaling).
pub fn resize(rgba: &image::RgbaImage, width: u32, height: u32) -> image::RgbaImage {
    image::imageops::resize(rgba, width, height, image::imageops::FilterType::Lanczos3)
}

/// An RGBA image as a PNG (then worth an [`optimize_png`]).
pub fn encode_png(rgba: &image::RgbaImage) -> Result<Vec<u8>, String> {
    let mut out = Cursor::new(Vec::new());
    rgba.write_to(&mut out, ImageFormat::Png)
        .map_err(|e| format!("PNG encoding: {e}"))?;
    Ok(out.into_inner())
}

/// A PNG re-compressed losslessly (oxipng at `level`, stopping its search after `timeout`),
/// keeping the colour under transparent pixels and every chunk that changes how the image
/// looks.
pub fn optimize_png(bytes: &[u8], level: u8, timeout: Duration) -> Result<Vec<u8>, String> {
    let mut options = oxipng::Options::from_preset(level);
    options.optimize_alpha = false;
    options.strip = oxipng::StripChunks::Safe;
    options.timeout = Some(timeout);
    oxipng::optimize_from_memory(bytes, &options).map_err(|e| e.to_string())
}

/// How a WebP is encoded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum WebpMode {
    /// Lossless, keeping the colour under transparent pixels (cwebp `-lossless -exact`), at
    /// libwebp's lossless preset `level` (0–9; cwebp's default `-q 75 -m 4` is about 5).
    Lossless { level: u8 },
    /// Lossy at `quality` (0–100), alpha lossless, sharp RGB→YUV, `method` 0–6.
    Lossy { quality: f32, method: u8 },
}

/// Encodes RGBA8 pixels as WebP with libwebp.
pub fn encode_webp(rgba: &image::RgbaImage, mode: WebpMode) -> Result<Vec<u8>, String> {
    use libwebp_sys as w;
    let (width, height) = rgba.dimensions();
    if width > 16383 || height > 16383 {
        return Err(format!(
            "{width}×{height} is larger than WebP's 16383×16383"
        ));
    }
    let mut config = w::WebPConfig::new().map_err(|()| "libwebp: config")?;
    match mode {
        WebpMode::Lossless { level } => {
            // SAFETY: `config` is an initialised WebPConfig.
            if unsafe { w::WebPConfigLosslessPreset(&mut config, i32::from(level.min(9))) } == 0 {
                return Err("libwebp: lossless preset".into());
            }
            config.exact = 1;
        }
        WebpMode::Lossy { quality, method } => {
            config.lossless = 0;
            config.quality = quality.clamp(0.0, 100.0);
            config.method = i32::from(method.min(6));
            config.alpha_quality = 100;
            config.use_sharp_yuv = 1;
        }
    }
    // SAFETY: `config` was initialised by libwebp.
    if unsafe { w::WebPValidateConfig(&config) } == 0 {
        return Err("libwebp: invalid configuration".into());
    }
    let mut picture = w::WebPPicture::new().map_err(|()| "libwebp: picture")?;
    picture.use_argb = 1;
    picture.width = width as i32;
    picture.height = height as i32;
    let mut writer = std::mem::MaybeUninit::<w::WebPMemoryWriter>::uninit();
    // SAFETY: every pointer handed to libwebp lives until the end of this block: the pixels
    // (`rgba`, read only), the picture (freed below), the memory writer (cleared below).
    unsafe {
        w::WebPMemoryWriterInit(writer.as_mut_ptr());
        let mut writer = writer.assume_init();
        let imported = w::WebPPictureImportRGBA(&mut picture, rgba.as_ptr(), (width * 4) as i32);
        if imported == 0 {
            w::WebPPictureFree(&mut picture);
            return Err("libwebp: out of memory importing the pixels".into());
        }
        picture.writer = Some(w::WebPMemoryWrite);
        picture.custom_ptr = (&mut writer as *mut w::WebPMemoryWriter).cast();
        let ok = w::WebPEncode(&config, &mut picture);
        let error = picture.error_code;
        w::WebPPictureFree(&mut picture);
        let out = if ok != 0 && !writer.mem.is_null() {
            Ok(std::slice::from_raw_parts(writer.mem, writer.size).to_vec())
        } else {
            Err(format!("libwebp: encoding failed ({error:?})"))
        };
        w::WebPMemoryWriterClear(&mut writer);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(width: u32, height: u32) -> image::RgbaImage {
        image::RgbaImage::from_fn(width, height, |x, y| {
            // Transparent pixels with colour under them: a lossless encoder must keep it.
            let a = if (x + y) % 7 == 0 { 0 } else { 255 };
            image::Rgba([(x * 7) as u8, (y * 3) as u8, ((x ^ y) * 5) as u8, a])
        })
    }

    #[test]
    fn lossless_webp_keeps_every_pixel_and_the_colour_under_transparency() {
        let src = sample(64, 48);
        let webp = encode_webp(&src, WebpMode::Lossless { level: 5 }).unwrap();
        assert_eq!(Format::sniff(&webp), Format::Webp);
        let back = decode(Format::Webp, &webp, 1 << 20).unwrap();
        assert!(same_pixels(&DynamicImage::ImageRgba8(src.clone()), &back));
        // The control: a lossy encode (and a channel swap) must fail the same check.
        let lossy = encode_webp(
            &src,
            WebpMode::Lossy {
                quality: 50.0,
                method: 4,
            },
        )
        .unwrap();
        let back = decode(Format::Webp, &lossy, 1 << 20).unwrap();
        assert!(!same_pixels(&DynamicImage::ImageRgba8(src.clone()), &back));
        let mut swapped = src.clone();
        for p in swapped.pixels_mut() {
            p.0.swap(0, 2);
        }
        assert!(!same_pixels(
            &DynamicImage::ImageRgba8(src),
            &DynamicImage::ImageRgba8(swapped)
        ));
    }

    #[test]
    fn a_fitted_size_keeps_the_aspect_and_never_grows() {
        assert_eq!(fitted_size(4096, 2048, 1024), Some((1024, 512)));
        assert_eq!(fitted_size(2048, 4096, 1024), Some((512, 1024)));
        assert_eq!(fitted_size(1000, 3, 100), Some((100, 1)));
        assert_eq!(fitted_size(3000, 1, 100), Some((100, 1)), "never 0 pixels");
        assert_eq!(fitted_size(1024, 1024, 1024), None, "already fits");
        assert_eq!(fitted_size(512, 300, 1024), None, "never scaled up");
        let scaled = resize(&sample(64, 32), 16, 8);
        assert_eq!(scaled.dimensions(), (16, 8));
        let png = encode_png(&scaled).unwrap();
        let back = decode(Format::Png, &png, u64::MAX).unwrap();
        assert!(same_pixels(&DynamicImage::ImageRgba8(scaled), &back));
    }

    #[test]
    fn formats_are_told_by_their_bytes() {
        assert_eq!(Format::sniff(b"\xFF\xD8\xFF\xE0rest"), Format::Jpeg);
        assert_eq!(Format::sniff(b"GIF89a..."), Format::Gif);
        assert_eq!(Format::sniff(b"not an image"), Format::Other);
    }
}
