//! Kiln's worker: the pipeline stages (`stages/`), the pipeline's script (`pipeline.rs`),
//! the build job that runs it against the database and object store (`job.rs`), the releases
//! it signs (`release.rs`), and start-up (`runtime.rs`). The last four are the `service`
//! feature (default); without it only the stages build (the fuzz targets use that).

pub mod animation;
pub mod fuzzing;
pub mod gltf;
#[cfg(feature = "service")]
pub mod job;
#[cfg(feature = "service")]
pub mod keys;
pub mod pipeline;
#[cfg(feature = "service")]
pub mod release;
#[cfg(feature = "service")]
pub mod runtime;
pub mod stages;
