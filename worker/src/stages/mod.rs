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

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::gltf::Resources;

/// Archive format of an uploaded package.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PackageFormat {
    Zip,
    TarGz,
}

impl PackageFormat {
    /// From the first bytes of the package: the only evidence that can't lie about the format.
    pub fn sniff(head: &[u8]) -> Option<Self> {
        if head.starts_with(b"PK\x03\x04") || head.starts_with(b"PK\x05\x06") {
            Some(Self::Zip)
        } else if head.starts_with(&[0x1f, 0x8b]) {
            Some(Self::TarGz)
        } else {
            None
        }
    }

    pub fn extension(self) -> &'static str {
        match self {
            Self::Zip => "zip",
            Self::TarGz => "tar.gz",
        }
    }

    pub fn from_extension(ext: &str) -> Option<Self> {
        match ext {
            "zip" => Some(Self::Zip),
            "tar.gz" | "tgz" => Some(Self::TarGz),
            _ => None,
        }
    }
}

impl std::fmt::Display for PackageFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Zip => "zip",
            Self::TarGz => "tar.gz",
        })
    }
}

/// The build's files on disk: what every stage after `unpack` reads and rewrites.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileTree {
    pub root: PathBuf,
    /// Sorted by path, so every stage sees files in the same order on every run.
    pub files: Vec<TreeFile>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeFile {
    /// Logical path inside the build, `/`-separated, validated by `unpack`.
    pub path: String,
    pub size: u64,
}

impl FileTree {
    pub fn absolute(&self, file: &TreeFile) -> PathBuf {
        self.root.join(&file.path)
    }

    pub fn read(&self, file: &TreeFile) -> std::io::Result<Vec<u8>> {
        std::fs::read(self.absolute(file))
    }

    pub fn contains(&self, path: &str) -> bool {
        self.files
            .binary_search_by(|f| f.path.as_str().cmp(path))
            .is_ok()
    }
}

/// Reads up to `len` leading bytes of a file (for magic numbers).
pub fn read_head(path: &Path, len: usize) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut buf = Vec::with_capacity(len);
    std::fs::File::open(path)?
        .take(len as u64)
        .read_to_end(&mut buf)?;
    Ok(buf)
}

/// Files of the tree a `.gltf` may reference, resolved relative to the model.
pub struct TreeResources<'a> {
    pub tree: &'a FileTree,
    pub model: &'a str,
}

impl Resources for TreeResources<'_> {
    fn load(&self, uri: &str) -> Option<Vec<u8>> {
        let path = inventory::resolve_uri(self.model, uri)?;
        if !self.tree.contains(&path) {
            return None;
        }
        std::fs::read(self.tree.root.join(path)).ok()
    }
}
