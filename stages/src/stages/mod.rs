//! The pipeline stages. Each file is one stage: a `NAME`, its options (whose `Default` is the
//! only source of its defaults), and a `Step` that implements [`Stage`]: one entry point of
//! the same shape for every stage (input and options in, typed output and report out), with
//! an error type that says whether a failure is permanent ([`StageError`]).
//!
//! Stages never touch the database, the object store or the async runtime: the job layer
//! (`job.rs`) loads inputs, calls them (via `pipeline.rs`) and stores their outputs.

pub mod animation;
pub mod encode;
pub mod engines;
pub mod geometry;
pub mod images;
pub mod inventory;
pub mod publish;
pub mod sign;
pub mod unpack;
pub mod vat;

pub use crate::ir::{FileTree, Files, PackageFormat, TreeFile, TreeResources, read_head};

use crate::gltf::guard_model;
use crate::ir::{FileKind, Inventory, InventoryEntry};

/// One stage of the pipeline, called the same way for every stage (`pipeline::call`).
///
/// A stage is a plain function of what earlier stages made (`Input`, for most a [`Files`])
/// and of its options: no database, object store, clock or queue. It returns its typed
/// output, which later stages read, and its report, which the build's report shows under
/// `NAME`.
pub trait Stage {
    /// The stage's name in a build's status, its report and the metrics.
    const NAME: &'static str;
    /// What the stage reads of the earlier stages' outputs.
    type Input<'a>;
    /// How the stage is configured; its `Default` is the only source of its defaults.
    type Options;
    /// What later stages read.
    type Output;
    /// What the build's report shows under `NAME`.
    type Report: serde::Serialize;
    type Error: StageError;
    /// Runs the stage. `progress` gets the share done (0 to 1), where the stage can tell.
    fn run(
        input: Self::Input<'_>,
        options: &Self::Options,
        progress: &mut dyn FnMut(f64),
    ) -> Result<(Self::Output, Self::Report), Self::Error>;
}

/// Why a stage failed, as the pipeline needs to know it.
pub trait StageError: std::error::Error {
    /// Permanent: retrying the same build cannot help (the package is at fault). Otherwise
    /// the machine is (a full disk, an unreadable work file) and the job layer retries.
    fn is_permanent(&self) -> bool;
    /// The build's file the failure is about, when there is one.
    fn file(&self) -> Option<String> {
        None
    }
}

/// A stage that cannot fail.
impl StageError for std::convert::Infallible {
    fn is_permanent(&self) -> bool {
        match *self {}
    }
}

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

/// Writes a file a stage made into the tree (its folders too) and lists it in the tree's order.
pub fn add_file(tree: &mut FileTree, path: &str, data: &[u8]) -> std::io::Result<()> {
    let full = tree.root.join(path);
    if let Some(parent) = full.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&full, data)?;
    // In the tree's order, which `FileTree::contains` searches.
    let at = tree.files.partition_point(|f| f.path.as_str() < path);
    tree.files.insert(
        at,
        TreeFile {
            path: path.to_string(),
            size: data.len() as u64,
        },
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Files a stage adds are found by `contains` at once (the images stage checks, image by
    /// image, that the original's name is free before taking it).
    #[test]
    fn an_added_file_is_found_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut tree = FileTree {
            root: dir.path().to_path_buf(),
            files: Vec::new(),
        };
        for path in [
            "b/z.png",
            "a.png",
            "b/a.png",
            "c.png",
            "b/m.kiln-original.png",
        ] {
            add_file(&mut tree, path, b"x").unwrap();
            assert!(tree.contains(path), "{path}");
        }
        let paths: Vec<_> = tree.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "a.png",
                "b/a.png",
                "b/m.kiln-original.png",
                "b/z.png",
                "c.png"
            ]
        );
    }
}
