//! Stage `vat`: bakes skinned and morph-target animation into vertex animation textures.
//!
//! For every skinned or morph-animated mesh node of a model, every clip is evaluated at a
//! fixed frame rate by the one animation evaluator (`crate::animation`: `Rig::pose_at`, then
//! `Deformer`), and each vertex's model-space position and normal per frame is written into
//! textures, with a GLB of the mesh whose `TEXCOORD_1` addresses each vertex's texel, a
//! `vat.json`, and GLSL / WGSL decoders. The format is specified in `docs/vat.md`; the error
//! in `vat.json` is measured by decoding exactly as the shaders do.
//!
//! `bake_model` is a pure function of the model and the options; `run` applies it to the
//! models of a build that the build's `kiln.toml` (or the server's configuration) selects.

use std::collections::BTreeMap;
use std::time::Instant;

use glam::DVec3;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Stage, StageError};
use crate::animation::deform::unit;
use crate::animation::metric::read_clips;
use crate::animation::{Clip, DeformScratch, Deformer, Path, Rig};
use crate::gltf::{Asset, GltfError, accessors};
use crate::ir::{FileTree, Files, Inventory, VatBaked};

mod mesh;
pub mod reader;
pub mod shaders;
pub mod textures;

pub use mesh::MESH_TO_MODEL;
use mesh::mesh_glb;
use textures::{Encoded, PositionCodec};

pub const NAME: &str = "vat";
pub const FORMAT_VERSION: u32 = 2;

/// How positions are stored in the textures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VatEncoding {
    /// 8 bits per component, 1 RGB8 texel per vertex per frame.
    Low,
    /// 16 bits per component split over 2 RGB8 texels (high bytes, low bytes).
    Medium,
    /// 24 bits per component over 3 RGB8 texels (seed 002's "high").
    High,
    /// 16 bits per component in one RGBA 16-bit PNG texel.
    Rgba16,
    /// Half floats in one RGBA half OpenEXR texel: the values themselves.
    Half,
}

impl VatEncoding {
    pub const ALL: [VatEncoding; 5] = [
        Self::Low,
        Self::Medium,
        Self::High,
        Self::Rgba16,
        Self::Half,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Low => "low",
            Self::Medium => "medium",
            Self::High => "high",
            Self::Rgba16 => "rgba16",
            Self::Half => "half",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.name() == name)
    }

    /// Texels per vertex per frame in the position texture.
    pub fn planes(self) -> u32 {
        match self {
            Self::Medium => 2,
            Self::High => 3,
            _ => 1,
        }
    }

    pub fn extension(self) -> &'static str {
        if self == Self::Half { "exr" } else { "png" }
    }
}

/// `auto`, or one encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncodingChoice {
    Auto,
    Fixed(VatEncoding),
}

impl EncodingChoice {
    pub fn parse(name: &str) -> Option<Self> {
        if name == "auto" {
            Some(Self::Auto)
        } else {
            VatEncoding::parse(name).map(Self::Fixed)
        }
    }
}

/// Positions as they are, or as offsets from the rest pose (smaller range, more precision).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PositionMode {
    Absolute,
    Relative,
}

impl PositionMode {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "absolute" => Some(Self::Absolute),
            "relative" => Some(Self::Relative),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct VatOptions {
    pub encoding: EncodingChoice,
    pub mode: PositionMode,
    /// Frames per second at which every clip is sampled.
    pub frame_rate: f64,
    /// Largest position error `auto` accepts, relative to the rest bounding-box diagonal.
    pub tolerance: f64,
    /// The same in model units; overrides `tolerance`.
    pub tolerance_abs: Option<f64>,
    /// Largest texture width or height (2048, 4096 or 8192).
    pub max_size: u32,
    /// Texels per row; default: the vertex count, capped at `max_size`.
    pub width: Option<u32>,
    /// The encodings `auto` chooses among.
    pub candidates: Vec<VatEncoding>,
}

impl Default for VatOptions {
    fn default() -> Self {
        Self {
            encoding: EncodingChoice::Auto,
            mode: PositionMode::Relative,
            frame_rate: 30.0,
            tolerance: 2.5e-4,
            tolerance_abs: None,
            max_size: 4096,
            width: None,
            candidates: VatEncoding::ALL.to_vec(),
        }
    }
}

#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum VatError {
    #[error("the model has no animation to bake")]
    NoAnimation,
    #[error(
        "the model has no skinned mesh and no mesh with animated morph targets ({meshes} mesh nodes)"
    )]
    NothingToBake { meshes: usize },
    #[error("clip {clip:?} has zero length: a VAT needs at least two distinct frames")]
    ZeroLengthClip { clip: String },
    #[error(
        "mesh {mesh:?}: {vertices} vertices need {rows} texture rows per frame at width {width}, \
         more than the maximum texture size {max_size}"
    )]
    DoesNotFit {
        mesh: String,
        vertices: usize,
        width: u32,
        rows: u32,
        max_size: u32,
    },
    #[error("invalid options: {0}")]
    Options(String),
    /// The model itself is broken (the reader's reason).
    #[error("{0}")]
    Invalid(String),
    #[error("writing a texture: {0}")]
    Texture(String),
}

impl From<GltfError> for VatError {
    fn from(e: GltfError) -> Self {
        Self::Invalid(e.to_string())
    }
}

/// One baked mesh: its folder name and files (relative name → bytes), and its description.
#[derive(Debug, Clone)]
pub struct VatMesh {
    pub folder: String,
    pub files: Vec<(String, Vec<u8>)>,
    pub meta: VatMeta,
}

/// Everything baked from one model.
#[derive(Debug, Clone)]
pub struct VatBake {
    pub meshes: Vec<VatMesh>,
    pub report: VatModelReport,
}

/// `vat.json` (see `docs/vat.md`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct VatMeta {
    pub format: String,
    pub version: u32,
    pub source: String,
    pub mesh: String,
    pub node: usize,
    pub encoding: VatEncoding,
    pub mode: PositionMode,
    pub vertices: usize,
    pub frame_rate: f64,
    pub frames: usize,
    pub layout: Layout,
    pub bounds: Bounds,
    pub rest_bounds: Bounds,
    pub animated_bounds: Bounds,
    pub textures: Vec<TextureEntry>,
    pub clips: Vec<ClipEntry>,
    /// The source mesh has no NORMAL: glTF shades it flat, so `mesh.glb` has none either and
    /// a renderer should shade it flat (three.js does so by itself); the normal textures hold
    /// smooth normals for engines that want them.
    pub flat_shading: bool,
    pub error: ErrorReport,
    /// The largest position error accepted, in model units.
    pub tolerance: f64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidates: Vec<Candidate>,
    pub shaders: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Layout {
    pub width: u32,
    pub rows_per_frame: u32,
    pub planes: u32,
    pub frames_per_texture: u32,
    pub max_size: u32,
}

impl Layout {
    /// Frames in texture `texture` of a bake of `frames` frames (the last may hold fewer).
    pub fn frames_in(&self, texture: usize, frames: usize) -> u32 {
        let per = self.frames_per_texture as usize;
        per.min(frames.saturating_sub(texture * per)) as u32
    }

    /// The position-texture row of plane `plane`, local frame `local`, vertex row `row` in a
    /// texture of `frames` frames (format 2): planes one after the other, in each plane the
    /// vertex rows one after the other, each holding every frame in turn. A texel's neighbour
    /// above is then the same vertex one frame earlier, which PNG's Up filter predicts from.
    pub fn position_row(&self, frames: u32, local: u32, plane: u32, row: u32) -> u32 {
        (plane * self.rows_per_frame + row) * frames + local
    }

    /// The normal-texture row of local frame `local`, vertex row `row` (one plane, the same
    /// order).
    pub fn normal_row(&self, frames: u32, local: u32, row: u32) -> u32 {
        self.position_row(frames, local, 0, row)
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Bounds {
    pub min: [f32; 3],
    pub max: [f32; 3],
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TextureEntry {
    pub positions: String,
    pub normals: String,
    pub width: u32,
    pub height: u32,
    pub normals_height: u32,
    pub first_frame: usize,
    pub frames: usize,
    pub positions_bytes: u64,
    pub normals_bytes: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ClipEntry {
    pub name: String,
    pub first_frame: usize,
    /// Frames stored: one every `1 / frame_rate` s from 0, and the last at the exact end.
    pub frames: usize,
    pub duration: f64,
    /// `duration × frame_rate`: where the last frame sits, in frames (what the shaders'
    /// `vatFrame` takes, so that playback and loops keep the clip's exact duration).
    pub frame_span: f64,
    pub looping: bool,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Default)]
pub struct ErrorReport {
    /// Measured: largest distance between a decoded and an evaluated position (model units).
    pub position_max: f64,
    /// The same over the rest bounding-box diagonal.
    pub position_max_relative: f64,
    /// The encoding's worst case (model units).
    pub position_bound: f64,
    /// Measured: largest angle between a decoded and an evaluated normal.
    pub normal_max_degrees: f64,
    pub normal_bound_degrees: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Candidate {
    pub encoding: VatEncoding,
    pub bytes: u64,
    pub position_max: f64,
    pub normal_max_degrees: f64,
    pub meets_tolerance: bool,
}

/// Per model, for the build report and the benchmark.
#[derive(Debug, Clone, Serialize, Default, PartialEq)]
pub struct VatModelReport {
    pub meshes: Vec<VatMeshReport>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct VatMeshReport {
    pub folder: String,
    pub vertices: usize,
    pub frames: usize,
    pub encoding: VatEncoding,
    pub texture_bytes: u64,
    pub mesh_bytes: u64,
    pub position_max: f64,
    pub position_max_relative: f64,
    pub normal_max_degrees: f64,
    /// Seconds spent evaluating every vertex at every frame.
    pub evaluate_seconds: f64,
    /// Seconds spent quantizing, measuring and compressing the textures (all candidates).
    pub encode_seconds: f64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Every vertex's position and normal at every frame of every clip, in frame order. Frame
/// normals are not normalised (only their direction counts); rest normals are.
pub struct Frames {
    pub vertices: usize,
    pub positions: Vec<[f32; 3]>,
    pub normals: Vec<[f32; 3]>,
    pub rest: Vec<[f32; 3]>,
    pub rest_normals: Vec<[f32; 3]>,
    pub clips: Vec<ClipEntry>,
}

impl Frames {
    pub fn count(&self) -> usize {
        self.positions.len() / self.vertices.max(1)
    }
}

/// The mesh nodes worth baking: skinned, or with morph weights some clip animates.
pub fn bakeable_nodes(rig: &Rig, clips: &[Clip]) -> Vec<usize> {
    rig.mesh_nodes
        .iter()
        .copied()
        .filter(|&n| {
            let node = &rig.nodes[n];
            let vertices: usize = rig.meshes[node.mesh.unwrap()]
                .primitives
                .iter()
                .map(|p| p.positions.len())
                .sum();
            vertices > 0
                && (node.skin.is_some()
                    || clips.iter().any(|c| {
                        c.channels
                            .iter()
                            .any(|ch| ch.node == n && ch.path == Path::Weights)
                    }))
        })
        .collect()
}

/// Checks the model can be baked and reads what every bake needs.
pub fn prepare(asset: &Asset) -> Result<(Rig, Vec<Clip>, Vec<usize>), VatError> {
    let clips = read_clips(asset)?;
    if clips.is_empty() {
        return Err(VatError::NoAnimation);
    }
    for (i, clip) in clips.iter().enumerate() {
        if clip.range().1 <= 0.0 {
            return Err(VatError::ZeroLengthClip {
                clip: clip_name(clip, i),
            });
        }
    }
    let mut rig = Rig::read(asset, crate::animation::MetricOptions::default().shell)?;
    let nodes = bakeable_nodes(&rig, &clips);
    if nodes.is_empty() {
        return Err(VatError::NothingToBake {
            meshes: rig.mesh_nodes.len(),
        });
    }
    fill_missing_normals(asset, &mut rig)?;
    Ok((rig, clips, nodes))
}

fn clip_name(clip: &Clip, index: usize) -> String {
    if clip.name.is_empty() {
        format!("clip{index}")
    } else {
        clip.name.clone()
    }
}

/// Primitives without NORMAL get smooth normals from their triangles at rest (what a viewer
/// would compute), so that every baked vertex has one.
fn fill_missing_normals(asset: &Asset, rig: &mut Rig) -> Result<(), VatError> {
    for (m, mesh) in rig.meshes.iter_mut().enumerate() {
        for (p, primitive) in mesh.primitives.iter_mut().enumerate() {
            if !primitive.normals.is_empty() || primitive.positions.is_empty() {
                continue;
            }
            let json = &asset.array("meshes")[m]["primitives"][p];
            let indices = triangle_indices(asset, json, primitive.positions.len())?;
            let mut normals = vec![DVec3::ZERO; primitive.positions.len()];
            for t in indices.chunks_exact(3) {
                let [a, b, c] = [t[0], t[1], t[2]].map(|i| primitive.positions[i as usize]);
                let face = (b - a).cross(c - a);
                for &i in t {
                    normals[i as usize] += face;
                }
            }
            primitive.normals = normals
                .into_iter()
                .map(|n| n.try_normalize().unwrap_or(DVec3::Y))
                .collect();
        }
    }
    Ok(())
}

/// A primitive's triangle list (indices, or 0..count), or an empty list for other modes.
fn triangle_indices(asset: &Asset, primitive: &Value, count: usize) -> Result<Vec<u32>, VatError> {
    let mode = primitive.get("mode").and_then(Value::as_u64).unwrap_or(4);
    if mode != 4 {
        return Ok(vec![]);
    }
    let indices = match primitive.get("indices").and_then(Value::as_u64) {
        Some(a) => accessors::read_indices(asset, a as usize, count)?,
        None => (0..count as u32).collect(),
    };
    Ok(indices)
}

/// Evaluates mesh node `node` at every frame of every clip (and at rest).
pub fn evaluate(rig: &Rig, clips: &[Clip], node: usize, frame_rate: f64) -> Frames {
    evaluate_all(rig, clips, &[node], frame_rate)
        .pop()
        .expect("one frame set per node")
}

/// Evaluates every mesh node of `nodes` at every frame of every clip (and at rest), posing
/// the rig once per frame for all of them (a model's meshes share its skeleton).
pub fn evaluate_all(rig: &Rig, clips: &[Clip], nodes: &[usize], frame_rate: f64) -> Vec<Frames> {
    let deformers: Vec<Deformer> = nodes.iter().map(|&n| Deformer::new(rig, n)).collect();
    let rest_pose = rig.rest_pose();
    let counts: Vec<usize> = clips
        .iter()
        .map(|c| clip_frames(c.range().1, frame_rate))
        .collect();
    let total: usize = counts.iter().sum();
    let mut all: Vec<Frames> = deformers
        .iter()
        .map(|deformer| {
            let vertices = deformer.vertices;
            let mut rest = vec![[0.0; 3]; vertices];
            let mut rest_normals = vec![[0.0; 3]; vertices];
            deformer.deform(rig, &rest_pose, &mut rest, &mut rest_normals);
            rest_normals.iter_mut().for_each(|n| *n = unit(*n));
            // Every frame's room at once, filled in place.
            Frames {
                vertices,
                positions: vec![[0.0; 3]; total * vertices],
                normals: vec![[0.0; 3]; total * vertices],
                rest,
                rest_normals,
                clips: Vec::new(),
            }
        })
        .collect();
    let mut pose = rest_pose;
    let mut cursors = Vec::new();
    let mut scratch = vec![DeformScratch::default(); deformers.len()];
    let mut first = 0;
    for (i, (clip, &count)) in clips.iter().zip(&counts).enumerate() {
        let duration = clip.range().1;
        cursors.clear();
        for f in 0..count {
            let t = (f as f64 / frame_rate).min(duration);
            rig.pose_at_in_order(clip, t, &mut pose, &mut cursors);
            for ((deformer, frames), scratch) in deformers.iter().zip(&mut all).zip(&mut scratch) {
                let vertices = frames.vertices;
                let at = (first + f) * vertices..(first + f + 1) * vertices;
                deformer.deform_with(
                    rig,
                    &pose,
                    &mut frames.positions[at.clone()],
                    &mut frames.normals[at],
                    scratch,
                );
            }
        }
        for frames in &mut all {
            frames.clips.push(ClipEntry {
                name: clip_name(clip, i),
                first_frame: first,
                frames: count,
                duration,
                frame_span: duration * frame_rate,
                looping: false,
            });
        }
        first += count;
    }
    all
}

/// Frames of a clip: one every `1 / frame_rate` seconds from 0, the last at its exact end.
pub fn clip_frames(duration: f64, frame_rate: f64) -> usize {
    (duration * frame_rate - 1e-6).ceil().max(1.0) as usize + 1
}

/// Where each vertex and frame goes.
pub fn layout(
    vertices: usize,
    encoding: VatEncoding,
    options: &VatOptions,
    mesh: &str,
) -> Result<Layout, VatError> {
    let max = options.max_size;
    let width = options
        .width
        .unwrap_or(vertices as u32)
        .clamp(1, max)
        .min(vertices.max(1) as u32);
    let rows = vertices.div_ceil(width as usize) as u32;
    let block = rows * encoding.planes();
    if block > max {
        return Err(VatError::DoesNotFit {
            mesh: mesh.to_string(),
            vertices,
            width,
            rows: block,
            max_size: max,
        });
    }
    Ok(Layout {
        width,
        rows_per_frame: rows,
        planes: encoding.planes(),
        frames_per_texture: max / block,
        max_size: max,
    })
}

/// Bakes every bakeable mesh of a model. `source` is the model's path (for `vat.json`).
pub fn bake_model(asset: &Asset, source: &str, options: &VatOptions) -> Result<VatBake, VatError> {
    check_options(options)?;
    let (rig, clips, nodes) = prepare(asset)?;
    let mut meshes = Vec::new();
    let mut report = VatModelReport::default();
    let mut used = Vec::new();
    // Meshes are evaluated together (one pose per frame for all), in batches that hold at
    // most MAX_SAMPLES vertex samples between them, as one mesh alone may.
    let mut batches: Vec<(Vec<usize>, usize)> = Vec::new();
    for &node in &nodes {
        let samples = check_samples(&rig, &clips, node, options.frame_rate)?;
        match batches.last_mut() {
            Some((batch, held)) if *held + samples <= MAX_SAMPLES => {
                batch.push(node);
                *held += samples;
            }
            _ => batches.push((vec![node], samples)),
        }
    }
    for (batch, _) in batches {
        let started = Instant::now();
        let all = evaluate_all(&rig, &clips, &batch, options.frame_rate);
        // One evaluation for the batch: each mesh's share of its time by vertices.
        let evaluate_seconds = started.elapsed().as_secs_f64();
        let batch_vertices = all.iter().map(|f| f.vertices).sum::<usize>().max(1);
        for (node, mut frames) in batch.into_iter().zip(all) {
            let folder = folder_name(asset, node, &mut used);
            let started = Instant::now();
            let share = frames.vertices as f64 / batch_vertices as f64;
            let (mesh, mut mesh_report) =
                bake_mesh(asset, &rig, node, &folder, source, &mut frames, options)?;
            mesh_report.evaluate_seconds = evaluate_seconds * share;
            mesh_report.encode_seconds = started.elapsed().as_secs_f64();
            report.meshes.push(mesh_report);
            meshes.push(mesh);
        }
    }
    Ok(VatBake { meshes, report })
}

/// Vertex positions one bake may hold in memory (frames × vertices): far beyond what fits in
/// the largest textures, so only a hostile clip length or vertex count reaches it.
pub const MAX_SAMPLES: usize = 1 << 25;

/// Refuses a bake whose frames × vertices would not fit in memory, before allocating them
/// (a clip can claim to last 10¹² seconds). Returns the mesh's vertex samples.
fn check_samples(
    rig: &Rig,
    clips: &[Clip],
    node: usize,
    frame_rate: f64,
) -> Result<usize, VatError> {
    let vertices = Deformer::new(rig, node).vertices;
    let mut frames = 0usize;
    for (i, clip) in clips.iter().enumerate() {
        let seconds = clip.range().1;
        let fits = seconds.is_finite() && seconds * frame_rate < MAX_SAMPLES as f64;
        frames = frames.saturating_add(if fits {
            clip_frames(seconds, frame_rate)
        } else {
            usize::MAX
        });
        if frames.saturating_mul(vertices.max(1)) > MAX_SAMPLES {
            return Err(VatError::Invalid(format!(
                "clip {:?} ({seconds} s) at {frame_rate} frames/s with {vertices} vertices needs more than {MAX_SAMPLES} vertex samples",
                clip_name(clip, i)
            )));
        }
    }
    Ok(frames * vertices.max(1))
}

fn check_options(options: &VatOptions) -> Result<(), VatError> {
    if !(options.frame_rate.is_finite() && options.frame_rate > 0.0 && options.frame_rate <= 1000.0)
    {
        return Err(VatError::Options(format!(
            "frame rate {} is not in (0, 1000]",
            options.frame_rate
        )));
    }
    if ![2048, 4096, 8192].contains(&options.max_size) {
        return Err(VatError::Options(format!(
            "maximum texture size {} is not 2048, 4096 or 8192",
            options.max_size
        )));
    }
    let tolerance = options.tolerance_abs.unwrap_or(options.tolerance);
    if !(tolerance.is_finite() && tolerance > 0.0) {
        return Err(VatError::Options(format!(
            "tolerance {tolerance} is not a positive number"
        )));
    }
    if options.encoding == EncodingChoice::Auto && options.candidates.is_empty() {
        return Err(VatError::Options(
            "auto has no encodings to choose from".into(),
        ));
    }
    Ok(())
}

/// A file-safe, unique folder name for a mesh node.
fn folder_name(asset: &Asset, node: usize, used: &mut Vec<String>) -> String {
    let json = &asset.array("nodes")[node];
    let mesh_name = json
        .get("mesh")
        .and_then(Value::as_u64)
        .and_then(|m| asset.array("meshes").get(m as usize))
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str);
    let name = json
        .get("name")
        .and_then(Value::as_str)
        .or(mesh_name)
        .unwrap_or("");
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    let base = if safe.trim_matches('_').is_empty() {
        format!("node{node}")
    } else {
        safe
    };
    let mut name = base.clone();
    let mut k = 2;
    while used.contains(&name) {
        name = format!("{base}-{k}");
        k += 1;
    }
    used.push(name.clone());
    name
}

fn bounds_of<'a>(points: impl Iterator<Item = &'a [f32; 3]>) -> Bounds {
    let mut b = Bounds {
        min: [f32::INFINITY; 3],
        max: [f32::NEG_INFINITY; 3],
    };
    for p in points {
        b.min = [0, 1, 2].map(|a| b.min[a].min(p[a]));
        b.max = [0, 1, 2].map(|a| b.max[a].max(p[a]));
    }
    for a in 0..3 {
        if b.min[a] > b.max[a] {
            b.min[a] = 0.0;
            b.max[a] = 0.0;
        }
    }
    b
}

fn diagonal(b: &Bounds) -> f64 {
    (0..3)
        .map(|a| ((b.max[a] - b.min[a]) as f64).powi(2))
        .sum::<f64>()
        .sqrt()
}

/// The values stored for `mode`: positions, or offsets from the rest pose.
pub fn stored_values(frames: &Frames, mode: PositionMode) -> Vec<[f32; 3]> {
    match mode {
        PositionMode::Absolute => frames.positions.clone(),
        PositionMode::Relative => frames
            .positions
            .chunks_exact(frames.vertices)
            .flat_map(|frame| {
                frame
                    .iter()
                    .zip(&frames.rest)
                    .map(|(p, r)| [p[0] - r[0], p[1] - r[1], p[2] - r[2]])
            })
            .collect(),
    }
}

fn bake_mesh(
    asset: &Asset,
    rig: &Rig,
    node: usize,
    folder: &str,
    source: &str,
    frames: &mut Frames,
    options: &VatOptions,
) -> Result<(VatMesh, VatMeshReport), VatError> {
    let rest_bounds = bounds_of(frames.rest.iter());
    let animated_bounds = bounds_of(frames.positions.iter().chain(&frames.rest));
    // The model's size: its rest diagonal, or the animated one for a mesh that starts
    // collapsed (e.g. all morph weights zero at a point).
    let size = diagonal(&rest_bounds)
        .max(diagonal(&animated_bounds) * 1e-3)
        .max(1e-9);
    let tolerance = options
        .tolerance_abs
        .unwrap_or(options.tolerance * rig.diagonal.max(size));
    let values = stored_values(frames, options.mode);
    let bounds = bounds_of(values.iter());
    let mut warnings = Vec::new();

    // Encode each candidate, measure it, keep the chosen one.
    let tried: Vec<VatEncoding> = match options.encoding {
        EncodingChoice::Fixed(e) => vec![e],
        EncodingChoice::Auto => options.candidates.clone(),
    };
    let mut candidates = Vec::new();
    let mut best: Option<(Encoded, Layout)> = None;
    let mut first_error = None;
    for encoding in tried {
        let layout = match layout(frames.vertices, encoding, options, folder) {
            Ok(l) => l,
            Err(e) => {
                first_error.get_or_insert(e);
                continue;
            }
        };
        let codec = PositionCodec::new(encoding, options.mode, bounds);
        let encoded =
            textures::encode(frames, &values, &codec, &layout).map_err(VatError::Texture)?;
        let meets = encoded.error.position_max <= tolerance;
        candidates.push(Candidate {
            encoding,
            bytes: encoded.bytes(),
            position_max: encoded.error.position_max,
            normal_max_degrees: encoded.error.normal_max_degrees,
            meets_tolerance: meets,
        });
        let better = match &best {
            None => true,
            Some((b, _)) => {
                let b_meets = b.error.position_max <= tolerance;
                match (meets, b_meets) {
                    (true, false) => true,
                    (false, true) => false,
                    (true, true) => encoded.bytes() < b.bytes(),
                    (false, false) => encoded.error.position_max < b.error.position_max,
                }
            }
        };
        if better {
            best = Some((encoded, layout));
        }
    }
    let Some((encoded, layout)) = best else {
        return Err(first_error.expect("a layout error when nothing was encoded"));
    };
    if encoded.error.position_max > tolerance {
        warnings.push(match options.encoding {
            EncodingChoice::Auto => format!(
                "no encoding meets the tolerance {tolerance:.3e}: {} has the smallest error, {:.3e}",
                encoded.encoding.name(),
                encoded.error.position_max
            ),
            EncodingChoice::Fixed(e) => format!(
                "{}'s error {:.3e} is over the tolerance {tolerance:.3e}",
                e.name(),
                encoded.error.position_max
            ),
        });
    }
    if asset.array("meshes")[rig.nodes[node].mesh.expect("a mesh node")]["primitives"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|p| p.pointer("/attributes/TEXCOORD_1").is_some())
    {
        warnings.push(
            "the mesh's own TEXCOORD_1 is replaced by the VAT texel coordinates: \
             textures it sampled through texCoord 1 (e.g. light maps) are not kept"
                .into(),
        );
    }
    // A clip loops when its last frame shows what its first does.
    for clip in &mut frames.clips {
        let v = frames.vertices;
        let first = &frames.positions[clip.first_frame * v..(clip.first_frame + 1) * v];
        let last_frame = clip.first_frame + clip.frames - 1;
        let last = &frames.positions[last_frame * v..(last_frame + 1) * v];
        let gap = first
            .iter()
            .zip(last)
            .map(|(a, b)| distance(a, b))
            .fold(0.0, f64::max);
        clip.looping = gap <= tolerance.max(encoded.error.position_bound);
    }

    let encoding = encoded.encoding;
    let ext = encoding.extension();
    let mut files = Vec::new();
    let mut entries = Vec::new();
    for (i, texture) in encoded.textures.into_iter().enumerate() {
        let positions = format!("positions-{i}.{ext}");
        let normals = format!("normals-{i}.{ext}");
        entries.push(TextureEntry {
            positions: positions.clone(),
            normals: normals.clone(),
            width: texture.width,
            height: texture.height,
            normals_height: texture.normals_height,
            first_frame: texture.first_frame,
            frames: texture.frames,
            positions_bytes: texture.positions.len() as u64,
            normals_bytes: texture.normals.len() as u64,
        });
        files.push((positions, texture.positions));
        files.push((normals, texture.normals));
    }
    let mesh_glb = mesh_glb(asset, rig, node, frames, &layout)?;
    let mesh_name = asset.array("nodes")[node]
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or(folder)
        .to_string();
    let meta = VatMeta {
        format: "kiln-vat".into(),
        version: FORMAT_VERSION,
        source: source.to_string(),
        mesh: mesh_name,
        node,
        encoding,
        mode: options.mode,
        vertices: frames.vertices,
        frame_rate: options.frame_rate,
        frames: frames.count(),
        layout,
        bounds,
        rest_bounds,
        animated_bounds,
        textures: entries,
        clips: frames.clips.clone(),
        flat_shading: !has_normals(asset, rig, node),
        error: ErrorReport {
            position_max_relative: encoded.error.position_max / size,
            ..encoded.error
        },
        tolerance,
        candidates: if options.encoding == EncodingChoice::Auto {
            candidates
        } else {
            vec![]
        },
        shaders: BTreeMap::from([
            ("glsl".to_string(), "vat.glsl".to_string()),
            ("wgsl".to_string(), "vat.wgsl".to_string()),
        ]),
    };
    files.push(("vat.glsl".into(), shaders::glsl(&meta).into_bytes()));
    files.push(("vat.wgsl".into(), shaders::wgsl(&meta).into_bytes()));
    let mut json = serde_json::to_vec_pretty(&meta).expect("vat.json serialises");
    json.push(b'\n');
    files.push(("vat.json".into(), json));
    let report = VatMeshReport {
        folder: folder.to_string(),
        vertices: frames.vertices,
        frames: frames.count(),
        encoding,
        texture_bytes: meta
            .textures
            .iter()
            .map(|t| t.positions_bytes + t.normals_bytes)
            .sum(),
        mesh_bytes: mesh_glb.len() as u64,
        position_max: meta.error.position_max,
        position_max_relative: meta.error.position_max_relative,
        normal_max_degrees: meta.error.normal_max_degrees,
        evaluate_seconds: 0.0,
        encode_seconds: 0.0,
        warnings,
    };
    files.insert(0, ("mesh.glb".into(), mesh_glb));
    Ok((
        VatMesh {
            folder: folder.to_string(),
            files,
            meta,
        },
        report,
    ))
}

/// Whether every primitive of the node's mesh has its own NORMAL.
fn has_normals(asset: &Asset, rig: &Rig, node: usize) -> bool {
    let mesh = rig.nodes[node].mesh.expect("a mesh node");
    asset.array("meshes")[mesh]["primitives"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|p| p.pointer("/attributes/NORMAL").is_some())
}

pub fn distance(a: &[f32; 3], b: &[f32; 3]) -> f64 {
    let d = |i: usize| (a[i] as f64 - b[i] as f64).powi(2);
    (d(0) + d(1) + d(2)).sqrt()
}

/// What the build's `kiln.toml` (or the server) asks of this stage: which models to bake and
/// how. `files` holds paths, or `*` for every animated model.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VatSelection {
    pub files: Vec<String>,
    pub options: VatOptions,
    /// Per-file overrides.
    pub per_file: BTreeMap<String, VatOptions>,
}

impl VatSelection {
    pub fn options_for(&self, path: &str) -> Option<&VatOptions> {
        if let Some(o) = self.per_file.get(path) {
            return Some(o);
        }
        self.files
            .iter()
            .any(|f| f == "*" || f == path)
            .then_some(&self.options)
    }
}

/// What happened to one selected model.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct VatModelOutcome {
    pub source: String,
    /// `vat.json` of each baked mesh, in the build.
    pub baked: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report: Option<VatModelReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize, Default, PartialEq)]
pub struct VatReport {
    pub models: Vec<VatModelOutcome>,
}

impl VatReport {
    /// Every baked mesh, for the manifest.
    pub fn baked(&self) -> Vec<VatBaked> {
        let mut out = Vec::new();
        for model in &self.models {
            let Some(report) = &model.report else {
                continue;
            };
            for (path, mesh) in model.baked.iter().zip(&report.meshes) {
                out.push(VatBaked {
                    source: model.source.clone(),
                    mesh: mesh.folder.clone(),
                    path: path.clone(),
                    encoding: mesh.encoding.name().to_string(),
                });
            }
        }
        out
    }
}

#[derive(Debug, thiserror::Error)]
#[error("vat: {path}: {source}")]
pub struct VatRunError {
    pub path: String,
    pub source: std::io::Error,
}

impl StageError for VatRunError {
    /// A file of the work tree that cannot be read or written: the machine's fault.
    fn is_permanent(&self) -> bool {
        false
    }

    fn file(&self) -> Option<String> {
        Some(self.path.clone())
    }
}

/// The VAT stage: bakes the selected models of the tree, writing each mesh's files under
/// `<model>.vat/`. A model that can't be baked gets its reason in the report; the build goes
/// on. Its options are the build's selection (the server's `[vat]` with the build's
/// `kiln.toml` on top: [`build_selection`]).
pub struct Step;

impl Stage for Step {
    const NAME: &'static str = NAME;
    type Input<'a> = Files<'a>;
    type Options = VatSelection;
    type Output = FileTree;
    type Report = VatReport;
    type Error = VatRunError;

    fn run(
        files: Files<'_>,
        selection: &VatSelection,
        _progress: &mut dyn FnMut(f64),
    ) -> Result<(FileTree, VatReport), VatRunError> {
        bake_tree(files.tree, files.inventory, selection)
    }
}

fn bake_tree(
    tree: &FileTree,
    inventory: &Inventory,
    selection: &VatSelection,
) -> Result<(FileTree, VatReport), VatRunError> {
    let mut tree = tree.clone();
    let mut report = VatReport::default();
    for entry in super::game_models(inventory) {
        let Some(options) = selection.options_for(&entry.path) else {
            continue;
        };
        let baked = super::with_model(&tree, entry, |bytes, resources| {
            Asset::read(bytes, resources)
                .map_err(VatError::from)
                .and_then(|asset| bake_model(&asset, &entry.path, options))
                .map_err(|e| e.to_string())
        })
        .map_err(|source| VatRunError {
            path: entry.path.clone(),
            source,
        })?;
        let bake = match baked {
            Ok(b) => b,
            Err(e) => {
                report.models.push(VatModelOutcome {
                    source: entry.path.clone(),
                    baked: vec![],
                    report: None,
                    error: Some(e),
                });
                continue;
            }
        };
        let stem = entry
            .path
            .strip_suffix(".glb")
            .or_else(|| entry.path.strip_suffix(".gltf"))
            .unwrap_or(&entry.path);
        let base = format!("{stem}.vat");
        if tree
            .files
            .iter()
            .any(|f| f.path.starts_with(&format!("{base}/")))
        {
            report.models.push(VatModelOutcome {
                source: entry.path.clone(),
                baked: vec![],
                report: None,
                error: Some(format!(
                    "the build already has files under {base}/; not baked"
                )),
            });
            continue;
        }
        let mut baked = Vec::new();
        for mesh in &bake.meshes {
            for (name, data) in &mesh.files {
                let path = format!("{base}/{}/{name}", mesh.folder);
                super::add_file(&mut tree, &path, data).map_err(|source| VatRunError {
                    path: path.clone(),
                    source,
                })?;
            }
            baked.push(format!("{base}/{}/vat.json", mesh.folder));
        }
        report.models.push(VatModelOutcome {
            source: entry.path.clone(),
            baked,
            report: Some(bake.report),
            error: None,
        });
    }
    Ok((tree, report))
}

/// The `[vat]` settings (the server's configuration and a build's `kiln.toml` alike) are
/// `kiln_common::config::VatSettings`: text and numbers as written, applied and checked here.
pub use kiln_common::config::VatSettings;

/// `base` with `settings` applied, checked.
pub fn apply(settings: &VatSettings, base: &VatOptions) -> Result<VatOptions, String> {
    let mut o = base.clone();
    if let Some(e) = &settings.encoding {
        o.encoding = EncodingChoice::parse(e).ok_or_else(|| {
            format!("encoding {e:?} is not auto, low, medium, high, rgba16 or half")
        })?;
    }
    if let Some(m) = &settings.mode {
        o.mode = PositionMode::parse(m)
            .ok_or_else(|| format!("mode {m:?} is not relative or absolute"))?;
    }
    if let Some(f) = settings.frame_rate {
        o.frame_rate = f;
    }
    if let Some(t) = settings.tolerance {
        o.tolerance = t;
        o.tolerance_abs = None;
    }
    if let Some(t) = settings.tolerance_abs {
        o.tolerance_abs = (t > 0.0).then_some(t);
    }
    if let Some(m) = settings.max_size {
        o.max_size = m;
    }
    if let Some(w) = settings.width {
        o.width = (w > 0).then_some(w);
    }
    check_options(&o).map_err(|e| e.to_string())?;
    Ok(o)
}

/// The selection `settings` make on top of `base` (the server's; for the server's own
/// settings, `VatSelection::default()`): files listed are added, options applied to all,
/// per-file settings on top.
pub fn select(settings: &VatSettings, base: &VatSelection) -> Result<VatSelection, String> {
    let options = apply(settings, &base.options)?;
    let mut files = base.files.clone();
    files.extend(settings.files.iter().flatten().cloned());
    let mut per_file = BTreeMap::new();
    for (path, file_settings) in &settings.file {
        if !file_settings.file.is_empty() || file_settings.files.is_some() {
            return Err(format!("[vat.file.{path:?}] cannot list files itself"));
        }
        per_file.insert(
            path.clone(),
            apply(file_settings, &options).map_err(|e| format!("{path}: {e}"))?,
        );
    }
    Ok(VatSelection {
        files,
        options,
        per_file,
    })
}

/// What a build asks for: its `kiln.toml`'s `[vat]` table (`BuildConfig::vat`) over the
/// server's selection.
pub fn build_selection(
    settings: Option<&VatSettings>,
    server: &VatSelection,
) -> Result<VatSelection, String> {
    match settings {
        Some(settings) => select(settings, server).map_err(|e| format!("kiln.toml [vat]: {e}")),
        None => Ok(server.clone()),
    }
}

#[cfg(test)]
mod tests;
