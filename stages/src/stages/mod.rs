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

use crate::gltf::guard_model;
use crate::ir::{FileKind, Inventory, InventoryEntry};

/// The one per-model driver of the model stages (`geometry`, `vat`): which files are the
/// game's models, reading one from the tree with its resources under a guard, and writing
/// what the stage made beside it. The stages' pure functions stay functions of bytes.
///
/// The game's own models: `.glb` and `.gltf` files without an error that no stage made from
/// another model (a VAT mesh is `used_by` its model).
pub fn game_models(inventory: &Inventory) -> impl Iterator<Item = &InventoryEntry> {
    inventory.entries.iter().filter(|e| {
        matches!(e.kind, FileKind::Glb | FileKind::Gltf) && e.error.is_none() && e.used_by.is_none()
    })
}

/// Reads `entry` from the tree and runs `work` on its bytes and resources. A panic in `work`
/// (a bug in Kiln that this file found) becomes that model's `Err(reason)`: the model fails,
/// the build goes on. A file that cannot be read is the stage's I/O error.
pub fn with_model<T>(
    tree: &FileTree,
    entry: &InventoryEntry,
    work: impl FnOnce(&[u8], &TreeResources<'_>) -> Result<T, String>,
) -> std::io::Result<Result<T, String>> {
    let bytes = std::fs::read(tree.root.join(&entry.path))?;
    let resources = TreeResources {
        tree,
        model: &entry.path,
    };
    Ok(guard_model(|| work(&bytes, &resources)))
}

/// Writes a file a stage made into the tree (its folders too) and lists it; the caller sorts
/// `tree.files` when it is done adding.
pub fn add_file(tree: &mut FileTree, path: &str, data: &[u8]) -> std::io::Result<()> {
    let full = tree.root.join(path);
    if let Some(parent) = full.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&full, data)?;
    tree.files.push(TreeFile {
        path: path.to_string(),
        size: data.len() as u64,
    });
    Ok(())
}
