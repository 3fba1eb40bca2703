//! How close a re-encoded image looks to its source: ssimulacra2 (the gate; 90 visually
//! lossless, 80 "very high", 70 "high") and PSNR (reported beside it), both on what a player
//! sees: the colour composited over its alpha. An image with transparency is composited over
//! black and over white and scored by the worse of the two, so a change hidden on one
//! background still counts on the other.

use image::RgbaImage;
use ssimulacra2::{ColorPrimaries, Rgb, TransferCharacteristic, compute_frame_ssimulacra2};

/// ssimulacra2 and PSNR (dB; `None` where identical) of `distorted` against `source`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Score {
    pub ssimulacra2: f64,
    pub psnr: Option<f64>,
}

/// Whether any pixel is not fully opaque.
pub fn has_alpha(image: &RgbaImage) -> bool {
    image.pixels().any(|p| p.0[3] != 255)
}

/// The scores of `distorted` against `source` (same size), composited as described above.
/// Images smaller than 8×8 (ssimulacra2's minimum) are scored on a copy repeated to 8×8.
pub fn score(source: &RgbaImage, distorted: &RgbaImage) -> Result<Score, String> {
    if source.dimensions() != distorted.dimensions() {
        return Err("the two images differ in size".into());
    }
    let backgrounds: &[f32] = if has_alpha(source) || has_alpha(distorted) {
        &[0.0, 1.0]
    } else {
        &[0.0]
    };
    // The worse of the backgrounds, each measure on its own.
    let mut worst = Score {
        ssimulacra2: f64::INFINITY,
        psnr: None,
    };
    for &bg in backgrounds {
        let a = composite(source, bg);
        let b = composite(distorted, bg);
        let s2 = ssimulacra2_of(&a, &b, source.width() as usize, source.height() as usize)?;
        worst.ssimulacra2 = worst.ssimulacra2.min(s2);
        worst.psnr = min_psnr(worst.psnr, psnr(&a, &b));
    }
    Ok(worst)
}

fn min_psnr(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// sRGB-encoded colour in 0..1 composited over a grey level `bg` (0 black, 1 white).
fn composite(image: &RgbaImage, bg: f32) -> Vec<[f32; 3]> {
    image
        .pixels()
        .map(|p| {
            let a = f32::from(p.0[3]) / 255.0;
            let c = |v: u8| f32::from(v) / 255.0 * a + bg * (1.0 - a);
            [c(p.0[0]), c(p.0[1]), c(p.0[2])]
        })
        .collect()
}

fn ssimulacra2_of(
    a: &[[f32; 3]],
    b: &[[f32; 3]],
    width: usize,
    height: usize,
) -> Result<f64, String> {
    // ssimulacra2 needs 8×8 at least: tile a small image to that size.
    let (a, b, w, h) = if width < 8 || height < 8 {
        let (w, h) = (width.max(8), height.max(8));
        let tile = |src: &[[f32; 3]]| {
            (0..w * h)
                .map(|i| src[(i / w % height) * width + (i % w % width)])
                .collect::<Vec<_>>()
        };
        (tile(a), tile(b), w, h)
    } else {
        (a.to_vec(), b.to_vec(), width, height)
    };
    let frame = |data| {
        Rgb::new(
            data,
            w,
            h,
            TransferCharacteristic::SRGB,
            ColorPrimaries::BT709,
        )
        .map_err(|e| format!("ssimulacra2: {e:?}"))
    };
    compute_frame_ssimulacra2(frame(a)?, frame(b)?).map_err(|e| format!("ssimulacra2: {e}"))
}

/// PSNR over the composited 8-bit colour; `None` when the images are identical.
fn psnr(a: &[[f32; 3]], b: &[[f32; 3]]) -> Option<f64> {
    let n = (a.len() * 3) as f64;
    let sum: f64 = a
        .iter()
        .zip(b)
        .flat_map(|(x, y)| (0..3).map(move |c| f64::from((x[c] - y[c]) * 255.0)))
        .map(|d| d * d)
        .sum();
    let mse = sum / n;
    (mse > 0.0).then(|| 10.0 * (255.0 * 255.0 / mse).log10())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noise(width: u32, height: u32) -> RgbaImage {
        let mut state = 12345u32;
        RgbaImage::from_fn(width, height, |_, _| {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let v = (state >> 24) as u8;
            image::Rgba([v, v / 2, 255 - v, 255])
        })
    }

    #[test]
    fn identical_images_score_100_and_a_channel_swap_far_less() {
        let a = noise(64, 64);
        let same = score(&a, &a).unwrap();
        assert!(same.ssimulacra2 > 99.9, "{same:?}");
        assert_eq!(same.psnr, None);
        let mut swapped = a.clone();
        for p in swapped.pixels_mut() {
            p.0.swap(0, 2);
        }
        let bad = score(&a, &swapped).unwrap();
        assert!(bad.ssimulacra2 < 50.0, "{bad:?}");
    }

    #[test]
    fn premultiplied_colour_is_seen_through_the_alpha() {
        // Half-transparent pixels stored premultiplied (a common wrong conversion) look
        // darker over white: the score must drop.
        let a = RgbaImage::from_fn(32, 32, |x, y| {
            image::Rgba([200, (x * 8) as u8, (y * 8) as u8, 128])
        });
        let mut pre = a.clone();
        for p in pre.pixels_mut() {
            for c in 0..3 {
                p.0[c] = (u16::from(p.0[c]) * 128 / 255) as u8;
            }
        }
        assert!(score(&a, &pre).unwrap().ssimulacra2 < 70.0);
    }
}
