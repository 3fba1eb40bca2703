//! Kiln's pipeline, as pure code: the stages (`stages/`, one file each), the intermediate
//! representation they hand each other (`stages/mod.rs`), the glTF reader and writer they share
//! (`gltf/`), the animation evaluator (`animation/`), and the script that runs them in order
//! (`pipeline.rs`). Nothing here touches a database, an object store or an async runtime: this
//! crate's dependency graph has none (the compiler enforces what was a convention), so the
//! job layer (`kiln-worker`), `kiln-worker process`, the benchmarks and the fuzz targets all run
//! the same code.

pub mod animation;
pub mod build_config;
pub mod fuzzing;
pub mod gltf;
pub mod ir;
pub mod pipeline;
pub mod stages;
