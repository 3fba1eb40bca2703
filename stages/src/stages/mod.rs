//! The pipeline stages. Each file is one stage: a `NAME`, its options (whose `Default` is the
//! only source of its defaults), a pure `run` function of its inputs returning a typed output
//! and report, and an error type that says whether a failure is permanent.
//!
//! Stages never touch the database, the object store or the async runtime: the job layer
//! (`job.rs`) loads inputs, calls them (via `pipeline.rs`) and stores their outputs.

pub mod animation;
pub mod encode;
pub mod engines;
pub mod geometry;
pub mod inventory;
pub mod publish;
pub mod sign;
pub mod unpack;
pub mod vat;

pub use crate::ir::{FileTree, PackageFormat, TreeFile, TreeResources, read_head};
