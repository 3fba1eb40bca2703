//! The images stage: what each kind of image gets, judged by decoders other than the one
//! that encoded it (WebP written by libwebp is read back by `image`'s pure-Rust decoder),
//! with controls that must fail the same checks; the bad inputs of issue 32, each with the
//! answer it gets; and the whole pipeline through `kiln-worker process`.

mod support;

use std::io::{Cursor, Write};
use std::process::Command;

use image::{DynamicImage, ImageFormat, RgbaImage};
use kiln_stages::stages::images::codec::{self, Format};
use kiln_stages::stages::images::{ImageOptions, Optimized, Plan, Role, optimize_image};
use kiln_stages::stages::images::{model, score};

/// A sprite sheet: flat shapes with hard edges on a transparent background, colour kept
/// under the transparent pixels (as exporters leave it).
fn sprite(width: u32, height: u32) -> RgbaImage {
    RgbaImage::from_fn(width, height, |x, y| {
        let cell = (x / 32 + y / 32) % 4;
        let inside = (x % 32).abs_diff(16).pow(2) + (y % 32).abs_diff(16).pow(2) < 150;
        let colour = [[230, 60, 40], [40, 180, 90], [50, 90, 220], [240, 200, 40]][cell as usize];
        // Shaded like drawn art: the shade follows the position inside the shape.
        let shade = |c: u8| (u32::from(c) * (160 + (x * 3 + y * 5) % 96) / 255) as u8;
        if inside {
            image::Rgba([shade(colour[0]), shade(colour[1]), shade(colour[2]), 255])
        } else {
            image::Rgba([colour[0] / 2, colour[1] / 2, 17, 0])
        }
    })
}

/// The sprite with a grainy backdrop under its transparent pixels: colour a lossless encoder
/// must keep although no premultiplying engine shows it.
fn grainy_sprite(width: u32, height: u32) -> RgbaImage {
    let grain = background(width, height);
    let mut source = sprite(width, height);
    for (p, g) in source.pixels_mut().zip(grain.pixels()) {
        if p.0[3] == 0 {
            p.0 = [g.0[0], g.0[1], g.0[2], 0];
        }
    }
    source
}

/// A background: smooth gradients with grain, opaque (what lossy shrinks most).
fn background(width: u32, height: u32) -> RgbaImage {
    let mut state = 7u32;
    RgbaImage::from_fn(width, height, |x, y| {
        state = state.wrapping_mul(1_103_515_245).wrapping_add(12345);
        let grain = ((state >> 16) % 9) as i32 - 4;
        let c = |v: i32| (v + grain).clamp(0, 255) as u8;
        image::Rgba([
            c((x * 255 / width) as i32),
            c((y * 200 / height) as i32 + 30),
            c(((x + y) * 120 / (width + height)) as i32 + 90),
            255,
        ])
    })
}

fn encode(image: &DynamicImage, format: ImageFormat) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    image.write_to(&mut out, format).unwrap();
    out.into_inner()
}

fn png_of(image: &RgbaImage) -> Vec<u8> {
    encode(&DynamicImage::ImageRgba8(image.clone()), ImageFormat::Png)
}

fn plan(role: Role, lossy: bool) -> Plan {
    Plan {
        role,
        lossy,
        bound: ImageOptions::default().min_ssimulacra2,
        data_texture: false,
        max_size: None,
    }
}

fn run(bytes: &[u8], plan: &Plan) -> Optimized {
    optimize_image(bytes, plan, &ImageOptions::default())
}

/// The chosen bytes, decoded by `image` (not libwebp), against the source's pixels.
fn decoded(bytes: &[u8]) -> DynamicImage {
    image::load_from_memory(bytes).expect("decodes")
}

#[test]
fn a_png_becomes_lossless_webp_with_every_pixel_and_the_colour_under_transparency() {
    let source = grainy_sprite(256, 128);
    let png = png_of(&source);
    let out = run(&png, &plan(Role::Standalone, false));
    let (bytes, format) = out.chosen.expect("re-encoded");
    assert_eq!(format, Format::Webp, "{:?}", out.result.candidates);
    assert_eq!(out.result.chosen, "webp-lossless");
    assert!(bytes.len() < png.len(), "{} vs {}", bytes.len(), png.len());
    assert_eq!(out.result.bytes_after, bytes.len() as u64);
    assert_eq!(
        decoded(&bytes).to_rgba8().as_raw(),
        source.as_raw(),
        "pixels and hidden colour"
    );
    // Controls the same comparison must reject: premultiplied colour, swapped channels, the
    // hidden colour cleared (what encoders without `exact` do).
    let mut premultiplied = source.clone();
    let mut swapped = source.clone();
    let mut cleared = source.clone();
    for ((p, s), c) in premultiplied
        .pixels_mut()
        .zip(swapped.pixels_mut())
        .zip(cleared.pixels_mut())
    {
        if p.0[3] == 0 {
            p.0 = [0, 0, 0, 0];
            c.0 = [0, 0, 0, 0];
        }
        s.0.swap(0, 2);
    }
    for control in [&premultiplied, &swapped, &cleared] {
        assert_ne!(decoded(&bytes).to_rgba8().as_raw(), control.as_raw());
    }
    // The report says what was tried.
    let tried: Vec<_> = out
        .result
        .candidates
        .iter()
        .map(|c| c.encoding.as_str())
        .collect();
    assert_eq!(tried, ["webp-lossless", "png-optimized"]);
    assert_eq!(out.result.ssimulacra2, Some(100.0));
}

#[test]
fn a_gltf_texture_stays_png_and_only_gets_smaller() {
    // A PNG written without compression: oxipng must shrink it; WebP is not core glTF.
    let source = sprite(128, 128);
    let mut png = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut png, 128, 128);
        enc.set_color(png::ColorType::Rgba);
        enc.set_compression(png::Compression::NoCompression);
        enc.write_header()
            .unwrap()
            .write_image_data(source.as_raw())
            .unwrap();
    }
    let out = run(&png, &plan(Role::GltfTexture, true));
    let (bytes, format) = out.chosen.expect("re-encoded");
    assert_eq!(format, Format::Png);
    assert_eq!(out.result.chosen, "png-optimized");
    assert_eq!(decoded(&bytes).to_rgba8().as_raw(), source.as_raw());
    assert_eq!(out.result.gpu_bytes, Some(128 * 128 * 4 * 4 / 3));
    assert!(
        out.result
            .candidates
            .iter()
            .all(|c| c.encoding != "webp-lossless")
    );
}

#[test]
fn lossy_keeps_the_smallest_webp_at_or_above_the_bound_and_reports_it_when_off() {
    let source = background(256, 256);
    let png = png_of(&source);
    let off = run(&png, &plan(Role::Standalone, false));
    let estimate = off.result.lossy_estimate.clone().expect("estimated");
    assert!(estimate.ssimulacra2.unwrap() >= 80.0);
    let lossless = off.result.bytes_after;
    assert!(estimate.bytes < lossless, "{estimate:?} vs {lossless}");

    let on = run(&png, &plan(Role::Standalone, true));
    let (bytes, format) = on.chosen.expect("re-encoded");
    assert_eq!(format, Format::Webp);
    assert_eq!(on.result.chosen, "webp-lossy");
    assert_eq!(bytes.len() as u64, estimate.bytes);
    // Scored again here on what `image` decodes: at the bound or above.
    let again = score::score(&source, &decoded(&bytes).to_rgba8()).unwrap();
    assert!(again.ssimulacra2 >= 80.0, "{again:?}");
    assert!(on.result.psnr.is_some());
    // The control: a fixed low quality fails the same bound.
    let q10 = codec::encode_webp(
        &source,
        codec::WebpMode::Lossy {
            quality: 10.0,
            method: 4,
        },
    )
    .unwrap();
    assert!(
        score::score(&source, &decoded(&q10).to_rgba8())
            .unwrap()
            .ssimulacra2
            < 80.0
    );
    // A stricter bound costs bytes.
    let strict = optimize_image(
        &png,
        &Plan {
            bound: 90.0,
            ..plan(Role::Standalone, true)
        },
        &ImageOptions::default(),
    );
    assert!(strict.result.bytes_after >= on.result.bytes_after);
    // Data textures are never perceptually lossy.
    let normal = optimize_image(
        &png,
        &Plan {
            data_texture: true,
            ..plan(Role::Standalone, true)
        },
        &ImageOptions::default(),
    );
    assert_ne!(normal.result.chosen, "webp-lossy");
}

/// A PNG with an RGB ICC profile (FlightHelmet's textures have one): the WebP carries the same
/// profile, so browsers colour-manage it alike; a profile for other colour (CMYK, grey) is not
/// put on RGB pixels, and that PNG stays PNG.
#[test]
fn a_colour_profile_travels_into_the_webp() {
    let profile = |space: &[u8; 4]| {
        let mut p = vec![0u8; 132];
        p[..4].copy_from_slice(&132u32.to_be_bytes());
        p[12..16].copy_from_slice(b"mntr");
        p[16..20].copy_from_slice(space);
        p[36..40].copy_from_slice(b"acsp");
        p
    };
    let with_profile = |icc: Vec<u8>| {
        let mut png = Vec::new();
        let mut info = png::Info::with_size(256, 128);
        info.color_type = png::ColorType::Rgba;
        info.icc_profile = Some(std::borrow::Cow::Owned(icc));
        let mut enc = png::Encoder::with_info(&mut png, info).unwrap();
        enc.set_compression(png::Compression::NoCompression);
        enc.write_header()
            .unwrap()
            .write_image_data(grainy_sprite(256, 128).as_raw())
            .unwrap();
        png
    };
    let rgb = with_profile(profile(b"RGB "));
    let out = run(&rgb, &plan(Role::Standalone, false));
    let (bytes, format) = out.chosen.expect("re-encoded");
    assert_eq!(format, Format::Webp, "{:?}", out.result.candidates);
    assert_eq!(
        codec::icc_profile(Format::Webp, &bytes).unwrap(),
        Some(profile(b"RGB ")),
        "the WebP carries the PNG's profile"
    );
    assert_eq!(
        decoded(&bytes).to_rgba8().as_raw(),
        grainy_sprite(256, 128).as_raw()
    );
    // An sRGB profile says what a WebP without one means: left out (its ~700 bytes saved).
    let mut srgb = profile(b"RGB ");
    srgb[128..132].copy_from_slice(&1u32.to_be_bytes());
    srgb.extend_from_slice(b"desc");
    srgb.extend_from_slice(&144u32.to_be_bytes());
    let text = b"desc\0\0\0\0\0\0\0\x0esRGB built-in\0";
    srgb.extend_from_slice(&(text.len() as u32).to_be_bytes());
    srgb.extend_from_slice(text);
    let out = run(&with_profile(srgb), &plan(Role::Standalone, false));
    let (bytes, format) = out.chosen.expect("re-encoded");
    assert_eq!(format, Format::Webp);
    assert_eq!(codec::icc_profile(Format::Webp, &bytes).unwrap(), None);
    let cmyk = with_profile(profile(b"CMYK"));
    let out = run(&cmyk, &plan(Role::Standalone, true));
    let webp = out
        .result
        .candidates
        .iter()
        .find(|c| c.encoding == "webp-lossless")
        .unwrap();
    assert!(
        webp.rejected.as_deref().unwrap().contains("CMYK"),
        "{webp:?}"
    );
    assert_ne!(out.result.chosen, "webp-lossy");
}

#[test]
fn a_jpeg_is_never_made_lossless_webp() {
    let jpeg = encode(
        &DynamicImage::ImageRgb8(DynamicImage::ImageRgba8(background(128, 128)).to_rgb8()),
        ImageFormat::Jpeg,
    );
    let out = run(&jpeg, &plan(Role::Standalone, false));
    assert!(out.chosen.is_none());
    assert_eq!(out.result.source_format, Format::Jpeg);
    assert!(out.result.kept.as_deref().unwrap().contains("JPEG"));
    assert!(out.result.candidates.is_empty());
}

/// `[images] max_size`: what is larger is scaled down to fit (aspect kept, Lanczos3) and then
/// encoded as usual: losslessly against the scaled pixels for a PNG, by the bounded lossy search
/// for a JPEG (which has no lossless form worth sending); what already fits, a data JPEG and a
/// PNG whose colours need a profile are left at their size. The report gives both sizes.
#[test]
fn max_size_scales_down_what_is_larger_and_says_so() {
    use image::imageops::{FilterType, resize};
    let source = background(300, 120);
    let sized = |max_size| Plan {
        max_size: Some(max_size),
        ..plan(Role::Standalone, false)
    };
    let out = run(&png_of(&source), &sized(100));
    let (bytes, format) = out.chosen.expect("a scaled encoding");
    assert_eq!(format, Format::Webp, "{:?}", out.result);
    assert_eq!(out.result.resized, Some([100, 40]));
    assert_eq!(
        (out.result.width, out.result.height),
        (Some(300), Some(120))
    );
    let back = decoded(&bytes).to_rgba8();
    assert_eq!(back.dimensions(), (100, 40));
    let expected = resize(&source, 100, 40, FilterType::Lanczos3);
    assert_eq!(
        back.as_raw(),
        expected.as_raw(),
        "lossless against the scaled pixels"
    );
    // Control: another filter's scaling is not what was encoded.
    let nearest = resize(&source, 100, 40, FilterType::Nearest);
    assert_ne!(back.as_raw(), nearest.as_raw());

    // Already within the size: untouched.
    let fits = run(&png_of(&source), &sized(300));
    assert_eq!(fits.result.resized, None);
    assert_eq!(decoded(&fits.chosen.unwrap().0).width(), 300);

    // A JPEG, lossy off: scaled, then the bounded lossy search against the scaled pixels.
    let jpeg = encode(
        &DynamicImage::ImageRgb8(DynamicImage::ImageRgba8(source.clone()).to_rgb8()),
        ImageFormat::Jpeg,
    );
    let out = run(&jpeg, &sized(150));
    assert_eq!(out.result.chosen, "webp-lossy", "{:?}", out.result);
    assert_eq!(out.result.resized, Some([150, 60]));
    let (bytes, _) = out.chosen.unwrap();
    let scaled_source = resize(&decoded(&jpeg).to_rgba8(), 150, 60, FilterType::Lanczos3);
    let s = score::score(&scaled_source, &decoded(&bytes).to_rgba8()).unwrap();
    assert!(s.ssimulacra2 >= 80.0, "{s:?}");
    // A data texture is never perceptually lossy: a normal-map JPEG keeps its size.
    let data = run(
        &jpeg,
        &Plan {
            data_texture: true,
            ..sized(150)
        },
    );
    assert!(data.chosen.is_none());
    assert_eq!(data.result.resized, None);
    assert!(data.result.kept.is_some());
}

/// Each bad or unusual input of issue 32 and what it gets: re-encoded (pixels checked), or
/// kept with its reason. Nothing panics.
#[test]
fn every_bad_or_unusual_image_gets_a_clear_answer() {
    let sprite_png = png_of(&sprite(64, 64));
    let mut cases: Vec<(&str, Vec<u8>, Expect)> = Vec::new();
    // Truncated and corrupt files.
    cases.push((
        "truncated PNG",
        sprite_png[..sprite_png.len() / 2].to_vec(),
        Expect::Kept("cannot decode"),
    ));
    let mut corrupt = sprite_png.clone();
    for b in corrupt.iter_mut().skip(60).step_by(7) {
        *b ^= 0x5A;
    }
    cases.push(("corrupt PNG", corrupt, Expect::Kept("cannot")));
    cases.push((
        "truncated JPEG",
        encode(
            &DynamicImage::ImageRgb8(image::RgbImage::new(64, 64)),
            ImageFormat::Jpeg,
        )[..100]
            .to_vec(),
        Expect::Kept("JPEG|cannot"),
    ));
    cases.push((
        "truncated WebP",
        b"RIFF\x20\0\0\0WEBPVP8L\x10\0\0\0\x2f".to_vec(),
        Expect::Kept("cannot"),
    ));
    // A decompression bomb: a header claiming 50 000 × 50 000 pixels.
    cases.push((
        "50 000² PNG",
        bomb_png(50_000, 50_000),
        Expect::Kept("limit"),
    ));
    // 16-bit, palette and grey PNGs: pixel-exact re-encodings only.
    let deep = DynamicImage::ImageRgba16(image::ImageBuffer::from_fn(64, 64, |x, y| {
        image::Rgba([(x * 1000 + 7) as u16, (y * 900 + 3) as u16, 12345, 65535])
    }));
    cases.push((
        "16-bit PNG",
        encode(&deep, ImageFormat::Png),
        Expect::ExactOrKept,
    ));
    let mut palette = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut palette, 64, 64);
        enc.set_color(png::ColorType::Indexed);
        enc.set_palette(
            (0..=255u8)
                .flat_map(|i| [i, 255 - i, i / 2])
                .collect::<Vec<_>>(),
        );
        enc.set_compression(png::Compression::NoCompression);
        let data: Vec<u8> = (0..64 * 64)
            .map(|i| ((i / 64 + i % 64) % 256) as u8)
            .collect();
        enc.write_header().unwrap().write_image_data(&data).unwrap();
    }
    cases.push(("palette PNG", palette, Expect::ExactOrKept));
    let grey = DynamicImage::ImageLuma8(image::GrayImage::from_fn(64, 64, |x, y| {
        image::Luma([((x * 4) ^ (y * 4)) as u8])
    }));
    cases.push((
        "grey PNG",
        encode(&grey, ImageFormat::Png),
        Expect::ExactOrKept,
    ));
    // Animated PNG: kept.
    let mut apng = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut apng, 16, 16);
        enc.set_color(png::ColorType::Rgba);
        enc.set_animated(2, 0).unwrap();
        let mut w = enc.write_header().unwrap();
        w.write_image_data(&[255u8; 16 * 16 * 4]).unwrap();
        w.write_image_data(&[0u8; 16 * 16 * 4]).unwrap();
    }
    cases.push(("animated PNG", apng, Expect::Kept("animated")));
    // A `.png` that is really a JPEG: treated as the JPEG it is.
    cases.push((
        "JPEG named .png",
        encode(
            &DynamicImage::ImageRgb8(image::RgbImage::new(32, 32)),
            ImageFormat::Jpeg,
        ),
        Expect::JpegKept,
    ));
    // A PNG with an ICC profile: WebP would drop it; the optimised PNG keeps it.
    let mut icc = Vec::new();
    {
        let mut info = png::Info::with_size(64, 64);
        info.color_type = png::ColorType::Rgba;
        info.icc_profile = Some(std::borrow::Cow::Owned(vec![0u8; 128]));
        let mut enc = png::Encoder::with_info(&mut icc, info).unwrap();
        enc.set_compression(png::Compression::NoCompression);
        enc.write_header()
            .unwrap()
            .write_image_data(sprite(64, 64).as_raw())
            .unwrap();
    }
    cases.push(("PNG with ICC profile", icc, Expect::NotWebp));
    // Not an image at all, and empty.
    cases.push((
        "text named .png",
        b"hello".to_vec(),
        Expect::Kept("not a PNG"),
    ));
    cases.push(("empty file", Vec::new(), Expect::Kept("not a PNG")));

    let mut checked = 0;
    for (name, bytes, expect) in &cases {
        for lossy in [false, true] {
            let out = run(bytes, &plan(Role::Standalone, lossy));
            let expect = match expect {
                // Lossless never makes a JPEG WebP; lossy may (within the bound).
                Expect::JpegKept if !lossy => &Expect::Kept("JPEG"),
                Expect::JpegKept => &Expect::ExactOrKept,
                other => other,
            };
            match expect {
                Expect::Kept(why) => {
                    assert!(out.chosen.is_none(), "{name}: kept");
                    let reason = out.result.kept.clone().unwrap_or_default();
                    assert!(
                        why.split('|').any(|w| reason.contains(w)),
                        "{name}: {reason:?} should say {why:?}"
                    );
                }
                Expect::JpegKept => unreachable!(),
                Expect::ExactOrKept | Expect::NotWebp => {
                    if let Some((out_bytes, format)) = &out.chosen {
                        if *expect == Expect::NotWebp {
                            assert_eq!(*format, Format::Png, "{name}");
                        }
                        if out.result.chosen != "webp-lossy" {
                            let a = codec::decode(Format::sniff(bytes), bytes, 1 << 30).unwrap();
                            let b = codec::decode(*format, out_bytes, 1 << 30).unwrap();
                            assert!(codec::same_pixels(&a, &b), "{name}: pixel-exact");
                        }
                    } else {
                        assert!(out.result.kept.is_some(), "{name}: says why");
                    }
                }
            }
            assert_eq!(out.result.bytes_before, bytes.len() as u64);
            checked += 1;
        }
    }
    assert_eq!(checked, cases.len() * 2);
    assert_eq!(cases.len(), 13);
}

/// A PNG of `width` × `height` grey pixels whose IDAT holds the first rows' zeros only: a
/// few hundred bytes that claim gigabytes once decoded.
fn bomb_png(width: u32, height: u32) -> Vec<u8> {
    let chunk = |out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]| {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        out.extend_from_slice(kind);
        out.extend_from_slice(data);
        let mut crc = flate2::Crc::new();
        crc.update(kind);
        crc.update(data);
        out.extend_from_slice(&crc.sum().to_be_bytes());
    };
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, 0, 0, 0, 0]);
    chunk(&mut png, b"IHDR", &ihdr);
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    z.write_all(&vec![0u8; 4 * (width as usize + 1)]).unwrap();
    chunk(&mut png, b"IDAT", &z.finish().unwrap());
    chunk(&mut png, b"IEND", &[]);
    png
}

#[derive(PartialEq)]
enum Expect {
    Kept(&'static str),
    ExactOrKept,
    NotWebp,
    JpegKept,
}

/// `lossy`, the served encoding of `source`, is under half its bytes and scores at least the
/// default bound (ssimulacra2 80) against it.
fn assert_lossy_at_bound(source: &[u8], lossy: &[u8]) {
    assert!(
        lossy.len() < source.len() / 2,
        "{} vs {}",
        lossy.len(),
        source.len()
    );
    let s = score::score(&decoded(source).to_rgba8(), &decoded(lossy).to_rgba8()).unwrap();
    assert!(s.ssimulacra2 >= 80.0, "{s:?}");
}

/// The whole pipeline: a 2D build's images served at their own paths as WebP (true type in
/// the key), the originals published and listed, a glTF texture kept PNG, the report and a
/// build setting turning lossy on for one folder; a bad `[images]` key fails the build naming it.
#[test]
fn a_build_publishes_smaller_images_at_their_own_paths_and_keeps_the_originals() {
    let dir = tempfile::tempdir().unwrap();
    let sprite = png_of(&grainy_sprite(256, 128));
    let texture = png_of(&background(128, 64));
    let bg = png_of(&background(256, 256));
    let gltf = br#"{"asset":{"version":"2.0"},"images":[{"uri":"tex.png"}]}"#;
    let kiln_toml = b"[images]\nlossy = [\"bg/**\"]\n";
    let (out, manifest, report) = process(
        dir.path(),
        "game",
        &[
            ("index.html", b"<!doctype html><img src=sprites/a.png>"),
            ("sprites/a.png", &sprite),
            ("bg/sky.png", &bg),
            ("models/m.gltf", gltf),
            ("models/tex.png", &texture),
            ("kiln.toml", kiln_toml),
        ],
    );
    let file = |path: &str| {
        manifest["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == path)
            .unwrap_or_else(|| panic!("{path} in the manifest"))
            .clone()
    };
    let object =
        |f: &serde_json::Value| std::fs::read(out.join(f["key"].as_str().unwrap())).unwrap();
    // The sprite's own path serves lossless WebP, named and typed as WebP.
    let a = file("sprites/a.png");
    assert!(a["key"].as_str().unwrap().ends_with(".webp"), "{a}");
    assert_eq!(a["content_type"], "image/webp");
    assert_eq!(
        decoded(&object(&a)).to_rgba8().as_raw(),
        decoded(&sprite).to_rgba8().as_raw()
    );
    // The original is published beside it and listed with every encoding.
    let original = file("sprites/a.kiln-original.png");
    assert_eq!(object(&original), sprite);
    let images = manifest["images"].as_array().unwrap();
    let listed = images
        .iter()
        .find(|i| i["path"] == "sprites/a.png")
        .unwrap();
    assert_eq!(listed["served"], "webp-lossless");
    let encodings: Vec<_> = listed["encodings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["encoding"].as_str().unwrap())
        .collect();
    assert_eq!(encodings, ["webp-lossless", "original"]);
    // The background is in the lossy folder: lossy WebP within the bound.
    assert_lossy_at_bound(&bg, &object(&file("bg/sky.png")));
    // The glTF texture stays PNG at its path (for the `.gltf` as uploaded); the model's
    // variants carry it as WebP in their binary chunk, the URI gone.
    let tex = file("models/tex.png");
    assert_eq!(tex["content_type"], "image/png");
    let stage = &report["stages"]["images"];
    let (json, bin) = model::read_glb(&object(&file("models/m.meshopt.glb"))).unwrap();
    assert!(json["images"][0].get("uri").is_none(), "{json} {stage}");
    assert_eq!(json["images"][0]["mimeType"], "image/webp");
    let view = json["images"][0]["bufferView"].as_u64().unwrap() as usize;
    assert_eq!(
        decoded(model::view_bytes(&json, &bin, view).unwrap())
            .to_rgba8()
            .as_raw(),
        decoded(&texture).to_rgba8().as_raw()
    );
    // The report: per image and in total (the texture twice: at its path, and in the variants).
    assert_eq!(stage["images"], 4, "{stage}");
    assert_eq!(stage["re_encoded"], 4);
    assert!(stage["bytes_saved"].as_u64().unwrap() > 0);
    assert!(stage["bytes_with_lossy"].as_u64().is_some());

    // A misspelt key in [images] fails the build, naming it.
    let bad = dir.path().join("bad.zip");
    std::fs::write(
        &bad,
        support::zip_with(&[
            ("a.png", &sprite),
            ("kiln.toml", b"[images]\nlosy = true\n"),
        ]),
    )
    .unwrap();
    let failed = Command::new(env!("CARGO_BIN_EXE_kiln-worker"))
        .args([
            "process",
            bad.to_str().unwrap(),
            "--out",
            dir.path().join("bad").to_str().unwrap(),
        ])
        .env("KILN_DATA_DIR", dir.path())
        .output()
        .unwrap();
    assert_eq!(failed.status.code(), Some(1));
    let text = String::from_utf8_lossy(&failed.stderr).to_string()
        + &String::from_utf8_lossy(&failed.stdout);
    assert!(text.contains("losy"), "{text}");
}

/// Chromium, decoding what `/play` serves at the image's own `.png` URL the way a WebGL engine
/// receives it (no premultiplication: the colour under transparent pixels counts), sees the
/// source's pixels exactly; the same judge fails a channel swap and premultiplied colour.
#[test]
fn chromium_decodes_the_served_webp_to_the_sources_pixels() {
    let dir = tempfile::tempdir().unwrap();
    let source = grainy_sprite(256, 128);
    let png = png_of(&source);
    let out = run(&png, &plan(Role::Standalone, false));
    let (served, format) = out.chosen.expect("re-encoded");
    assert_eq!(format, Format::Webp);
    let write = |name: &str, bytes: &[u8]| {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    };
    let lossless = |image: &RgbaImage| {
        codec::encode_webp(image, codec::WebpMode::Lossless { level: 6 }).unwrap()
    };
    let mut swapped = source.clone();
    let mut premultiplied = source.clone();
    for (s, p) in swapped.pixels_mut().zip(premultiplied.pixels_mut()) {
        s.0.swap(0, 2);
        let a = u16::from(p.0[3]);
        for c in 0..3 {
            p.0[c] = (u16::from(p.0[c]) * a / 255) as u8;
        }
    }
    let original = write("original.png", &png);
    let files = [
        original.clone(),
        write("sprite.png", &served),
        original.clone(),
        write("swapped.png", &lossless(&swapped)),
        original,
        write("premultiplied.png", &lossless(&premultiplied)),
    ];
    let args: Vec<&std::ffi::OsStr> = files.iter().map(|f| f.as_os_str()).collect();
    let result = support::node_json("image-decode.mjs", &args);
    let pairs = result["pairs"]
        .as_array()
        .unwrap_or_else(|| panic!("{result}"));
    assert_eq!(pairs.len(), 3, "{result}");
    assert_eq!(pairs[0]["equal"], true, "served: {}", pairs[0]);
    assert_eq!(pairs[0]["width"], 256);
    for control in &pairs[1..] {
        assert_eq!(control["equal"], false, "control: {control}");
    }
}

fn fox() -> Vec<u8> {
    std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../examples/sample-game/assets/Fox.glb"),
    )
    .unwrap()
}

/// `kiln-worker process` on `files` (with `kiln.toml` when given): the output folder, its
/// manifest and its report.
fn process(
    dir: &std::path::Path,
    name: &str,
    files: &[(&str, &[u8])],
) -> (std::path::PathBuf, serde_json::Value, serde_json::Value) {
    let package = dir.join(format!("{name}.zip"));
    std::fs::write(&package, support::zip_with(files)).unwrap();
    let out = dir.join(name);
    let status = Command::new(env!("CARGO_BIN_EXE_kiln-worker"))
        .args([
            "process",
            package.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
        .env("KILN_DATA_DIR", dir)
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let read = |f: &str| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(out.join(f)).unwrap()).unwrap()
    };
    let (manifest, report) = (read("manifest.json"), read("report.json"));
    (out, manifest, report)
}

/// The bytes `/play` serves for `path` of a processed build.
fn served(out: &std::path::Path, manifest: &serde_json::Value, path: &str) -> Vec<u8> {
    let file = manifest["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == path)
        .unwrap_or_else(|| panic!("{path} in the manifest"));
    std::fs::read(out.join(file["key"].as_str().unwrap())).unwrap()
}

/// A model's embedded texture: its variants (the files players get) carry it as WebP through
/// `EXT_texture_webp`, required, with exactly the source's pixels (read by `image`'s decoder
/// and by Chromium), their geometry unchanged and valid to the Khronos validator; the model's
/// own file stays byte for byte as uploaded (the fallback for devices without WebP); with
/// lossy on for the model's folder, the texture is lossy within the bound.
#[test]
fn a_models_texture_is_webp_in_its_variants_and_the_model_itself_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let fox = fox();
    let (out, manifest, report) = process(
        dir.path(),
        "lossless",
        &[("index.html", b"<!doctype html>"), ("assets/Fox.glb", &fox)],
    );
    let (source_json, source_bin) = model::read_glb(&fox).unwrap();
    let source_images = model::model_images(&source_json);
    assert_eq!(source_images.len(), 1, "the Fox embeds one texture");
    let png = model::view_bytes(&source_json, &source_bin, source_images[0].view.unwrap())
        .unwrap()
        .to_vec();
    assert_eq!(Format::sniff(&png), Format::Png);
    let stage = &report["stages"]["images"];
    let texture = stage["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "assets/Fox.glb#images/0")
        .unwrap_or_else(|| panic!("the Fox's texture in the report: {stage}"));
    assert_eq!(texture["chosen"], "webp-lossless", "{texture}");
    assert_eq!(texture["role"], "model_texture");
    assert_eq!(texture["slots"], serde_json::json!(["baseColorTexture"]));
    assert_eq!(texture["used_by"], "assets/Fox.glb");
    assert!(texture["gpu_bytes"].as_u64().unwrap() > 0);
    let (before, after) = (
        texture["bytes_before"].as_u64().unwrap(),
        texture["bytes_after"].as_u64().unwrap(),
    );
    assert_eq!(before, png.len() as u64);
    assert!(after < before, "{after} vs {before}");
    assert!(
        stage["bytes_with_lossy"].as_u64().unwrap() <= after,
        "{stage}"
    );

    // The model's own path serves the upload, unchanged.
    assert_eq!(served(&out, &manifest, "assets/Fox.glb"), fox);
    let mut variants = Vec::new();
    let mut webps = Vec::new();
    for variant in ["assets/Fox.meshopt.glb", "assets/Fox.quantized.glb"] {
        let glb = served(&out, &manifest, variant);
        let (json, bin) = model::read_glb(&glb).unwrap();
        let required = json["extensionsRequired"].as_array().unwrap();
        assert!(required.contains(&"EXT_texture_webp".into()), "{variant}");
        assert_eq!(json["images"][0]["mimeType"], "image/webp", "{variant}");
        let texture = &json["textures"][0];
        assert!(texture.get("source").is_none(), "{variant}: {texture}");
        assert_eq!(texture["extensions"]["EXT_texture_webp"]["source"], 0);
        let view = json["images"][0]["bufferView"].as_u64().unwrap() as usize;
        let webp = model::view_bytes(&json, &bin, view).unwrap().to_vec();
        assert_eq!(webp.len() as u64, after, "{variant}");
        assert_eq!(
            decoded(&webp).to_rgba8().as_raw(),
            decoded(&png).to_rgba8().as_raw(),
            "{variant}: the WebP shows the source's pixels"
        );
        let path = dir.path().join(variant.replace('/', "_"));
        std::fs::write(&path, &glb).unwrap();
        variants.push(path);
        webps.push(webp);
    }
    // The Khronos validator on both variants (EXT_texture_webp understood, the MIME type
    // matching the bytes), three.js loading them, their geometry against the source's.
    let reference = dir.path().join("Fox.glb");
    std::fs::write(&reference, &fox).unwrap();
    let mut args: Vec<&std::ffi::OsStr> = vec!["--reference".as_ref(), reference.as_os_str()];
    args.extend(variants.iter().map(|p| p.as_os_str()));
    let checked = support::node_json("check.mjs", &args);
    let outputs = checked["outputs"].as_array().unwrap();
    assert_eq!(outputs.len(), 2, "{checked}");
    for output in outputs {
        let validator = &output["validator"];
        assert_eq!(validator["numErrors"], 0, "{validator}");
        assert_eq!(validator["numWarnings"], 0, "{validator}");
        // The one extension this validator cannot check is meshopt's (it says so as info).
        let meshopt = output["extensions_used"]
            .as_array()
            .unwrap()
            .contains(&"EXT_meshopt_compression".into());
        let unsupported = validator["codes"]["UNSUPPORTED_EXTENSION"]["count"]
            .as_u64()
            .unwrap_or(0);
        assert_eq!(unsupported, u64::from(meshopt), "{validator}");
        assert_eq!(output["failed"], serde_json::json!([]), "{output}");
    }
    // Chromium decodes the embedded WebP to the PNG's pixels.
    let source = dir.path().join("texture.png");
    std::fs::write(&source, &png).unwrap();
    let embedded = dir.path().join("texture-from-variant.webp");
    std::fs::write(&embedded, &webps[0]).unwrap();
    let pairs = support::node_json(
        "image-decode.mjs",
        &[source.as_os_str(), embedded.as_os_str()],
    );
    assert_eq!(pairs["pairs"][0]["equal"], true, "{pairs}");

    // Lossy on for the models' folder: a colour texture is lossy within the bound; a texture
    // a normal slot samples holds data, and stays lossless even there.
    let (colour, normal) = (
        png_of(&background(256, 256)),
        png_of(&grainy_sprite(128, 128)),
    );
    let (out, manifest, report) = process(
        dir.path(),
        "lossy",
        &[
            ("assets/quad.glb", &textured_quad(&colour, &normal)),
            ("kiln.toml", b"[images]\nlossy = [\"assets/**\"]\n"),
        ],
    );
    let files = report["stages"]["images"]["files"].as_array().unwrap();
    let result = |path: &str| {
        files
            .iter()
            .find(|f| f["path"] == path)
            .unwrap_or_else(|| panic!("{path}: {report}"))
            .clone()
    };
    let (colour_result, normal_result) = (
        result("assets/quad.glb#images/0"),
        result("assets/quad.glb#images/1"),
    );
    assert_eq!(
        colour_result["slots"],
        serde_json::json!(["baseColorTexture"])
    );
    assert_eq!(colour_result["chosen"], "webp-lossy", "{colour_result}");
    assert_eq!(normal_result["slots"], serde_json::json!(["normalTexture"]));
    assert_eq!(normal_result["chosen"], "webp-lossless", "{normal_result}");
    let glb = served(&out, &manifest, "assets/quad.meshopt.glb");
    let (json, bin) = model::read_glb(&glb).unwrap();
    let image = |i: usize| {
        let view = json["images"][i]["bufferView"].as_u64().unwrap() as usize;
        model::view_bytes(&json, &bin, view).unwrap().to_vec()
    };
    assert_lossy_at_bound(&colour, &image(0));
    assert_eq!(
        decoded(&image(1)).to_rgba8().as_raw(),
        decoded(&normal).to_rgba8().as_raw()
    );
}

/// A textured quad: image 0 (`colour`) sampled as base colour, image 1 (`normal`) as normals.
fn textured_quad(colour: &[u8], normal: &[u8]) -> Vec<u8> {
    let floats = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|f| f.to_le_bytes()).collect() };
    let positions = floats(&[0., 0., 0., 1., 0., 0., 0., 1., 0., 1., 1., 0.]);
    let uvs = floats(&[0., 1., 1., 1., 0., 0., 1., 0.]);
    let indices: Vec<u8> = [0u16, 1, 2, 2, 1, 3]
        .iter()
        .flat_map(|i| i.to_le_bytes())
        .collect();
    let json = serde_json::json!({
        "asset": { "version": "2.0" },
        "buffers": [{ "byteLength": 0 }],
        "bufferViews": [
            { "buffer": 0, "byteLength": positions.len(), "target": 34962 },
            { "buffer": 0, "byteLength": uvs.len(), "target": 34962 },
            { "buffer": 0, "byteLength": indices.len(), "target": 34963 },
            { "buffer": 0, "byteLength": colour.len() },
            { "buffer": 0, "byteLength": normal.len() },
        ],
        "accessors": [
            { "bufferView": 0, "componentType": 5126, "count": 4, "type": "VEC3",
              "min": [0, 0, 0], "max": [1, 1, 0] },
            { "bufferView": 1, "componentType": 5126, "count": 4, "type": "VEC2" },
            { "bufferView": 2, "componentType": 5123, "count": 6, "type": "SCALAR" },
        ],
        "images": [
            { "bufferView": 3, "mimeType": "image/png" },
            { "bufferView": 4, "mimeType": "image/png" },
        ],
        "textures": [{ "source": 0 }, { "source": 1 }],
        "materials": [{
            "pbrMetallicRoughness": { "baseColorTexture": { "index": 0 } },
            "normalTexture": { "index": 1 },
        }],
        "meshes": [{ "primitives": [{
            "attributes": { "POSITION": 0, "TEXCOORD_0": 1 }, "indices": 2, "material": 0 }] }],
        "nodes": [{ "mesh": 0 }],
        "scenes": [{ "nodes": [0] }],
    });
    kiln_stages::gltf::Asset {
        json,
        views: vec![positions, uvs, indices, colour.to_vec(), normal.to_vec()],
    }
    .to_glb()
}

/// `[images] ktx2 = true`: a textured model gets a `ktx2` variant — its meshopt geometry with
/// each texture as Basis Universal (KTX2) where an encoding keeps the texture's bound on ASTC
/// and BC7 after transcoding, as in its other variants where none does — declared through
/// `KHR_texture_basisu` (required), listed in the manifest with the GPU formats it holds on
/// and never as the preferred variant. Each KTX2 is read by a reader that is not ours (the
/// pure-Rust `basisu` transcoder) and looks as the bound says; the Khronos validator finds
/// no error in the variant; the other variants are as without the setting.
#[test]
fn ktx2_gives_a_textured_model_a_basis_variant_for_the_formats_it_holds_on() {
    let dir = tempfile::tempdir().unwrap();
    let (colour, normal) = (
        background(256, 256),
        RgbaImage::from_fn(128, 128, |x, y| {
            // Soft bumps, as a normal map holds them.
            let t = std::f64::consts::TAU / 64.0;
            let (nx, ny) = (
                (f64::from(x) * t).sin() * 0.3,
                (f64::from(y) * t).cos() * 0.3,
            );
            let nz = (1.0 - nx * nx - ny * ny).sqrt();
            let c = |v: f64| ((v * 0.5 + 0.5) * 255.0).round() as u8;
            image::Rgba([c(nx), c(ny), c(nz), 255])
        }),
    );
    let quad = textured_quad(&png_of(&colour), &png_of(&normal));
    let (out, manifest, report) = process(
        dir.path(),
        "ktx2",
        &[
            ("assets/quad.glb", &quad),
            ("kiln.toml", b"[images]\nktx2 = true\n"),
        ],
    );
    let stage = &report["stages"]["images"];
    let made = stage["ktx2_variants"]
        .as_array()
        .unwrap_or_else(|| panic!("no ktx2 variant: {stage}"));
    assert_eq!(made.len(), 1, "{stage}");
    assert_eq!(made[0]["model"], "assets/quad.glb");
    assert_eq!(made[0]["path"], "assets/quad.ktx2.glb");
    let formats = made[0]["formats"].as_array().unwrap();
    assert!(
        formats.contains(&"astc".into()) && formats.contains(&"bc7".into()),
        "{made:?}"
    );

    let model_entry = manifest["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["path"] == "assets/quad.glb")
        .unwrap_or_else(|| panic!("the model in the manifest: {manifest}"));
    let entry = model_entry["variants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["variant"] == "ktx2")
        .unwrap_or_else(|| panic!("the ktx2 variant in the manifest: {model_entry}"));
    assert_eq!(entry["needs_decoder"], true, "{entry}");
    assert_eq!(entry["gpu_formats"], made[0]["formats"], "{entry}");
    assert_ne!(model_entry["preferred"], "ktx2", "{model_entry}");

    let glb = served(&out, &manifest, "assets/quad.ktx2.glb");
    let (json, bin) = model::read_glb(&glb).unwrap();
    let required = json["extensionsRequired"].as_array().unwrap();
    assert!(
        required.contains(&"KHR_texture_basisu".into()),
        "{required:?}"
    );
    assert!(
        required.contains(&"EXT_meshopt_compression".into()),
        "{required:?}"
    );
    let meshopt = served(&out, &manifest, "assets/quad.meshopt.glb");
    let (meshopt_json, meshopt_bin) = model::read_glb(&meshopt).unwrap();
    assert!(!meshopt_json.to_string().contains("KHR_texture_basisu"));
    let files = stage["files"].as_array().unwrap();
    let mut as_ktx2 = 0;
    for (i, source) in [&colour, &normal].into_iter().enumerate() {
        let result = files
            .iter()
            .find(|f| f["path"] == format!("assets/quad.glb#images/{i}"))
            .unwrap_or_else(|| panic!("image {i} in the report: {stage}"));
        let ktx2 = &result["ktx2"];
        let view = json["images"][i]["bufferView"].as_u64().unwrap() as usize;
        let bytes = model::view_bytes(&json, &bin, view).unwrap();
        if ktx2["chosen"] == "none" {
            // As in the meshopt variant.
            let view = meshopt_json["images"][i]["bufferView"].as_u64().unwrap() as usize;
            assert_eq!(
                bytes,
                model::view_bytes(&meshopt_json, &meshopt_bin, view).unwrap(),
                "{ktx2}"
            );
            continue;
        }
        as_ktx2 += 1;
        assert_eq!(json["images"][i]["mimeType"], "image/ktx2", "{ktx2}");
        let texture = &json["textures"][i];
        assert_eq!(
            texture["extensions"]["KHR_texture_basisu"]["source"], i,
            "{texture}"
        );
        assert!(texture.get("source").is_none(), "{texture}");
        assert_eq!(
            bytes.len() as u64,
            ktx2["bytes"].as_u64().unwrap(),
            "{ktx2}"
        );
        let reader = basisu::Transcoder::new(bytes).expect("an independent reader reads it");
        assert_eq!(reader.base_dimensions(), source.dimensions());
        assert_eq!(
            reader.level_count(),
            1 + source.width().max(source.height()).ilog2()
        );
        let rgba = reader
            .transcode(0, basisu::TargetFormat::Rgba32, basisu::DecodeFlags::NONE)
            .unwrap();
        let seen = RgbaImage::from_raw(source.width(), source.height(), rgba).unwrap();
        let s2 = score::score(source, &seen).unwrap().ssimulacra2;
        if i == 0 {
            assert_eq!(ktx2["measure"], "ssimulacra2", "{ktx2}");
            assert!(s2 >= 80.0, "the colour texture as decoded: {s2} ({ktx2})");
        } else {
            assert_eq!(ktx2["measure"], "normal_degrees_p99", "{ktx2}");
        }
        for format in formats {
            assert!(
                ktx2["formats"].as_array().unwrap().contains(format),
                "{ktx2}"
            );
        }
        // A quarter of RGBA8's GPU memory (the smallest mipmaps take a whole block each).
        let (gpu, rgba8) = (
            ktx2["gpu_bytes"].as_f64().unwrap(),
            result["gpu_bytes"].as_f64().unwrap(),
        );
        assert!(rgba8 / gpu > 3.99, "{result}");
    }
    assert!(as_ktx2 >= 1, "no texture became KTX2: {stage}");

    // three.js' KTX2Loader in Chromium (the transcoder three.js ships) on each device format:
    // every KTX2 texture loads with all its mipmaps, in the colour space its slot needs, and
    // rendered 1:1 shows the source's pixels (far closer than the same pixels with red and
    // blue swapped, the control).
    let mut args: Vec<std::ffi::OsString> = Vec::new();
    let mut textures = Vec::new();
    for (i, source) in [&colour, &normal].into_iter().enumerate() {
        if json["images"][i]["mimeType"] != "image/ktx2" {
            continue;
        }
        let view = json["images"][i]["bufferView"].as_u64().unwrap() as usize;
        let (png, ktx2) = (
            dir.path().join(format!("t{i}.png")),
            dir.path().join(format!("t{i}.ktx2")),
        );
        std::fs::write(&png, png_of(source)).unwrap();
        std::fs::write(&ktx2, model::view_bytes(&json, &bin, view).unwrap()).unwrap();
        args.extend([png.into_os_string(), ktx2.into_os_string()]);
        textures.push((i, 1 + source.width().max(source.height()).ilog2()));
    }
    let mut rendered = 0;
    for format in ["astc", "bc7", "etc2"] {
        let mut with_format: Vec<&std::ffi::OsStr> = vec!["--format".as_ref(), format.as_ref()];
        with_format.extend(args.iter().map(|a| a.as_os_str()));
        let decoded = support::node_json("ktx2-decode.mjs", &with_format);
        let pairs = decoded["pairs"]
            .as_array()
            .unwrap_or_else(|| panic!("{decoded}"));
        assert_eq!(pairs.len(), textures.len(), "{decoded}");
        for (pair, (i, levels)) in pairs.iter().zip(&textures) {
            assert_eq!(pair["format"], format, "{pair}");
            assert_eq!(pair["mipmaps"], *levels, "{pair}");
            let space = if *i == 0 { "srgb" } else { "srgb-linear" };
            assert_eq!(pair["color_space"], space, "{pair}");
            let (psnr, control) = (
                pair["psnr"].as_f64().unwrap(),
                pair["psnr_swapped"].as_f64().unwrap(),
            );
            assert!(control < psnr - 10.0, "{pair}");
            if formats.contains(&format.into()) {
                assert!(psnr >= 30.0, "{format}: {pair}");
            }
            rendered += 1;
        }
    }
    assert_eq!(rendered, 3 * textures.len());

    // The Khronos validator on the variant (KHR_texture_basisu and image/ktx2 understood).
    let variant = dir.path().join("quad.ktx2.glb");
    std::fs::write(&variant, &glb).unwrap();
    // three.js' GLTFLoader, with its KTX2Loader and meshoptimizer's decoder, in Chromium: the
    // whole variant loads, each KTX2 texture compressed on the GPU, colour sRGB.
    let loaded = support::node_json("ktx2-decode.mjs", &["--gltf".as_ref(), variant.as_os_str()]);
    assert_eq!(loaded["meshes"], 1, "{loaded}");
    let slots = loaded["textures"]
        .as_array()
        .unwrap_or_else(|| panic!("{loaded}"));
    assert_eq!(slots.len(), 2, "{loaded}");
    for (slot, i, space) in [("map", 0, "srgb"), ("normalMap", 1, "srgb-linear")] {
        let t = slots
            .iter()
            .find(|t| t["slot"] == slot)
            .unwrap_or_else(|| panic!("{loaded}"));
        let is_ktx2 = json["images"][i]["mimeType"] == "image/ktx2";
        assert_eq!(t["compressed"], is_ktx2, "{t}");
        if is_ktx2 {
            assert_eq!(t["color_space"], space, "{t}");
        }
    }
    let reference = dir.path().join("quad.glb");
    std::fs::write(&reference, &quad).unwrap();
    let checked = support::node_json(
        "check.mjs",
        &[
            "--reference".as_ref(),
            reference.as_os_str(),
            variant.as_os_str(),
        ],
    );
    let output = &checked["outputs"][0];
    assert_eq!(output["validator"]["numErrors"], 0, "{output}");
    assert_eq!(output["failed"], serde_json::json!([]), "{output}");
}
