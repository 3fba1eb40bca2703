//! Stage `images`: every image of a build in fewer bytes, the player seeing the same pixels
//! (lossless, on by default) or pixels bounded by a perceptual metric (lossy, opted into per
//! build or path in `kiln.toml` `[images]`).
//!
//! Per image (`optimize_image`, a function of bytes and options):
//! - PNG: lossless WebP (libwebp, `exact`: the colour under transparent pixels is kept, since
//!   engines that do not premultiply sample it) and an optimised PNG (oxipng); each candidate
//!   is decoded again (WebP by a second decoder, not libwebp) and kept only if it shows the
//!   source's pixels exactly; the smallest wins, the original when none is smaller.
//! - JPEG: never turned into lossless WebP (it only grows); lossy WebP where lossy is on.
//! - Lossy (standalone images, never data textures): the WebP quality is searched per image and
//!   the smallest candidate whose ssimulacra2 against the source, composited over its alpha,
//!   reaches the bound (80 by default) is kept. With lossy off the same search runs to report
//!   what it would save.
//! - Images a `.gltf` references: only PNG/JPEG are core glTF, so only the optimised PNG.
//! - `max_size` (opt-in, per build or path): scaled down to fit first (Lanczos3), then the
//!   above against the scaled pixels; a scaled JPEG or WebP gets the bounded lossy search.
//! - Animated PNG/WebP, GIF, AVIF, KTX2, images past the pixel limit (checked on the header,
//!   before decoding), unreadable files: kept as they are, with the reason.
//!
//! The chosen bytes replace the file at its own path, so an unmodified game loads them from
//! the URL it always used (browsers decode WebP whatever the URL's extension; `encode` names
//! the object by what the bytes are, so it is served as `image/webp`); the original is kept
//! beside it (`{stem}.kiln-original.{ext}`, see [`original_path`]) and listed in the manifest
//! with every encoding.

pub mod codec;
pub mod ktx2;
pub mod model;
pub mod score;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use globset::{Glob, GlobSet, GlobSetBuilder};
use image::DynamicImage;
pub use kiln_common::config::{ImagePathRule, ImagesSettings, PathSwitch};
use serde::Serialize;

use self::codec::{Format, WebpMode};
use super::{Stage, StageError};
use crate::gltf::Resources;
pub use crate::ir::ServedImage;
use crate::ir::{FileKind, FileTree, Files, InventoryEntry, TreeResources};

pub const NAME: &str = "images";

/// The image stage's settings. `Default` is the only source of these defaults; a build's
/// `kiln.toml` `[images]` section applies on top ([`apply`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ImageOptions {
    /// Pixel-exact re-encoding (lossless WebP or optimised PNG).
    pub lossless: bool,
    /// Lossy WebP for every standalone image of the build.
    pub lossy: bool,
    /// Globs of build paths that get lossy even when `lossy` is off (`[images] lossy_paths`).
    pub lossy_paths: Vec<String>,
    /// The perceptual bound: a lossy candidate is kept only at ssimulacra2 ≥ this (90 is
    /// visually lossless, 80 "very high": not noticeable side by side at 1:1).
    pub min_ssimulacra2: f64,
    /// Per-path bounds (glob, bound), the last match winning over `min_ssimulacra2`.
    pub path_bounds: Vec<(String, f64)>,
    /// Images with more pixels are kept as they are, refused on their header before any
    /// decoding (a 50 000 × 50 000 PNG of a few kB is a decompression bomb).
    pub max_pixels: u64,
    /// Images wider or taller than this are scaled down to fit (aspect kept, Lanczos3) before
    /// they are encoded; `None` (the default) never resizes. For model textures, backgrounds
    /// and UI art; not for atlases whose frame coordinates are in pixels.
    pub max_size: Option<u32>,
    /// Per-path sizes (glob, size), the last match winning over `max_size`.
    pub path_max_sizes: Vec<(String, u32)>,
    /// Run the lossy search on images where lossy is off, to report what it would save.
    pub estimate_lossy: bool,
    /// libwebp's lossless preset (0–9); 6 is cwebp's `-z 6`.
    pub webp_lossless_level: u8,
    /// oxipng's preset (0–6) and how long it may search one image.
    pub png_level: u8,
    pub png_timeout: Duration,
    /// The PNG search is skipped where lossless WebP is already under this share of the PNG.
    pub png_skip_below: f64,
    /// libwebp's lossy effort (0–6).
    pub webp_method: u8,
    /// Textured models get a `ktx2` variant (the meshopt geometry, Basis Universal textures);
    /// off by default: it is lossy, held to the bounds below on ASTC and BC7 (ETC2 scored too).
    pub ktx2: bool,
    /// Globs of model paths that get it even when `ktx2` is off.
    pub ktx2_paths: Vec<String>,
    /// The KTX2 bounds of normal maps (99th-percentile angle, degrees) and other data textures
    /// (PSNR per channel, dB); colour textures keep `min_ssimulacra2` (or their path's).
    pub ktx2_normal_max_degrees: f64,
    pub ktx2_data_min_psnr: f64,
}

impl Default for ImageOptions {
    fn default() -> Self {
        Self {
            lossless: true,
            lossy: false,
            lossy_paths: Vec::new(),
            min_ssimulacra2: 80.0,
            path_bounds: Vec::new(),
            max_pixels: 64 * 1024 * 1024,
            max_size: None,
            path_max_sizes: Vec::new(),
            estimate_lossy: true,
            webp_lossless_level: 6,
            png_level: 2,
            png_timeout: Duration::from_secs(10),
            png_skip_below: 0.8,
            webp_method: 4,
            ktx2: false,
            ktx2_paths: Vec::new(),
            ktx2_normal_max_degrees: ktx2::NORMAL_MAX_DEGREES,
            ktx2_data_min_psnr: ktx2::DATA_MIN_PSNR,
        }
    }
}

/// `settings` (the server's `[images]`, or a build's `kiln.toml` `[images]`) on top of `base`;
/// a bad glob or bound is an error naming it.
pub fn apply(settings: &ImagesSettings, base: &ImageOptions) -> Result<ImageOptions, String> {
    let mut o = base.clone();
    let bound = |b: f64, what: &str| {
        if (0.0..=100.0).contains(&b) {
            Ok(b)
        } else {
            Err(format!(
                "[images] {what} = {b}: ssimulacra2 bounds are 0 to 100"
            ))
        }
    };
    if let Some(v) = settings.lossless {
        o.lossless = v;
    }
    match &settings.lossy {
        Some(PathSwitch::All(v)) => o.lossy = *v,
        Some(PathSwitch::Paths(globs)) => o.lossy_paths.extend(globs.iter().cloned()),
        None => {}
    }
    match &settings.ktx2 {
        Some(PathSwitch::All(v)) => o.ktx2 = *v,
        Some(PathSwitch::Paths(globs)) => o.ktx2_paths.extend(globs.iter().cloned()),
        None => {}
    }
    if let Some(b) = settings.min_ssimulacra2 {
        o.min_ssimulacra2 = bound(b, "min_ssimulacra2")?;
    }
    if let Some(p) = settings.max_pixels {
        o.max_pixels = p;
    }
    let size = |n: u32, what: &str| {
        if n >= MIN_MAX_SIZE {
            Ok(n)
        } else {
            Err(format!(
                "[images] {what} = {n}: the smallest size an image may be scaled to is {MIN_MAX_SIZE}"
            ))
        }
    };
    if let Some(n) = settings.max_size {
        o.max_size = Some(size(n, "max_size")?);
    }
    if let Some(e) = settings.estimate_lossy {
        o.estimate_lossy = e;
    }
    for rule in &settings.paths {
        if rule.lossy == Some(true) {
            o.lossy_paths.push(rule.pattern.clone());
        }
        if rule.ktx2 == Some(true) {
            o.ktx2_paths.push(rule.pattern.clone());
        }
        if let Some(n) = rule.max_size {
            o.path_max_sizes.push((
                rule.pattern.clone(),
                size(n, &format!("paths {:?} max_size", rule.pattern))?,
            ));
        }
        if let Some(b) = rule.min_ssimulacra2 {
            o.path_bounds.push((
                rule.pattern.clone(),
                bound(b, &format!("paths {:?} min_ssimulacra2", rule.pattern))?,
            ));
        }
    }
    for glob in o
        .lossy_paths
        .iter()
        .chain(&o.ktx2_paths)
        .chain(o.path_bounds.iter().map(|(g, _)| g))
        .chain(o.path_max_sizes.iter().map(|(g, _)| g))
    {
        Glob::new(glob).map_err(|e| format!("[images] glob {glob:?}: {e}"))?;
    }
    Ok(o)
}

/// The smallest `max_size` a build may ask for: below it a texture or sprite is no longer
/// the same picture, and the setting is more likely a typo.
pub const MIN_MAX_SIZE: u32 = 16;

/// Where the original of a re-encoded image is kept: `img/a.png` → `img/a.kiln-original.png`.
pub fn original_path(path: &str) -> String {
    let (dir, name) = path.rsplit_once('/').map_or(("", path), |(d, n)| (d, n));
    let name = match name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => format!("{stem}.kiln-original.{ext}"),
        _ => format!("{name}.kiln-original"),
    };
    if dir.is_empty() {
        name
    } else {
        format!("{dir}/{name}")
    }
}

/// Where the image is used, which decides the encodings it may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A standalone image (sprite, atlas, background, UI): any format a browser decodes.
    Standalone,
    /// An image a `.gltf` references: core glTF allows PNG and JPEG only.
    GltfTexture,
    /// An image embedded in a model variant: WebP through `EXT_texture_webp` (see [`model`]).
    ModelTexture,
}

/// One encoding the stage tried.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    /// `webp-lossless`, `png-optimized`, `webp-lossy`.
    pub encoding: String,
    pub bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quality: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ssimulacra2: Option<f64>,
    /// Why it was not chosen (absent on the chosen one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rejected: Option<String>,
    /// PSNR measured with the ssimulacra2 (lossy candidates), for the report of the chosen one.
    #[serde(skip)]
    pub psnr: Option<f64>,
}

/// What the lossy search found for an image where lossy is off: the bytes the image would
/// take with lossy on at `bound` (the lossless result's where no quality beats it).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LossyEstimate {
    pub bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quality: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ssimulacra2: Option<f64>,
    pub bound: f64,
}

/// The report of one image.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ImageResult {
    pub path: String,
    pub role: Role,
    /// The model that references it, for glTF textures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub used_by: Option<String>,
    /// The material slots that sample it (model textures).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub slots: Vec<String>,
    pub source_format: Format,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub width: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub height: Option<u32>,
    /// The size it was scaled to (`[images] max_size`): what the chosen bytes hold, and
    /// what their ssimulacra2 is measured against.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resized: Option<[u32; 2]>,
    /// `original`, or the chosen candidate's encoding.
    pub chosen: String,
    pub bytes_before: u64,
    pub bytes_after: u64,
    /// Of the chosen bytes against the source (100 and no PSNR when pixel-identical).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ssimulacra2: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psnr: Option<f64>,
    /// GPU memory as RGBA8 with mipmaps (glTF textures): what the WebP/PNG variants take; the
    /// KTX2 variant's is in `ktx2`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_bytes: Option<u64>,
    pub encode_ms: u64,
    pub candidates: Vec<Candidate>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lossy_estimate: Option<LossyEstimate>,
    /// Why the original is served (when it is).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept: Option<String>,
    /// What the model's `ktx2` variant holds for it (model textures, `[images] ktx2`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ktx2: Option<ktx2::Ktx2Report>,
}

/// The outcome of one image: its report and, where something better was found, the bytes.
#[derive(Debug)]
pub struct Optimized {
    pub result: ImageResult,
    /// The chosen bytes and their format (`None`: the original is served).
    pub chosen: Option<(Vec<u8>, Format)>,
}

/// The stage's report.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct ImagesReport {
    pub images: u64,
    pub re_encoded: u64,
    pub kept: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub bytes_saved: u64,
    /// Whether any image was encoded lossy.
    pub lossy: bool,
    /// With lossy at the bound where it is off: the images' bytes in total.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_with_lossy: Option<u64>,
    pub encode_ms: u64,
    pub files: Vec<ImageResult>,
    /// The `ktx2` model variants made (`[images] ktx2`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ktx2_variants: Vec<Ktx2Variant>,
}

/// A model's `ktx2` variant: its meshopt variant with Basis Universal textures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ktx2Variant {
    pub model: String,
    pub path: String,
    pub bytes: u64,
    /// GPU memory of its KTX2 textures (8 bits per pixel), against the same textures as
    /// RGBA8 in the other variants, mipmaps included.
    pub gpu_bytes: u64,
    pub gpu_bytes_rgba8: u64,
    /// The GPU formats every KTX2 texture in it keeps its bound on (see [`ktx2::REQUIRED`]).
    pub formats: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ImagesError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("kiln.toml: {0}")]
    Config(String),
}

impl StageError for ImagesError {
    fn is_permanent(&self) -> bool {
        matches!(self, Self::Config(_))
    }

    fn file(&self) -> Option<String> {
        match self {
            Self::Io { path, .. } => Some(path.clone()),
            Self::Config(_) => Some("kiln.toml".into()),
        }
    }
}

/// The image stage over a build's tree.
pub struct Step;

impl Stage for Step {
    const NAME: &'static str = NAME;
    type Input<'a> = Files<'a>;
    type Options = ImageOptions;
    type Output = (FileTree, Vec<ServedImage>);
    type Report = ImagesReport;
    type Error = ImagesError;

    fn run(
        files: Files<'_>,
        options: &ImageOptions,
        progress: &mut dyn FnMut(f64),
    ) -> Result<((FileTree, Vec<ServedImage>), ImagesReport), ImagesError> {
        optimize_tree(files, options, progress)
    }
}

/// The images the stage works on: standalone images and `.gltf` textures of the game itself
/// (not the outputs of other stages, such as VAT textures, which are data).
fn game_images<'a>(files: &Files<'a>) -> impl Iterator<Item = (&'a InventoryEntry, Role)> {
    files.inventory.entries.iter().filter_map(|e| {
        if e.error.is_some() {
            return None;
        }
        match e.kind {
            FileKind::Texture if e.used_by.is_none() => Some((e, Role::Standalone)),
            FileKind::GltfImage => Some((e, Role::GltfTexture)),
            _ => None,
        }
    })
}

/// Which images go lossy and at what bound, from the options' globs (compiled once).
struct PathRules<'o> {
    options: &'o ImageOptions,
    lossy: GlobSet,
    ktx2: GlobSet,
    bounds: Vec<GlobSet>,
    sizes: Vec<GlobSet>,
}

impl<'o> PathRules<'o> {
    fn new(options: &'o ImageOptions) -> Result<Self, ImagesError> {
        let globs = |patterns: &[&String]| -> Result<GlobSet, ImagesError> {
            let mut set = GlobSetBuilder::new();
            for p in patterns {
                set.add(Glob::new(p).map_err(|e| ImagesError::Config(format!("glob {p:?}: {e}")))?);
            }
            set.build()
                .map_err(|e| ImagesError::Config(format!("globs: {e}")))
        };
        // One set per (glob, value) rule, so that the last match can be found.
        fn each<T>(
            rules: &[(String, T)],
            globs: impl Fn(&[&String]) -> Result<GlobSet, ImagesError>,
        ) -> Result<Vec<GlobSet>, ImagesError> {
            rules.iter().map(|(g, _)| globs(&[g])).collect()
        }
        Ok(Self {
            options,
            lossy: globs(&options.lossy_paths.iter().collect::<Vec<_>>())?,
            ktx2: globs(&options.ktx2_paths.iter().collect::<Vec<_>>())?,
            bounds: each(&options.path_bounds, globs)?,
            sizes: each(&options.path_max_sizes, globs)?,
        })
    }

    /// Whether the model at `path` gets a `ktx2` variant.
    fn ktx2(&self, path: &str) -> bool {
        self.options.ktx2 || self.ktx2.is_match(path)
    }

    /// The plan for an image at `path` (a model texture: its model's path) in `role`.
    fn plan(&self, path: &str, role: Role, data_texture: bool) -> Plan {
        let o = self.options;
        Plan {
            role,
            lossy: role != Role::GltfTexture && (o.lossy || self.lossy.is_match(path)),
            bound: last_match(&o.path_bounds, &self.bounds, path).unwrap_or(o.min_ssimulacra2),
            data_texture,
            max_size: last_match(&o.path_max_sizes, &self.sizes, path).or(o.max_size),
        }
    }
}

/// The value of the last per-path rule (glob, value) whose compiled glob matches `path`.
fn last_match<T: Copy>(rules: &[(String, T)], globs: &[GlobSet], path: &str) -> Option<T> {
    rules
        .iter()
        .zip(globs)
        .rev()
        .find(|(_, set)| set.is_match(path))
        .map(|((_, value), _)| *value)
}

/// [`optimize_image`], a panic in a codec being this image's failure, not the build's.
fn optimize_guarded(bytes: &[u8], plan: &Plan, options: &ImageOptions) -> Optimized {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        optimize_image(bytes, plan, options)
    }))
    .unwrap_or_else(|panic| Optimized {
        result: kept_result(
            bytes,
            plan,
            format!(
                "internal error: {}",
                crate::gltf::panic_message(panic.as_ref())
            ),
        ),
        chosen: None,
    })
}

impl ImagesReport {
    /// Counts one image's result; whether it carried a lossy estimate.
    fn add(&mut self, result: ImageResult) -> bool {
        self.images += 1;
        if result.chosen == "original" {
            self.kept += 1;
        } else {
            self.re_encoded += 1;
        }
        self.lossy |= result.chosen == "webp-lossy";
        self.bytes_before += result.bytes_before;
        self.bytes_after += result.bytes_after;
        self.encode_ms += result.encode_ms;
        let estimate = result.lossy_estimate.as_ref().map(|e| e.bytes);
        let with_lossy = estimate.map_or(result.bytes_after, |e| e.min(result.bytes_after));
        self.bytes_with_lossy = Some(self.bytes_with_lossy.unwrap_or(0) + with_lossy);
        self.files.push(result);
        estimate.is_some()
    }
}

fn optimize_tree(
    files: Files<'_>,
    options: &ImageOptions,
    progress: &mut dyn FnMut(f64),
) -> Result<((FileTree, Vec<ServedImage>), ImagesReport), ImagesError> {
    let rules = PathRules::new(options)?;
    let images: Vec<_> = game_images(&files).collect();
    let variants = model_variants(&files);
    let steps = (images.len() + variants.len()).max(1) as f64;
    let mut tree = files.tree.clone();
    let mut served = Vec::new();
    let mut report = ImagesReport::default();
    let mut estimated = false;
    for (n, (entry, role)) in images.iter().enumerate() {
        let io = |source| ImagesError::Io {
            path: entry.path.clone(),
            source,
        };
        let bytes = std::fs::read(tree.root.join(&entry.path)).map_err(io)?;
        let plan = rules.plan(&entry.path, *role, looks_like_data(&entry.path));
        let outcome = optimize_guarded(&bytes, &plan, options);
        let mut result = outcome.result;
        result.path = entry.path.clone();
        result.used_by = entry.used_by.clone().filter(|_| *role == Role::GltfTexture);
        if let Some((chosen, _format)) = outcome.chosen {
            let original = original_path(&entry.path);
            if tree.contains(&original) {
                result.kept = Some(format!("{original} already exists in the build"));
                result.chosen = "original".into();
                result.bytes_after = result.bytes_before;
            } else {
                super::add_file(&mut tree, &original, &bytes).map_err(io)?;
                write_file(&mut tree, &entry.path, &chosen).map_err(io)?;
                served.push(ServedImage {
                    path: entry.path.clone(),
                    original,
                    encoding: result.chosen.clone(),
                });
            }
        }
        estimated |= report.add(result);
        progress((n + 1) as f64 / steps);
    }
    for (n, (source, paths)) in variants.iter().enumerate() {
        let (results, ktx2) = model_textures(&mut tree, source, paths, &rules)?;
        for result in results {
            estimated |= report.add(result);
        }
        report.ktx2_variants.extend(ktx2);
        progress((images.len() + n + 1) as f64 / steps);
    }
    report.bytes_saved = report.bytes_before.saturating_sub(report.bytes_after);
    if !estimated {
        report.bytes_with_lossy = None;
    }
    Ok(((tree, served), report))
}

/// The bytes of an image `model` references by `uri`: a `data:` URI, or a file of the build
/// beside the model.
fn image_at_uri(tree: &FileTree, model: &str, uri: &str) -> Result<Vec<u8>, String> {
    match crate::gltf::data_uri(uri) {
        Some(decoded) => decoded,
        None => TreeResources { tree, model }
            .load(uri)
            .ok_or_else(|| format!("{uri} is not in the build")),
    }
}

/// Writes `data` over the tree's file at `path`, keeping its listed size true.
fn write_file(tree: &mut FileTree, path: &str, data: &[u8]) -> std::io::Result<()> {
    std::fs::write(tree.root.join(path), data)?;
    if let Some(f) = tree.files.iter_mut().find(|f| f.path == path) {
        f.size = data.len() as u64;
    }
    Ok(())
}

/// The geometry stage's variants in the tree, by model: the model's path and its variants'.
fn model_variants(files: &Files<'_>) -> Vec<(String, Vec<String>)> {
    let mut by_model: Vec<(String, Vec<String>)> = Vec::new();
    for e in &files.inventory.entries {
        let Some(source) = e.used_by.as_ref() else {
            continue;
        };
        let is_variant = e.kind == FileKind::Glb
            && e.error.is_none()
            && ["quantized", "meshopt"]
                .iter()
                .any(|v| crate::ir::variant_path(source, v) == e.path);
        if !is_variant {
            continue;
        }
        match by_model.iter_mut().find(|(s, _)| s == source) {
            Some((_, paths)) => paths.push(e.path.clone()),
            None => by_model.push((source.clone(), vec![e.path.clone()])),
        }
    }
    by_model
}

/// One model's textures: each image optimised once (its variants hold the same images) and
/// written into every variant. A variant that cannot be rewritten leaves them all as they
/// were, the reason on each of the model's images; one result per image of the model. Where
/// `[images] ktx2` covers the model, its meshopt variant is also written with Basis
/// Universal textures as the `ktx2` variant ([`ktx2_variant`]).
fn model_textures(
    tree: &mut FileTree,
    source: &str,
    variants: &[String],
    rules: &PathRules<'_>,
) -> Result<(Vec<ImageResult>, Option<Ktx2Variant>), ImagesError> {
    let io = |path: &str| {
        let path = path.to_string();
        move |source| ImagesError::Io { path, source }
    };
    let read = |path: &str| -> Result<Result<(serde_json::Value, Vec<u8>), String>, ImagesError> {
        let glb = std::fs::read(tree.root.join(path)).map_err(io(path))?;
        Ok(model::read_glb(&glb).map_err(|e| e.to_string()))
    };
    // The first variant decides: the others hold the same images.
    let Some(first) = variants.first() else {
        return Ok((Vec::new(), None));
    };
    let Ok((json, bin)) = read(first)? else {
        return Ok((Vec::new(), None));
    };
    let Ok(mut textures) =
        crate::gltf::guard_model(|| Ok(choose_textures(tree, source, &json, &bin, rules)))
    else {
        return Ok((Vec::new(), None));
    };
    // The KTX2 variant is made from the meshopt variant as the geometry stage wrote it.
    let meshopt = crate::ir::variant_path(source, "meshopt");
    let ktx2 = if rules.ktx2(source) && !textures.images.is_empty() && variants.contains(&meshopt) {
        let glb = if *first == meshopt {
            Ok((json.clone(), bin.clone()))
        } else {
            read(&meshopt)?
        };
        match glb {
            Ok((json, bin)) => ktx2_variant(tree, source, json, &bin, &mut textures, rules.options),
            Err(why) => {
                note_no_ktx2(&mut textures.results, &format!("{meshopt}: {why}"));
                None
            }
        }
    } else {
        None
    };
    let ModelTextures {
        images,
        chosen,
        mut results,
        ..
    } = textures;
    if chosen.is_empty() {
        return Ok((results, write_ktx2(tree, ktx2)?));
    }
    let mut parsed = Some((json, bin));
    let mut rewritten = Vec::new();
    for path in variants {
        let glb = match parsed.take() {
            Some(first) => Ok(first),
            None => read(path)?,
        };
        let out = glb.and_then(|(json, bin)| {
            crate::gltf::guard_model(|| {
                model::with_textures(json, &bin, &images, &chosen).map_err(|e| e.to_string())
            })
        });
        match out {
            Ok(out) => rewritten.push((path, out)),
            Err(why) => {
                // No variant changes: the model's images are served as they were.
                for result in &mut results {
                    if result.chosen != "original" {
                        result.kept = Some(format!("{path}: cannot rewrite its textures: {why}"));
                        result.chosen = "original".into();
                        result.bytes_after = result.bytes_before;
                    }
                }
                return Ok((results, write_ktx2(tree, ktx2)?));
            }
        }
    }
    for (path, out) in rewritten {
        write_file(tree, path, &out).map_err(io(path))?;
    }
    Ok((results, write_ktx2(tree, ktx2)?))
}

/// Adds a made `ktx2` variant to the tree.
fn write_ktx2(
    tree: &mut FileTree,
    made: Option<(Ktx2Variant, Vec<u8>)>,
) -> Result<Option<Ktx2Variant>, ImagesError> {
    let Some((variant, bytes)) = made else {
        return Ok(None);
    };
    super::add_file(tree, &variant.path, &bytes).map_err(|source| ImagesError::Io {
        path: variant.path.clone(),
        source,
    })?;
    Ok(Some(variant))
}

/// Notes on each of a model's image results why its `ktx2` variant was not made.
fn note_no_ktx2(results: &mut [ImageResult], why: &str) {
    for result in results {
        result.ktx2 = Some(ktx2::Ktx2Report::not_made(why));
    }
}

/// The model's `ktx2` variant: its meshopt variant (`json`, `bin`) with each image as KTX2
/// where an encoding keeps the image's bound on ASTC and BC7 ([`ktx2::REQUIRED`]), else as in
/// the other variants (`chosen`, or as it was). Each image's result gets its
/// [`ktx2::Ktx2Report`]. `None` (the reason on the results) when no image became KTX2, the
/// variant's path is taken by a file of the build, or the variant cannot be written.
fn ktx2_variant(
    tree: &FileTree,
    source: &str,
    json: serde_json::Value,
    bin: &[u8],
    model: &mut ModelTextures,
    options: &ImageOptions,
) -> Option<(Ktx2Variant, Vec<u8>)> {
    let path = crate::ir::variant_path(source, "ktx2");
    if tree.contains(&path) {
        note_no_ktx2(
            &mut model.results,
            &format!("{path} already exists in the build"),
        );
        return None;
    }
    let mut textures = model::Chosen::new();
    let (mut gpu, mut gpu_rgba8) = (0u64, 0u64);
    let mut formats: Vec<&str> = ktx2::GpuFormat::ALL.iter().map(|f| f.name()).collect();
    for (image, result) in model.images.iter().zip(model.results.iter_mut()) {
        let Some((bytes, plan)) = model.sources.get(&image.index) else {
            continue;
        };
        let (ktx2, report) = ktx2_texture(bytes, plan, image, options);
        match ktx2 {
            Some((bytes, rgba8)) => {
                gpu += report.gpu_bytes;
                gpu_rgba8 += rgba8;
                formats.retain(|f| report.formats.contains(f));
                textures.insert(image.index, (bytes, Format::Ktx2));
            }
            // As in the other variants.
            None => {
                if let Some(other) = model.chosen.get(&image.index) {
                    textures.insert(image.index, other.clone());
                }
            }
        }
        result.ktx2 = Some(report);
    }
    if !textures.values().any(|(_, f)| *f == Format::Ktx2) {
        return None;
    }
    let written = crate::gltf::guard_model(|| {
        model::with_textures(json, bin, &model.images, &textures).map_err(|e| e.to_string())
    });
    match written {
        Ok(bytes) => Some((
            Ktx2Variant {
                model: source.to_string(),
                path,
                bytes: bytes.len() as u64,
                gpu_bytes: gpu,
                gpu_bytes_rgba8: gpu_rgba8,
                formats: formats.iter().map(|f| f.to_string()).collect(),
            },
            bytes,
        )),
        Err(why) => {
            let why = format!("cannot write the ktx2 variant: {why}");
            note_no_ktx2(&mut model.results, &why);
            None
        }
    }
}

/// One texture of the `ktx2` variant: the KTX2 bytes and the texture's RGBA8 GPU bytes where
/// an encoding keeps its bound (colour slots: ssimulacra2; a normal slot: the angle; other
/// data: PSNR), and the report either way.
fn ktx2_texture(
    bytes: &[u8],
    plan: &Plan,
    image: &model::ModelImage,
    options: &ImageOptions,
) -> (Option<(Vec<u8>, u64)>, ktx2::Ktx2Report) {
    // The pixels the other variants hold: decoded, and scaled where `max_size` says.
    let rgba = match decode_source(bytes, options.max_pixels) {
        Ok(source) => codec::fit(source, plan.max_size).0.to_rgba8(),
        Err(why) => {
            let why = format!("cannot decode it: {why}");
            return (None, ktx2::Ktx2Report::not_made(&why));
        }
    };
    let (width, height) = rgba.dimensions();
    if u64::from(width) * u64::from(height) > ktx2::MAX_PIXELS {
        let why = format!(
            "{width}×{height} is past the KTX2 search's {} pixels (its encoder takes minutes there)",
            ktx2::MAX_PIXELS
        );
        return (None, ktx2::Ktx2Report::not_made(&why));
    }
    let normal = image.slots.iter().any(|s| s == "normalTexture");
    let (srgb, bound) = ktx2_bound(plan.data_texture, normal, plan.bound, options);
    match crate::gltf::guard_model(|| Ok(ktx2::choose(&rgba, srgb, bound))) {
        Ok((bytes, report)) => (bytes.map(|b| (b, rgba8_gpu_bytes(width, height))), report),
        Err(why) => (
            None,
            ktx2::Ktx2Report::not_made(&format!("internal error: {why}")),
        ),
    }
}

/// What a texture's KTX2 is held to, and whether it holds colour (encoded and tagged sRGB):
/// colour keeps the ssimulacra2 `bound` (the build's or its path's), a normal map the angle,
/// other data the PSNR.
pub fn ktx2_bound(
    data_texture: bool,
    normal: bool,
    bound: f64,
    options: &ImageOptions,
) -> (bool, ktx2::Bound) {
    if !data_texture {
        let min_ssimulacra2 = bound;
        (true, ktx2::Bound::Colour { min_ssimulacra2 })
    } else if normal {
        let max_degrees = options.ktx2_normal_max_degrees;
        (false, ktx2::Bound::Normal { max_degrees })
    } else {
        let min_psnr = options.ktx2_data_min_psnr;
        (false, ktx2::Bound::Data { min_psnr })
    }
}

/// GPU memory of an RGBA8 texture with its mipmaps (a third more than its base level).
pub fn rgba8_gpu_bytes(width: u32, height: u32) -> u64 {
    u64::from(width) * u64::from(height) * 4 * 4 / 3
}

/// A model's images as the stage read them: the images, their source bytes and plans by
/// image index, the chosen bytes by image index, and one result per image.
struct ModelTextures {
    images: Vec<model::ModelImage>,
    sources: BTreeMap<usize, (Vec<u8>, Plan)>,
    chosen: model::Chosen,
    results: Vec<ImageResult>,
}

/// The encodings chosen for a model's images (JSON and binary chunk of one of its variants).
fn choose_textures(
    tree: &FileTree,
    source: &str,
    json: &serde_json::Value,
    bin: &[u8],
    rules: &PathRules<'_>,
) -> ModelTextures {
    let images = model::model_images(json);
    let mut chosen = model::Chosen::new();
    let mut sources = BTreeMap::new();
    let mut results = Vec::new();
    for image in &images {
        let name = image.name.as_deref().unwrap_or("");
        let data = looks_like_data(name) || !image.colour_only();
        let plan = rules.plan(source, Role::ModelTexture, data);
        let bytes = match (&image.view, &image.uri) {
            (Some(view), _) => model::view_bytes(json, bin, *view)
                .map(<[u8]>::to_vec)
                .map_err(|e| e.to_string()),
            (None, Some(uri)) => image_at_uri(tree, source, uri),
            (None, None) => Err("no bytes".into()),
        };
        let (mut result, out) = match bytes {
            Ok(bytes) => {
                let o = optimize_guarded(&bytes, &plan, rules.options);
                sources.insert(image.index, (bytes, plan));
                (o.result, o.chosen)
            }
            Err(e) => (
                kept_result(&[], &plan, format!("cannot read it: {e}")),
                None,
            ),
        };
        result.path = match &image.uri {
            Some(uri) if !uri.starts_with("data:") => {
                format!("{source}#images/{} ({uri})", image.index)
            }
            _ => format!("{source}#images/{}", image.index),
        };
        result.used_by = Some(source.to_string());
        result.slots = image.slots.clone();
        if let Some(out) = out {
            chosen.insert(image.index, out);
        }
        results.push(result);
    }
    ModelTextures {
        images,
        sources,
        chosen,
        results,
    }
}

/// Names that say an image holds data, not colour: never perceptually lossy.
pub fn looks_like_data(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path).to_ascii_lowercase();
    [
        "normal",
        "_nrm",
        "_nor.",
        "height",
        "displacement",
        "roughness",
        "metallic",
        "_orm",
        "occlusion",
    ]
    .iter()
    .any(|w| name.contains(w))
}

/// How one image is to be treated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Plan {
    pub role: Role,
    /// Lossy WebP allowed for this file.
    pub lossy: bool,
    /// Its ssimulacra2 bound.
    pub bound: f64,
    /// A data texture (normal, height, …): never perceptually lossy.
    pub data_texture: bool,
    /// Scaled down to fit this size first (`[images] max_size`).
    pub max_size: Option<u32>,
}

fn kept_result(bytes: &[u8], plan: &Plan, why: String) -> ImageResult {
    ImageResult {
        path: String::new(),
        role: plan.role,
        used_by: None,
        slots: Vec::new(),
        source_format: Format::sniff(bytes),
        width: None,
        height: None,
        resized: None,
        chosen: "original".into(),
        bytes_before: bytes.len() as u64,
        bytes_after: bytes.len() as u64,
        ssimulacra2: None,
        psnr: None,
        gpu_bytes: None,
        encode_ms: 0,
        candidates: Vec::new(),
        lossy_estimate: None,
        kept: Some(why),
        ktx2: None,
    }
}

/// One image: the smallest encoding that shows the source's pixels (or, with lossy, pixels
/// within the bound), or the original with the reason. Never fails: whatever goes wrong is
/// the reason the original is kept.
pub fn optimize_image(bytes: &[u8], plan: &Plan, options: &ImageOptions) -> Optimized {
    let start = Instant::now();
    let format = Format::sniff(bytes);
    let keep = |why: String| Optimized {
        result: ImageResult {
            encode_ms: start.elapsed().as_millis() as u64,
            ..kept_result(bytes, plan, why)
        },
        chosen: None,
    };
    match format {
        Format::Png | Format::Jpeg | Format::Webp => {}
        Format::Gif | Format::Avif | Format::Ktx2 => {
            return keep(format!("{} is kept as it is", format.name()));
        }
        Format::Other => return keep("not a PNG, JPEG or WebP image".into()),
    }
    if codec::is_animated(format, bytes) {
        return keep(format!("an animated {}: kept as it is", format.name()));
    }
    let (width, height) = match codec::dimensions(format, bytes) {
        Ok((w, h)) if w > 0 && h > 0 => (w, h),
        Ok((w, h)) => return keep(format!("cannot read the image: it is {w}×{h} pixels")),
        Err(e) => return keep(format!("cannot read the image: {e}")),
    };
    let source = match codec::decode(format, bytes, options.max_pixels) {
        Ok(image) => image,
        Err(e) => {
            let mut k = keep(format!("cannot decode the image: {e}"));
            k.result.width = Some(width);
            k.result.height = Some(height);
            return k;
        }
    };
    // `[images] max_size`: scaled down first; every candidate then holds the scaled image and
    // is checked or scored against it.
    let (source, resized) = codec::fit(source, plan.max_size);
    let rgba = source.to_rgba8();
    // A WebP carries the source's colour profile (or is not made, where it cannot).
    let webp_profile = match format {
        Format::Png => match codec::png_colour_profile(bytes) {
            Some(why) => Err(format!("the PNG carries {why}, which WebP cannot say")),
            None => codec::icc_profile(format, bytes),
        },
        _ => codec::icc_profile(format, bytes),
    };
    let webp_of = |mode: WebpMode| -> Result<Vec<u8>, String> {
        let profile = webp_profile.clone()?;
        let webp = codec::encode_webp(&rgba, mode)?;
        match profile {
            Some(icc) => codec::with_icc_profile(&webp, &icc),
            None => Ok(webp),
        }
    };
    let mut candidates: Vec<(Candidate, Option<Vec<u8>>)> = Vec::new();
    let exact = |out: &[u8], out_format: Format| -> Result<(), String> {
        let back = codec::decode(out_format, out, options.max_pixels)
            .map_err(|e| format!("our output does not decode: {e}"))?;
        if codec::same_pixels(&source, &back) {
            Ok(())
        } else {
            Err("decoded pixels differ from the source's".into())
        }
    };
    // Records a candidate (checked pixel for pixel against the source where `verify` names
    // the format to decode it as); the bytes it kept, if it was accepted.
    let mut push = |encoding: &str, result: Result<Vec<u8>, String>, verify: Option<Format>| {
        let (bytes_out, rejected) = match result {
            Ok(out) => match verify.map(|f| exact(&out, f)) {
                Some(Err(e)) => (out.len() as u64, Some(e)),
                _ => {
                    let n = out.len() as u64;
                    candidates.push((
                        Candidate {
                            encoding: encoding.into(),
                            bytes: n,
                            quality: None,
                            ssimulacra2: Some(100.0),
                            rejected: None,
                            psnr: None,
                        },
                        Some(out),
                    ));
                    return Some(n);
                }
            },
            Err(e) => (0, Some(e)),
        };
        candidates.push((
            Candidate {
                encoding: encoding.into(),
                bytes: bytes_out,
                quality: None,
                ssimulacra2: None,
                rejected,
                psnr: None,
            },
            None,
        ));
        None
    };
    // A scaled JPEG or WebP has no lossless form worth sending: it gets the bounded lossy
    // search, as if lossy were on (the scaling already changed its pixels, by request).
    let lossy_on = plan.lossy || (resized.is_some() && format != Format::Png);
    let lossless_source = format == Format::Png || (resized.is_some() && format == Format::Webp);
    if options.lossless && lossless_source {
        let mut webp_bytes = None;
        if plan.role != Role::GltfTexture {
            let webp = webp_of(WebpMode::Lossless {
                level: options.webp_lossless_level,
            });
            webp_bytes = push("webp-lossless", webp, Some(Format::Webp));
        }
        // oxipng rarely takes more than a fifth off a PNG: where lossless WebP already took
        // off more than `png_skip_below` of it, the PNG search (seconds on a large image)
        // cannot win and is skipped (not when scaled: the source PNG is no measure of that).
        let webp_won = resized.is_none()
            && webp_bytes.is_some_and(|n| (n as f64) < options.png_skip_below * bytes.len() as f64);
        // (A scaled WebP source gets no PNG.)
        if format == Format::Png && webp_won {
            push(
                "png-optimized",
                Err(format!(
                    "not tried: lossless WebP is under {:.0} % of the PNG, more than oxipng takes off",
                    options.png_skip_below * 100.0
                )),
                None,
            );
        } else if format == Format::Png {
            let png = match resized {
                None => codec::optimize_png(bytes, options.png_level, options.png_timeout),
                Some(_) => scaled_png(&webp_profile, &rgba, options),
            };
            push("png-optimized", png, Some(Format::Png));
        }
    }
    // Lossy: for standalone PNG/JPEG sources, searched when on, or estimated when not.
    let lossy_allowed = plan.role != Role::GltfTexture
        && (matches!(format, Format::Png | Format::Jpeg) || resized.is_some())
        && !plan.data_texture
        && webp_profile.is_ok();
    let mut estimate = None;
    if lossy_allowed && (lossy_on || options.estimate_lossy) {
        let best_lossless = candidates
            .iter()
            .filter(|(c, _)| c.rejected.is_none())
            .map(|(c, _)| c.bytes)
            .min()
            .unwrap_or(bytes.len() as u64)
            .min(bytes.len() as u64);
        match lossy_search(
            &rgba,
            plan.bound,
            &webp_of,
            options.webp_method,
            best_lossless,
        ) {
            Ok(Some((out, candidate))) => {
                if lossy_on {
                    candidates.push((candidate, Some(out)));
                } else {
                    estimate = Some(LossyEstimate {
                        bytes: candidate.bytes,
                        quality: candidate.quality,
                        ssimulacra2: candidate.ssimulacra2,
                        bound: plan.bound,
                    });
                }
            }
            Ok(None) => {
                if !lossy_on {
                    estimate = Some(LossyEstimate {
                        bytes: best_lossless,
                        quality: None,
                        ssimulacra2: None,
                        bound: plan.bound,
                    });
                } else {
                    candidates.push((
                        Candidate {
                            encoding: "webp-lossy".into(),
                            bytes: 0,
                            quality: None,
                            ssimulacra2: None,
                            rejected: Some(format!(
                                "no quality both reaches ssimulacra2 {} and is smaller than {best_lossless} bytes",
                                plan.bound
                            )),
                            psnr: None,
                        },
                        None,
                    ));
                }
            }
            Err(e) => {
                if lossy_on {
                    candidates.push((
                        Candidate {
                            encoding: "webp-lossy".into(),
                            bytes: 0,
                            quality: None,
                            ssimulacra2: None,
                            rejected: Some(e),
                            psnr: None,
                        },
                        None,
                    ));
                }
            }
        }
    }
    // The smallest accepted candidate smaller than the source wins.
    let original = bytes.len() as u64;
    let best = candidates
        .iter()
        .enumerate()
        .filter(|(_, (c, out))| c.rejected.is_none() && out.is_some() && c.bytes < original)
        .min_by_key(|(_, (c, _))| c.bytes)
        .map(|(i, _)| i);
    for (i, (c, _)) in candidates.iter_mut().enumerate() {
        if Some(i) != best && c.rejected.is_none() {
            c.rejected = Some(if c.bytes >= original {
                format!("not smaller than the original ({} bytes)", original)
            } else {
                "a smaller candidate was chosen".into()
            });
        }
    }
    // What the player's GPU holds: the scaled size once scaled bytes are chosen.
    let (gpu_width, gpu_height) = resized
        .filter(|_| best.is_some())
        .unwrap_or((width, height));
    let gpu_bytes = (plan.role != Role::Standalone).then(|| rgba8_gpu_bytes(gpu_width, gpu_height));
    let mut result = ImageResult {
        path: String::new(),
        role: plan.role,
        used_by: None,
        slots: Vec::new(),
        source_format: format,
        width: Some(width),
        height: Some(height),
        resized: None,
        chosen: "original".into(),
        bytes_before: original,
        bytes_after: original,
        ssimulacra2: None,
        psnr: None,
        gpu_bytes,
        encode_ms: 0,
        candidates: Vec::new(),
        lossy_estimate: estimate,
        kept: None,
        ktx2: None,
    };
    let mut chosen = None;
    match best {
        Some(i) => {
            let (c, out) = &mut candidates[i];
            let out = out.take().expect("accepted candidates carry their bytes");
            let out_format = Format::sniff(&out);
            result.chosen = c.encoding.clone();
            result.resized = resized.map(|(w, h)| [w, h]);
            result.bytes_after = c.bytes;
            result.ssimulacra2 = c.ssimulacra2;
            if c.encoding == "webp-lossy" {
                result.psnr = c.psnr;
            }
            chosen = Some((out, out_format));
        }
        None => {
            result.kept = Some(match format {
                Format::Jpeg if !plan.lossy => {
                    "a JPEG is never made lossless WebP (it only grows); lossy is off".into()
                }
                Format::Webp => "already WebP".into(),
                _ if candidates.is_empty() => "no encoding applies".into(),
                _ => "no candidate is smaller than the original".into(),
            });
        }
    }
    result.candidates = candidates.into_iter().map(|(c, _)| c).collect();
    result.encode_ms = start.elapsed().as_millis() as u64;
    Optimized { result, chosen }
}

/// A scaled PNG source as an optimised PNG, unless the source says how its colours are to be
/// read (`profile`: what the WebP candidates carry, found once per image), which a PNG written
/// from its pixels would drop.
fn scaled_png(
    profile: &Result<Option<Vec<u8>>, String>,
    rgba: &image::RgbaImage,
    options: &ImageOptions,
) -> Result<Vec<u8>, String> {
    match profile {
        Ok(None) => {}
        Ok(Some(_)) => {
            return Err("the PNG carries an ICC profile, which the scaled PNG would lose".into());
        }
        Err(why) => return Err(format!("{why}; the scaled PNG would lose it too")),
    }
    let png = codec::encode_png(rgba)?;
    codec::optimize_png(&png, options.png_level, options.png_timeout)
}

/// The smallest lossy WebP whose ssimulacra2 reaches `bound` and that is smaller than
/// `smaller_than`: a bisection over the quality (at most 7 encodes and scores), keeping the
/// smallest passing candidate. `None` when no quality passes.
fn lossy_search(
    rgba: &image::RgbaImage,
    bound: f64,
    encode: &dyn Fn(WebpMode) -> Result<Vec<u8>, String>,
    method: u8,
    smaller_than: u64,
) -> Result<Option<(Vec<u8>, Candidate)>, String> {
    let (mut lo, mut hi) = (30i32, 100i32);
    let mut best: Option<(Vec<u8>, Candidate)> = None;
    while lo <= hi {
        let q = (lo + hi) / 2;
        let out = encode(WebpMode::Lossy {
            quality: q as f32,
            method,
        })?;
        let back = codec::decode(Format::Webp, &out, u64::MAX)
            .map_err(|e| format!("our lossy output does not decode: {e}"))?;
        let s = score::score(rgba, &back.to_rgba8())?;
        if s.ssimulacra2 >= bound {
            let n = out.len() as u64;
            if n < smaller_than && best.as_ref().is_none_or(|(_, c)| n < c.bytes) {
                best = Some((
                    out,
                    Candidate {
                        encoding: "webp-lossy".into(),
                        bytes: n,
                        quality: Some(q as f32),
                        ssimulacra2: Some(s.ssimulacra2),
                        rejected: None,
                        psnr: s.psnr,
                    },
                ));
            }
            hi = q - 1;
        } else {
            lo = q + 1;
        }
    }
    Ok(best)
}

/// The decoded source image, for callers that score outputs themselves (the benchmark).
pub fn decode_source(bytes: &[u8], max_pixels: u64) -> Result<DynamicImage, String> {
    codec::decode(Format::sniff(bytes), bytes, max_pixels)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_common::config::{ImagePathRule, ImagesSettings, PathSwitch};

    fn rule(pattern: &str, max_size: Option<u32>) -> ImagePathRule {
        ImagePathRule {
            pattern: pattern.into(),
            lossy: None,
            min_ssimulacra2: None,
            max_size,
            ktx2: None,
        }
    }

    /// `[images] ktx2`: off by default; on for every model, for the model paths its globs
    /// match, or through a `[[images.paths]]` rule; a bad glob names itself.
    #[test]
    fn ktx2_is_opt_in_per_build_and_per_model_path() {
        let base = ImageOptions::default();
        assert!(!PathRules::new(&base).unwrap().ktx2("assets/fox.glb"));
        let all = ImagesSettings {
            ktx2: Some(PathSwitch::All(true)),
            ..ImagesSettings::default()
        };
        let options = apply(&all, &base).unwrap();
        assert!(PathRules::new(&options).unwrap().ktx2("assets/fox.glb"));
        let some = ImagesSettings {
            ktx2: Some(PathSwitch::Paths(vec!["chars/**".into()])),
            paths: vec![ImagePathRule {
                ktx2: Some(true),
                ..rule("props/*.glb", None)
            }],
            ..ImagesSettings::default()
        };
        let options = apply(&some, &base).unwrap();
        let rules = PathRules::new(&options).unwrap();
        assert!(rules.ktx2("chars/hero.glb"));
        assert!(rules.ktx2("props/crate.glb"));
        assert!(!rules.ktx2("level/ground.glb"));
        let bad = ImagesSettings {
            ktx2: Some(PathSwitch::Paths(vec!["chars/[".into()])),
            ..ImagesSettings::default()
        };
        assert!(apply(&bad, &base).unwrap_err().contains("chars/["));
    }

    /// What the KTX2 search does not take gets a reason and no bytes: a texture that does not
    /// decode, one past the search's pixel limit (refused before any encoding).
    #[test]
    fn a_texture_the_ktx2_search_cannot_take_says_why() {
        let image = model::ModelImage {
            index: 0,
            name: None,
            view: Some(0),
            uri: None,
            slots: vec!["baseColorTexture".into()],
        };
        let plan = Plan {
            role: Role::ModelTexture,
            lossy: false,
            bound: 80.0,
            data_texture: false,
            max_size: None,
        };
        let options = ImageOptions::default();
        let (out, report) = ktx2_texture(b"\x89PNG\r\n\x1a\n truncated", &plan, &image, &options);
        assert!(out.is_none());
        assert_eq!(report.chosen, "none");
        assert!(
            report.why.as_deref().unwrap().starts_with("cannot decode"),
            "{report:?}"
        );
        let big = codec::encode_png(&image::RgbaImage::new(4097, 4096)).unwrap();
        let (out, report) = ktx2_texture(&big, &plan, &image, &options);
        assert!(out.is_none());
        assert!(
            report
                .why
                .as_deref()
                .unwrap()
                .contains("past the KTX2 search"),
            "{report:?}"
        );
        assert!(report.candidates.is_empty(), "refused before any encoding");
    }

    /// `[images] max_size` and `[[images.paths]] max_size`: never by default, the last
    /// matching path rule wins, a size too small to be meant is refused naming the setting.
    #[test]
    fn max_size_is_opt_in_per_build_and_per_path() {
        let base = ImageOptions::default();
        let rules = PathRules::new(&base).unwrap();
        assert_eq!(
            rules.plan("bg/sky.png", Role::Standalone, false).max_size,
            None
        );

        let settings = ImagesSettings {
            max_size: Some(2048),
            paths: vec![
                rule("bg/**", Some(1024)),
                rule("bg/huge/**", Some(512)),
                rule("atlas/**", None),
            ],
            ..ImagesSettings::default()
        };
        let options = apply(&settings, &base).unwrap();
        let rules = PathRules::new(&options).unwrap();
        let size = |path: &str| rules.plan(path, Role::Standalone, false).max_size;
        assert_eq!(size("ui/button.png"), Some(2048));
        assert_eq!(size("bg/sky.png"), Some(1024));
        assert_eq!(size("bg/huge/sea.png"), Some(512));
        assert_eq!(
            size("atlas/sheet.png"),
            Some(2048),
            "a rule without a size changes none"
        );

        for bad in [
            ImagesSettings {
                max_size: Some(0),
                ..ImagesSettings::default()
            },
            ImagesSettings {
                paths: vec![rule("bg/**", Some(8))],
                ..ImagesSettings::default()
            },
        ] {
            let e = apply(&bad, &base).unwrap_err();
            assert!(e.contains("max_size") && e.contains("16"), "{e}");
        }
    }
}
