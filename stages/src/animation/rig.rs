//! A model's scene as the animation evaluator needs it: node hierarchy and rest transforms,
//! skins (joints, inverse bind matrices), mesh vertices with their joint influences (every
//! JOINTS_n/WEIGHTS_n set) and morph target position deltas. From it, a pose at a time of a
//! clip, and the model-space positions of every vertex (skinned, morphed) in that pose.

use glam::{DMat4, DQuat, DVec3};
use serde_json::Value;

use super::clip::{Clip, Path};
use crate::gltf::accessors;
use crate::gltf::{Asset, GltfError, invalid};

/// A node's local transform.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Local {
    pub translation: DVec3,
    pub rotation: DQuat,
    pub scale: DVec3,
}

impl Local {
    pub fn matrix(&self) -> DMat4 {
        DMat4::from_scale_rotation_translation(self.scale, self.rotation, self.translation)
    }

    /// This transform with one property (not `weights`) set from sampled values. Rotations
    /// are not renormalised: three.js uses keys as stored.
    pub fn with(&self, path: Path, v: &[f64]) -> Local {
        let mut out = *self;
        match path {
            Path::Translation => out.translation = DVec3::new(v[0], v[1], v[2]),
            Path::Scale => out.scale = DVec3::new(v[0], v[1], v[2]),
            Path::Rotation => out.rotation = DQuat::from_xyzw(v[0], v[1], v[2], v[3]),
            Path::Weights => {}
        }
        out
    }
}

#[derive(Debug, Clone)]
pub struct Node {
    pub parent: Option<usize>,
    pub rest: Local,
    /// A node given by `matrix` can't be animated (glTF): its matrix is used as is.
    pub matrix: Option<DMat4>,
    pub mesh: Option<usize>,
    pub skin: Option<usize>,
    /// Morph weights at rest (the node's, else the mesh's, else zeros).
    pub weights: Vec<f64>,
}

#[derive(Debug, Clone)]
pub struct Primitive {
    pub positions: Vec<DVec3>,
    /// Per vertex normal (empty when the primitive has no NORMAL).
    pub normals: Vec<DVec3>,
    /// Per target, per vertex position delta.
    pub targets: Vec<Vec<DVec3>>,
    /// Per target, per vertex normal delta (empty when the target has no NORMAL).
    pub normal_targets: Vec<Vec<DVec3>>,
    /// Per vertex, `influences_per_vertex` (joint slot, weight) pairs; weight 0 unused.
    pub influences: Vec<(u16, f32)>,
    pub influences_per_vertex: usize,
}

#[derive(Debug, Clone, Default)]
pub struct Mesh {
    pub primitives: Vec<Primitive>,
    pub targets: usize,
}

#[derive(Debug, Clone)]
pub struct Skin {
    pub joints: Vec<usize>,
    pub inverse_binds: Vec<DMat4>,
}

#[derive(Debug, Clone)]
pub struct Rig {
    pub nodes: Vec<Node>,
    /// Nodes of the scene, every parent before its children.
    pub order: Vec<usize>,
    pub meshes: Vec<Mesh>,
    pub skins: Vec<Skin>,
    /// Mesh nodes of the scene in index order: the canonical vertex order is these nodes,
    /// their primitives in order, and each primitive's vertices in order.
    pub mesh_nodes: Vec<usize>,
    /// Scene nodes that move no vertex and have no descendant that does (end joints,
    /// attachment points): they are measured by virtual vertices on a shell around them.
    pub shell_nodes: Vec<usize>,
    /// Per node, the largest distance (in the node's local units) from its origin to a point
    /// it moves: influenced vertices, its own mesh, or its shell.
    pub reach: Vec<f64>,
    /// Model-space bounding-box diagonal at rest.
    pub diagonal: f64,
    /// Shell radius in model units.
    pub shell: f64,
}

/// A pose: local transforms and morph weights of every node, and world matrices.
#[derive(Debug, Clone)]
pub struct Pose {
    pub local: Vec<Local>,
    pub weights: Vec<Vec<f64>>,
    pub world: Vec<DMat4>,
}

/// `node[key]` as exactly `count` finite numbers (`None` when absent).
fn numbers(
    node: &Value,
    key: &str,
    count: usize,
    what: &str,
) -> Result<Option<Vec<f64>>, GltfError> {
    let Some(v) = node.get(key) else {
        return Ok(None);
    };
    let a: Vec<f64> = v
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_f64)
        .collect();
    if a.len() != count || a.iter().any(|x| !x.is_finite()) {
        return Err(invalid(
            what,
            format!("{key} is not {count} finite numbers"),
        ));
    }
    Ok(Some(a))
}

fn triple(node: &Value, key: &str, default: DVec3, what: &str) -> Result<DVec3, GltfError> {
    Ok(numbers(node, key, 3, what)?.map_or(default, |a| DVec3::new(a[0], a[1], a[2])))
}

fn read_node(node: &Value, what: &str) -> Result<Node, GltfError> {
    let index = |key: &str| node.get(key).and_then(Value::as_u64).map(|v| v as usize);
    let matrix = numbers(node, "matrix", 16, what)?.map(|v| DMat4::from_cols_slice(&v));
    let rotation = numbers(node, "rotation", 4, what)?.map_or(DQuat::IDENTITY, |a| {
        DQuat::from_xyzw(a[0], a[1], a[2], a[3])
    });
    let weights = node
        .get("weights")
        .and_then(Value::as_array)
        .map(|w| w.iter().map(|x| x.as_f64().unwrap_or(0.0)).collect())
        .unwrap_or_default();
    Ok(Node {
        parent: None,
        rest: Local {
            translation: triple(node, "translation", DVec3::ZERO, what)?,
            rotation,
            scale: triple(node, "scale", DVec3::ONE, what)?,
        },
        matrix,
        mesh: index("mesh"),
        skin: index("skin"),
        weights,
    })
}

fn vec3s(values: &[f32]) -> Vec<DVec3> {
    values
        .chunks_exact(3)
        .map(|v| DVec3::new(v[0] as f64, v[1] as f64, v[2] as f64))
        .collect()
}

fn read_mesh(asset: &Asset, index: usize, mesh: &Value) -> Result<Mesh, GltfError> {
    let mut out = Mesh::default();
    for (p, primitive) in mesh
        .get("primitives")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let what = format!("meshes[{index}].primitives[{p}]");
        let Some(position) = primitive
            .pointer("/attributes/POSITION")
            .and_then(Value::as_u64)
        else {
            out.primitives.push(Primitive {
                positions: vec![],
                normals: vec![],
                targets: vec![],
                normal_targets: vec![],
                influences: vec![],
                influences_per_vertex: 0,
            });
            continue;
        };
        let (layout, values) = accessors::read_f32(asset, position as usize)?;
        if layout.components != 3 {
            return Err(invalid(&what, "POSITION is not VEC3"));
        }
        if values.iter().any(|v| !v.is_finite()) {
            return Err(invalid(&what, "POSITION holds NaN or infinite values"));
        }
        let count = layout.count;
        // A VEC3 attribute with one finite value per vertex, or empty when absent.
        let per_vertex_vec3 = |accessor: Option<&Value>, name: &str| {
            let Some(a) = accessor.and_then(Value::as_u64) else {
                return Ok(vec![]);
            };
            let (l, d) = accessors::read_f32(asset, a as usize)?;
            if l.components != 3 || l.count != count || d.iter().any(|v| !v.is_finite()) {
                return Err(invalid(
                    &what,
                    format!("{name} is not one finite VEC3 per vertex"),
                ));
            }
            Ok(vec3s(&d))
        };
        let normals = per_vertex_vec3(primitive.pointer("/attributes/NORMAL"), "NORMAL")?;
        let mut targets = Vec::new();
        let mut normal_targets = Vec::new();
        for target in primitive
            .get("targets")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let delta = per_vertex_vec3(target.get("POSITION"), "morph target POSITION")?;
            targets.push(if delta.is_empty() {
                vec![DVec3::ZERO; count]
            } else {
                delta
            });
            normal_targets.push(per_vertex_vec3(
                target.get("NORMAL"),
                "morph target NORMAL",
            )?);
        }
        out.targets = out.targets.max(targets.len());
        // Every JOINTS_n/WEIGHTS_n set, four influences each.
        let mut sets = Vec::new();
        for set in 0.. {
            let joints = primitive
                .pointer(&format!("/attributes/JOINTS_{set}"))
                .and_then(Value::as_u64);
            let weights = primitive
                .pointer(&format!("/attributes/WEIGHTS_{set}"))
                .and_then(Value::as_u64);
            let (Some(j), Some(w)) = (joints, weights) else {
                break;
            };
            let (jl, jv) = accessors::read_f32(asset, j as usize)?;
            let (wl, wv) = accessors::read_f32(asset, w as usize)?;
            if jl.components != 4 || wl.components != 4 || jl.count != count || wl.count != count {
                return Err(invalid(
                    &what,
                    format!("JOINTS_{set}/WEIGHTS_{set} are not VEC4 per vertex"),
                ));
            }
            sets.push((jv, wv, wl.component_type == accessors::FLOAT));
        }
        let per_vertex = 4 * sets.len();
        let mut influences = Vec::with_capacity(count * per_vertex);
        let float_weights = sets.iter().any(|s| s.2);
        for v in 0..count {
            let start = influences.len();
            for (jv, wv, _) in &sets {
                for k in 0..4 {
                    influences.push((jv[4 * v + k] as u16, wv[4 * v + k]));
                }
            }
            // Float weights that don't sum to one are normalised, as three.js does on load.
            let sum: f32 = influences[start..].iter().map(|i| i.1).sum();
            if float_weights && sum > 0.0 && (sum - 1.0).abs() > 1e-7 {
                influences[start..].iter_mut().for_each(|i| i.1 /= sum);
            }
        }
        out.primitives.push(Primitive {
            positions: vec3s(&values),
            normals,
            targets,
            normal_targets,
            influences,
            influences_per_vertex: per_vertex,
        });
    }
    Ok(out)
}

/// The default scene's nodes (or every root's when the file has no scene) with their parents
/// linked, and the scene's nodes in an order that puts every parent before its children.
fn scene_nodes(asset: &Asset) -> Result<(Vec<Node>, Vec<usize>), GltfError> {
    let mut nodes = Vec::new();
    for (n, node) in asset.array("nodes").iter().enumerate() {
        nodes.push(read_node(node, &format!("nodes[{n}]"))?);
    }
    let count = nodes.len();
    for (n, node) in asset.array("nodes").iter().enumerate() {
        for child in node
            .get("children")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let c = child
                .as_u64()
                .map(|c| c as usize)
                .filter(|&c| c < count && c != n);
            let Some(c) = c else {
                return Err(invalid(
                    format!("nodes[{n}]"),
                    format!("child {child} does not exist"),
                ));
            };
            if nodes[c].parent.is_some() {
                return Err(invalid(format!("nodes[{c}]"), "has more than one parent"));
            }
            nodes[c].parent = Some(n);
        }
    }
    let roots: Vec<usize> = {
        let scene = asset.json.get("scene").and_then(Value::as_u64).unwrap_or(0) as usize;
        match asset.array("scenes").get(scene) {
            Some(s) => s
                .get("nodes")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_u64)
                .map(|n| n as usize)
                .filter(|&n| n < count)
                .collect(),
            None => (0..count).filter(|&n| nodes[n].parent.is_none()).collect(),
        }
    };
    // Parents before children; a cycle never reaches a root, so it is never visited.
    let mut order = Vec::new();
    let mut seen = vec![false; count];
    let mut stack: Vec<usize> = roots.into_iter().rev().collect();
    while let Some(n) = stack.pop() {
        if std::mem::replace(&mut seen[n], true) {
            return Err(invalid(
                format!("nodes[{n}]"),
                "appears twice in the scene hierarchy",
            ));
        }
        order.push(n);
        for child in asset.array("nodes")[n]
            .get("children")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .rev()
        {
            stack.push(child.as_u64().unwrap_or(0) as usize);
        }
    }
    Ok((nodes, order))
}

/// Every node's world matrix at rest (`None` for nodes outside the scene), without reading
/// any mesh.
pub fn rest_world(asset: &Asset) -> Result<Vec<Option<DMat4>>, GltfError> {
    let (nodes, order) = scene_nodes(asset)?;
    let mut world = vec![None; nodes.len()];
    for n in order {
        let local = nodes[n].matrix.unwrap_or_else(|| nodes[n].rest.matrix());
        world[n] = Some(match nodes[n].parent.and_then(|p| world[p]) {
            Some(parent) => parent * local,
            None => local,
        });
    }
    Ok(world)
}

impl Rig {
    /// Reads the default scene (or every root node when the file has no scene).
    /// `shell` is the virtual-vertex shell radius relative to the rest bounding-box diagonal.
    pub fn read(asset: &Asset, shell: f64) -> Result<Self, GltfError> {
        let (mut nodes, order) = scene_nodes(asset)?;
        let count = nodes.len();
        let mut meshes = Vec::new();
        for (m, mesh) in asset.array("meshes").iter().enumerate() {
            meshes.push(read_mesh(asset, m, mesh)?);
        }
        let mut skins = Vec::new();
        for (s, skin) in asset.array("skins").iter().enumerate() {
            let what = format!("skins[{s}]");
            let joints: Vec<usize> = skin
                .get("joints")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|j| j.as_u64().map(|j| j as usize).filter(|&j| j < count))
                .collect::<Option<_>>()
                .ok_or_else(|| invalid(&what, "a joint is not a node"))?;
            if joints.is_empty() {
                // glTF: `joints` has at least one item; a skin of none deforms nothing.
                return Err(invalid(&what, "joints is empty"));
            }
            let inverse_binds = match skin.get("inverseBindMatrices").and_then(Value::as_u64) {
                Some(a) => {
                    let (l, v) = accessors::read_f32(asset, a as usize)?;
                    if l.components != 16 || l.count < joints.len() {
                        return Err(invalid(
                            &what,
                            "inverseBindMatrices is not one MAT4 per joint",
                        ));
                    }
                    v.chunks_exact(16)
                        .map(|m| {
                            DMat4::from_cols_slice(&m.iter().map(|&x| x as f64).collect::<Vec<_>>())
                        })
                        .collect()
                }
                None => vec![DMat4::IDENTITY; joints.len()],
            };
            skins.push(Skin {
                joints,
                inverse_binds,
            });
        }
        for (n, node) in nodes.iter_mut().enumerate() {
            if let Some(m) = node.mesh {
                let mesh = meshes
                    .get(m)
                    .ok_or_else(|| invalid(format!("nodes[{n}]"), "mesh does not exist"))?;
                if node.weights.len() != mesh.targets {
                    node.weights = asset.array("meshes")[m]
                        .get("weights")
                        .and_then(Value::as_array)
                        .map(|w| w.iter().map(|x| x.as_f64().unwrap_or(0.0)).collect())
                        .unwrap_or_default();
                    node.weights.resize(mesh.targets, 0.0);
                }
            }
            if let Some(s) = node.skin
                && s >= skins.len()
            {
                return Err(invalid(format!("nodes[{n}]"), "skin does not exist"));
            }
        }
        for (n, node) in nodes.iter().enumerate() {
            let (Some(m), Some(s)) = (node.mesh, node.skin) else {
                continue;
            };
            let joints = skins[s].joints.len();
            let bad = meshes[m]
                .primitives
                .iter()
                .flat_map(|p| &p.influences)
                .any(|i| i.1 != 0.0 && i.0 as usize >= joints);
            if bad {
                return Err(invalid(
                    format!("nodes[{n}]"),
                    format!("a vertex names a joint that skin {s} does not have"),
                ));
            }
        }
        let mesh_nodes: Vec<usize> = {
            let mut v: Vec<usize> = order
                .iter()
                .copied()
                .filter(|&n| nodes[n].mesh.is_some())
                .collect();
            v.sort_unstable();
            v
        };
        let mut rig = Rig {
            nodes,
            order,
            meshes,
            skins,
            mesh_nodes,
            shell_nodes: vec![],
            reach: vec![0.0; count],
            diagonal: 0.0,
            shell: 0.0,
        };
        let rest = rig.rest_pose();
        let mut points = Vec::new();
        rig.points(&rest, &mut points);
        let (lo, hi) = points
            .iter()
            .fold((DVec3::INFINITY, DVec3::NEG_INFINITY), |(lo, hi), p| {
                (lo.min(*p), hi.max(*p))
            });
        rig.diagonal = if points.is_empty() {
            0.0
        } else {
            (hi - lo).length()
        };
        if rig.diagonal.is_nan() || rig.diagonal <= 0.0 {
            // No geometry: measure the skeleton's own extent instead.
            let origins: Vec<DVec3> = rig
                .order
                .iter()
                .map(|&n| rest.world[n].w_axis.truncate())
                .collect();
            let (lo, hi) = origins
                .iter()
                .fold((DVec3::INFINITY, DVec3::NEG_INFINITY), |(lo, hi), p| {
                    (lo.min(*p), hi.max(*p))
                });
            rig.diagonal = if origins.is_empty() {
                1.0
            } else {
                (hi - lo).length().max(1e-6)
            };
        }
        rig.shell = shell * rig.diagonal;
        rig.measure_reach(&rest);
        Ok(rig)
    }

    /// Which nodes carry points of their own, how far those reach, and which nodes need a
    /// shell.
    fn measure_reach(&mut self, rest: &Pose) {
        let count = self.nodes.len();
        let mut owns = vec![false; count];
        for &n in &self.mesh_nodes {
            let node = &self.nodes[n];
            let mesh = &self.meshes[node.mesh.unwrap()];
            for p in &mesh.primitives {
                for (v, &base) in p.positions.iter().enumerate() {
                    // Morph targets can push a vertex as far as all deltas at full weight.
                    let extent = p.targets.iter().map(|t| t[v].length()).sum::<f64>();
                    match node.skin {
                        None => {
                            owns[n] = true;
                            self.reach[n] = self.reach[n].max(base.length() + extent);
                        }
                        Some(s) => {
                            let skin = &self.skins[s];
                            let per = p.influences_per_vertex;
                            for &(slot, w) in &p.influences[v * per..(v + 1) * per] {
                                if w == 0.0 {
                                    continue;
                                }
                                let joint = skin.joints[slot as usize];
                                let ibm = skin.inverse_binds[slot as usize];
                                let local = ibm.transform_point3(base).length()
                                    + extent * matrix_norm(&ibm);
                                owns[joint] = true;
                                self.reach[joint] = self.reach[joint].max(local);
                            }
                        }
                    }
                }
            }
        }
        // A node whose subtree owns no point gets a shell.
        let mut subtree = owns.clone();
        for &n in self.order.iter().rev() {
            if let Some(p) = self.nodes[n].parent {
                subtree[p] |= subtree[n];
            }
        }
        self.shell_nodes = self
            .order
            .iter()
            .copied()
            .filter(|&n| !subtree[n])
            .collect();
        self.shell_nodes.sort_unstable();
        for &n in &self.shell_nodes {
            self.reach[n] = self.shell / world_scale(&rest.world[n]).max(1e-12);
        }
    }

    pub fn rest_pose(&self) -> Pose {
        let mut pose = Pose {
            local: self.nodes.iter().map(|n| n.rest).collect(),
            weights: self.nodes.iter().map(|n| n.weights.clone()).collect(),
            world: vec![DMat4::IDENTITY; self.nodes.len()],
        };
        self.compose(&mut pose);
        pose
    }

    /// World matrices from local transforms, parents first.
    pub fn compose(&self, pose: &mut Pose) {
        for &n in &self.order {
            let node = &self.nodes[n];
            let local = node.matrix.unwrap_or_else(|| pose.local[n].matrix());
            pose.world[n] = match node.parent {
                Some(p) => pose.world[p] * local,
                None => local,
            };
        }
    }

    /// The pose of `clip` at time `t` (properties it does not animate stay at rest).
    pub fn pose_at(&self, clip: &Clip, t: f64, pose: &mut Pose) {
        self.pose_with(clip, t, pose, None);
    }

    /// `pose_at` for times in order (frames, sample times): each channel's key search starts
    /// where the previous call left it (`cursors`, one per channel, grown as needed), so a
    /// pose costs no binary searches. The same pose as `pose_at`.
    pub fn pose_at_in_order(&self, clip: &Clip, t: f64, pose: &mut Pose, cursors: &mut Vec<usize>) {
        cursors.resize(clip.channels.len(), 0);
        self.pose_with(clip, t, pose, Some(cursors));
    }

    fn pose_with(
        &self,
        clip: &Clip,
        t: f64,
        pose: &mut Pose,
        mut cursors: Option<&mut Vec<usize>>,
    ) {
        for (n, node) in self.nodes.iter().enumerate() {
            pose.local[n] = node.rest;
            pose.weights[n].clone_from(&node.weights);
        }
        // Values of one channel: on the stack unless a mesh has more than 16 morph targets
        // (this runs once per sample or frame; an allocation would be much of its cost).
        let (mut stack, mut heap) = ([0.0; 16], Vec::new());
        for (c, channel) in clip.channels.iter().enumerate() {
            let buffer = if channel.width <= stack.len() {
                &mut stack[..channel.width]
            } else {
                heap.resize(channel.width, 0.0);
                &mut heap[..]
            };
            match cursors.as_deref_mut() {
                Some(cursors) => channel.sample_from(t, buffer, &mut cursors[c]),
                None => channel.sample(t, buffer),
            }
            apply(pose, channel.node, channel.path, buffer);
        }
        self.compose(pose);
    }

    /// Model-space positions of every vertex in canonical order (see `mesh_nodes`), then six
    /// virtual vertices per shell node.
    pub fn points(&self, pose: &Pose, out: &mut Vec<DVec3>) {
        out.clear();
        let mut joint_matrices = Vec::new();
        for &n in &self.mesh_nodes {
            let node = &self.nodes[n];
            let mesh = &self.meshes[node.mesh.unwrap()];
            let weights = &pose.weights[n];
            if let Some(s) = node.skin {
                let skin = &self.skins[s];
                joint_matrices.clear();
                joint_matrices.extend(
                    skin.joints
                        .iter()
                        .zip(&skin.inverse_binds)
                        .map(|(&j, ibm)| pose.world[j] * *ibm),
                );
            }
            for p in &mesh.primitives {
                for (v, &base) in p.positions.iter().enumerate() {
                    let mut local = base;
                    for (t, target) in p.targets.iter().enumerate() {
                        let w = weights.get(t).copied().unwrap_or(0.0);
                        if w != 0.0 {
                            local += target[v] * w;
                        }
                    }
                    let world = match node.skin {
                        None => pose.world[n].transform_point3(local),
                        Some(_) => {
                            let per = p.influences_per_vertex;
                            let mut sum = DVec3::ZERO;
                            for &(slot, w) in &p.influences[v * per..(v + 1) * per] {
                                if w != 0.0 {
                                    sum += joint_matrices[slot as usize].transform_point3(local)
                                        * w as f64;
                                }
                            }
                            sum
                        }
                    };
                    out.push(world);
                }
            }
        }
        out.extend(self.shell_points(pose));
    }

    /// The six virtual vertices of every shell node in `pose` (±reach along each local axis),
    /// in `points`' order.
    pub fn shell_points<'a>(&'a self, pose: &'a Pose) -> impl Iterator<Item = DVec3> + 'a {
        self.shell_nodes.iter().flat_map(move |&n| {
            let (r, w) = (self.reach[n], pose.world[n]);
            [DVec3::X, DVec3::Y, DVec3::Z]
                .into_iter()
                .flat_map(move |axis| [w.transform_point3(axis * r), w.transform_point3(-axis * r)])
        })
    }
}

/// Sets one animated property of node `n` from sampled values.
pub fn apply(pose: &mut Pose, n: usize, path: Path, v: &[f64]) {
    if path == Path::Weights {
        for (slot, x) in pose.weights[n].iter_mut().zip(v) {
            *slot = *x;
        }
    } else {
        pose.local[n] = pose.local[n].with(path, v);
    }
}

/// Frobenius norm of the linear (3×3) part: an upper bound of how far it moves a unit vector.
pub fn matrix_norm(m: &DMat4) -> f64 {
    (m.x_axis.truncate().length_squared()
        + m.y_axis.truncate().length_squared()
        + m.z_axis.truncate().length_squared())
    .sqrt()
}

/// Mean length of the axes of the linear part: the node's size factor in model units.
pub fn world_scale(m: &DMat4) -> f64 {
    (m.x_axis.truncate().length() + m.y_axis.truncate().length() + m.z_axis.truncate().length())
        / 3.0
}
