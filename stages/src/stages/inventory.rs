//! Stage `inventory`: what every file in the build is, so later stages know what to work on.
//!
//! Kinds come from content where content can tell (GLB magic, glTF JSON and what it
//! references) and from the extension otherwise. A broken glTF is noted on that file; it
//! never fails the build.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Stage, StageError};
pub use crate::ir::{FileKind, Inventory, InventoryEntry, resolve_uri};
use crate::ir::{FileTree, TreeFile, read_head};

pub const NAME: &str = "inventory";

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InventoryReport {
    pub counts: BTreeMap<FileKind, u64>,
    pub bytes: BTreeMap<FileKind, u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    #[error("reading {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

impl StageError for InventoryError {
    /// A file unpack just wrote can't be read: the machine, not the package, is at fault.
    fn is_permanent(&self) -> bool {
        false
    }

    fn file(&self) -> Option<String> {
        let Self::Io { path, .. } = self;
        Some(path.clone())
    }
}

/// The inventory stage: the tree in, what each file is (and what it belongs to) out. It has
/// no options.
pub struct Step;

impl Stage for Step {
    const NAME: &'static str = NAME;
    type Input<'a> = &'a FileTree;
    type Options = ();
    type Output = Inventory;
    type Report = InventoryReport;
    type Error = InventoryError;

    fn run(
        tree: &FileTree,
        _: &(),
        _progress: &mut dyn FnMut(f64),
    ) -> Result<(Inventory, InventoryReport), InventoryError> {
        take(tree)
    }
}

fn take(tree: &FileTree) -> Result<(Inventory, InventoryReport), InventoryError> {
    let mut entries: Vec<InventoryEntry> = Vec::with_capacity(tree.files.len());
    // path -> (referencing gltf, is image)
    let mut references: BTreeMap<String, (String, bool)> = BTreeMap::new();
    for file in &tree.files {
        let mut entry = classify(tree, file)?;
        if entry.kind == FileKind::Gltf {
            let bytes = tree.read(file).map_err(|source| InventoryError::Io {
                path: file.path.clone(),
                source,
            })?;
            match gltf_resources(&bytes) {
                Ok(resources) => {
                    for (uri, is_image) in resources {
                        let Some(target) = resolve_uri(&file.path, &uri) else {
                            entry
                                .warnings
                                .push(format!("reference {uri:?} leaves the build; ignored"));
                            continue;
                        };
                        if tree.contains(&target) {
                            references.insert(target, (file.path.clone(), is_image));
                        } else {
                            entry
                                .warnings
                                .push(format!("references {uri:?}, which is not in the build"));
                        }
                    }
                }
                Err(reason) => entry.error = Some(format!("not valid glTF JSON: {reason}")),
            }
        }
        entries.push(entry);
    }
    for entry in &mut entries {
        if let Some((gltf, is_image)) = references.get(&entry.path) {
            entry.used_by = Some(gltf.clone());
            entry.kind = if *is_image {
                FileKind::GltfImage
            } else {
                FileKind::GltfBuffer
            };
        }
    }
    let mut report = InventoryReport {
        counts: BTreeMap::new(),
        bytes: BTreeMap::new(),
    };
    for entry in &entries {
        *report.counts.entry(entry.kind).or_default() += 1;
        *report.bytes.entry(entry.kind).or_default() += entry.size;
    }
    Ok((Inventory { entries }, report))
}

/// One file by its name and, where that can lie, its first bytes: a `.glb` must carry the
/// glTF binary header, and a file that does is a GLB whatever its name. (A `.gltf`'s
/// references are `run`'s to resolve, across the tree.)
fn classify(tree: &FileTree, file: &TreeFile) -> Result<InventoryEntry, InventoryError> {
    let mut entry = InventoryEntry {
        path: file.path.clone(),
        kind: kind_by_extension(&kiln_common::keys::extension_of(&file.path)),
        size: file.size,
        used_by: None,
        error: None,
        warnings: Vec::new(),
    };
    let head = read_head(&tree.absolute(file), 4).map_err(|source| InventoryError::Io {
        path: file.path.clone(),
        source,
    })?;
    if head == b"glTF" {
        entry.kind = FileKind::Glb;
    } else if entry.kind == FileKind::Glb {
        entry.error = Some("has a .glb name but no glTF binary header".into());
        entry.kind = FileKind::Other;
    }
    Ok(entry)
}

/// The inventory of a tree that only grew since `before` was taken (a stage added its
/// outputs): what `before` says of each file it had stays as it is, with what earlier stages
/// noted; each new file is classified alone. A stage's outputs are never `.gltf`, so they
/// reference nothing; should one be, the whole tree is inventoried again and the earlier
/// notes carried over.
pub fn extend(before: &Inventory, tree: &FileTree) -> Result<Inventory, InventoryError> {
    let known = |path: &str| {
        before
            .entries
            .binary_search_by(|e| e.path.as_str().cmp(path))
            .is_ok()
    };
    let new: Vec<&TreeFile> = tree.files.iter().filter(|f| !known(&f.path)).collect();
    if new
        .iter()
        .any(|f| kind_by_extension(&kiln_common::keys::extension_of(&f.path)) == FileKind::Gltf)
    {
        let (mut inventory, _) = take(tree)?;
        for entry in &mut inventory.entries {
            if let Ok(i) = before.entries.binary_search_by(|e| e.path.cmp(&entry.path)) {
                let old = &before.entries[i];
                entry.used_by = entry.used_by.take().or_else(|| old.used_by.clone());
                for w in &old.warnings {
                    if !entry.warnings.contains(w) {
                        entry.warnings.push(w.clone());
                    }
                }
            }
        }
        return Ok(inventory);
    }
    let mut entries = before.entries.clone();
    for file in new {
        entries.push(classify(tree, file)?);
    }
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(Inventory { entries })
}

fn kind_by_extension(ext: &str) -> FileKind {
    match ext {
        "html" | "htm" => FileKind::Html,
        "js" | "mjs" | "cjs" => FileKind::Js,
        "css" => FileKind::Css,
        "wasm" => FileKind::Wasm,
        "gltf" => FileKind::Gltf,
        "glb" => FileKind::Glb,
        "png" | "jpg" | "jpeg" | "webp" | "avif" | "gif" | "ktx2" | "ktx" | "basis" | "dds" => {
            FileKind::Texture
        }
        "mp3" | "ogg" | "oga" | "wav" | "m4a" | "aac" | "opus" | "flac" | "weba" => FileKind::Audio,
        "json" => FileKind::Json,
        _ => FileKind::Other,
    }
}

/// External URIs of a glTF's buffers and images (`true` for images); data URIs are inline.
pub fn gltf_resources(bytes: &[u8]) -> Result<Vec<(String, bool)>, String> {
    #[derive(Deserialize)]
    struct Uri {
        uri: Option<String>,
    }
    #[derive(Deserialize)]
    struct Doc {
        asset: serde_json::Value,
        #[serde(default)]
        buffers: Vec<Uri>,
        #[serde(default)]
        images: Vec<Uri>,
    }
    let doc: Doc = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    if doc.asset.get("version").and_then(|v| v.as_str()).is_none() {
        return Err("asset.version is missing".into());
    }
    let external = |u: &Uri| u.uri.clone().filter(|uri| !uri.starts_with("data:"));
    Ok(doc
        .buffers
        .iter()
        .filter_map(external)
        .map(|u| (u, false))
        .chain(doc.images.iter().filter_map(external).map(|u| (u, true)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::TreeFile;

    fn tree(files: &[(&str, &[u8])]) -> (tempfile::TempDir, FileTree) {
        let dir = tempfile::tempdir().unwrap();
        let mut list = Vec::new();
        for (path, bytes) in files {
            let p = dir.path().join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, bytes).unwrap();
            list.push(TreeFile {
                path: path.to_string(),
                size: bytes.len() as u64,
            });
        }
        list.sort_by(|a, b| a.path.cmp(&b.path));
        let root = dir.path().to_owned();
        (dir, FileTree { root, files: list })
    }

    #[test]
    fn classifies_by_content_and_gltf_references() {
        let gltf = br#"{"asset":{"version":"2.0"},"buffers":[{"uri":"mesh%20data.bin"}],"images":[{"uri":"../tex/a.png"},{"uri":"data:image/png;base64,AA=="}]}"#;
        let (_dir, tree) = tree(&[
            ("index.html", b"<html>"),
            ("js/game.js", b"1"),
            ("models/a.gltf", gltf),
            ("models/mesh data.bin", b"\0\0"),
            ("tex/a.png", b"\x89PNG"),
            ("tex/b.png", b"\x89PNG"),
            ("models/b.glb", b"glTF...."),
            ("models/fake.glb", b"nope"),
            ("music.ogg", b"OggS"),
            ("models/broken.gltf", b"{not json"),
        ]);
        let (inv, report) = take(&tree).unwrap();
        let kind = |p: &str| inv.entries.iter().find(|e| e.path == p).unwrap().clone();
        assert_eq!(kind("index.html").kind, FileKind::Html);
        assert_eq!(kind("js/game.js").kind, FileKind::Js);
        assert_eq!(kind("models/a.gltf").kind, FileKind::Gltf);
        assert_eq!(kind("models/mesh data.bin").kind, FileKind::GltfBuffer);
        assert_eq!(
            kind("models/mesh data.bin").used_by.as_deref(),
            Some("models/a.gltf")
        );
        assert_eq!(kind("tex/a.png").kind, FileKind::GltfImage);
        assert_eq!(kind("tex/b.png").kind, FileKind::Texture);
        assert_eq!(kind("models/b.glb").kind, FileKind::Glb);
        assert_eq!(kind("models/fake.glb").kind, FileKind::Other);
        assert!(kind("models/fake.glb").error.is_some());
        assert_eq!(kind("music.ogg").kind, FileKind::Audio);
        assert!(
            kind("models/broken.gltf")
                .error
                .as_deref()
                .unwrap()
                .contains("not valid glTF")
        );
        assert_eq!(report.counts[&FileKind::Texture], 1);
    }

    #[test]
    fn references_cannot_leave_the_build() {
        assert_eq!(resolve_uri("a/b.gltf", "../../x.bin"), None);
        assert_eq!(resolve_uri("a/b.gltf", "http://evil/x.bin"), None);
        assert_eq!(
            resolve_uri("a/b.gltf", "c/../x.bin").as_deref(),
            Some("a/x.bin")
        );
    }

    /// A grown tree: old entries keep what was noted on them, new files are classified,
    /// the order stays the tree's; the same as inventorying it all again, without re-reading.
    #[test]
    fn extending_keeps_notes_and_classifies_new_files() {
        let gltf = br#"{"asset":{"version":"2.0"},"buffers":[{"uri":"m.bin","byteLength":4}]}"#;
        let (_dir, mut tree) = tree(&[("m.gltf", gltf), ("m.bin", b"\0\0\0\0")]);
        let (mut before, _) = take(&tree).unwrap();
        before.entries[0].warnings.push("noted by a stage".into());
        for (path, bytes) in [
            ("m.quantized.glb", &b"glTF...."[..]),
            ("a.vat/x/t.png", b"png"),
        ] {
            std::fs::create_dir_all(tree.root.join(path).parent().unwrap()).unwrap();
            std::fs::write(tree.root.join(path), bytes).unwrap();
            tree.files.push(TreeFile {
                path: path.into(),
                size: bytes.len() as u64,
            });
        }
        tree.files.sort_by(|a, b| a.path.cmp(&b.path));
        let after = extend(&before, &tree).unwrap();
        let paths: Vec<&str> = after.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            ["a.vat/x/t.png", "m.bin", "m.gltf", "m.quantized.glb"]
        );
        assert_eq!(after.entries[1].used_by.as_deref(), Some("m.gltf"));
        assert_eq!(after.entries[1].warnings, ["noted by a stage"]);
        assert_eq!(after.entries[3].kind, FileKind::Glb);
        let (fresh, _) = take(&tree).unwrap();
        let kinds = |i: &Inventory| i.entries.iter().map(|e| e.kind).collect::<Vec<_>>();
        assert_eq!(kinds(&after), kinds(&fresh));
    }
}
