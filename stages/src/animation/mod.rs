//! Animation evaluation shared by every stage that needs motion: reading clips, sampling them
//! exactly as glTF 2.0 specifies, posing the node hierarchy, skinning (every JOINTS_n/WEIGHTS_n
//! set) and morphing vertices, and measuring the error of one animation against another.
//! Checked against three.js' own sampling (`worker/tests/gltf-check/anim.mjs`).

pub mod clip;
pub mod deform;
pub mod metric;
pub mod rig;
#[cfg(test)]
pub mod test_models;

pub use clip::{Channel, Clip, Interpolation, Path};
pub use deform::{DeformScratch, Deformer};
pub use metric::{ClipError, MetricOptions};
pub use rig::{Pose, Rig};
