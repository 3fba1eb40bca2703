//! Stage `geometry`: every glTF/GLB model in the build gets two smaller variants.
//!
//! - `quantized`: `KHR_mesh_quantization` only — loads everywhere, no decoder needed;
//! - `meshopt`: the same data compressed with `EXT_meshopt_compression` (or
//!   `KHR_meshopt_compression`) — smallest, needs meshoptimizer's decoder.
//!
//! Per triangle primitive, as seed 000 describes: generate indices, merge identical vertices,
//! reorder for the vertex cache, then for vertex fetch; then quantize each attribute to the
//! configured bits. Positions share one quantization grid per file (seams stay closed); the
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
use crate::gltf::cleanup::{add_extension, collect_garbage};
use crate::gltf::meshopt_codec::ViewCodec;
pub use crate::gltf::meshopt_write::MeshoptCodec;
use crate::gltf::meshopt_write::{DEFAULT_VERTEX_LEVEL, write_meshopt};
use crate::gltf::{Asset, GltfError, Resources, invalid, meshopt_codec};

use super::animation::{AnimationOptions, AnimationReport, compress_animations};
pub use crate::ir::variant_path;
use crate::ir::{
    FileKind, FileTree, Inventory, InventoryEntry, ModelPaths, TreeFile, TreeResources,
};

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
    pub codec: MeshoptCodec,
    /// meshopt vertex codec level (0–3; only with codec version 1, i.e. `Khr`).
    pub vertex_level: i32,
    /// Use sparse accessors for morph targets where that is smaller.
    pub sparse_morph_targets: bool,
    /// Animation compression (the `animation` stage) for both variants; `None` carries
    /// animations through untouched.
    pub animation: Option<AnimationOptions>,
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
            codec: MeshoptCodec::Ext,
            vertex_level: DEFAULT_VERTEX_LEVEL,
            sparse_morph_targets: true,
            animation: Some(AnimationOptions::default()),
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
    /// Largest distance between a source vertex and its quantized position, in model units.
    pub max_position_error: f64,
    /// The same, relative to the model's bounding-box diagonal.
    pub max_position_error_relative: f64,
    /// Largest angle between a source normal and its quantized one, per variant.
    pub max_normal_error_degrees_quantized: f64,
    pub max_normal_error_degrees_meshopt: f64,
    pub sparse_targets: u64,
    pub dropped_zero_targets: u64,
    /// What the animation stage did (models with animations).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub animation: Option<AnimationReport>,
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
    let source = Asset::read(bytes, resources)?;
    for ext in source.array("extensionsUsed") {
        let name = ext.as_str().unwrap_or("");
        if !UNDERSTOOD.contains(&name) {
            return Err(ModelError::Unsupported(name.to_string()));
        }
    }
    let mut report = ModelReport {
        bytes_before: bytes.len() as u64,
        ..ModelReport::default()
    };
    let mut codecs: HashMap<usize, ViewCodec> = HashMap::new();
    // Animations first, on the source's own geometry (the metric's vertices); the geometry
    // below carries the new animation data through.
    let source = match &options.animation {
        Some(animation) if !source.array("animations").is_empty() => {
            let compressed = compress_animations(&source, animation)?;
            codecs.extend(compressed.codecs);
            report.animation = Some(compressed.report);
            compressed.asset
        }
        _ => source,
    };
    let mut asset = source.clone();
    let grid = position_grid(&source, options.position_bits)?;
    // Integer UVs with the scale in KHR_texture_transform, per material; variants of a
    // material (KHR_materials_variants) would need one grid for several: normalised UVs there.
    let uv_grids = if source.uses_extension("KHR_materials_variants") {
        HashMap::new()
    } else {
        uv_grids(&source)?
    };
    let mut sq_error = 0f64;
    let mut normal_error = (0f64, 0f64);

    let mesh_count = source.array("meshes").len();
    for m in 0..mesh_count {
        let primitives = source.json["meshes"][m]["primitives"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for (p, primitive) in primitives.iter().enumerate() {
            let what = format!("meshes[{m}].primitives[{p}]");
            let uv = uv_grids.get(&primitive.get("material").and_then(Value::as_u64));
            let out = process_primitive(
                &source,
                &mut asset,
                primitive,
                Grids {
                    position: &grid,
                    uv,
                },
                &options,
                &what,
                &mut codecs,
            )?;
            report.triangles_before += out.triangles_before;
            report.triangles_after += out.triangles_after;
            report.vertices_before += out.vertices_before;
            report.vertices_after += out.vertices_after;
            report.sparse_targets += out.sparse_targets;
            report.dropped_zero_targets += out.dropped_targets;
            sq_error = sq_error.max(out.max_position_error);
            normal_error.0 = normal_error.0.max(out.normal_error.0);
            normal_error.1 = normal_error.1.max(out.normal_error.1);
            asset.json["meshes"][m]["primitives"][p] = out.primitive;
        }
    }
    if let Some(grid) = &grid {
        place_dequantization(&mut asset, grid)?;
        report.max_position_error = sq_error;
        report.max_position_error_relative = if grid.diagonal > 0.0 {
            sq_error / grid.diagonal
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
    let codecs = collect_garbage(&mut asset, codecs);
    let quantized = asset.to_glb();
    let meshopt = write_meshopt(&asset, &codecs, options.codec, options.vertex_level);
    report.quantized_bytes = quantized.len() as u64;
    report.meshopt_bytes = meshopt.len() as u64;
    Ok(OptimizedModel {
        quantized,
        meshopt,
        report,
    })
}

/// One quantization grid for all positions of a file: `real = offset + scale × q`.
#[derive(Debug, Clone)]
struct Grid {
    offset: [f32; 3],
    scale: f32,
    diagonal: f64,
}

fn position_grid(asset: &Asset, bits: u32) -> Result<Option<Grid>, GltfError> {
    let mut min = [f32::INFINITY; 3];
    let mut max = [f32::NEG_INFINITY; 3];
    for (m, mesh) in asset.array("meshes").iter().enumerate() {
        for (p, primitive) in mesh["primitives"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let Some(index) = primitive
                .pointer("/attributes/POSITION")
                .and_then(Value::as_u64)
            else {
                continue;
            };
            let (layout, values) = accessors::read_f32(asset, index as usize)?;
            if layout.components != 3 {
                return Err(invalid(
                    format!("meshes[{m}].primitives[{p}]"),
                    "POSITION is not VEC3",
                ));
            }
            for v in values.chunks_exact(3) {
                if v.iter().any(|c| !c.is_finite()) {
                    return Err(invalid(
                        format!("meshes[{m}].primitives[{p}].POSITION"),
                        "holds NaN or infinite values",
                    ));
                }
                for a in 0..3 {
                    min[a] = min[a].min(v[a]);
                    max[a] = max[a].max(v[a]);
                }
            }
        }
    }
    if min[0] > max[0] {
        return Ok(None);
    }
    let extent = (0..3).map(|a| max[a] - min[a]).fold(0f32, f32::max);
    let levels = ((1u32 << bits) - 1) as f32;
    let scale = if extent > 0.0 { extent / levels } else { 1.0 };
    let diagonal = (0..3)
        .map(|a| ((max[a] - min[a]) as f64).powi(2))
        .sum::<f64>()
        .sqrt();
    Ok(Some(Grid {
        offset: min,
        scale,
        diagonal,
    }))
}

/// A material's texture coordinate range: `uv = offset + extent × q / (2^bits − 1)`.
#[derive(Debug, Clone, PartialEq)]
struct UvGrid {
    offset: [f32; 2],
    extent: [f32; 2],
}

/// UV bounds per material (all texcoord sets of all primitives that use it), keyed by the
/// material index (`None`: primitives without a material, which sample no texture).
fn uv_grids(asset: &Asset) -> Result<HashMap<Option<u64>, UvGrid>, GltfError> {
    let mut bounds: HashMap<Option<u64>, ([f32; 2], [f32; 2])> = HashMap::new();
    for (m, mesh) in asset.array("meshes").iter().enumerate() {
        for (p, primitive) in mesh["primitives"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            // Without a material there is no texture to carry the scale: normalised UVs there.
            let Some(key) = primitive.get("material").and_then(Value::as_u64).map(Some) else {
                continue;
            };
            for (name, index) in primitive["attributes"].as_object().into_iter().flatten() {
                if !name.starts_with("TEXCOORD_") {
                    continue;
                }
                let Some(index) = index.as_u64() else {
                    continue;
                };
                let (layout, values) = accessors::read_f32(asset, index as usize)?;
                if layout.components != 2 {
                    continue;
                }
                if values.iter().any(|v| !v.is_finite()) {
                    return Err(invalid(
                        format!("meshes[{m}].primitives[{p}].{name}"),
                        "holds NaN or infinite values",
                    ));
                }
                let entry = bounds
                    .entry(key)
                    .or_insert(([f32::INFINITY; 2], [f32::NEG_INFINITY; 2]));
                for uv in values.chunks_exact(2) {
                    for ((lo, hi), &v) in entry.0.iter_mut().zip(entry.1.iter_mut()).zip(uv) {
                        *lo = lo.min(v);
                        *hi = hi.max(v);
                    }
                }
            }
        }
    }
    Ok(bounds
        .into_iter()
        .map(|(key, (min, max))| {
            (
                key,
                UvGrid {
                    offset: min,
                    extent: [max[0] - min[0], max[1] - min[1]],
                },
            )
        })
        .collect())
}

/// Puts each material's UV dequantization into every texture it samples, composed with the
/// material's own KHR_texture_transform. Returns whether any texture got one.
fn apply_texture_transforms(
    json: &mut Value,
    grids: &HashMap<Option<u64>, UvGrid>,
    bits: u32,
) -> bool {
    let levels = ((1u32 << bits) - 1) as f32;
    let mut any = false;
    let Some(materials) = json.get_mut("materials").and_then(Value::as_array_mut) else {
        return false;
    };
    for (index, material) in materials.iter_mut().enumerate() {
        let Some(grid) = grids.get(&Some(index as u64)) else {
            continue;
        };
        let q_scale = [grid.extent[0] / levels, grid.extent[1] / levels];
        any |= compose_in_texture_infos(material, grid.offset, q_scale);
    }
    any
}

/// Walks a material's JSON; every texture info (an object with `index` under a key ending in
/// `Texture`) gets `E ∘ Q`, where `E` is its existing transform and `Q` the dequantization.
fn compose_in_texture_infos(value: &mut Value, q_offset: [f32; 2], q_scale: [f32; 2]) -> bool {
    let mut any = false;
    if let Some(object) = value.as_object_mut() {
        for (key, child) in object.iter_mut() {
            if (key.ends_with("Texture") || key.ends_with("texture"))
                && child.get("index").is_some()
            {
                let Some(info) = child.as_object_mut() else {
                    continue;
                };
                let extensions = info.entry("extensions").or_insert_with(|| json!({}));
                if !extensions.is_object() {
                    // The reader refuses such files; never index into a non-object.
                    *extensions = json!({});
                }
                let existing = extensions
                    .get("KHR_texture_transform")
                    .cloned()
                    .unwrap_or(json!({}));
                let pair = |v: &Value, default: f32| -> [f32; 2] {
                    [
                        v.get(0)
                            .and_then(Value::as_f64)
                            .map_or(default, |x| x as f32),
                        v.get(1)
                            .and_then(Value::as_f64)
                            .map_or(default, |x| x as f32),
                    ]
                };
                let e_offset = pair(&existing["offset"], 0.0);
                let e_scale = pair(&existing["scale"], 1.0);
                let rotation = existing["rotation"].as_f64().unwrap_or(0.0) as f32;
                let (sin, cos) = rotation.sin_cos();
                let scaled = [e_scale[0] * q_offset[0], e_scale[1] * q_offset[1]];
                let offset = [
                    e_offset[0] + cos * scaled[0] - sin * scaled[1],
                    e_offset[1] + sin * scaled[0] + cos * scaled[1],
                ];
                let mut transform = existing.clone();
                transform["offset"] = floats(&offset);
                transform["scale"] = floats(&[e_scale[0] * q_scale[0], e_scale[1] * q_scale[1]]);
                extensions["KHR_texture_transform"] = transform;
                any = true;
            } else {
                any |= compose_in_texture_infos(child, q_offset, q_scale);
            }
        }
    }
    any
}

struct PrimitiveOut {
    primitive: Value,
    triangles_before: u64,
    triangles_after: u64,
    vertices_before: u64,
    vertices_after: u64,
    max_position_error: f64,
    normal_error: (f64, f64),
    sparse_targets: u64,
    dropped_targets: u64,
}

/// A float attribute stream: `count × components`.
struct Stream {
    name: String,
    components: usize,
    values: Vec<f32>,
    source: Layout,
}

/// The quantization grids one primitive is written on.
struct Grids<'a> {
    position: &'a Option<Grid>,
    uv: Option<&'a UvGrid>,
}

fn process_primitive(
    source: &Asset,
    asset: &mut Asset,
    primitive: &Value,
    grids: Grids<'_>,
    options: &GeometryOptions,
    what: &str,
    codecs: &mut HashMap<usize, ViewCodec>,
) -> Result<PrimitiveOut, GltfError> {
    let (grid, uv) = (grids.position, grids.uv);
    let mode = primitive.get("mode").and_then(Value::as_u64).unwrap_or(4);
    let attributes = primitive
        .get("attributes")
        .and_then(Value::as_object)
        .ok_or_else(|| invalid(what, "attributes missing"))?;
    let mut streams = Vec::new();
    for (name, index) in attributes {
        let index = index
            .as_u64()
            .ok_or_else(|| invalid(what, format!("{name} is not an index")))?
            as usize;
        let (layout, values) = accessors::read_f32(source, index)?;
        streams.push(Stream {
            name: name.clone(),
            components: layout.components,
            values,
            source: layout,
        });
    }
    let vertex_count = streams
        .first()
        .map_or(0, |s| s.values.len() / s.components.max(1));
    if streams
        .iter()
        .any(|s| s.values.len() != vertex_count * s.components)
    {
        return Err(invalid(what, "attributes have different counts"));
    }
    let targets_json = primitive
        .get("targets")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut targets: Vec<Vec<Stream>> = Vec::new();
    for (t, target) in targets_json.iter().enumerate() {
        let mut list = Vec::new();
        for (name, index) in target.as_object().into_iter().flatten() {
            let index = index
                .as_u64()
                .ok_or_else(|| invalid(what, format!("targets[{t}].{name} is not an index")))?
                as usize;
            let (layout, values) = accessors::read_f32(source, index)?;
            if values.len() != vertex_count * layout.components {
                return Err(invalid(
                    what,
                    format!("targets[{t}].{name} has a different count"),
                ));
            }
            list.push(Stream {
                name: name.clone(),
                components: layout.components,
                values,
                source: layout,
            });
        }
        targets.push(list);
    }
    let mut indices = match primitive.get("indices").and_then(Value::as_u64) {
        Some(index) => Some(accessors::read_indices(
            source,
            index as usize,
            vertex_count,
        )?),
        None => None,
    };
    let triangles_before = if mode == 4 {
        indices.as_ref().map_or(vertex_count, Vec::len) as u64 / 3
    } else {
        0
    };
    // Quantize first, per source vertex: vertices that differ only below the quantization
    // step become identical and are merged below (what the output can express decides).
    let weight_sets: Vec<String> = streams
        .iter()
        .filter(|s| s.name.starts_with("WEIGHTS_"))
        .map(|s| s.name.clone())
        .collect();
    let weights_total: Option<Vec<f32>> = (!weight_sets.is_empty()).then(|| {
        let mut total = vec![0f32; vertex_count];
        for s in streams.iter().filter(|s| s.name.starts_with("WEIGHTS_")) {
            for (v, chunk) in s.values.chunks(4).enumerate() {
                total[v] += chunk.iter().sum::<f32>();
            }
        }
        total
    });
    // A joint whose weight quantizes to zero does not matter: storing 0 there lets more
    // vertices merge and compresses better (and the validator stops warning about it).
    for set in 0.. {
        let (Some(j), Some(w)) = (
            streams
                .iter()
                .position(|s| s.name == format!("JOINTS_{set}")),
            streams
                .iter()
                .position(|s| s.name == format!("WEIGHTS_{set}")),
        ) else {
            break;
        };
        if streams[j].components != 4 || streams[w].components != 4 {
            break;
        }
        let totals = weights_total.as_deref().unwrap_or(&[]);
        let weights = streams[w].values.clone();
        for (v, joints) in streams[j].values.chunks_mut(4).enumerate() {
            let total = totals.get(v).copied().filter(|t| *t > 0.0).unwrap_or(1.0);
            for k in 0..4 {
                if (weights[v * 4 + k] / total * 255.0).round() == 0.0 {
                    joints[k] = 0.0;
                }
            }
        }
    }
    let mut encoded = Vec::with_capacity(streams.len());
    for stream in &streams {
        encoded.push(encode_attribute(
            stream,
            &stream.values,
            grid,
            uv,
            options,
            weights_total.as_deref(),
            &weight_sets,
        )?);
    }

    let mut original_of: Vec<u32> = (0..vertex_count as u32).collect();
    let mut new_count = vertex_count;

    // Only triangle lists are reordered; other modes keep their order, and are quantized.
    if mode == 4 && vertex_count > 0 {
        let list = indices
            .take()
            .unwrap_or_else(|| (0..vertex_count as u32).collect());
        if list.len() % 3 != 0 {
            return Err(invalid(what, "triangle list length is not a multiple of 3"));
        }
        // Merge vertices whose stored bytes (both variants') and morph deltas are equal.
        let mut seen: HashMap<Vec<u8>, u32> = HashMap::with_capacity(vertex_count);
        let mut first: Vec<u32> = Vec::new();
        let mut remap = vec![u32::MAX; vertex_count];
        for &v in &list {
            let v = v as usize;
            if remap[v] != u32::MAX {
                continue;
            }
            let mut key = Vec::new();
            for e in &encoded {
                key.extend_from_slice(&e.bytes[v * e.stride..(v + 1) * e.stride]);
                if let Some(f) = &e.filtered {
                    key.extend_from_slice(&f[v * e.stride..(v + 1) * e.stride]);
                }
            }
            for t in targets.iter().flatten() {
                for x in &t.values[v * t.components..(v + 1) * t.components] {
                    key.extend_from_slice(&x.to_bits().to_le_bytes());
                }
            }
            let next = first.len() as u32;
            let id = *seen.entry(key).or_insert(next);
            if id == next {
                first.push(v as u32);
            }
            remap[v] = id;
        }
        let unique = first.len();
        let list: Vec<u32> = list.iter().map(|&v| remap[v as usize]).collect();
        // Strip-friendly order: the index codec and the vertex deltas compress better.
        let list = meshopt::optimize_vertex_cache_strip(&list, unique);
        let fetch = meshopt::optimize_vertex_fetch_remap(&list, unique);
        let used = fetch.iter().filter(|&&f| f != u32::MAX).count();
        let mut order = vec![0u32; used];
        for (old, &new) in fetch.iter().enumerate() {
            if new != u32::MAX {
                order[new as usize] = first[old];
            }
        }
        indices = Some(list.iter().map(|&i| fetch[i as usize]).collect());
        original_of = order;
        new_count = used;
    }
    let pick = |s: &Stream| -> Vec<f32> {
        let n = s.components;
        original_of
            .iter()
            .flat_map(|&o| s.values[o as usize * n..o as usize * n + n].iter().copied())
            .collect()
    };
    let pick_rows = |bytes: &[u8], stride: usize| -> Vec<u8> {
        original_of
            .iter()
            .flat_map(|&o| {
                bytes[o as usize * stride..(o as usize + 1) * stride]
                    .iter()
                    .copied()
            })
            .collect()
    };

    let mut out = primitive.clone();
    let mut attrs = serde_json::Map::new();
    let mut max_position_error = 0f64;
    let mut normal_error = (0f64, 0f64);
    for (stream, encoded) in streams.iter().zip(encoded) {
        if let Some(e) = encoded.position_error {
            max_position_error = max_position_error.max(e);
        }
        if let Some(e) = encoded.normal_error {
            normal_error.0 = normal_error.0.max(e.0);
            normal_error.1 = normal_error.1.max(e.1);
        }
        let bytes = pick_rows(&encoded.bytes, encoded.stride);
        let filtered = encoded
            .filtered
            .as_deref()
            .map(|f| pick_rows(f, encoded.stride));
        let mut accessor = encoded.accessor;
        if stream.name == "POSITION" {
            // Bounds of the vertices kept (unreferenced ones are gone).
            let (min, max) = u16_bounds(&bytes, encoded.stride);
            accessor["min"] = floats(&min);
            accessor["max"] = floats(&max);
        }
        let view = push_view(asset, bytes, Some(encoded.stride), Some(ARRAY_BUFFER));
        accessor["bufferView"] = json!(view);
        accessor["count"] = json!(new_count);
        let index = push_accessor(asset, accessor);
        codecs.insert(
            view,
            ViewCodec {
                mode: "ATTRIBUTES",
                filter: encoded.filter,
                filtered,
                stride: None,
            },
        );
        attrs.insert(stream.name.clone(), json!(index));
    }
    out["attributes"] = Value::Object(attrs);

    let mut sparse_targets = 0;
    let mut dropped_targets = 0;
    if !targets.is_empty() {
        let mut new_targets = Vec::new();
        for target in &targets {
            let mut object = serde_json::Map::new();
            for stream in target {
                let values = pick(stream);
                let (index, kind) = encode_target(asset, stream, &values, grid, options, codecs)?;
                match kind {
                    TargetKind::Sparse => sparse_targets += 1,
                    TargetKind::Zero => dropped_targets += 1,
                    TargetKind::Dense => {}
                }
                object.insert(stream.name.clone(), json!(index));
            }
            new_targets.push(Value::Object(object));
        }
        out["targets"] = Value::Array(new_targets);
    }

    if let Some(list) = indices {
        // 16-bit indices up to 65534: 65535 is the primitive restart index in WebGL 2.
        let (bytes, component_type, stride) = if new_count <= 65_535 {
            (
                list.iter()
                    .flat_map(|&i| (i as u16).to_le_bytes())
                    .collect::<Vec<u8>>(),
                UNSIGNED_SHORT,
                2,
            )
        } else {
            (
                list.iter().flat_map(|&i| i.to_le_bytes()).collect(),
                UNSIGNED_INT,
                4,
            )
        };
        let _ = stride;
        let view = push_view(asset, bytes, None, Some(ELEMENT_ARRAY_BUFFER));
        let index = push_accessor(
            asset,
            json!({"bufferView": view, "componentType": component_type, "count": list.len(), "type": "SCALAR"}),
        );
        codecs.insert(
            view,
            ViewCodec {
                mode: if mode == 4 { "TRIANGLES" } else { "INDICES" },
                filter: "NONE",
                filtered: None,
                stride: None,
            },
        );
        out["indices"] = json!(index);
    }
    let triangles_after = if mode == 4 {
        out.get("indices")
            .and_then(Value::as_u64)
            .map_or(new_count as u64 / 3, |i| {
                asset.array("accessors")[i as usize]["count"]
                    .as_u64()
                    .unwrap_or(0)
                    / 3
            })
    } else {
        0
    };
    Ok(PrimitiveOut {
        primitive: out,
        triangles_before,
        triangles_after,
        vertices_before: vertex_count as u64,
        vertices_after: new_count as u64,
        max_position_error,
        normal_error,
        sparse_targets,
        dropped_targets,
    })
}

struct EncodedAttribute {
    accessor: Value,
    bytes: Vec<u8>,
    stride: usize,
    filter: &'static str,
    filtered: Option<Vec<u8>>,
    position_error: Option<f64>,
    normal_error: Option<(f64, f64)>,
}

/// `v` in `[0, 1]` on a `bits` grid, stored in a normalised integer of `storage_bits` (8 or
/// 16) by bit replication (`k << s | k >> r`, like 5-to-8-bit color expansion): exact at both
/// ends, and the low bits repeat the high ones instead of being rounding noise, which would
/// cost compression.
fn unorm(v: f32, bits: u32, storage_bits: u32) -> u32 {
    let levels = ((1u32 << bits) - 1) as f32;
    let k = (v.clamp(0.0, 1.0) * levels).round() as u32;
    expand(k, bits, storage_bits)
}

/// Signed counterpart of [`unorm`]: the magnitude is replicated, the sign kept.
fn snorm(v: f32, bits: u32, storage_bits: u32) -> i32 {
    let levels = ((1u32 << (bits - 1)) - 1) as f32;
    let m = (v.clamp(-1.0, 1.0).abs() * levels).round() as u32;
    let magnitude = expand(m, bits - 1, storage_bits - 1) as i32;
    if v < 0.0 { -magnitude } else { magnitude }
}

/// Widens a `from`-bit integer to `to` bits so that all-ones maps to all-ones.
fn expand(k: u32, from: u32, to: u32) -> u32 {
    if from >= to {
        return k;
    }
    let mut out = 0u32;
    let mut filled = 0;
    while filled < to {
        let shift = to as i32 - filled as i32 - from as i32;
        out |= if shift >= 0 { k << shift } else { k >> -shift };
        filled += from;
    }
    out & ((1u32 << to) - 1)
}

fn storage_bits(bits: u32) -> u32 {
    if bits <= 8 { 8 } else { 16 }
}

/// f32 values as JSON numbers in their shortest form (`0.1`, not `0.10000000149011612`;
/// `16383`, not `16383.0`): the JSON is part of what every player downloads.
fn floats(values: &[f32]) -> Value {
    Value::Array(
        values
            .iter()
            .map(|&v| {
                if v.fract() == 0.0 && v.abs() < 1e15 {
                    json!(v as i64)
                } else {
                    v.to_string()
                        .parse::<f64>()
                        .ok()
                        .and_then(serde_json::Number::from_f64)
                        .map_or(Value::Null, Value::Number)
                }
            })
            .collect(),
    )
}

/// Per-axis bounds of quantized positions (three u16 at the start of each element).
fn u16_bounds(bytes: &[u8], stride: usize) -> (Vec<f32>, Vec<f32>) {
    let mut min = [f32::INFINITY; 3];
    let mut max = [f32::NEG_INFINITY; 3];
    for element in bytes.chunks(stride) {
        for axis in 0..3 {
            let v = u16::from_le_bytes([element[2 * axis], element[2 * axis + 1]]) as f32;
            min[axis] = min[axis].min(v);
            max[axis] = max[axis].max(v);
        }
    }
    if bytes.is_empty() {
        return (vec![0.0; 3], vec![0.0; 3]);
    }
    (min.to_vec(), max.to_vec())
}

/// Packs `count` elements of `components` integers into 4-byte-aligned elements.
fn pack_ints(values: &[i32], components: usize, storage: u32) -> (Vec<u8>, usize) {
    let size = (storage / 8) as usize;
    let stride = (components * size).next_multiple_of(4);
    let mut out = Vec::with_capacity(values.len() / components.max(1) * stride);
    for element in values.chunks(components) {
        let start = out.len();
        for &v in element {
            if size == 1 {
                out.push(v as u8);
            } else {
                out.extend_from_slice(&(v as u16).to_le_bytes());
            }
        }
        out.resize(start + stride, 0);
    }
    (out, stride)
}

fn encode_attribute(
    stream: &Stream,
    values: &[f32],
    grid: &Option<Grid>,
    uv: Option<&UvGrid>,
    options: &GeometryOptions,
    weights_total: Option<&[f32]>,
    weight_sets: &[String],
) -> Result<EncodedAttribute, GltfError> {
    let name = stream.name.as_str();
    let n = stream.components;
    let float = |values: &[f32]| {
        let mut accessor = json!({"componentType": FLOAT, "type": accessors::type_name(n)});
        if name == "POSITION" {
            let (min, max) = min_max(values, n);
            accessor["min"] = floats(&min);
            accessor["max"] = floats(&max);
        }
        // Float data stays float; the meshopt variant stores it with the exponential filter.
        let filtered = exp_filter(values, n);
        EncodedAttribute {
            accessor,
            bytes: pack_floats(values),
            stride: n * 4,
            filter: "EXPONENTIAL",
            filtered: Some(filtered),
            position_error: None,
            normal_error: None,
        }
    };
    match name {
        "POSITION" => {
            let grid = grid.as_ref().expect("positions imply a grid");
            let mut q = Vec::with_capacity(values.len());
            let mut error = 0f64;
            for v in values.chunks(3) {
                let mut d2 = 0f64;
                for (&c, &offset) in v.iter().zip(&grid.offset) {
                    let i = ((c - offset) / grid.scale).round().clamp(0.0, 65535.0) as i32;
                    let back = offset + i as f32 * grid.scale;
                    d2 += ((back - c) as f64).powi(2);
                    q.push(i);
                }
                error = error.max(d2.sqrt());
            }
            let (bytes, stride) = pack_ints(&q, 3, 16);
            let (min, max) = min_max(&q.iter().map(|&i| i as f32).collect::<Vec<_>>(), 3);
            Ok(EncodedAttribute {
                accessor: json!({"componentType": UNSIGNED_SHORT, "type": "VEC3", "min": min, "max": max}),
                bytes,
                stride,
                filter: "NONE",
                filtered: None,
                position_error: Some(error),
                normal_error: None,
            })
        }
        "NORMAL" | "TANGENT" if n == 3 || n == 4 => {
            let bits = if name == "NORMAL" {
                options.normal_bits
            } else {
                options.tangent_bits
            };
            let storage = storage_bits(bits);
            let mut q = Vec::with_capacity(values.len());
            let mut unit = Vec::with_capacity(values.len() / n);
            for v in values.chunks(n) {
                let len = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
                let norm = if len > 0.0 {
                    [v[0] / len, v[1] / len, v[2] / len]
                } else {
                    [0.0, 0.0, 1.0]
                };
                for c in norm {
                    q.push(snorm(c, bits, storage));
                }
                let w = if n == 4 {
                    if v[3] < 0.0 { -1.0 } else { 1.0 }
                } else {
                    0.0
                };
                if n == 4 {
                    q.push(snorm(w, bits, storage));
                }
                unit.push([norm[0], norm[1], norm[2], w]);
            }
            let (bytes, stride) = pack_ints(&q, n, storage);
            let max_value = ((1u32 << (storage - 1)) - 1) as f32;
            let plain_error = unit
                .iter()
                .zip(q.chunks(n))
                .map(|(u, s)| {
                    angle_deg(
                        u,
                        &[
                            s[0] as f32 / max_value,
                            s[1] as f32 / max_value,
                            s[2] as f32 / max_value,
                        ],
                    )
                })
                .fold(0f64, f64::max);
            // The meshopt variant stores octahedral-encoded values (4 components, w kept).
            let oct = oct_filter(&unit, bits, storage);
            debug_assert_eq!(oct.decoded.len(), bytes.len());
            let component_type = if storage == 8 { BYTE } else { SHORT };
            Ok(EncodedAttribute {
                accessor: json!({"componentType": component_type, "normalized": true, "type": accessors::type_name(n)}),
                // Element strides agree: 3 or 4 components of 1 or 2 bytes pad to 4 or 8.
                bytes: if n == 3 {
                    oct_plain_normals(&oct.decoded, stride)
                } else {
                    bytes
                },
                stride,
                filter: "OCTAHEDRAL",
                filtered: Some(oct.filtered),
                position_error: None,
                normal_error: Some((plain_error.max(oct.max_error), oct.max_error)),
            })
        }
        _ if name.starts_with("TEXCOORD_") && n == 2 && uv.is_some() => {
            // Plain integers on the material's grid: small values, no rounding noise.
            let uv = uv.expect("checked");
            let bits = options.texcoord_bits;
            let levels = ((1u32 << bits) - 1) as f32;
            let q: Vec<i32> = values
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    let axis = i % 2;
                    if uv.extent[axis] > 0.0 {
                        ((v - uv.offset[axis]) / uv.extent[axis] * levels)
                            .round()
                            .clamp(0.0, levels) as i32
                    } else {
                        0
                    }
                })
                .collect();
            let storage = storage_bits(bits);
            let (bytes, stride) = pack_ints(&q, 2, storage);
            let component_type = if storage == 8 {
                UNSIGNED_BYTE
            } else {
                UNSIGNED_SHORT
            };
            Ok(EncodedAttribute {
                accessor: json!({"componentType": component_type, "type": "VEC2"}),
                bytes,
                stride,
                filter: "NONE",
                filtered: None,
                position_error: None,
                normal_error: None,
            })
        }
        _ if name.starts_with("TEXCOORD_") && n == 2 => {
            if values.iter().all(|v| (0.0..=1.0).contains(v)) {
                let bits = options.texcoord_bits;
                let storage = storage_bits(bits);
                let q: Vec<i32> = values
                    .iter()
                    .map(|&v| unorm(v, bits, storage) as i32)
                    .collect();
                let (bytes, stride) = pack_ints(&q, 2, storage);
                let component_type = if storage == 8 {
                    UNSIGNED_BYTE
                } else {
                    UNSIGNED_SHORT
                };
                Ok(EncodedAttribute {
                    accessor: json!({"componentType": component_type, "normalized": true, "type": "VEC2"}),
                    bytes,
                    stride,
                    filter: "NONE",
                    filtered: None,
                    position_error: None,
                    normal_error: None,
                })
            } else {
                Ok(float(values))
            }
        }
        _ if name.starts_with("COLOR_") && (n == 3 || n == 4) => {
            let bits = options.color_bits;
            let storage = storage_bits(bits);
            let q: Vec<i32> = values
                .iter()
                .map(|&v| unorm(v, bits, storage) as i32)
                .collect();
            let (bytes, stride) = pack_ints(&q, n, storage);
            let component_type = if storage == 8 {
                UNSIGNED_BYTE
            } else {
                UNSIGNED_SHORT
            };
            // KHR_meshopt_compression's color filter (YCoCg) compresses colors better.
            let (filter, filtered) = if options.codec == MeshoptCodec::Khr {
                let rgba: Vec<[f32; 4]> = values
                    .chunks(n)
                    .map(|c| [c[0], c[1], c[2], if n == 4 { c[3] } else { 1.0 }])
                    .collect();
                ("COLOR", Some(color_filter(&rgba, bits, stride)))
            } else {
                ("NONE", None)
            };
            Ok(EncodedAttribute {
                accessor: json!({"componentType": component_type, "normalized": true, "type": accessors::type_name(n)}),
                bytes,
                stride,
                filter,
                filtered,
                position_error: None,
                normal_error: None,
            })
        }
        _ if name.starts_with("JOINTS_") && n == 4 => {
            let max = values.iter().fold(0f32, |m, &v| m.max(v));
            let storage = if max < 256.0 { 8 } else { 16 };
            let q: Vec<i32> = values.iter().map(|&v| v as i32).collect();
            let (bytes, stride) = pack_ints(&q, 4, storage);
            Ok(EncodedAttribute {
                accessor: json!({"componentType": if storage == 8 { UNSIGNED_BYTE } else { UNSIGNED_SHORT }, "type": "VEC4"}),
                bytes,
                stride,
                filter: "NONE",
                filtered: None,
                position_error: None,
                normal_error: None,
            })
        }
        _ if name.starts_with("WEIGHTS_") && n == 4 => {
            let totals = weights_total.unwrap_or(&[]);
            let first_set = weight_sets.first().is_some_and(|s| s == name);
            let q = quantize_weights(values, totals, first_set);
            let (bytes, stride) = pack_ints(&q, 4, 8);
            Ok(EncodedAttribute {
                accessor: json!({"componentType": UNSIGNED_BYTE, "normalized": true, "type": "VEC4"}),
                bytes,
                stride,
                filter: "NONE",
                filtered: None,
                position_error: None,
                normal_error: None,
            })
        }
        _ => {
            // Attributes this stage does not quantize keep their source type when it is
            // already an integer one, else stay float.
            if stream.source.component_type != FLOAT {
                let q: Vec<i32> = values.iter().map(|&v| v as i32).collect();
                let storage = if matches!(stream.source.component_type, BYTE | UNSIGNED_BYTE) {
                    8
                } else {
                    16
                };
                if !stream.source.normalized && stream.source.component_type != UNSIGNED_INT {
                    let (bytes, stride) = pack_ints(&q, n, storage);
                    return Ok(EncodedAttribute {
                        accessor: json!({"componentType": stream.source.component_type, "type": accessors::type_name(n)}),
                        bytes,
                        stride,
                        filter: "NONE",
                        filtered: None,
                        position_error: None,
                        normal_error: None,
                    });
                }
            }
            Ok(float(values))
        }
    }
}

/// Skin weights as normalised bytes that sum to exactly 255 across all sets: rounding error
/// goes to the largest weight of the first set.
fn quantize_weights(values: &[f32], totals: &[f32], first_set: bool) -> Vec<i32> {
    let mut out = Vec::with_capacity(values.len());
    for (v, chunk) in values.chunks(4).enumerate() {
        let total = totals.get(v).copied().filter(|t| *t > 0.0).unwrap_or(1.0);
        let q: Vec<i32> = chunk
            .iter()
            .map(|w| ((w / total) * 255.0).round() as i32)
            .collect();
        out.extend(q);
    }
    if first_set {
        // Fix the sum (of this set; other sets are rounded on their own and small).
        for chunk in out.chunks_mut(4) {
            let sum: i32 = chunk.iter().sum();
            if sum != 255 && sum > 0 {
                let (largest, _) = chunk.iter().enumerate().max_by_key(|(_, w)| **w).unwrap();
                chunk[largest] = (chunk[largest] + 255 - sum).clamp(0, 255);
            }
        }
    }
    out
}

fn angle_deg(a: &[f32; 4], b: &[f32; 3]) -> f64 {
    let lb = (b[0] * b[0] + b[1] * b[1] + b[2] * b[2]).sqrt().max(1e-12);
    let dot = ((a[0] * b[0] + a[1] * b[1] + a[2] * b[2]) / lb).clamp(-1.0, 1.0);
    (dot as f64).acos().to_degrees()
}

/// Octahedral encoding of unit vectors for the meshopt variant, decoded once to measure it.
struct Octahedral {
    /// Filter input: what the meshopt variant compresses.
    filtered: Vec<u8>,
    /// What a decoder reconstructs from it (xyz, and w as given).
    decoded: Vec<u8>,
    /// Largest angle between a source vector and its decoded one, in degrees.
    max_error: f64,
}

fn oct_filter(unit: &[[f32; 4]], bits: u32, storage: u32) -> Octahedral {
    let stride = if storage == 8 { 4 } else { 8 };
    let mut filtered = vec![0u8; unit.len() * stride];
    // SAFETY: `filtered` holds unit.len() elements of `stride` bytes; `unit` is 4 floats each.
    unsafe {
        meshopt::ffi::meshopt_encodeFilterOct(
            filtered.as_mut_ptr().cast(),
            unit.len(),
            stride,
            bits as i32,
            unit.as_ptr().cast(),
        );
    }
    let mut decoded = filtered.clone();
    // SAFETY: as above.
    unsafe {
        meshopt::ffi::meshopt_decodeFilterOct(decoded.as_mut_ptr().cast(), unit.len(), stride)
    };
    let max_value = ((1u32 << (storage - 1)) - 1) as f32;
    let read = |e: &[u8], c: usize| -> f32 {
        if storage == 8 {
            e[c] as i8 as f32 / max_value
        } else {
            i16::from_le_bytes([e[2 * c], e[2 * c + 1]]) as f32 / max_value
        }
    };
    let max_error = unit
        .iter()
        .zip(decoded.chunks(stride))
        .map(|(u, e)| angle_deg(u, &[read(e, 0), read(e, 1), read(e, 2)]))
        .fold(0f64, f64::max);
    Octahedral {
        filtered,
        decoded,
        max_error,
    }
}

/// For VEC3 normals the quantized variant stores exactly what the octahedral decoder
/// produces, so both variants hold the same normals (and the meshopt fallback is exact).
/// The decoder keeps w, which is padding here: it is cleared.
fn oct_plain_normals(decoded: &[u8], stride: usize) -> Vec<u8> {
    let mut plain = decoded.to_vec();
    let size = stride / 4;
    for element in plain.chunks_mut(stride) {
        element[3 * size..].fill(0);
    }
    plain
}

/// Color-filter input (KHR_meshopt_compression) for RGBA in `[0, 1]`; `stride` is 4 or 8.
fn color_filter(rgba: &[[f32; 4]], bits: u32, stride: usize) -> Vec<u8> {
    let mut out = vec![0u8; rgba.len() * stride];
    // SAFETY: `out` holds rgba.len() elements of `stride` (4 or 8) bytes; input is 4 floats each.
    unsafe {
        meshopt::ffi::meshopt_encodeFilterColor(
            out.as_mut_ptr().cast(),
            rgba.len(),
            stride,
            bits as i32,
            rgba.as_ptr().cast(),
        );
    }
    out
}

/// Exponential-filter input for float data in the meshopt variant (24-bit mantissa: lossless
/// enough for geometry that stays float).
fn exp_filter(values: &[f32], components: usize) -> Vec<u8> {
    meshopt_codec::exp_filter(values, components, 24, false).0
}

enum TargetKind {
    Dense,
    Sparse,
    Zero,
}

/// One morph target attribute: deltas on the position grid (coarsened to `morph_bits`), as a
/// zero accessor, a sparse one or a dense one, whichever is smallest.
fn encode_target(
    asset: &mut Asset,
    stream: &Stream,
    values: &[f32],
    grid: &Option<Grid>,
    options: &GeometryOptions,
    codecs: &mut HashMap<usize, ViewCodec>,
) -> Result<(usize, TargetKind), GltfError> {
    let n = stream.components.min(3);
    let count = values.len() / stream.components.max(1);
    let deltas: Vec<f32> = values
        .chunks(stream.components)
        .flat_map(|c| c[..n].iter().copied())
        .collect();
    let (ints, component_type, normalized): (Vec<i32>, u64, bool) =
        match (stream.name.as_str(), grid) {
            ("POSITION", Some(grid)) => {
                // In i64 with saturating steps: a hostile delta can be any f32 (`as` saturates,
                // NaN is 0), and its grid units need not fit an i32.
                let max = deltas
                    .iter()
                    .map(|d| ((d / grid.scale).round() as i64).unsigned_abs())
                    .max()
                    .unwrap_or(0);
                let limit = (1u64 << (options.morph_bits - 1)) - 1;
                let step = max.div_ceil(limit).max(1) as i64;
                let q: Vec<i32> = deltas
                    .iter()
                    .map(|d| {
                        ((d / grid.scale / step as f32).round() as i64)
                            .saturating_mul(step)
                            .clamp(-32767, 32767) as i32
                    })
                    .collect();
                let wide = q.iter().any(|v| v.abs() > 127);
                (q, if wide { SHORT } else { BYTE }, false)
            }
            _ => {
                if deltas.iter().any(|d| d.abs() > 1.0) {
                    return Ok((
                        dense_float_target(asset, &deltas, n, codecs),
                        TargetKind::Dense,
                    ));
                }
                let bits = options.morph_bits.max(8);
                let storage = storage_bits(bits);
                let q: Vec<i32> = deltas.iter().map(|&d| snorm(d, bits, storage)).collect();
                (q, if storage == 8 { BYTE } else { SHORT }, true)
            }
        };
    let storage = if component_type == BYTE { 8 } else { 16 };
    let as_float = |v: i32| {
        if normalized {
            v as f32 / if storage == 8 { 127.0 } else { 32767.0 }
        } else {
            v as f32
        }
    };
    let float_values: Vec<f32> = ints.iter().map(|&v| as_float(v)).collect();
    let (min, max) = min_max(&float_values, n);
    let mut accessor =
        json!({"componentType": component_type, "type": accessors::type_name(n), "count": count});
    if normalized {
        accessor["normalized"] = json!(true);
    }
    if stream.name == "POSITION" {
        accessor["min"] = json!(
            min.iter()
                .map(|v| if v.is_finite() { *v } else { 0.0 })
                .collect::<Vec<_>>()
        );
        accessor["max"] = json!(
            max.iter()
                .map(|v| if v.is_finite() { *v } else { 0.0 })
                .collect::<Vec<_>>()
        );
    }
    let nonzero: Vec<usize> = (0..count)
        .filter(|&v| ints[v * n..v * n + n].iter().any(|&x| x != 0))
        .collect();
    if nonzero.is_empty() {
        // An accessor without a buffer view reads as zeros: the target costs no bytes.
        if stream.name == "POSITION" {
            accessor["min"] = json!([0.0, 0.0, 0.0]);
            accessor["max"] = json!([0.0, 0.0, 0.0]);
        }
        return Ok((push_accessor(asset, accessor), TargetKind::Zero));
    }
    let (dense, stride) = pack_ints(&ints, n, storage);
    let element = stride;
    let index_size = if count <= 65_536 { 2 } else { 4 };
    let sparse_bytes = nonzero.len() * (index_size.max(4) + element) + 16;
    if options.sparse_morph_targets && sparse_bytes < dense.len() {
        let index_bytes: Vec<u8> = if index_size == 2 {
            nonzero
                .iter()
                .flat_map(|&i| (i as u16).to_le_bytes())
                .collect()
        } else {
            nonzero
                .iter()
                .flat_map(|&i| (i as u32).to_le_bytes())
                .collect()
        };
        let picked: Vec<i32> = nonzero
            .iter()
            .flat_map(|&v| ints[v * n..v * n + n].iter().copied())
            .collect();
        // Sparse values are tightly packed (no byteStride allowed on their view).
        let values_bytes: Vec<u8> = picked
            .iter()
            .flat_map(|&v| {
                if storage == 8 {
                    vec![v as u8]
                } else {
                    (v as u16).to_le_bytes().to_vec()
                }
            })
            .collect();
        let index_view = push_view(asset, index_bytes, None, None);
        let values_view = push_view(asset, values_bytes, None, None);
        accessor["sparse"] = json!({
            "count": nonzero.len(),
            "indices": {"bufferView": index_view, "componentType": if index_size == 2 { UNSIGNED_SHORT } else { UNSIGNED_INT }},
            "values": {"bufferView": values_view},
        });
        return Ok((push_accessor(asset, accessor), TargetKind::Sparse));
    }
    let view = push_view(asset, dense, Some(stride), Some(ARRAY_BUFFER));
    accessor["bufferView"] = json!(view);
    codecs.insert(
        view,
        ViewCodec {
            mode: "ATTRIBUTES",
            filter: "NONE",
            filtered: None,
            stride: None,
        },
    );
    Ok((push_accessor(asset, accessor), TargetKind::Dense))
}

fn dense_float_target(
    asset: &mut Asset,
    deltas: &[f32],
    n: usize,
    codecs: &mut HashMap<usize, ViewCodec>,
) -> usize {
    let view = push_view(asset, pack_floats(deltas), Some(n * 4), Some(ARRAY_BUFFER));
    codecs.insert(
        view,
        ViewCodec {
            mode: "ATTRIBUTES",
            filter: "EXPONENTIAL",
            filtered: Some(exp_filter(deltas, n)),
            stride: None,
        },
    );
    push_accessor(
        asset,
        json!({"bufferView": view, "componentType": FLOAT, "type": accessors::type_name(n), "count": deltas.len() / n}),
    )
}

/// Puts `real = offset + scale × q` where glTF applies it: the inverse bind matrices of
/// skinned meshes, and a child node carrying the mesh for everything else.
fn place_dequantization(asset: &mut Asset, grid: &Grid) -> Result<(), GltfError> {
    let s = grid.scale;
    let o = grid.offset;
    // Column-major D = translate(o) · scale(s).
    let d: [f32; 16] = [
        s, 0., 0., 0., 0., s, 0., 0., 0., 0., s, 0., o[0], o[1], o[2], 1.,
    ];
    let node_count = asset.array("nodes").len();
    // Nodes whose translation/rotation/scale an animation drives can't absorb D themselves.
    let animated: BTreeSet<u64> = asset
        .array("animations")
        .iter()
        .flat_map(|a| a["channels"].as_array().cloned().unwrap_or_default())
        .filter(|c| c["target"]["path"] != "weights")
        .filter_map(|c| c["target"]["node"].as_u64())
        .collect();
    let mut skins_done = BTreeSet::new();
    let mut moved: BTreeMap<usize, usize> = BTreeMap::new();
    for n in 0..node_count {
        let node = asset.json["nodes"][n].clone();
        let Some(mesh) = node.get("mesh").cloned() else {
            continue;
        };
        if let Some(skin) = node.get("skin").and_then(Value::as_u64) {
            let skin = skin as usize;
            if skins_done.insert(skin) {
                premultiply_inverse_binds(asset, skin, &d)?;
            }
            continue;
        }
        // A leaf node that no animation moves takes D into its own transform: M' = M · D.
        let leaf = node
            .get("children")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty);
        if leaf
            && !animated.contains(&(n as u64))
            && bake_into_node(&mut asset.json["nodes"][n], &d)
        {
            continue;
        }
        // Otherwise a child node holds the mesh with the dequantization transform, so the
        // node's own transform, animations and children are untouched.
        let mut child =
            json!({"mesh": mesh, "translation": floats(&o), "scale": floats(&[s, s, s])});
        if let Some(weights) = node.get("weights") {
            child["weights"] = weights.clone();
        }
        let child_index = asset.array("nodes").len();
        let what = format!("nodes[{n}]");
        let nodes = asset
            .json
            .get_mut("nodes")
            .and_then(Value::as_array_mut)
            .ok_or_else(|| invalid("nodes", "is not an array"))?;
        nodes.push(child);
        let parent = nodes[n]
            .as_object_mut()
            .ok_or_else(|| invalid(&what, "is not an object"))?;
        parent.remove("mesh");
        parent.remove("weights");
        let children = parent.entry("children").or_insert_with(|| json!([]));
        children
            .as_array_mut()
            .ok_or_else(|| invalid(format!("{what}.children"), "is not an array"))?
            .push(json!(child_index));
        moved.insert(n, child_index);
    }
    // Morph weight animations follow the mesh to its new node.
    if let Some(animations) = asset
        .json
        .get_mut("animations")
        .and_then(Value::as_array_mut)
    {
        for animation in animations {
            for channel in animation["channels"].as_array_mut().into_iter().flatten() {
                let target = &mut channel["target"];
                if target["path"] == "weights"
                    && let Some(node) = target["node"].as_u64()
                    && let Some(child) = moved.get(&(node as usize))
                {
                    target["node"] = json!(child);
                }
            }
        }
    }
    Ok(())
}

/// `node`'s transform becomes `M · D` (D = translate(o) · uniform scale(s)); false if the
/// node's transform can't be read.
fn bake_into_node(node: &mut Value, d: &[f32; 16]) -> bool {
    let Some(object) = node.as_object_mut() else {
        return false;
    };
    if let Some(matrix) = object.get("matrix").and_then(Value::as_array) {
        let m: Vec<f32> = matrix
            .iter()
            .filter_map(|v| v.as_f64().map(|x| x as f32))
            .collect();
        if m.len() != 16 {
            return false;
        }
        object.insert("matrix".into(), floats(&mat4_mul(&m, d)));
        return true;
    }
    let triple = |key: &str, default: [f32; 3]| -> Option<[f32; 3]> {
        match object.get(key) {
            None => Some(default),
            Some(v) => {
                let a = v.as_array()?;
                Some([
                    a.first()?.as_f64()? as f32,
                    a.get(1)?.as_f64()? as f32,
                    a.get(2)?.as_f64()? as f32,
                ])
            }
        }
    };
    let (Some(t), Some(sc)) = (triple("translation", [0.0; 3]), triple("scale", [1.0; 3])) else {
        return false;
    };
    let q: [f32; 4] = match object.get("rotation").and_then(Value::as_array) {
        None => [0.0, 0.0, 0.0, 1.0],
        Some(a) if a.len() == 4 => {
            let v: Vec<f32> = a
                .iter()
                .filter_map(|x| x.as_f64().map(|x| x as f32))
                .collect();
            if v.len() != 4 {
                return false;
            }
            [v[0], v[1], v[2], v[3]]
        }
        Some(_) => return false,
    };
    // T' = T + R(S ⊙ o), R' = R, S' = S · s.
    let (o, s) = ([d[12], d[13], d[14]], d[0]);
    let v = [sc[0] * o[0], sc[1] * o[1], sc[2] * o[2]];
    let r = rotate(q, v);
    object.insert(
        "translation".into(),
        floats(&[t[0] + r[0], t[1] + r[1], t[2] + r[2]]),
    );
    object.insert("scale".into(), floats(&[sc[0] * s, sc[1] * s, sc[2] * s]));
    true
}

/// Rotates `v` by the unit quaternion `q` (x, y, z, w).
fn rotate(q: [f32; 4], v: [f32; 3]) -> [f32; 3] {
    let (x, y, z, w) = (q[0], q[1], q[2], q[3]);
    // v' = v + 2w(u × v) + 2 u × (u × v), with u = (x, y, z).
    let c1 = [
        y * v[2] - z * v[1],
        z * v[0] - x * v[2],
        x * v[1] - y * v[0],
    ];
    let c2 = [
        y * c1[2] - z * c1[1],
        z * c1[0] - x * c1[2],
        x * c1[1] - y * c1[0],
    ];
    [
        v[0] + 2.0 * (w * c1[0] + c2[0]),
        v[1] + 2.0 * (w * c1[1] + c2[1]),
        v[2] + 2.0 * (w * c1[2] + c2[2]),
    ]
}

fn premultiply_inverse_binds(
    asset: &mut Asset,
    skin: usize,
    d: &[f32; 16],
) -> Result<(), GltfError> {
    let what = format!("skins[{skin}]");
    let joints = asset.json["skins"][skin]["joints"]
        .as_array()
        .map_or(0, Vec::len);
    let matrices: Vec<f32> = match asset.json["skins"][skin]
        .get("inverseBindMatrices")
        .and_then(Value::as_u64)
    {
        Some(index) => {
            let (layout, values) = accessors::read_f32(asset, index as usize)?;
            if layout.components != 16 || layout.count < joints {
                return Err(invalid(
                    &what,
                    "inverseBindMatrices is not one MAT4 per joint",
                ));
            }
            values
        }
        None => (0..joints)
            .flat_map(|_| {
                [
                    1., 0., 0., 0., 0., 1., 0., 0., 0., 0., 1., 0., 0., 0., 0., 1.,
                ]
            })
            .collect(),
    };
    let product: Vec<f32> = matrices.chunks(16).flat_map(|m| mat4_mul(m, d)).collect();
    let count = product.len() / 16;
    let view = push_view(asset, pack_floats(&product), None, None);
    let index = push_accessor(
        asset,
        json!({"bufferView": view, "componentType": FLOAT, "count": count, "type": "MAT4"}),
    );
    asset.json["skins"][skin]["inverseBindMatrices"] = json!(index);
    Ok(())
}

/// Column-major 4×4 product `a · b`.
fn mat4_mul(a: &[f32], b: &[f32; 16]) -> [f32; 16] {
    let mut out = [0f32; 16];
    for col in 0..4 {
        for row in 0..4 {
            out[col * 4 + row] = (0..4).map(|k| a[k * 4 + row] * b[col * 4 + k]).sum();
        }
    }
    out
}

/// The variants written for one model of the build.
/// `kiln.toml` `[models] serve = "quantized"`: the build opts into serving that variant at
/// each `.glb` model's own path, so a game that loads its models itself gets it without a
/// code change (`quantized` needs no decoder: KHR_mesh_quantization is read by three.js,
/// Babylon.js, PlayCanvas, …). Default: the original file.
pub fn served_variant(kiln_toml: Option<&str>) -> Result<Option<String>, String> {
    #[derive(serde::Deserialize, Default)]
    #[serde(default)]
    struct BuildConfig {
        models: Option<ModelsSettings>,
    }
    #[derive(serde::Deserialize, Default)]
    #[serde(default, deny_unknown_fields)]
    struct ModelsSettings {
        serve: Option<String>,
    }
    let Some(text) = kiln_toml else {
        return Ok(None);
    };
    let config: BuildConfig =
        toml::from_str(text).map_err(|e| format!("kiln.toml: {}", e.message()))?;
    match config.models.and_then(|m| m.serve).as_deref() {
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

impl GeometryError {
    pub fn is_permanent(&self) -> bool {
        false
    }
}

/// Optimises every model of the tree, writing the variants beside each one.
pub fn run(
    tree: &FileTree,
    inventory: &Inventory,
    options: &GeometryOptions,
    progress: &mut dyn FnMut(f64),
) -> Result<(FileTree, Vec<ModelOutcome>, GeometryReport), GeometryError> {
    let models: Vec<&InventoryEntry> = inventory
        .entries
        .iter()
        // Files another stage made from a model (VAT meshes) are not models of the game.
        .filter(|e| {
            matches!(e.kind, FileKind::Glb | FileKind::Gltf)
                && e.error.is_none()
                && e.used_by.is_none()
        })
        .collect();
    let mut tree = tree.clone();
    let mut outcomes = Vec::new();
    let mut report = GeometryReport::default();
    for (n, entry) in models.iter().enumerate() {
        report.models += 1;
        let io = |source| GeometryError::Io {
            path: entry.path.clone(),
            source,
        };
        let bytes = std::fs::read(tree.root.join(&entry.path)).map_err(io)?;
        let resources = TreeResources {
            tree: &tree,
            model: &entry.path,
        };
        // A panic is a bug in Kiln that this file found: that file fails, the build goes on.
        let optimized =
            match crate::gltf::guard_model(|| Ok(optimize_model(&bytes, &resources, options))) {
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
                let mut added = Vec::new();
                for (path, data) in [(&quantized, &model.quantized), (&meshopt, &model.meshopt)] {
                    if tree.contains(path) {
                        // The build already has a file by that name: leave both alone.
                        continue;
                    }
                    std::fs::write(tree.root.join(path), data).map_err(|source| {
                        GeometryError::Io {
                            path: path.clone(),
                            source,
                        }
                    })?;
                    added.push(TreeFile {
                        path: path.clone(),
                        size: data.len() as u64,
                    });
                }
                if added.len() < 2 {
                    outcomes.push(ModelOutcome::Kept(
                        entry.path.clone(),
                        "a file with a variant's name is already in the build".into(),
                    ));
                    report.kept_unchanged += 1;
                    continue;
                }
                report.optimized += 1;
                report.bytes_before += model.report.bytes_before;
                report.quantized_bytes += model.report.quantized_bytes;
                report.meshopt_bytes += model.report.meshopt_bytes;
                tree.files.extend(added);
                tree.files.sort_by(|a, b| a.path.cmp(&b.path));
                outcomes.push(ModelOutcome::Optimized(Box::new(ModelVariants {
                    source: entry.path.clone(),
                    quantized,
                    meshopt,
                    report: model.report,
                })));
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

    /// A unit quad (two triangles, non-indexed, with a duplicate vertex) with normals and UVs.
    fn quad() -> Vec<u8> {
        let positions: [[f32; 3]; 6] = [
            [0., 0., 0.],
            [2., 0., 0.],
            [2., 1., 0.],
            [0., 0., 0.],
            [2., 1., 0.],
            [0., 1., 0.],
        ];
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
        crate::gltf::write_glb(&json, Some(&bin))
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
}
