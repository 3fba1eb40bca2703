//! Deforming one mesh node many times, fast: the VAT baker's inner loop, and the animation
//! stage's verification (`Points::differences`: every point's distance between two poses).
//!
//! The same model as `Rig::points` (morph targets, then linear blend skinning over every
//! JOINTS_n/WEIGHTS_n set, or the node's world matrix for an unskinned mesh), evaluated in f32
//! with SIMD vectors, plus normals: morph normal deltas, then the blended skin matrix (as
//! three.js' `skinnormal_vertex` does), or the node's normal matrix, renormalised. Poses come
//! from the one evaluator (`Rig::pose_at`); `Rig::points` (f64) stays the reference that
//! measurements use, and the tests check the two agree.

use glam::{Affine3A, DMat4, DVec3, Mat3A, Vec3A};

use super::rig::{Pose, Rig};

/// What `Deformer::deform_with` keeps from one call to the next.
#[derive(Debug, Clone, Default)]
pub struct DeformScratch {
    /// The morph targets the pose weighs, with their weights.
    active: Vec<(usize, f32)>,
    /// The skin's joint matrices as f32 columns.
    joints: Vec<[Vec3A; 4]>,
    /// An unskinned node's last world matrix and the normal matrix computed from it.
    normal_matrix: Option<(DMat4, Mat3A)>,
}

/// One mesh node's vertices, flattened over its primitives, ready to deform.
#[derive(Debug, Clone)]
pub struct Deformer {
    pub node: usize,
    pub vertices: usize,
    positions: Vec<Vec3A>,
    normals: Vec<Vec3A>,
    /// Per morph target: position and normal deltas per vertex (normals empty when absent).
    targets: Vec<(Vec<Vec3A>, Vec<Vec3A>)>,
    /// `per_vertex` (joint slot, weight) pairs per vertex, zero weights included: a fixed
    /// width lets the blend run without branches (faster than skipping zeros).
    influences: Vec<(u32, f32)>,
    per_vertex: usize,
    skin: Option<usize>,
}

fn f32s(v: &[DVec3]) -> Vec<Vec3A> {
    v.iter().map(|p| p.as_vec3().into()).collect()
}

impl Deformer {
    /// The mesh of node `node` (which must have one). Primitives without normals get zero
    /// normals: callers that need them fill `Primitive::normals` first.
    pub fn new(rig: &Rig, node: usize) -> Self {
        let n = &rig.nodes[node];
        let mesh = &rig.meshes[n.mesh.expect("a mesh node")];
        let vertices = mesh.primitives.iter().map(|p| p.positions.len()).sum();
        let mut positions = Vec::with_capacity(vertices);
        let mut normals = Vec::with_capacity(vertices);
        let mut targets = vec![(Vec::new(), Vec::new()); mesh.targets];
        let per_vertex = mesh
            .primitives
            .iter()
            .map(|p| p.influences_per_vertex)
            .max()
            .unwrap_or(0);
        let mut influences = Vec::with_capacity(vertices * per_vertex);
        for p in &mesh.primitives {
            let count = p.positions.len();
            positions.extend(f32s(&p.positions));
            if p.normals.len() == count {
                normals.extend(f32s(&p.normals));
            } else {
                normals.extend(std::iter::repeat_n(Vec3A::ZERO, count));
            }
            for (t, (pos, nrm)) in targets.iter_mut().enumerate() {
                match p.targets.get(t) {
                    Some(d) => pos.extend(f32s(d)),
                    None => pos.extend(std::iter::repeat_n(Vec3A::ZERO, count)),
                }
                match p.normal_targets.get(t) {
                    Some(d) if d.len() == count => nrm.extend(f32s(d)),
                    _ => nrm.extend(std::iter::repeat_n(Vec3A::ZERO, count)),
                }
            }
            let per = p.influences_per_vertex;
            for v in 0..count {
                let own = &p.influences[v * per..(v + 1) * per];
                // A zero weight may name any slot (`Rig::read` checks weighted ones only):
                // it points at slot 0, which every skin has, since the blend reads them all.
                influences.extend(
                    own.iter()
                        .map(|&(slot, w)| (if w == 0.0 { 0 } else { slot as u32 }, w)),
                );
                influences.extend(std::iter::repeat_n((0, 0.0), per_vertex - per));
            }
        }
        // Targets whose normal deltas are all zero cost nothing per frame.
        for (_, nrm) in &mut targets {
            if nrm.iter().all(|d| *d == Vec3A::ZERO) {
                nrm.clear();
            }
        }
        Self {
            node,
            vertices,
            positions,
            normals,
            targets,
            influences,
            per_vertex,
            skin: n.skin,
        }
    }

    /// Model-space positions and normals of every vertex in `pose`, written into slices of
    /// `vertices` entries. Normals are not normalised (their direction is the result: the
    /// octahedral encoding and angle measurements don't need unit length, and skipping it is a
    /// quarter of the time); `unit` gives unit length where needed.
    pub fn deform(
        &self,
        rig: &Rig,
        pose: &Pose,
        positions: &mut [[f32; 3]],
        normals: &mut [[f32; 3]],
    ) {
        self.deform_with(rig, pose, positions, normals, &mut DeformScratch::default());
    }

    /// `deform` for one pose after another (a bake's frames): what each call works out
    /// besides the vertices is kept in `scratch` (no allocation per call, and an unskinned
    /// node's normal matrix is computed again only when its world matrix changed). The same
    /// results as `deform`.
    pub fn deform_with(
        &self,
        rig: &Rig,
        pose: &Pose,
        positions: &mut [[f32; 3]],
        normals: &mut [[f32; 3]],
        scratch: &mut DeformScratch,
    ) {
        self.active_targets_into(pose, &mut scratch.active);
        let active = &scratch.active;
        // Morphed rest position and normal of vertex `v` (targets in order, as three.js adds
        // them), computed where they are used: no copy of the mesh per call.
        let rest = |v: usize| {
            let mut n = self.normals[v];
            for &(t, w) in active {
                if let Some(d) = self.targets[t].1.get(v) {
                    n += *d * w;
                }
            }
            (self.morphed_position(v, active), n)
        };
        let outputs = positions.iter_mut().zip(normals.iter_mut()).enumerate();
        match self.skin {
            None => {
                let world = pose.world[self.node];
                let m = Affine3A::from_mat4(world.as_mat4());
                let normal_matrix = match scratch.normal_matrix {
                    Some((from, matrix)) if from == world => matrix,
                    _ => {
                        let matrix = Mat3A::from_mat4(world.inverse().transpose().as_mat4());
                        scratch.normal_matrix = Some((world, matrix));
                        matrix
                    }
                };
                for (v, (out_p, out_n)) in outputs {
                    let (p, n) = rest(v);
                    *out_p = m.transform_point3a(p).to_array();
                    *out_n = (normal_matrix * n).to_array();
                }
            }
            Some(s) => {
                joint_columns(rig, pose, s, &mut scratch.joints);
                let joints = &scratch.joints;
                let per = self.per_vertex.max(1);
                for ((v, (out_p, out_n)), influences) in
                    outputs.zip(self.influences.chunks_exact(per))
                {
                    let (p, n) = rest(v);
                    let m = blend_matrix(influences, joints);
                    *out_p = (m[0] * p.x + m[1] * p.y + m[2] * p.z + m[3]).to_array();
                    *out_n = (m[0] * n.x + m[1] * n.y + m[2] * n.z).to_array();
                }
            }
        }
    }

    /// `Points::differences` for this mesh: the distance of each vertex between the two
    /// poses into `out`; returns the bound on each result's distance from the f64 metric's.
    /// `(reach, target_reach, weight_sum)`: the largest morphed rest length, each target's
    /// largest delta, the largest sum of a vertex's |weights|.
    fn differences(
        &self,
        rig: &Rig,
        (source, output): (&Pose, &Pose),
        (reach, target_reach, weight_sum): (f64, &[f64], f64),
        out: &mut [f32],
        scratch: &mut DifferenceScratch,
    ) -> f64 {
        self.active_targets_into(source, &mut scratch.source_targets);
        let (ws, wo) = (&source.weights[self.node], &output.weights[self.node]);
        scratch.delta_targets.clear();
        // Largest |s - o| of a vertex: the weight differences times the targets' deltas.
        let mut morph_reach: f64 = 0.0;
        for (t, &delta_reach) in target_reach.iter().enumerate() {
            let a = ws.get(t).copied().unwrap_or(0.0);
            let b = wo.get(t).copied().unwrap_or(0.0);
            if a != b {
                scratch.delta_targets.push((t, (a - b) as f32));
                morph_reach += (a - b).abs() * delta_reach;
            }
        }
        let morphs = scratch.source_targets.len() + scratch.delta_targets.len();
        // Magnitudes: of the differences, of the output's matrices over the morph difference,
        // and of either pose's points (the f64 metric's own rounding).
        let (mut difference, mut morph, mut points) = (0f64, 0f64, 0f64);
        let mut weigh = |s: &DMat4, o: &DMat4| {
            let d = *s - *o;
            difference =
                difference.max(super::rig::matrix_norm(&d) * reach + d.w_axis.truncate().length());
            morph = morph.max(super::rig::matrix_norm(o) * morph_reach);
            for m in [s, o] {
                points =
                    points.max(super::rig::matrix_norm(m) * reach + m.w_axis.truncate().length());
            }
            d
        };
        let morphing = !scratch.delta_targets.is_empty();
        let (st, dt) = (&scratch.source_targets, &scratch.delta_targets);
        let morph_delta = |v: usize| {
            let mut dv = Vec3A::ZERO;
            for &(t, w) in dt {
                dv += self.targets[t].0[v] * w;
            }
            dv
        };
        match self.skin {
            None => {
                let (s, o) = (source.world[self.node], output.world[self.node]);
                let d = columns(&weigh(&s, &o));
                let o = columns(&o);
                for (v, e) in out.iter_mut().enumerate() {
                    let p = self.morphed_position(v, st);
                    let mut x = d[0] * p.x + d[1] * p.y + d[2] * p.z + d[3];
                    if morphing {
                        let dv = morph_delta(v);
                        x += o[0] * dv.x + o[1] * dv.y + o[2] * dv.z;
                    }
                    *e = x.length();
                }
            }
            Some(skin) => {
                let skin = &rig.skins[skin];
                scratch.differences.clear();
                scratch.output_joints.clear();
                for (&j, ibm) in skin.joints.iter().zip(&skin.inverse_binds) {
                    let (s, o) = (source.world[j] * *ibm, output.world[j] * *ibm);
                    scratch.differences.push(columns(&weigh(&s, &o)));
                    if morphing {
                        scratch.output_joints.push(columns(&o));
                    }
                }
                let (ds, os) = (&scratch.differences, &scratch.output_joints);
                let per = self.per_vertex.max(1);
                for ((v, e), influences) in out
                    .iter_mut()
                    .enumerate()
                    .zip(self.influences.chunks_exact(per))
                {
                    let p = self.morphed_position(v, st);
                    let d = blend_matrix(influences, ds);
                    let mut x = d[0] * p.x + d[1] * p.y + d[2] * p.z + d[3];
                    if morphing {
                        let dv = morph_delta(v);
                        let o = blend_matrix(influences, os);
                        x += o[0] * dv.x + o[1] * dv.y + o[2] * dv.z;
                    }
                    *e = x.length();
                }
            }
        }
        let f32_units = F32_DIFFERENCE_ULPS + morphs as f64 * f32::EPSILON as f64;
        weight_sum * (f32_units * (difference + morph) + F64_ERROR_ULPS * 2.0 * points)
    }

    /// Vertex `v`'s rest position with the `active` targets added in order (as three.js adds
    /// them).
    fn morphed_position(&self, v: usize, active: &[(usize, f32)]) -> Vec3A {
        let mut p = self.positions[v];
        for &(t, w) in active {
            p += self.targets[t].0[v] * w;
        }
        p
    }

    /// The morph targets `pose` weighs, with their weights, into `active`.
    fn active_targets_into(&self, pose: &Pose, active: &mut Vec<(usize, f32)>) {
        let weights = &pose.weights[self.node];
        active.clear();
        active.extend(
            (0..self.targets.len())
                .map(|t| (t, weights.get(t).copied().unwrap_or(0.0) as f32))
                .filter(|&(_, w)| w != 0.0),
        );
    }
}

/// The weighted sum of a vertex's joint matrices (columns).
#[inline(always)]
fn blend_matrix(influences: &[(u32, f32)], joints: &[[Vec3A; 4]]) -> [Vec3A; 4] {
    let mut m = [Vec3A::ZERO; 4];
    for &(slot, w) in influences {
        let j = &joints[slot as usize];
        m[0] += j[0] * w;
        m[1] += j[1] * w;
        m[2] += j[2] * w;
        m[3] += j[3] * w;
    }
    m
}

/// Skin `s`'s joint matrices in `pose` (world × inverse bind) as f32 columns, into `out`.
fn joint_columns(rig: &Rig, pose: &Pose, s: usize, out: &mut Vec<[Vec3A; 4]>) {
    let skin = &rig.skins[s];
    out.clear();
    out.extend(
        skin.joints
            .iter()
            .zip(&skin.inverse_binds)
            .map(|(&j, ibm)| columns(&(pose.world[j] * *ibm))),
    );
}

/// Every point `Rig::points` gives (vertices of every mesh node, then the shell), in f32 with
/// SIMD vectors: the animation stage's verification loop. Each evaluation also returns a bound
/// on its rounding error (see `evaluate`), so a caller can tell which results f32 cannot decide
/// and take those from `Rig::points` in f64.
#[derive(Debug, Clone)]
pub struct Points {
    deformers: Vec<Deformer>,
    /// Per deformer: the largest length of a morphed rest position (|p| + Σ|target delta|).
    reach: Vec<f32>,
    /// Per deformer and morph target: its largest position delta.
    target_reach: Vec<Vec<f64>>,
    /// Per deformer: the largest sum of a vertex's |skin weights| (1 for an unskinned mesh),
    /// what a blend of joint matrices can scale their magnitude by.
    weight_sum: Vec<f64>,
}

/// Rounding-error factor of `Points::differences`, in units of its magnitude bounds, plus
/// one unit per morph target weighed: a difference of f64 matrices rounded to f32 (half a
/// unit), blended over up to eight joints (nine), applied to a morphed point (four, and one per
/// target added to it), its length (two): at most about 16 roundings of the difference's
/// magnitude.
pub const F32_DIFFERENCE_ULPS: f64 = 16.0 * f32::EPSILON as f64;

/// Rounding-error factor of the f64 metric (`Rig::points` on both sides, then a distance), in
/// units of the points' magnitude: a few tens of f64 roundings.
pub const F64_ERROR_ULPS: f64 = 64.0 * f64::EPSILON;

/// What `Points::differences` works out per mesh besides the vertices, kept between calls.
#[derive(Debug, Clone, Default)]
pub struct DifferenceScratch {
    source_targets: Vec<(usize, f32)>,
    /// Per morph target weighed differently: the source's weight minus the output's.
    delta_targets: Vec<(usize, f32)>,
    /// Per joint: source minus output joint matrix, and the output's, as f32 columns.
    differences: Vec<[Vec3A; 4]>,
    output_joints: Vec<[Vec3A; 4]>,
}

impl Points {
    pub fn new(rig: &Rig) -> Self {
        let deformers: Vec<Deformer> = rig
            .mesh_nodes
            .iter()
            .map(|&n| Deformer::new(rig, n))
            .collect();
        let reach = deformers
            .iter()
            .map(|d| {
                (0..d.vertices)
                    .map(|v| {
                        d.positions[v].length()
                            + d.targets.iter().map(|(p, _)| p[v].length()).sum::<f32>()
                    })
                    .fold(0.0, f32::max)
            })
            .collect();
        let target_reach = deformers
            .iter()
            .map(|d| {
                d.targets
                    .iter()
                    .map(|(p, _)| p.iter().map(|x| x.length() as f64).fold(0.0, f64::max))
                    .collect()
            })
            .collect();
        let weight_sum = deformers
            .iter()
            .map(|d| match d.skin {
                None => 1.0,
                Some(_) => d
                    .influences
                    .chunks_exact(d.per_vertex.max(1))
                    .map(|i| i.iter().map(|&(_, w)| w.abs() as f64).sum::<f64>())
                    .fold(1.0, f64::max),
            })
            .collect();
        Self {
            deformers,
            reach,
            target_reach,
            weight_sum,
        }
    }

    /// How many points a pose has: every mesh node's vertices, then six per shell node.
    pub fn count(&self, rig: &Rig) -> usize {
        self.deformers.iter().map(|d| d.vertices).sum::<usize>() + 6 * rig.shell_nodes.len()
    }

    /// The distance of every point between `source` and `output` into `out` (appended), in
    /// `Rig::points`' order: the metric's errors of one sample. Vertices are evaluated as
    /// their difference, in f32 with SIMD vectors: `(S_j - O_j) s + O_j (s - o)` blended over
    /// the vertex's joints, where `S_j`, `O_j` are the two poses' joint matrices subtracted in
    /// f64, and `s - o` the morph targets' weight differences times their deltas, so rounding
    /// scales with the difference, not with the points' size (subtracting two f32 points lost
    /// their size's rounding). Shell points are measured in f64, as `Rig::points` gives them.
    /// Returns a bound on how far each result may lie from the f64 metric's
    /// (`measure`'s) value of the same point.
    pub fn differences(
        &self,
        rig: &Rig,
        (source, output): (&Pose, &Pose),
        out: &mut Vec<f32>,
        scratch: &mut DifferenceScratch,
    ) -> f64 {
        let mut bound: f64 = 0.0;
        for (i, d) in self.deformers.iter().enumerate() {
            let start = out.len();
            out.resize(start + d.vertices, 0.0);
            bound = bound.max(d.differences(
                rig,
                (source, output),
                (
                    self.reach[i] as f64,
                    &self.target_reach[i],
                    self.weight_sum[i],
                ),
                &mut out[start..],
                scratch,
            ));
        }
        let mut magnitude: f64 = 0.0;
        for &n in &rig.shell_nodes {
            let r = rig.reach[n];
            for w in [source.world[n], output.world[n]] {
                magnitude =
                    magnitude.max(super::rig::matrix_norm(&w) * r + w.w_axis.truncate().length());
            }
        }
        out.extend(
            rig.shell_points(source)
                .zip(rig.shell_points(output))
                .map(|(a, b)| a.distance(b) as f32),
        );
        // The shell's distances are the f64 metric's own; f32 rounds them once more.
        bound.max(magnitude * F64_ERROR_ULPS)
    }
}

/// `v` scaled to length 1 (zero stays zero).
pub fn unit(v: [f32; 3]) -> [f32; 3] {
    let v = Vec3A::from_array(v);
    let length_squared = v.length_squared();
    if length_squared > 0.0 {
        (v * length_squared.sqrt().recip()).to_array()
    } else {
        v.to_array()
    }
}

/// The four columns of an affine matrix (the last row is 0 0 0 1).
fn columns(m: &DMat4) -> [Vec3A; 4] {
    let m = m.as_mat4();
    [
        m.x_axis.truncate().into(),
        m.y_axis.truncate().into(),
        m.z_axis.truncate().into(),
        m.w_axis.truncate().into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Deformer` and the f64 `Rig::points` are one model: on a two-joint rig with a morph
    /// target they agree to f32 rounding.
    #[test]
    fn deformer_agrees_with_rig_points() {
        let asset = super::super::test_models::skinned_tube(8, 6);
        let rig = Rig::read(&asset, 0.015).unwrap();
        let clips = super::super::metric::read_clips(&asset).unwrap();
        let node = rig.mesh_nodes[0];
        let deformer = Deformer::new(&rig, node);
        let mut pose = rig.rest_pose();
        let v = deformer.vertices;
        let (mut p, mut n, mut reference) = (vec![[0.0; 3]; v], vec![[0.0; 3]; v], Vec::new());
        for (clip, i) in [0, 1]
            .into_iter()
            .flat_map(|c| (0..=20).map(move |i| (c, i)))
        {
            rig.pose_at(&clips[clip], i as f64 * 0.05, &mut pose);
            deformer.deform(&rig, &pose, &mut p, &mut n);
            rig.points(&pose, &mut reference);
            for (a, b) in p.iter().zip(&reference) {
                let a = glam::DVec3::from_array(a.map(f64::from));
                assert!((a - *b).length() < 1e-5, "{a} vs {b}");
            }
            // The tube's normals point away from its axis, bent with it.
            for (n, p) in n.iter().zip(&p) {
                let u = unit(*n);
                assert!((Vec3A::from_array(u).length() - 1.0).abs() < 1e-5);
                assert!(
                    u[0] * p[0] + u[2] * p[2] > -1e-3 || p[1] > 0.9,
                    "{u:?} at {p:?}"
                );
            }
        }
    }

    /// A bake's fast path (`Rig::pose_at_in_order`, `deform_with` keeping its scratch, the
    /// normal matrix reused while the world matrix stays) gives bit for bit what a fresh pose
    /// and `deform` give, frame after frame: times in order, jumping back, repeated, over
    /// both clips, for a skinned mesh and for an unskinned one under an animated node.
    #[test]
    fn baking_frame_after_frame_is_the_same_as_each_alone() {
        let skinned = super::super::test_models::skinned_tube(8, 6);
        let mut unskinned = skinned.clone();
        super::super::test_models::set(
            &mut unskinned,
            "/nodes",
            serde_json::json!([
                {"name": "root", "children": [1]},
                {"name": "tip", "translation": [0, 1, 0], "children": [2]},
                {"name": "tube", "mesh": 0}
            ]),
        );
        super::super::test_models::set(
            &mut unskinned,
            "/scenes",
            serde_json::json!([{"nodes": [0]}]),
        );
        let mut checked = 0;
        for asset in [&skinned, &unskinned] {
            let rig = Rig::read(asset, 0.015).unwrap();
            let clips = super::super::metric::read_clips(asset).unwrap();
            let deformer = Deformer::new(&rig, rig.mesh_nodes[0]);
            let v = deformer.vertices;
            let (mut pose, mut fresh) = (rig.rest_pose(), rig.rest_pose());
            let (mut cursors, mut scratch) = (Vec::new(), DeformScratch::default());
            let (mut p, mut n) = (vec![[0.0; 3]; v], vec![[0.0; 3]; v]);
            let (mut p_fresh, mut n_fresh) = (vec![[0.0; 3]; v], vec![[0.0; 3]; v]);
            let times = (0..=24)
                .map(|i| i as f64 / 24.0)
                .chain([0.5, 0.5, 0.1, 1.0, 0.0]);
            for clip in &clips {
                cursors.clear();
                for t in times.clone() {
                    rig.pose_at_in_order(clip, t, &mut pose, &mut cursors);
                    deformer.deform_with(&rig, &pose, &mut p, &mut n, &mut scratch);
                    rig.pose_at(clip, t, &mut fresh);
                    deformer.deform(&rig, &fresh, &mut p_fresh, &mut n_fresh);
                    assert_eq!(pose.world, fresh.world, "at {t}");
                    assert_eq!((&p, &n), (&p_fresh, &n_fresh), "at {t}");
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 2 * 2 * 30);
    }
}
