//! Stage `geometry`: every glTF/GLB model in the build gets two smaller variants.
//!
//! - `quantized`: `KHR_mesh_quantization` only — loads everywhere, no decoder needed;
//! - `meshopt`: the same data compressed with `EXT_meshopt_compression` (or
//!   `KHR_meshopt_compression`) — smallest, needs meshoptimizer's decoder.
//!
//! Per triangle primitive, as seed 000 describes: generate indices, merge identical vertices,
//! reorder for the vertex cache, then for vertex fetch; then quantize each attribute to the
//! configured bits. Positions are quantized on grids with one step length in the world at
//! rest (the scene's extent over the position bits): meshes their nodes place in the same
//! frame share a grid (seams stay closed), skinned meshes share one, and a mesh its node
//! scales or places far from its own coordinates gets its own; the
//! dequantization (offset + uniform scale) goes into a child node carrying the mesh, or into
//! the inverse bind matrices for skinned meshes, so bounds stay exact and the model renders
//! in the same place and size. Morph target deltas use the same grid, coarsened to their own
//! bits, all-zero ones become zero-filled accessors (no bytes), and sparse accessors are
//! used where they are smaller.
//!
//! Everything else in the file (materials, animations, skins, cameras, lights, extras, names,
//! extensions this stage understands) is carried through untouched.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;
use serde_json::{Value, json};

use crate::gltf::accessors::{
    self, ARRAY_BUFFER, BYTE, ELEMENT_ARRAY_BUFFER, FLOAT, Layout, SHORT, UNSIGNED_BYTE,
    UNSIGNED_INT, UNSIGNED_SHORT, min_max, pack_floats, push_accessor, push_view,
};
use crate::gltf::cleanup::{Pruned, add_extension, collect_garbage, merge_views, prune_unused};
use crate::gltf::meshopt_codec::ViewCodec;
pub use crate::gltf::meshopt_write::MeshoptCodec;
use crate::gltf::meshopt_write::{DEFAULT_VERTEX_LEVEL, write_meshopt};
use crate::gltf::{Asset, GltfError, Resources, invalid, meshopt_codec};

use super::animation::{AnimationOptions, AnimationReport, Tolerance, compress_animations};
use super::{Stage, StageError};
use crate::animation::Rig;
use crate::animation::metric::{DeliveredError, VertexMap, delivered_error};
use crate::gltf::NoResources;
pub use crate::ir::variant_path;
use crate::ir::{FileTree, Files, Inventory, InventoryEntry, ModelPaths};

mod attributes;
mod morph;
mod quantize;
mod transforms;
mod unused;

use attributes::*;
use morph::*;
use quantize::*;
use transforms::*;

pub const NAME: &str = "geometry";

/// Bits per attribute and codec settings. `Default` holds seed 000's values.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GeometryOptions {
    pub position_bits: u32,
    pub texcoord_bits: u32,
    pub normal_bits: u32,
    pub tangent_bits: u32,
    pub color_bits: u32,
    pub morph_bits: u32,
    /// Skin weights: 8 (normalized bytes) or 16 bits (shorts). An animated model whose
    /// delivered error would break the animation tolerance with 8 gets 16 (the error budget).
    pub weight_bits: u32,
    pub codec: MeshoptCodec,
    /// meshopt vertex codec level (0–3; only with codec version 1, i.e. `Khr`).
    pub vertex_level: i32,
    /// Use sparse accessors for morph targets where that is smaller.
    pub sparse_morph_targets: bool,
    /// Animation compression (the `animation` stage) for both variants; `None` carries
    /// animations through untouched.
    pub animation: Option<AnimationOptions>,
    /// Drop vertex attributes no material of their primitive reads (`unused.rs`; gltfpack's
    /// default). Off: games often assign materials in code. A build turns it on in its
    /// `kiln.toml` (`[models] drop_unused_attributes = true`).
    pub drop_unused_attributes: bool,
}

impl Default for GeometryOptions {
    fn default() -> Self {
        Self {
            position_bits: 14,
            texcoord_bits: 12,
            normal_bits: 10,
            tangent_bits: 12,
            color_bits: 8,
            morph_bits: 8,
            weight_bits: 8,
            codec: MeshoptCodec::Ext,
            vertex_level: DEFAULT_VERTEX_LEVEL,
            sparse_morph_targets: true,
            animation: Some(AnimationOptions::default()),
            drop_unused_attributes: false,
        }
    }
}

impl GeometryOptions {
    /// Bits are capped at 16: quantized data is stored in at most 16-bit integers.
    fn clamped(&self) -> Self {
        let c = |b: u32, lo: u32| b.clamp(lo, 16);
        Self {
            position_bits: c(self.position_bits, 4),
            texcoord_bits: c(self.texcoord_bits, 4),
            normal_bits: c(self.normal_bits, 4),
            tangent_bits: c(self.tangent_bits, 4),
            color_bits: c(self.color_bits, 2),
            morph_bits: c(self.morph_bits, 2),
            ..self.clone()
        }
    }
}

/// The two variants of one model and what they cost and lost.
#[derive(Debug, Clone)]
pub struct OptimizedModel {
    pub quantized: Vec<u8>,
    pub meshopt: Vec<u8>,
    pub report: ModelReport,
    /// Where each source vertex is in both variants (they hold the same vertices).
    pub vertex_map: VertexMap,
}

/// The animation tolerance held on the files a player gets: the delivered variants measured
/// against the source with the animation metric, geometry quantization included.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DeliveredBudget {
    /// The animation tolerance, relative to the model's bounding-box diagonal.
    pub tolerance_relative: f64,
    /// Error of the geometry's quantization alone (the source's animation on the quantized
    /// vertices and weights), relative.
    pub geometry_relative: f64,
    /// What the animation pass was given: the tolerance less the geometry's share, relative.
    pub animation_tolerance_relative: f64,
    pub position_bits: u32,
    pub weight_bits: u32,
    pub morph_bits: u32,
    /// Largest measured error of each delivered variant, relative.
    pub quantized_max_relative: f64,
    pub meshopt_max_relative: f64,
    /// (sample, point) pairs measured per variant.
    pub measured: usize,
    /// Builds tried until the budget held (1: the first).
    pub attempts: u32,
}

#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct ModelReport {
    pub bytes_before: u64,
    pub quantized_bytes: u64,
    pub meshopt_bytes: u64,
    pub triangles_before: u64,
    pub triangles_after: u64,
    pub vertices_before: u64,
    pub vertices_after: u64,
    /// Largest distance between a source vertex and its quantized position, in the scene's
    /// units at rest (a mesh's own units times the scale its nodes place it at).
    pub max_position_error: f64,
    /// The same, relative to the scene's bounding-box diagonal at rest.
    pub max_position_error_relative: f64,
    /// Largest angle between a source normal and its quantized one, per variant.
    pub max_normal_error_degrees_quantized: f64,
    pub max_normal_error_degrees_meshopt: f64,
    pub sparse_targets: u64,
    pub dropped_zero_targets: u64,
    /// Materials and samplers nothing used, dropped.
    pub pruned: Pruned,
    /// Vertex attributes no material reads, dropped (`drop_unused_attributes`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unused_attributes_dropped: Vec<String>,
    /// What the animation stage did (models with animations).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub animation: Option<AnimationReport>,
    /// The error budget on the delivered variants (models with animations).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivered: Option<DeliveredBudget>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Why a model was not optimised.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ModelError {
    /// The file can't be read: that file fails, not the build.
    #[error("{0}")]
    Invalid(#[from] GltfError),
    /// The file needs an extension this stage does not understand: copied through unchanged.
    #[error("uses extension {0} which the geometry stage does not understand; kept unchanged")]
    Unsupported(String),
    #[error("{0}")]
    NonFinite(String),
    /// No variant holds the animation tolerance: the original is served, with the reason.
    #[error("{0}")]
    OverBudget(String),
}

/// Extensions this stage can carry through (they reference no accessors or views it moves,
/// or it handles them).
const UNDERSTOOD: &[&str] = &[
    "KHR_mesh_quantization",
    "EXT_meshopt_compression",
    "KHR_meshopt_compression",
    "KHR_texture_transform",
    "KHR_lights_punctual",
    "KHR_materials_emissive_strength",
    "KHR_materials_ior",
    "KHR_materials_specular",
    "KHR_materials_transmission",
    "KHR_materials_volume",
    "KHR_materials_clearcoat",
    "KHR_materials_sheen",
    "KHR_materials_iridescence",
    "KHR_materials_anisotropy",
    "KHR_materials_dispersion",
    "KHR_materials_unlit",
    "KHR_materials_variants",
    "KHR_materials_pbrSpecularGlossiness",
    "KHR_texture_basisu",
    "EXT_texture_webp",
    "EXT_texture_avif",
    "KHR_xmp_json_ld",
];

/// Optimises one model given its bytes (`.glb` or `.gltf`) and its external resources.
pub fn optimize_model(
    bytes: &[u8],
    resources: &dyn Resources,
    options: &GeometryOptions,
) -> Result<OptimizedModel, ModelError> {
    let options = options.clamped();
    let mut source = Asset::read(bytes, resources)?;
    for ext in source.array("extensionsUsed") {
        let name = ext.as_str().unwrap_or("");
        if !UNDERSTOOD.contains(&name) {
            return Err(ModelError::Unsupported(name.to_string()));
        }
    }
    let unused_attributes_dropped = if options.drop_unused_attributes {
        unused::drop_unused_attributes(&mut source)
    } else {
        Vec::new()
    };
    let model = match &options.animation {
        Some(animation) if !source.array("animations").is_empty() => {
            within_budget(&source, &options, animation)?
        }
        _ => build_variants(&source, &options)?,
    };
    Ok(OptimizedModel {
        report: ModelReport {
            bytes_before: bytes.len() as u64,
            unused_attributes_dropped,
            ..model.report
        },
        ..model
    })
}

/// The most of the animation tolerance the geometry's quantization may take before it gets
/// more bits. 14-bit positions alone can move a vertex by 0.87 of a grid step, up to 3e-5 of
/// a cube's diagonal: 60 % of the default tolerance.
const GEOMETRY_SHARE: f64 = 0.6;

/// The error budget: the animation tolerance bounds the delivered files. Geometry's share is
/// measured first (the source's own animation on the quantized vertices, skin weights and
/// morph targets; more bits while it takes more than `GEOMETRY_SHARE`); the animation pass
/// gets the rest; both variants are then measured, and the animation's share halved until
/// they hold. A model that cannot be brought within it is not optimised (`OverBudget`).
fn within_budget(
    source: &Asset,
    options: &GeometryOptions,
    animation: &AnimationOptions,
) -> Result<OptimizedModel, ModelError> {
    let diagonal = Rig::read(source, animation.metric.shell)?.diagonal;
    let relative = |x: f64| x / diagonal.max(f64::MIN_POSITIVE);
    let tolerance = match animation.tolerance {
        Tolerance::Relative(r) => r * diagonal,
        Tolerance::Absolute(a) => a,
    };
    let measure = |bytes: &[u8], map: &VertexMap| -> Result<DeliveredError, ModelError> {
        let delivered = Asset::read(bytes, &NoResources)?;
        Ok(delivered_error(
            source,
            &delivered,
            map,
            &animation.metric,
            tolerance,
        )?)
    };
    // Geometry's share, with more bits while it takes more than half of the budget.
    let mut geometry = GeometryOptions {
        animation: None,
        ..options.clone()
    };
    // Positions first (they cost the fewest bytes per bit), then weights and morph targets.
    let (p, w, m) = (
        geometry.position_bits,
        geometry.weight_bits,
        geometry.morph_bits,
    );
    let steps = [
        (p, w, m),
        ((p + 2).min(16), w, m),
        ((p + 2).min(16), 16, (m + 4).min(16)),
        (16, 16, 16),
    ];
    let mut geometry_error = f64::INFINITY;
    for (position_bits, weight_bits, morph_bits) in steps {
        geometry.position_bits = position_bits;
        geometry.weight_bits = weight_bits;
        geometry.morph_bits = morph_bits;
        let alone = build_variants(source, &geometry)?;
        geometry_error = measure(&alone.quantized, &alone.vertex_map)?.max;
        if geometry_error <= tolerance * GEOMETRY_SHARE {
            break;
        }
    }
    if geometry_error >= tolerance {
        return Err(ModelError::OverBudget(format!(
            "quantizing the geometry alone moves the animated vertices by {:.3e} of the diagonal, beyond the animation tolerance {:.3e} even at {} position, {} weight and {} morph bits",
            relative(geometry_error),
            relative(tolerance),
            geometry.position_bits,
            geometry.weight_bits,
            geometry.morph_bits
        )));
    }
    let mut share = (tolerance - geometry_error) * 0.9;
    let mut worst = 0.0;
    for attempt in 1..=4 {
        let options = GeometryOptions {
            animation: Some(AnimationOptions {
                tolerance: Tolerance::Absolute(share),
                ..animation.clone()
            }),
            ..geometry.clone()
        };
        let mut model = build_variants(source, &options)?;
        let quantized = measure(&model.quantized, &model.vertex_map)?;
        let meshopt = measure(&model.meshopt, &model.vertex_map)?;
        worst = quantized.max.max(meshopt.max);
        if worst <= tolerance {
            model.report.delivered = Some(DeliveredBudget {
                tolerance_relative: relative(tolerance),
                geometry_relative: relative(geometry_error),
                animation_tolerance_relative: relative(share),
                position_bits: geometry.position_bits,
                weight_bits: geometry.weight_bits,
                morph_bits: geometry.morph_bits,
                quantized_max_relative: quantized.max_relative,
                meshopt_max_relative: meshopt.max_relative,
                measured: quantized.measured,
                attempts: attempt,
            });
            return Ok(model);
        }
        share /= 2.0;
    }
    Err(ModelError::OverBudget(format!(
        "the delivered variants' animation error stays above the tolerance {:.3e} of the diagonal (last {:.3e})",
        relative(tolerance),
        relative(worst)
    )))
}

/// Both variants of `source` with these options, and where each source vertex went.
fn build_variants(source: &Asset, options: &GeometryOptions) -> Result<OptimizedModel, ModelError> {
    let mut report = ModelReport::default();
    let mut codecs: HashMap<usize, ViewCodec> = HashMap::new();
    // Animations first, on the source's own geometry (the metric's vertices); the geometry
    // below carries the new animation data through.
    let compressed;
    let source = match &options.animation {
        Some(animation) if !source.array("animations").is_empty() => {
            let c = compress_animations(source, animation)?;
            codecs.extend(c.codecs);
            report.animation = Some(c.report);
            compressed = c.asset;
            &compressed
        }
        _ => source,
    };
    let mut asset = source.clone();
    let grids = position_grids(source, options.position_bits)?;
    // Integer UVs with the scale in KHR_texture_transform, per material; variants of a
    // material (KHR_materials_variants) would need one grid for several: normalised UVs there.
    let uv_grids = if source.uses_extension("KHR_materials_variants") {
        HashMap::new()
    } else {
        uv_grids(source)?
    };
    // The largest position error in world units at rest (each mesh's error times its scale).
    let mut world_error = 0f64;
    let mut normal_error = (0f64, 0f64);
    let mut vertex_map: VertexMap = Vec::new();

    let mesh_count = source.array("meshes").len();
    for m in 0..mesh_count {
        let primitives = source.json["meshes"][m]["primitives"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        vertex_map.push(Vec::new());
        for (p, primitive) in primitives.iter().enumerate() {
            let what = format!("meshes[{m}].primitives[{p}]");
            let uv = uv_grids.get(&primitive.get("material").and_then(Value::as_u64));
            let out = process_primitive(
                source,
                &mut asset,
                primitive,
                Grids {
                    position: &grids.of_mesh[m],
                    uv,
                },
                options,
                &what,
                &mut codecs,
            )?;
            report.triangles_before += out.triangles_before;
            report.triangles_after += out.triangles_after;
            report.vertices_before += out.vertices_before;
            report.vertices_after += out.vertices_after;
            report.sparse_targets += out.sparse_targets;
            report.dropped_zero_targets += out.dropped_targets;
            world_error = world_error.max(out.max_position_error * grids.mesh_scale[m]);
            normal_error.0 = normal_error.0.max(out.normal_error.0);
            normal_error.1 = normal_error.1.max(out.normal_error.1);
            asset.json["meshes"][m]["primitives"][p] = out.primitive;
            vertex_map[m].push(out.output_of);
        }
    }
    if grids.of_mesh.iter().any(Option::is_some) {
        place_dequantization(&mut asset, &grids.of_mesh)?;
        report.max_position_error = world_error;
        let diagonal = grids.world_diagonal;
        report.max_position_error_relative = if diagonal > 0.0 {
            world_error / diagonal
        } else {
            0.0
        };
    }
    if apply_texture_transforms(&mut asset.json, &uv_grids, options.texcoord_bits) {
        add_extension(&mut asset.json, "KHR_texture_transform", true);
    }
    report.max_normal_error_degrees_quantized = normal_error.0;
    report.max_normal_error_degrees_meshopt = normal_error.1;
    if mesh_count > 0 {
        add_extension(&mut asset.json, "KHR_mesh_quantization", true);
    }
    report.pruned = prune_unused(&mut asset.json);
    let codecs = collect_garbage(&mut asset, codecs);
    let codecs = merge_views(&mut asset, codecs);
    let quantized = asset.to_glb();
    let meshopt = write_meshopt(&asset, &codecs, options.codec, options.vertex_level);
    report.quantized_bytes = quantized.len() as u64;
    report.meshopt_bytes = meshopt.len() as u64;
    Ok(OptimizedModel {
        quantized,
        meshopt,
        report,
        vertex_map,
    })
}

/// A build's `kiln.toml` `[models]` section.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelsSettings {
    /// `"quantized"`: serve that variant at each `.glb` model's own path (see
    /// `served_variant`); `"original"` or unset: the original file.
    pub serve: Option<String>,
    /// Drop vertex attributes no material reads (`GeometryOptions::drop_unused_attributes`).
    pub drop_unused_attributes: bool,
}

/// `kiln.toml` `[models] serve = "quantized"`: the build opts into serving that variant at
/// each `.glb` model's own path, so a game that loads its models itself gets it without a
/// code change (`quantized` needs no decoder: KHR_mesh_quantization is read by three.js,
/// Babylon.js, PlayCanvas, …). Default: the original file.
pub fn served_variant(models: &ModelsSettings) -> Result<Option<String>, String> {
    match models.serve.as_deref() {
        None | Some("original") => Ok(None),
        Some("quantized") => Ok(Some("quantized".into())),
        Some("meshopt") => Err(
            "kiln.toml [models] serve = \"meshopt\": a meshopt model needs the game to set up a decoder; load it with kiln.model, or serve \"quantized\"".into(),
        ),
        Some(other) => Err(format!(
            "kiln.toml [models] serve = {other:?}: use \"quantized\" or \"original\""
        )),
    }
}

#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct GeometryReport {
    pub models: u64,
    pub optimized: u64,
    pub kept_unchanged: u64,
    pub failed: u64,
    pub bytes_before: u64,
    pub quantized_bytes: u64,
    pub meshopt_bytes: u64,
}

/// The variants written for one model of the build.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ModelVariants {
    /// The model's own path (the `original` variant).
    pub source: String,
    pub quantized: String,
    pub meshopt: String,
    pub report: ModelReport,
}

impl ModelVariants {
    /// Where the variants are, for `sign`.
    pub fn paths(&self) -> ModelPaths {
        ModelPaths {
            source: self.source.clone(),
            quantized: self.quantized.clone(),
            meshopt: self.meshopt.clone(),
            ktx2: None,
        }
    }
}

/// What happened to each model file, for the build report.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelOutcome {
    Optimized(Box<ModelVariants>),
    /// Copied through unchanged, with the reason.
    Kept(String, String),
    /// Could not be read: this file fails, the build goes on.
    Failed(String, String),
}

#[derive(Debug, thiserror::Error)]
pub enum GeometryError {
    #[error("geometry: {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

impl StageError for GeometryError {
    /// A file of the work tree that cannot be read or written: the machine's fault (a model
    /// that cannot be optimised fails alone, as a [`ModelOutcome::Failed`]).
    fn is_permanent(&self) -> bool {
        false
    }

    fn file(&self) -> Option<String> {
        let Self::Io { path, .. } = self;
        Some(path.clone())
    }
}

/// The geometry stage: optimises every model of the tree, writing the variants beside each
/// one; the outcome of each model comes back with the tree.
pub struct Step;

impl Stage for Step {
    const NAME: &'static str = NAME;
    type Input<'a> = Files<'a>;
    type Options = GeometryOptions;
    type Output = (FileTree, Vec<ModelOutcome>);
    type Report = GeometryReport;
    type Error = GeometryError;

    fn run(
        files: Files<'_>,
        options: &GeometryOptions,
        progress: &mut dyn FnMut(f64),
    ) -> Result<((FileTree, Vec<ModelOutcome>), GeometryReport), GeometryError> {
        optimize_tree(files.tree, files.inventory, options, progress)
            .map(|(tree, outcomes, report)| ((tree, outcomes), report))
    }
}

fn optimize_tree(
    tree: &FileTree,
    inventory: &Inventory,
    options: &GeometryOptions,
    progress: &mut dyn FnMut(f64),
) -> Result<(FileTree, Vec<ModelOutcome>, GeometryReport), GeometryError> {
    let models: Vec<&InventoryEntry> = super::game_models(inventory).collect();
    let mut tree = tree.clone();
    let mut outcomes = Vec::new();
    let mut report = GeometryReport::default();
    for (n, entry) in models.iter().enumerate() {
        report.models += 1;
        let read = super::with_model(&tree, entry, |bytes, resources| {
            Ok(optimize_model(bytes, resources, options))
        })
        .map_err(|source| GeometryError::Io {
            path: entry.path.clone(),
            source,
        })?;
        let optimized = match read {
            Ok(result) => result,
            Err(internal) => {
                report.failed += 1;
                outcomes.push(ModelOutcome::Failed(entry.path.clone(), internal));
                progress((n + 1) as f64 / models.len() as f64);
                continue;
            }
        };
        match optimized {
            Ok(model) => {
                let quantized = variant_path(&entry.path, "quantized");
                let meshopt = variant_path(&entry.path, "meshopt");
                if tree.contains(&quantized) || tree.contains(&meshopt) {
                    // The build already has a file by a variant's name: leave it all alone.
                    outcomes.push(ModelOutcome::Kept(
                        entry.path.clone(),
                        "a file with a variant's name is already in the build".into(),
                    ));
                    report.kept_unchanged += 1;
                    continue;
                }
                for (path, data) in [(&quantized, &model.quantized), (&meshopt, &model.meshopt)] {
                    super::add_file(&mut tree, path, data).map_err(|source| GeometryError::Io {
                        path: path.clone(),
                        source,
                    })?;
                }
                report.optimized += 1;
                report.bytes_before += model.report.bytes_before;
                report.quantized_bytes += model.report.quantized_bytes;
                report.meshopt_bytes += model.report.meshopt_bytes;
                outcomes.push(ModelOutcome::Optimized(Box::new(ModelVariants {
                    source: entry.path.clone(),
                    quantized,
                    meshopt,
                    report: model.report,
                })));
            }
            Err(ModelError::OverBudget(why)) => {
                report.kept_unchanged += 1;
                outcomes.push(ModelOutcome::Kept(
                    entry.path.clone(),
                    format!("{why}; kept unchanged"),
                ));
            }
            Err(ModelError::Unsupported(ext)) => {
                report.kept_unchanged += 1;
                outcomes.push(ModelOutcome::Kept(
                    entry.path.clone(),
                    format!("uses extension {ext} which the geometry stage does not understand; kept unchanged"),
                ));
            }
            Err(e) => {
                report.failed += 1;
                outcomes.push(ModelOutcome::Failed(entry.path.clone(), e.to_string()));
            }
        }
        progress((n + 1) as f64 / models.len() as f64);
    }
    Ok((tree, outcomes, report))
}

#[cfg(test)]
mod budget_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gltf::NoResources;

    #[test]
    fn bit_replication_is_exact_at_the_ends_and_close_between() {
        assert_eq!(unorm(1.0, 12, 16), 65535);
        assert_eq!(unorm(0.0, 12, 16), 0);
        assert_eq!(snorm(1.0, 10, 16), 32767);
        assert_eq!(snorm(-1.0, 10, 16), -32767);
        for i in 0..=4095u32 {
            let v = i as f32 / 4095.0;
            let stored = unorm(v, 12, 16) as f32 / 65535.0;
            assert!((stored - v).abs() < 1.0 / 65535.0, "{i}: {stored} vs {v}");
        }
        for i in 0..=511i32 {
            let v = i as f32 / 511.0;
            let stored = snorm(v, 10, 16) as f32 / 32767.0;
            assert!((stored - v).abs() < 1.0 / 32767.0, "{i}");
        }
    }

    /// A 2 × 1 quad's positions: two triangles, non-indexed, with a duplicate vertex.
    const QUAD: [[f32; 3]; 6] = [
        [0., 0., 0.],
        [2., 0., 0.],
        [2., 1., 0.],
        [0., 0., 0.],
        [2., 1., 0.],
        [0., 1., 0.],
    ];

    /// A unit quad (two triangles, non-indexed, with a duplicate vertex) with normals and UVs.
    fn quad() -> Vec<u8> {
        let positions = QUAD;
        let normals = [[0f32, 0., 1.]; 6];
        let uvs: [[f32; 2]; 6] = [[0., 0.], [1., 0.], [1., 1.], [0., 0.], [1., 1.], [0., 1.]];
        let mut bin = Vec::new();
        for p in positions {
            for c in p {
                bin.extend_from_slice(&c.to_le_bytes());
            }
        }
        for n in normals {
            for c in n {
                bin.extend_from_slice(&c.to_le_bytes());
            }
        }
        for t in uvs {
            for c in t {
                bin.extend_from_slice(&c.to_le_bytes());
            }
        }
        let json = json!({
            "asset": {"version": "2.0"},
            "scene": 0, "scenes": [{"nodes": [0]}],
            "nodes": [{"mesh": 0, "name": "quad", "translation": [5, 0, 0]}],
            "meshes": [{"primitives": [{"attributes": {"POSITION": 0, "NORMAL": 1, "TEXCOORD_0": 2}}], "extras": {"keep": 1}}],
            "buffers": [{"byteLength": bin.len()}],
            "bufferViews": [
                {"buffer": 0, "byteOffset": 0, "byteLength": 72},
                {"buffer": 0, "byteOffset": 72, "byteLength": 72},
                {"buffer": 0, "byteOffset": 144, "byteLength": 48}
            ],
            "accessors": [
                {"bufferView": 0, "componentType": FLOAT, "count": 6, "type": "VEC3", "min": [0,0,0], "max": [2,1,0]},
                {"bufferView": 1, "componentType": FLOAT, "count": 6, "type": "VEC3"},
                {"bufferView": 2, "componentType": FLOAT, "count": 6, "type": "VEC2"}
            ]
        });
        crate::gltf::write_glb(json, Some(&bin))
    }

    #[test]
    fn quad_is_indexed_deduplicated_quantized_and_placed() {
        let out = optimize_model(&quad(), &NoResources, &GeometryOptions::default()).unwrap();
        assert_eq!(out.report.vertices_before, 6);
        assert_eq!(out.report.vertices_after, 4);
        assert_eq!(out.report.triangles_before, 2);
        assert_eq!(out.report.triangles_after, 2);
        assert!(out.report.max_position_error_relative < 1.0 / 16383.0);
        let q = Asset::read(&out.quantized, &NoResources).unwrap();
        assert!(q.uses_extension("KHR_mesh_quantization"));
        assert_eq!(q.json["meshes"][0]["extras"]["keep"], 1);
        // The leaf node took the dequantization into its own transform: world x = 5 + 2 at most.
        assert_eq!(q.json["nodes"][0]["mesh"], 0);
        let s = q.json["nodes"][0]["scale"][0].as_f64().unwrap();
        let t = q.json["nodes"][0]["translation"][0].as_f64().unwrap();
        let (_, pos) = accessors::read_f32(
            &q,
            q.json["meshes"][0]["primitives"][0]["attributes"]["POSITION"]
                .as_u64()
                .unwrap() as usize,
        )
        .unwrap();
        let max_x = t + pos.chunks(3).map(|p| p[0]).fold(0f32, f32::max) as f64 * s;
        assert!((max_x - 7.0).abs() < 1e-3, "{max_x}");
        let m = Asset::read(&out.meshopt, &NoResources).unwrap();
        assert!(m.uses_extension("EXT_meshopt_compression"));
        // Decoding the meshopt variant gives the quantized variant's data.
        let pi = m.json["meshes"][0]["primitives"][0]["attributes"]["POSITION"]
            .as_u64()
            .unwrap() as usize;
        assert_eq!(accessors::read_f32(&m, pi).unwrap().1, pos);
    }

    /// Three quads side by side in the world: one as stored, one modelled 1000× too small
    /// and scaled up by its node, one modelled 50 units from its origin and moved back by its
    /// node. Every vertex of both variants lands within one step of the scene's 14-bit grid
    /// of where its source vertex is (one grid over the meshes' own coordinates gave the
    /// second a step a thousand times too long in the world).
    #[test]
    fn every_mesh_is_as_precise_in_the_world_whatever_its_node_scale_or_frame() {
        // Each mesh: its quad's stored coordinates, and the node placing it.
        type Placed = (fn([f32; 3]) -> [f32; 3], Value);
        let placed: [Placed; 3] = [
            (|p| p, json!({"mesh": 0, "translation": [5, 0, 0]})),
            (
                |p| [1.0 + p[0] * 1e-3, p[1] * 1e-3, p[2] * 1e-3],
                json!({"mesh": 1, "translation": [-992, 0, 0], "scale": [1000, 1000, 1000]}),
            ),
            (
                |p| [p[0] + 50.0, p[1], p[2]],
                json!({"mesh": 2, "translation": [-39, 0, 0]}),
            ),
        ];
        let mut bin = Vec::new();
        let (mut nodes, mut meshes, mut views, mut accessors) = (vec![], vec![], vec![], vec![]);
        for (m, (local, node)) in placed.iter().enumerate() {
            views.push(json!({"buffer": 0, "byteOffset": bin.len(), "byteLength": 72}));
            for p in QUAD {
                for c in local(p) {
                    bin.extend_from_slice(&c.to_le_bytes());
                }
            }
            accessors
                .push(json!({"bufferView": m, "componentType": FLOAT, "count": 6, "type": "VEC3"}));
            meshes.push(json!({"primitives": [{"attributes": {"POSITION": m}}]}));
            nodes.push(node.clone());
        }
        let source = crate::gltf::write_glb(
            json!({
                "asset": {"version": "2.0"},
                "scene": 0, "scenes": [{"nodes": [0, 1, 2]}],
                "nodes": nodes, "meshes": meshes, "accessors": accessors, "bufferViews": views,
                "buffers": [{"byteLength": bin.len()}],
            }),
            Some(&bin),
        );
        let world = |bytes: &[u8]| {
            let rig = Rig::read(&Asset::read(bytes, &NoResources).unwrap(), 0.0).unwrap();
            let mut points = Vec::new();
            rig.points(&rig.rest_pose(), &mut points);
            points
        };
        let expected = world(&source);
        // The scene spans x 5..13, y 0..1: a 14-bit step of its longest side.
        let step = 8.0 / 16383.0;
        let out = optimize_model(&source, &NoResources, &GeometryOptions::default()).unwrap();
        assert!(out.report.max_position_error_relative < 1.0 / 16383.0);
        let mut checked = 0;
        for variant in [&out.quantized, &out.meshopt] {
            let got = world(variant);
            assert_eq!(got.len(), 12, "4 welded vertices a quad");
            for p in &expected {
                let nearest = got.iter().map(|q| q.distance(*p)).fold(f64::MAX, f64::min);
                assert!(
                    nearest < step,
                    "{p}: {nearest} from the nearest output vertex"
                );
                checked += 1;
            }
        }
        assert_eq!(checked, 36);
    }

    /// UVs outside [0, 1] on a primitive without a material (no texture transform to hold a
    /// grid) are rounded floats: EXPONENTIAL in the meshopt variant, the same rounded values in
    /// the quantized one, each within a texture coordinate step of its source (2^-12 below 1,
    /// the same significant bits above), and vertices equal once rounded weld.
    #[test]
    fn uvs_without_a_material_are_rounded_floats_in_both_variants() {
        let mut asset = Asset::read(&quad(), &NoResources).unwrap();
        // Vertices 0 and 3 share position and normal; their UVs are 1e-5 apart.
        let uvs: Vec<f32> = vec![
            -7.25,
            0.5,
            3.1,
            0.0,
            3.1,
            12.7,
            -7.25 + 1e-5,
            0.5,
            3.1,
            12.7,
            -7.25,
            12.7,
        ];
        asset.views[2] = pack_floats(&uvs);
        let out =
            optimize_model(&asset.to_glb(), &NoResources, &GeometryOptions::default()).unwrap();
        assert_eq!(
            out.report.vertices_after, 4,
            "UVs 1e-5 apart weld once rounded"
        );
        let q = Asset::read(&out.quantized, &NoResources).unwrap();
        let m = Asset::read(&out.meshopt, &NoResources).unwrap();
        let index = q.json["meshes"][0]["primitives"][0]["attributes"]["TEXCOORD_0"]
            .as_u64()
            .unwrap() as usize;
        let (layout, rounded) = accessors::read_f32(&q, index).unwrap();
        assert_eq!(layout.component_type, FLOAT);
        assert_eq!(accessors::read_f32(&m, index).unwrap().1, rounded);
        let view = m.json["accessors"][index]["bufferView"].as_u64().unwrap() as usize;
        assert_eq!(
            m.json["bufferViews"][view]["extensions"]["EXT_meshopt_compression"]["filter"],
            "EXPONENTIAL"
        );
        let step = |x: f32| x.abs().max(1.0) / 4096.0;
        let mut rounded_away = 0;
        for uv in rounded.chunks(2) {
            assert!(
                uvs.chunks(2)
                    .any(|s| (s[0] - uv[0]).abs() <= step(s[0])
                        && (s[1] - uv[1]).abs() <= step(s[1])),
                "{uv:?} is no source UV within a step"
            );
            rounded_away += uvs.chunks(2).all(|s| s != uv) as usize;
        }
        assert!(rounded_away > 0, "3.1 and 12.7 are not on the 12-bit grid");
    }

    /// Integer UVs with the scale in KHR_texture_transform sample the texture where the
    /// source did, composed with the material's own transform (rotation included).
    #[test]
    fn texture_coordinates_keep_their_meaning_through_the_transform() {
        let mut asset = Asset::read(&quad(), &NoResources).unwrap();
        // UVs outside [0, 1] and a material with its own transform.
        let uvs: Vec<f32> = vec![-1., 0., 3., 0., 3., 2., -1., 0., 3., 2., -1., 2.];
        asset.views[2] = pack_floats(&uvs);
        asset.json["meshes"][0]["primitives"][0]["material"] = json!(0);
        asset.json["materials"] = json!([{"pbrMetallicRoughness": {"baseColorTexture": {"index": 0,
            "extensions": {"KHR_texture_transform": {"offset": [0.1, 0.2], "scale": [2.0, 3.0], "rotation": 0.3}}}}}]);
        asset.json["textures"] = json!([{"source": 0}]);
        asset.json["images"] = json!([{"uri": "a.png"}]);
        let out =
            optimize_model(&asset.to_glb(), &NoResources, &GeometryOptions::default()).unwrap();
        let q = Asset::read(&out.quantized, &NoResources).unwrap();
        let apply = |t: &Value, uv: [f32; 2]| -> [f32; 2] {
            let get = |k: &str, i: usize, d: f32| {
                t[k].get(i).and_then(Value::as_f64).map_or(d, |v| v as f32)
            };
            let (sin, cos) = (t["rotation"].as_f64().unwrap_or(0.0) as f32).sin_cos();
            let v = [get("scale", 0, 1.0) * uv[0], get("scale", 1, 1.0) * uv[1]];
            [
                get("offset", 0, 0.0) + cos * v[0] - sin * v[1],
                get("offset", 1, 0.0) + sin * v[0] + cos * v[1],
            ]
        };
        let old = json!({"offset": [0.1, 0.2], "scale": [2.0, 3.0], "rotation": 0.3});
        let new = &q.json["materials"][0]["pbrMetallicRoughness"]["baseColorTexture"]["extensions"]
            ["KHR_texture_transform"];
        assert!(q.uses_extension("KHR_texture_transform"));
        let prim = &q.json["meshes"][0]["primitives"][0]["attributes"];
        let (layout, tex) =
            accessors::read_f32(&q, prim["TEXCOORD_0"].as_u64().unwrap() as usize).unwrap();
        assert!(!layout.normalized && layout.component_type == UNSIGNED_SHORT);
        let (_, pos) =
            accessors::read_f32(&q, prim["POSITION"].as_u64().unwrap() as usize).unwrap();
        let source_pos: [[f32; 2]; 6] =
            [[0., 0.], [2., 0.], [2., 1.], [0., 0.], [2., 1.], [0., 1.]];
        let max_q = pos
            .chunks(3)
            .fold([0f32; 2], |m, p| [m[0].max(p[0]), m[1].max(p[1])]);
        for (v, p) in pos.chunks(3).enumerate() {
            // Match the source vertex by (normalised) position.
            let here = [p[0] / max_q[0] * 2.0, p[1] / max_q[1].max(1.0)];
            let s = source_pos
                .iter()
                .position(|sp| (sp[0] - here[0]).abs() < 1e-2 && (sp[1] - here[1]).abs() < 1e-2)
                .unwrap();
            let expected = apply(&old, [uvs[2 * s], uvs[2 * s + 1]]);
            let got = apply(new, [tex[2 * v], tex[2 * v + 1]]);
            for axis in 0..2 {
                assert!(
                    (expected[axis] - got[axis]).abs() < 4.0 * 3.0 / 4095.0,
                    "{v}: {expected:?} vs {got:?}"
                );
            }
        }
    }

    /// Two meshes: their positions, normals, UVs and indices each share one view (as
    /// gltfpack writes them), and each accessor reads back its own mesh's data.
    #[test]
    fn views_of_the_same_kind_are_packed_into_one() {
        let mut asset = Asset::read(&quad(), &NoResources).unwrap();
        // A second mesh, a copy of the first scaled by 3 (its own accessors and views).
        let views = asset.array("bufferViews").to_vec();
        let mut accessors_json = asset.array("accessors").to_vec();
        for a in 0..3 {
            let mut data = asset.views[a].clone();
            if a == 0 {
                let scaled: Vec<f32> = data
                    .chunks(4)
                    .map(|c| 3.0 * f32::from_le_bytes(c.try_into().unwrap()))
                    .collect();
                data = pack_floats(&scaled);
            }
            asset.views.push(data);
            let mut accessor = accessors_json[a].clone();
            accessor["bufferView"] = json!(3 + a);
            if a == 0 {
                accessor["max"] = json!([6, 3, 0]);
            }
            accessors_json.push(accessor);
        }
        let mut all_views = views.clone();
        all_views.extend(views);
        asset.json["bufferViews"] = json!(all_views);
        asset.json["accessors"] = json!(accessors_json);
        asset.json["meshes"].as_array_mut().unwrap().push(
            json!({"primitives": [{"attributes": {"POSITION": 3, "NORMAL": 4, "TEXCOORD_0": 5}}]}),
        );
        asset.json["nodes"]
            .as_array_mut()
            .unwrap()
            .push(json!({"mesh": 1}));
        asset.json["scenes"][0]["nodes"] = json!([0, 1]);
        let out =
            optimize_model(&asset.to_glb(), &NoResources, &GeometryOptions::default()).unwrap();
        for (variant, bytes) in [("quantized", &out.quantized), ("meshopt", &out.meshopt)] {
            let q = Asset::read(bytes, &NoResources).unwrap();
            // Positions, normals, UVs, indices: four views for eight accessors.
            assert_eq!(q.array("accessors").len(), 8, "{variant}");
            assert_eq!(q.array("bufferViews").len(), 4, "{variant}");
            let read = |m: usize, name: &str| {
                let prim = &q.json["meshes"][m]["primitives"][0];
                let a = if name == "indices" {
                    &prim["indices"]
                } else {
                    &prim["attributes"][name]
                };
                accessors::read_f32(&q, a.as_u64().unwrap() as usize)
                    .unwrap()
                    .1
            };
            for name in ["POSITION", "NORMAL", "TEXCOORD_0", "indices"] {
                assert_eq!(read(0, name).len(), read(1, name).len(), "{variant} {name}");
            }
            // The second mesh's quantized positions are its own: three times as far out.
            let max = |m: usize| read(m, "POSITION").into_iter().fold(0f32, f32::max);
            assert!((max(1) / max(0) - 3.0).abs() < 1e-3, "{variant}");
            assert_eq!(read(0, "NORMAL"), read(1, "NORMAL"), "{variant}");
        }
    }

    #[test]
    fn broken_models_fail_with_a_reason() {
        let mut bytes = quad();
        let err = optimize_model(
            &bytes[..bytes.len() - 40],
            &NoResources,
            &GeometryOptions::default(),
        )
        .unwrap_err();
        assert!(matches!(err, ModelError::Invalid(_)), "{err}");
        // NaN in a position.
        let json_len = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
        let bin_start = 20 + json_len + 8;
        bytes[bin_start..bin_start + 4].copy_from_slice(&f32::NAN.to_le_bytes());
        let err = optimize_model(&bytes, &NoResources, &GeometryOptions::default()).unwrap_err();
        assert!(err.to_string().contains("NaN"), "{err}");
    }

    /// Seed 000's sparse accessors: a morph target that moves few vertices is stored sparse
    /// (indices and values of the moved ones only), and only when the option allows it.
    #[test]
    fn a_morph_target_that_moves_few_vertices_is_stored_sparse() {
        let mut asset = crate::animation::test_models::skinned_tube(16, 8);
        let position = asset.json["meshes"][0]["primitives"][0]["attributes"]["POSITION"]
            .as_u64()
            .unwrap() as usize;
        let count = accessors::read_f32(&asset, position).unwrap().0.count;
        let mut deltas = vec![0f32; count * 3];
        deltas[1] = 0.3;
        deltas[3 * 40 + 1] = 0.2;
        let target =
            accessors::push_floats(&mut asset, &deltas, 3, Some(accessors::ARRAY_BUFFER), true);
        asset.json["meshes"][0]["primitives"][0]["targets"][0]["POSITION"] = json!(target);
        let glb = asset.to_glb();
        let sparse_of = |options: &GeometryOptions| {
            let out = optimize_model(&glb, &NoResources, options).unwrap();
            let q = Asset::read(&out.quantized, &NoResources).unwrap();
            let t = q.json["meshes"][0]["primitives"][0]["targets"][0]["POSITION"]
                .as_u64()
                .unwrap() as usize;
            (
                out.report.sparse_targets,
                q.json["accessors"][t].get("sparse").cloned(),
            )
        };
        let (targets, sparse) = sparse_of(&GeometryOptions::default());
        assert_eq!(targets, 1);
        let sparse = sparse.expect("a sparse accessor");
        assert_eq!(sparse["count"], 2, "{sparse}");
        let (targets, sparse) = sparse_of(&GeometryOptions {
            sparse_morph_targets: false,
            ..GeometryOptions::default()
        });
        assert_eq!((targets, sparse), (0, None));
    }
}
