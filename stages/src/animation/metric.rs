//! The error of an animation against its source, where players see it: the distance between
//! source and compressed positions of every vertex (skinned and morphed through the whole
//! hierarchy) and of virtual vertices on a shell around nodes that move no vertex (ACL's
//! approach), in model space, sampled at 4× the source key rate over the whole clip.

use glam::DVec3;
use serde::Serialize;
use serde_json::Value;

use super::clip::{Clip, Interpolation, read_clip};
use super::deform::{DifferenceScratch, Points};
use super::rig::{Pose, Rig};
use crate::gltf::{Asset, GltfError};

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MetricOptions {
    /// Samples per source key interval (4: between keys too).
    pub rate_multiplier: f64,
    /// Shell radius for virtual vertices, relative to the rest bounding-box diagonal
    /// (0.015: 3 cm on a 2 m character).
    pub shell: f64,
}

impl Default for MetricOptions {
    fn default() -> Self {
        Self {
            rate_multiplier: 4.0,
            shell: 0.015,
        }
    }
}

/// The times a clip is measured at: every source key time, and a uniform grid at
/// `multiplier` × the clip's highest key rate (CUBICSPLINE keys count four times: their
/// curves bend between keys) from its first to its last key.
pub fn sample_times(clip: &Clip, multiplier: f64) -> Vec<f64> {
    let (start, end) = clip.range();
    let mut rate: f64 = 0.0;
    let mut times: Vec<f64> = vec![start, end];
    for c in &clip.channels {
        times.extend(c.times.iter().map(|&t| t as f64));
        let (first, last) = (c.times[0] as f64, *c.times.last().unwrap() as f64);
        if c.times.len() > 1 && last > first {
            let per_key = if c.interpolation == Interpolation::CubicSpline {
                4.0
            } else {
                1.0
            };
            rate = rate.max((c.times.len() - 1) as f64 * per_key / (last - first));
        }
    }
    if rate > 0.0 && end > start {
        let step = 1.0 / (rate * multiplier);
        let n = ((end - start) / step).ceil() as usize;
        times.extend((0..=n).map(|i| (start + i as f64 * step).min(end)));
    }
    times.sort_by(f64::total_cmp);
    times.dedup_by(|a, b| (*a - *b).abs() < 1e-9);
    times
}

/// One clip's error, in model units and relative to the model's bounding-box diagonal.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ClipError {
    pub index: usize,
    pub name: String,
    pub samples: usize,
    pub points: usize,
    pub max: f64,
    pub p99: f64,
    pub mean: f64,
    pub max_relative: f64,
    pub p99_relative: f64,
    /// Share of (sample, point) pairs whose error is at most the tolerance.
    pub within_share: f64,
    pub duration_source: f64,
    pub duration_output: f64,
}

/// The error of `compressed` against `source` at `times`.
pub fn clip_error(
    rig: &Rig,
    source: &Clip,
    compressed: &Clip,
    times: &[f64],
    tolerance: f64,
) -> ClipError {
    let (_, errors) = measure(rig, source, compressed, times);
    let points = errors.len() / times.len().max(1);
    summarise(
        rig,
        source,
        compressed,
        times.len(),
        points,
        errors,
        tolerance,
    )
}

/// The exact metric: per sample, the largest error, and every (sample, point) error, in f64.
pub fn measure(rig: &Rig, source: &Clip, output: &Clip, times: &[f64]) -> (Vec<f64>, Vec<f32>) {
    let mut a = rig.rest_pose();
    let mut b = a.clone();
    let (mut pa, mut pb) = (Vec::new(), Vec::new());
    let mut per_sample = Vec::with_capacity(times.len());
    let mut all = Vec::new();
    for &t in times {
        let start = all.len();
        exact_sample(
            rig,
            (source, output),
            t,
            (&mut a, &mut b),
            (&mut pa, &mut pb),
            &mut all,
        );
        per_sample.push(all[start..].iter().copied().fold(0f32, f32::max) as f64);
    }
    (per_sample, all)
}

/// Appends the errors of every point of `output` against `source` at time `t`, in f64.
fn exact_sample(
    rig: &Rig,
    (source, output): (&Clip, &Clip),
    t: f64,
    (a, b): (&mut Pose, &mut Pose),
    (pa, pb): (&mut Vec<DVec3>, &mut Vec<DVec3>),
    all: &mut Vec<f32>,
) {
    rig.pose_at(source, t, a);
    rig.points(a, pa);
    rig.pose_at(output, t, b);
    rig.points(b, pb);
    all.extend(pa.iter().zip(pb.iter()).map(|(x, y)| x.distance(*y) as f32));
}

/// The animation stage's verification: the same metric as `measure`, evaluated in f32 with
/// SIMD vectors as each point's difference between the two poses (`deform::Points::
/// differences`), except at the samples whose largest error is too close to the threshold for
/// f32 to decide, which are measured again in f64. Decisions against the threshold are
/// therefore `measure`'s.
pub struct Verifier<'a> {
    rig: &'a Rig,
    source: &'a Clip,
    times: &'a [f64],
    points: Points,
}

impl<'a> Verifier<'a> {
    pub fn new(rig: &'a Rig, source: &'a Clip, times: &'a [f64]) -> Self {
        Self {
            rig,
            source,
            times,
            points: Points::new(rig),
        }
    }

    /// Per sample, the largest error, and every (sample, point) error of `output`. A sample
    /// whose f32 maximum lies within its rounding bound of `threshold` is measured in f64.
    pub fn measure(&self, output: &Clip, threshold: f64) -> (Vec<f64>, Vec<f32>) {
        let rig = self.rig;
        let (mut a, mut b) = (rig.rest_pose(), rig.rest_pose());
        let (mut cursors_a, mut cursors_b) = (Vec::new(), Vec::new());
        let mut scratch = DifferenceScratch::default();
        let (mut exact_a, mut exact_b) = (Vec::new(), Vec::new());
        let mut per_sample = Vec::with_capacity(self.times.len());
        // Every (sample, point) error, room made once (growing it copied millions of them).
        let mut all = Vec::with_capacity(self.times.len() * self.points.count(rig));
        for &t in self.times {
            rig.pose_at_in_order(self.source, t, &mut a, &mut cursors_a);
            rig.pose_at_in_order(output, t, &mut b, &mut cursors_b);
            let start = all.len();
            let bound = self
                .points
                .differences(rig, (&a, &b), &mut all, &mut scratch);
            let worst = all[start..].iter().copied().fold(0f32, f32::max) as f64;
            if (worst - threshold).abs() <= bound {
                all.truncate(start);
                exact_sample(
                    rig,
                    (self.source, output),
                    t,
                    (&mut a, &mut b),
                    (&mut exact_a, &mut exact_b),
                    &mut all,
                );
                per_sample.push(all[start..].iter().copied().fold(0f32, f32::max) as f64);
            } else {
                per_sample.push(worst);
            }
        }
        (per_sample, all)
    }
}

/// Statistics of every (sample, point) error of one clip.
pub fn summarise(
    rig: &Rig,
    source: &Clip,
    compressed: &Clip,
    samples: usize,
    points: usize,
    errors: Vec<f32>,
    tolerance: f64,
) -> ClipError {
    let n = errors.len().max(1);
    let (max, sum, within, p99) = statistics(&errors, tolerance);
    let mean = sum / n as f64;
    let within = within as f64 / n as f64;
    let d = rig.diagonal.max(f64::MIN_POSITIVE);
    ClipError {
        index: 0,
        name: source.name.clone(),
        samples,
        points,
        max,
        p99,
        mean,
        max_relative: max / d,
        p99_relative: p99 / d,
        within_share: if errors.is_empty() { 1.0 } else { within },
        duration_source: source.range().1,
        duration_output: compressed.range().1,
    }
}

/// The largest value, the sum, how many are at most `tolerance`, and the 99th percentile
/// (the `ceil(0.99 n)`-th smallest, as `select_nth_unstable_by` finds it) of millions of
/// errors, in one pass and without reordering them: the bit patterns of non-negative floats
/// are ordered as their values, so a histogram of their top 14 bits (exponent and 5 mantissa
/// bits) finds the bin holding the percentile, and only that bin's values are selected among.
/// A negative or NaN value falls back to plain folds and a full selection.
fn statistics(values: &[f32], tolerance: f64) -> (f64, f64, usize, f64) {
    const SHIFT: u32 = 18;
    if values.is_empty() {
        return (0.0, 0.0, 0, 0.0);
    }
    let k = ((values.len() as f64 * 0.99).ceil() as usize).clamp(1, values.len()) - 1;
    const BINS: usize = (0x7f80_0000 >> SHIFT) + 1;
    // Four histograms, one per lane: neighbouring errors often share a bin, and one array
    // would wait on its own last increment.
    let mut lanes = vec![[0u32; 4]; BINS];
    let (mut max_bits, mut sum, mut within) = (0u32, 0f64, 0usize);
    let mut ordered = true;
    for (i, &e) in values.iter().enumerate() {
        let bits = e.to_bits();
        ordered &= bits <= 0x7f80_0000;
        lanes[(bits.min(0x7f80_0000) >> SHIFT) as usize][i & 3] += 1;
        max_bits = max_bits.max(bits);
        sum += e as f64;
        within += (e as f64 <= tolerance) as usize;
    }
    let counts: Vec<u32> = lanes.iter().map(|l| l.iter().sum()).collect();
    if !ordered {
        let max = values.iter().copied().fold(0f32, f32::max) as f64;
        let mut all = values.to_vec();
        let p99 = *all.select_nth_unstable_by(k, f32::total_cmp).1 as f64;
        return (max, sum, within, p99);
    }
    let (mut below, mut target) = (0usize, 0u32);
    for (b, &c) in counts.iter().enumerate() {
        if below + c as usize > k {
            target = b as u32;
            break;
        }
        below += c as usize;
    }
    let mut members: Vec<f32> = values
        .iter()
        .copied()
        .filter(|e| e.to_bits() >> SHIFT == target)
        .collect();
    let p99 = *members.select_nth_unstable_by(k - below, f32::total_cmp).1;
    (f32::from_bits(max_bits) as f64, sum, within, p99 as f64)
}

/// Morph target count of mesh `m` of `asset`.
pub fn morph_targets(asset: &Asset, m: usize) -> Option<usize> {
    let mesh = asset.array("meshes").get(m)?;
    mesh["primitives"]
        .as_array()?
        .iter()
        .map(|p| {
            p.get("targets")
                .and_then(Value::as_array)
                .map_or(0, Vec::len)
        })
        .max()
        .filter(|&n| n > 0)
}

/// Every clip of `asset`.
pub fn read_clips(asset: &Asset) -> Result<Vec<Clip>, GltfError> {
    (0..asset.array("animations").len())
        .map(|i| read_clip(asset, i, &|m| morph_targets(asset, m)))
        .collect()
}

/// Which source node each node of `output` is (`None`: no counterpart). Kiln's outputs keep
/// the source's nodes at the same indices (the geometry stage appends child nodes that carry
/// a moved mesh: those count as their parent). Other tools' outputs (gltfpack reorders and
/// adds nodes) are matched by names that are unique in both files.
pub fn node_map(source: &Asset, output: &Asset) -> Vec<Option<usize>> {
    let name = |a: &Asset, n: usize| {
        a.array("nodes")[n]
            .get("name")
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let (ns, no) = (source.array("nodes").len(), output.array("nodes").len());
    let parents = parents(output);
    // Same index, same name, and every animated node at its source's rest transform.
    let animated: std::collections::BTreeSet<usize> = output
        .array("animations")
        .iter()
        .flat_map(|a| a["channels"].as_array().into_iter().flatten())
        .filter(|c| c["target"]["path"] != "weights")
        .filter_map(|c| {
            c.pointer("/target/node")
                .and_then(Value::as_u64)
                .map(|n| n as usize)
        })
        .collect();
    let same_rest = |s: usize, o: usize| rest_key(source, s) == rest_key(output, o);
    let identity = no >= ns
        && (0..ns).all(|i| name(source, i) == name(output, i))
        && animated.iter().all(|&n| n >= ns || same_rest(n, n));
    if identity {
        return (0..no)
            .map(|mut n| {
                for _ in 0..no {
                    if n < ns {
                        return Some(n);
                    }
                    n = parents[n]?;
                }
                None
            })
            .collect();
    }
    // Otherwise: the one source node with the same name (or both unnamed) and the same rest
    // transform; for a mesh node, the one source node with that many morph targets.
    (0..no)
        .map(|o| {
            let candidates: Vec<usize> = (0..ns)
                .filter(|&s| name(source, s) == name(output, o))
                .collect();
            let by_name = match candidates.as_slice() {
                [only] if name(output, o).is_some() => Some(*only),
                _ => None,
            };
            by_name
                .or_else(|| {
                    let exact: Vec<usize> = candidates
                        .iter()
                        .copied()
                        .filter(|&s| same_rest(s, o))
                        .collect();
                    (exact.len() == 1).then(|| exact[0])
                })
                .or_else(|| {
                    let mesh = output.array("nodes")[o]
                        .get("mesh")
                        .and_then(Value::as_u64)?;
                    let targets = morph_targets(output, mesh as usize)?;
                    let with: Vec<usize> = (0..ns)
                        .filter(|&s| {
                            source.array("nodes")[s]
                                .get("mesh")
                                .and_then(Value::as_u64)
                                .and_then(|m| morph_targets(source, m as usize))
                                == Some(targets)
                        })
                        .collect();
                    (with.len() == 1).then(|| with[0])
                })
        })
        .collect()
}

/// A node's rest transform, rounded so float noise of a rewrite doesn't count.
fn rest_key(asset: &Asset, n: usize) -> Vec<i64> {
    let node = &asset.array("nodes")[n];
    let mut out = Vec::new();
    for (key, default) in [
        ("translation", &[0.0, 0.0, 0.0][..]),
        ("rotation", &[0.0, 0.0, 0.0, 1.0][..]),
        ("scale", &[1.0, 1.0, 1.0][..]),
    ] {
        let values: Vec<f64> = match node.get(key).and_then(Value::as_array) {
            Some(a) => a.iter().map(|v| v.as_f64().unwrap_or(0.0)).collect(),
            None => default.to_vec(),
        };
        out.extend(values.iter().map(|v| (v * 1e4).round() as i64));
    }
    if let Some(m) = node.get("matrix").and_then(Value::as_array) {
        out.extend(
            m.iter()
                .map(|v| (v.as_f64().unwrap_or(0.0) * 1e4).round() as i64),
        );
    }
    out
}

fn parents(asset: &Asset) -> Vec<Option<usize>> {
    let count = asset.array("nodes").len();
    let mut out = vec![None; count];
    for (p, node) in asset.array("nodes").iter().enumerate() {
        for c in node
            .get("children")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(c) = c.as_u64().map(|c| c as usize).filter(|&c| c < count) {
                out[c] = Some(p);
            }
        }
    }
    out
}

/// A file's clips with their targets mapped onto the source's nodes by `map` (`node_map`).
pub fn read_clips_onto(asset: &Asset, map: &[Option<usize>]) -> Result<Vec<Clip>, GltfError> {
    let mut clips = read_clips(asset)?;
    for clip in &mut clips {
        for c in &mut clip.channels {
            c.node = map.get(c.node).copied().flatten().ok_or_else(|| {
                crate::gltf::invalid(
                    format!("nodes[{}]", c.node),
                    "is animated but matches no node of the source (by index or unique name)",
                )
            })?;
        }
    }
    Ok(clips)
}

/// Measures every clip of `compressed` against the clip of `source` with the same index.
/// `tolerance` is in model units.
pub fn compare(
    source: &Asset,
    compressed: &Asset,
    options: &MetricOptions,
    tolerance: Option<f64>,
    relative_tolerance: f64,
) -> Result<(Rig, Vec<ClipError>), GltfError> {
    let rig = Rig::read(source, options.shell)?;
    let tolerance = tolerance.unwrap_or(relative_tolerance * rig.diagonal);
    let source_clips = read_clips(source)?;
    let output_clips = read_clips_onto(compressed, &node_map(source, compressed))?;
    if source_clips.len() != output_clips.len() {
        return Err(crate::gltf::invalid(
            "animations",
            format!(
                "source has {} clips, the other file {}",
                source_clips.len(),
                output_clips.len()
            ),
        ));
    }
    let mut out = Vec::new();
    for (i, (s, c)) in source_clips.iter().zip(&output_clips).enumerate() {
        let times = sample_times(s, options.rate_multiplier);
        let mut e = clip_error(&rig, s, c, &times, tolerance);
        e.index = i;
        out.push(e);
    }
    Ok((rig, out))
}

/// Largest distance between two point sets of equal length.
pub fn max_distance(a: &[DVec3], b: &[DVec3]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| x.distance(*y))
        .fold(0.0, f64::max)
}

/// Where each source vertex is in a delivered file: `[mesh][primitive][source vertex]` is the
/// delivered vertex of the same primitive (`u32::MAX`: no triangle draws it; not measured).
/// The geometry stage welds and reorders vertices, and records this as it does.
pub type VertexMap = Vec<Vec<Vec<u32>>>;

/// The error of a delivered file (its own vertices, weights, morph targets, node and skin
/// transforms, and animation) against its source, over every source clip's samples.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct DeliveredError {
    pub clips: usize,
    /// (sample, point) pairs measured.
    pub measured: usize,
    /// In model units.
    pub max: f64,
    pub max_relative: f64,
    /// Share of pairs within the tolerance.
    pub within_share: f64,
}

/// Measures `delivered` against `source` with the metric's points: every drawn vertex (by
/// `map`) and the shell points of the source's shell nodes, at the source clips' sample
/// times, each clip of `delivered` played on the delivered file's own rig. Kiln's outputs keep
/// the source's nodes, meshes and primitives at the same indices (the geometry stage appends
/// child nodes that carry a moved mesh).
pub fn delivered_error(
    source: &Asset,
    delivered: &Asset,
    map: &VertexMap,
    options: &MetricOptions,
    tolerance: f64,
) -> Result<DeliveredError, GltfError> {
    let rig = Rig::read(source, options.shell)?;
    let out = Rig::read(delivered, options.shell)?;
    let source_clips = read_clips(source)?;
    let delivered_clips = read_clips(delivered)?;
    if source_clips.len() != delivered_clips.len() {
        return Err(crate::gltf::invalid(
            "animations",
            format!(
                "source has {} clips, the delivered file {}",
                source_clips.len(),
                delivered_clips.len()
            ),
        ));
    }
    let pairs = point_pairs(&rig, &out, map)?;
    let (mut ps, mut pd) = (rig.rest_pose(), out.rest_pose());
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let (mut max, mut measured, mut within) = (0f64, 0usize, 0usize);
    let mut check = |e: f64| {
        max = max.max(e);
        measured += 1;
        within += usize::from(e <= tolerance);
    };
    for (s, d) in source_clips.iter().zip(&delivered_clips) {
        for t in sample_times(s, options.rate_multiplier) {
            rig.pose_at(s, t, &mut ps);
            rig.points(&ps, &mut a);
            // `Rig::points` ends with six shell points per shell node.
            let shell_start = a.len() - 6 * rig.shell_nodes.len();
            out.pose_at(d, t, &mut pd);
            out.points(&pd, &mut b);
            for &(i, j) in &pairs {
                check(a[i].distance(b[j]));
            }
            // Shell points of the source's shell nodes, on the delivered pose.
            for (k, &n) in rig.shell_nodes.iter().enumerate() {
                let r = rig.reach[n];
                let w = pd.world[n];
                for (x, axis) in [DVec3::X, DVec3::Y, DVec3::Z].into_iter().enumerate() {
                    let at = shell_start + 6 * k + 2 * x;
                    check(a[at].distance(w.transform_point3(axis * r)));
                    check(a[at + 1].distance(w.transform_point3(-axis * r)));
                }
            }
        }
    }
    let d = rig.diagonal.max(f64::MIN_POSITIVE);
    Ok(DeliveredError {
        clips: source_clips.len(),
        measured,
        max,
        max_relative: max / d,
        within_share: if measured == 0 {
            1.0
        } else {
            within as f64 / measured as f64
        },
    })
}

/// The first point of each mesh node, in `Rig::points` order.
fn point_offsets(rig: &Rig) -> Vec<(usize, usize)> {
    let mut at = 0;
    rig.mesh_nodes
        .iter()
        .map(|&n| {
            let start = at;
            at += rig.meshes[rig.nodes[n].mesh.unwrap()]
                .primitives
                .iter()
                .map(|p| p.positions.len())
                .sum::<usize>();
            (n, start)
        })
        .collect()
}

/// (source point, delivered point) for every source vertex that is drawn.
fn point_pairs(rig: &Rig, out: &Rig, map: &VertexMap) -> Result<Vec<(usize, usize)>, GltfError> {
    let delivered = point_offsets(out);
    let source_nodes = rig.nodes.len();
    let mut pairs = Vec::new();
    for (n, start) in point_offsets(rig) {
        let m = rig.nodes[n].mesh.unwrap();
        // The node itself, or the child appended to carry its moved mesh.
        let carrier = delivered.iter().find(|&&(d, _)| {
            out.nodes[d].mesh == Some(m)
                && (d == n || (d >= source_nodes && out.nodes[d].parent == Some(n)))
        });
        let Some(&(_, delivered_start)) = carrier else {
            return Err(crate::gltf::invalid(
                format!("nodes[{n}]"),
                format!("mesh {m} is not drawn there in the delivered file"),
            ));
        };
        let (mut base, mut delivered_base) = (start, delivered_start);
        let out_mesh = &out.meshes[m];
        for (p, primitive) in rig.meshes[m].primitives.iter().enumerate() {
            let remap = map.get(m).and_then(|mesh| mesh.get(p));
            let delivered_len = out_mesh.primitives.get(p).map_or(0, |q| q.positions.len());
            match remap {
                Some(remap) if remap.len() == primitive.positions.len() => {
                    for (v, &o) in remap.iter().enumerate() {
                        if o == u32::MAX {
                            continue;
                        }
                        if o as usize >= delivered_len {
                            return Err(crate::gltf::invalid(
                                format!("meshes[{m}].primitives[{p}]"),
                                format!(
                                    "vertex {v} maps to {o}, beyond the delivered {delivered_len}"
                                ),
                            ));
                        }
                        pairs.push((base + v, delivered_base + o as usize));
                    }
                }
                _ => {
                    return Err(crate::gltf::invalid(
                        format!("meshes[{m}].primitives[{p}]"),
                        "no vertex map for this primitive",
                    ));
                }
            }
            base += primitive.positions.len();
            delivered_base += delivered_len;
        }
    }
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::animation::test_models::skinned_tube;

    /// The one-pass statistics are what folds and a sort give: spread, clustered, tied, all
    /// zero, one value, the largest at the end, and with a NaN (the fallback).
    #[test]
    fn statistics_are_what_sorting_gives() {
        let spread: Vec<f32> = (0..10_000u32)
            .map(|i| ((i * 7919) % 10_007) as f32 * 1e-7)
            .collect();
        let mut clustered: Vec<f32> = (0..5_000u32)
            .map(|i| 1e-5 + (i % 13) as f32 * 1e-12)
            .collect();
        clustered.push(3.0);
        let cases = [
            spread,
            clustered,
            vec![0.0; 100],
            vec![2.5],
            vec![1.0, 1.0, 2.0, 0.5],
            vec![0.5, f32::NAN, 0.25, 1.0],
        ];
        for values in &cases {
            let mut sorted = values.clone();
            sorted.sort_by(f32::total_cmp);
            let k = ((values.len() as f64 * 0.99).ceil() as usize).clamp(1, values.len()) - 1;
            let (max, sum, within, p99) = statistics(values, 1e-3);
            assert_eq!(p99.to_bits(), (sorted[k] as f64).to_bits(), "{values:?}");
            assert_eq!(max, values.iter().copied().fold(0f32, f32::max) as f64);
            assert_eq!(
                sum.to_bits(),
                values.iter().map(|&e| e as f64).sum::<f64>().to_bits()
            );
            assert_eq!(within, values.iter().filter(|&&e| e as f64 <= 1e-3).count());
        }
        assert_eq!(statistics(&[], 1.0), (0.0, 0.0, 0, 0.0));
    }

    /// The stage's f32 verification decides every sample as the f64 metric does, even with
    /// the threshold set at a sample's own error (where f32 cannot tell and f64 is used).
    #[test]
    fn verifier_decides_as_the_exact_metric_does() {
        let asset = skinned_tube(12, 9);
        let rig = Rig::read(&asset, MetricOptions::default().shell).unwrap();
        let clips = read_clips(&asset).unwrap();
        let mut decided = 0;
        for source in &clips {
            // An output that differs from the source at every key: values scaled by 0.9.
            let mut output = source.clone();
            for c in &mut output.channels {
                c.values.iter_mut().for_each(|v| *v *= 0.9);
            }
            let times = sample_times(source, 4.0);
            let (exact, exact_all) = measure(&rig, source, &output, &times);
            let verifier = Verifier::new(&rig, source, &times);
            let mut thresholds: Vec<f64> = exact.clone();
            thresholds.extend([0.0, exact.iter().sum::<f64>() / exact.len() as f64]);
            for threshold in thresholds {
                let (fast, fast_all) = verifier.measure(&output, threshold);
                assert_eq!(fast.len(), exact.len());
                assert_eq!(fast_all.len(), exact_all.len());
                for (s, (f, e)) in fast.iter().zip(&exact).enumerate() {
                    assert_eq!(
                        *f > threshold,
                        *e > threshold,
                        "{} sample {s}: f32 {f:e}, f64 {e:e}, threshold {threshold:e}",
                        source.name
                    );
                    assert!((f - e).abs() <= 1e-6 * rig.diagonal, "{f:e} vs {e:e}");
                    decided += 1;
                }
            }
        }
        assert!(decided > 100, "{decided} decisions checked");
    }
}
