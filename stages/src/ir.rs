//! The intermediate representation: what the stages hand each other. A stage reads and
//! returns these types and its own options and report; it never imports another stage (the
//! pipeline, `pipeline.rs`, is the only place that knows the order).
//!
//! - the build's files on disk ([`FileTree`]) and what `inventory` says of each ([`Inventory`]);
//! - a model as the model stages read and write it ([`Asset`], `gltf/`);
//! - what `encode` publishes ([`OutputFile`]), what `engines` splits into the library
//!   ([`EngineFile`]), where a model's variants are ([`ModelPaths`]), which VAT bakes a build
//!   made ([`VatBaked`]), and what `sign` signed ([`SignedManifest`]).

use std::path::{Path, PathBuf};

use kiln_common::keys::Encoding;
use kiln_common::manifest::Manifest;
use kiln_common::signing::ManifestSignature;
use serde::{Deserialize, Serialize};

pub use crate::gltf::Asset;
use crate::gltf::Resources;
pub use kiln_common::package::PackageFormat;

// --- The tree and its inventory ---------------------------------------------------------

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
        let path = resolve_uri(self.model, uri)?;
        if !self.tree.contains(&path) {
            return None;
        }
        std::fs::read(self.tree.root.join(path)).ok()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum FileKind {
    Html,
    Js,
    Css,
    Wasm,
    /// glTF JSON (`.gltf`).
    Gltf,
    /// Binary glTF (`.glb`).
    Glb,
    /// A buffer (`.bin`) referenced by a `.gltf` in the build.
    GltfBuffer,
    /// An image referenced by a `.gltf` in the build.
    GltfImage,
    Texture,
    Audio,
    Json,
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InventoryEntry {
    pub path: String,
    pub kind: FileKind,
    pub size: u64,
    /// For glTF resources: the `.gltf` that references this file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub used_by: Option<String>,
    /// A problem with this file that later stages must respect (they skip it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Something a team should know that is not an error.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inventory {
    /// In the tree's order (sorted by path).
    pub entries: Vec<InventoryEntry>,
}

/// What most stages read: the build's files and what inventory found them to be.
#[derive(Debug, Clone, Copy)]
pub struct Files<'a> {
    pub tree: &'a FileTree,
    pub inventory: &'a Inventory,
}

/// Resolves a relative URI against the referencing file's directory, inside the build only.
pub fn resolve_uri(from: &str, uri: &str) -> Option<String> {
    if uri.contains("://") || uri.starts_with('/') {
        return None;
    }
    let decoded = percent_decode(uri.split(['?', '#']).next().unwrap_or(uri));
    let mut parts: Vec<&str> = from.split('/').collect();
    parts.pop();
    for segment in decoded.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            s => parts.push(s),
        }
    }
    Some(parts.join("/"))
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(hi), Some(lo)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            let v = (hi * 16 + lo) as u8;
            out.push(v);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

// --- Between the stages ---------------------------------------------------------------

/// One published file and its compressed forms.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutputFile {
    pub path: String,
    pub kind: FileKind,
    pub sha256: String,
    pub size: u64,
    pub key: String,
    pub content_type: String,
    /// Where the identity bytes are on disk.
    #[serde(skip)]
    pub source: PathBuf,
    pub encodings: Vec<EncodedForm>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EncodedForm {
    pub encoding: Encoding,
    pub size: u64,
    pub key: String,
    #[serde(skip)]
    pub source: PathBuf,
}

/// One engine file found in the build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EngineFile {
    pub path: String,
    pub name: String,
    pub version: String,
    pub sha256: String,
    pub size: u64,
    pub global: String,
    pub module: bool,
    /// Its library object key (content-addressed).
    pub library_key: String,
}

/// Where a model's variants are in the tree (what `sign` lists for the loader to choose from).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelPaths {
    /// The model's own path (the `original` variant).
    pub source: String,
    pub quantized: String,
    pub meshopt: String,
    /// The `ktx2` variant (`[images] ktx2`) and the GPU formats its textures keep their bounds
    /// on, where the images stage made one.
    pub ktx2: Option<(String, Vec<String>)>,
}

/// Variant paths beside the model: `a/b.glb` → `a/b.quantized.glb`, `a/b.meshopt.glb`.
pub fn variant_path(source: &str, variant: &str) -> String {
    let stem = source
        .strip_suffix(".glb")
        .or_else(|| source.strip_suffix(".gltf"))
        .unwrap_or(source);
    format!("{stem}.{variant}.glb")
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedManifest {
    pub manifest: Manifest,
    /// The bytes that were signed and that are served.
    pub bytes: Vec<u8>,
    pub sha256: String,
    pub key: String,
    pub signature: ManifestSignature,
}

/// An image whose re-encoded bytes replaced the file at `path` (the images stage); the
/// original is kept at `original`; `encoding` names what `path` now holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedImage {
    pub path: String,
    pub original: String,
    pub encoding: String,
}

/// A VAT bake to list in the manifest: its `vat.json` path, model, mesh and encoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VatBaked {
    pub source: String,
    pub mesh: String,
    pub path: String,
    pub encoding: String,
}
