//! Kiln's worker: the pipeline stages (`stages/`), the pipeline's script (`pipeline.rs`),
//! the build job that runs it against the database and object store (`job.rs`), the releases
//! it signs (`release.rs`), and start-up (`runtime.rs`).

pub mod animation;
pub mod gltf;
pub mod job;
pub mod keys;
pub mod pipeline;
pub mod release;
pub mod runtime;
pub mod stages;
