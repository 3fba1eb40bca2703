//! Kiln's job layer: the build job that runs the pipeline (`kiln-stages`) against the database
//! and object store (`job.rs`), the releases it signs (`release.rs`), the operator's key
//! commands (`keys.rs`), start-up (`runtime.rs`) and the heap between builds (`memory.rs`).
//! The queue's payload and `enqueue` are in `kiln-jobs`, which the API shares; the stages
//! themselves are in `kiln-stages`.

pub mod context;
pub mod job;
pub mod keys;
pub mod memory;
pub mod release;
pub mod runtime;
