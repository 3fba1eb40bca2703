//! Stage `encode`: content-address every output file and pre-compress it (brotli, gzip) where
//! that makes it smaller, so the CDN serves compressed bytes without compressing on the fly.
//!
//! Output keys depend only on the bytes (and the extension, for the content type), and the
//! compressors are deterministic (gzip's mtime is 0), so running this twice gives the same
//! objects: a retried or resumed job writes nothing new.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

use kiln_common::keys::{self, Encoding};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::{Stage, StageError};
pub use crate::ir::{EncodedForm, OutputFile};
use crate::ir::{FileKind, FileTree, Files, Inventory};

pub const NAME: &str = "encode";

/// Compression settings. `Default` is the only source of these defaults.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EncodeOptions {
    /// Brotli quality (0–11) for files up to `large_file_bytes`.
    pub brotli_quality: u32,
    /// Brotli quality for larger files, where 11 would take minutes.
    pub brotli_large_quality: u32,
    /// gzip level (0–9).
    pub gzip_level: u32,
    /// Size from which a file counts as large.
    pub large_file_bytes: u64,
    /// Files larger than this are published uncompressed only.
    pub max_precompress_bytes: u64,
    /// Keep a compressed form only if it saves at least this share of the bytes.
    pub min_saving: f64,
}

impl Default for EncodeOptions {
    fn default() -> Self {
        Self {
            brotli_quality: 11,
            brotli_large_quality: 5,
            gzip_level: 9,
            large_file_bytes: 4 * 1024 * 1024,
            max_precompress_bytes: 512 * 1024 * 1024,
            min_saving: 0.01,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EncodeReport {
    pub files: u64,
    pub identity_bytes: u64,
    pub brotli_bytes: u64,
    pub gzip_bytes: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    #[error("encoding {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

impl StageError for EncodeError {
    /// Files unpack wrote are ours; an I/O failure here is the machine's, worth a retry.
    fn is_permanent(&self) -> bool {
        false
    }

    fn file(&self) -> Option<String> {
        let Self::Io { path, .. } = self;
        Some(path.clone())
    }
}

/// The build's files, and the directory their encoded forms are written to.
#[derive(Debug, Clone, Copy)]
pub struct EncodeInput<'a> {
    pub files: Files<'a>,
    pub out_dir: &'a Path,
}

/// The encode stage: every file of the tree content-addressed and pre-compressed into
/// `out_dir`, calling `progress` with the share done.
pub struct Step;

impl Stage for Step {
    const NAME: &'static str = NAME;
    type Input<'a> = EncodeInput<'a>;
    type Options = EncodeOptions;
    type Output = Vec<OutputFile>;
    type Report = EncodeReport;
    type Error = EncodeError;

    fn run(
        input: EncodeInput<'_>,
        options: &EncodeOptions,
        progress: &mut dyn FnMut(f64),
    ) -> Result<(Vec<OutputFile>, EncodeReport), EncodeError> {
        encode(
            input.files.tree,
            input.files.inventory,
            input.out_dir,
            options,
            progress,
        )
    }
}

fn encode(
    tree: &FileTree,
    inventory: &Inventory,
    out_dir: &Path,
    options: &EncodeOptions,
    progress: &mut dyn FnMut(f64),
) -> Result<(Vec<OutputFile>, EncodeReport), EncodeError> {
    std::fs::create_dir_all(out_dir).map_err(|source| EncodeError::Io {
        path: out_dir.display().to_string(),
        source,
    })?;
    let total_bytes: u64 = tree.files.iter().map(|f| f.size).sum::<u64>().max(1);
    let mut done_bytes = 0u64;
    // Identical files in one build are compressed once.
    let mut encoded_by_key: HashMap<String, Vec<EncodedForm>> = HashMap::new();
    let mut outputs = Vec::with_capacity(tree.files.len());
    for (file, entry) in tree.files.iter().zip(&inventory.entries) {
        let source = tree.absolute(file);
        let io = |source| EncodeError::Io {
            path: file.path.clone(),
            source,
        };
        let sha256 = sha256_file(&source).map_err(io)?;
        // An image is named by what its bytes are (the images stage may have put WebP at a
        // `.png` path; a `.png` may be a JPEG), so it is served with its true type.
        let typed_path = match entry.kind {
            FileKind::Texture | FileKind::GltfImage => {
                let head = crate::ir::read_head(&source, 16).map_err(io)?;
                keys::image_extension(&head).map(|ext| format!("image.{ext}"))
            }
            _ => None,
        };
        let typed_path = typed_path.as_deref().unwrap_or(&file.path);
        let key = keys::file_key(&sha256, typed_path);
        let content_type = keys::content_type_for(typed_path);
        let encodings = match encoded_by_key.get(&key) {
            Some(forms) => forms.clone(),
            None => {
                let forms = if worth_compressing(entry.kind, &content_type)
                    && file.size <= options.max_precompress_bytes
                    && file.size > 0
                {
                    compress_forms(&source, file.size, &key, out_dir, options).map_err(io)?
                } else {
                    Vec::new()
                };
                encoded_by_key.insert(key.clone(), forms.clone());
                forms
            }
        };
        outputs.push(OutputFile {
            path: file.path.clone(),
            kind: entry.kind,
            sha256,
            size: file.size,
            key,
            content_type,
            source,
            encodings,
        });
        done_bytes += file.size;
        progress(done_bytes as f64 / total_bytes as f64);
    }
    let sum = |enc: Encoding| -> u64 {
        outputs
            .iter()
            .map(|o| {
                o.encodings
                    .iter()
                    .find(|e| e.encoding == enc)
                    .map_or(o.size, |e| e.size)
            })
            .sum()
    };
    let report = EncodeReport {
        files: outputs.len() as u64,
        identity_bytes: outputs.iter().map(|o| o.size).sum(),
        brotli_bytes: sum(Encoding::Br),
        gzip_bytes: sum(Encoding::Gzip),
    };
    Ok((outputs, report))
}

/// Already-compressed formats (images, audio, archives) only get bigger.
fn worth_compressing(kind: FileKind, content_type: &str) -> bool {
    match kind {
        FileKind::Html
        | FileKind::Js
        | FileKind::Css
        | FileKind::Wasm
        | FileKind::Gltf
        | FileKind::Glb
        | FileKind::GltfBuffer
        | FileKind::Json => true,
        FileKind::Texture | FileKind::Audio | FileKind::GltfImage => {
            content_type.starts_with("image/svg") || content_type.contains("ktx")
        }
        FileKind::Other => {
            content_type.starts_with("text/")
                || content_type.contains("json")
                || content_type.contains("xml")
                || content_type.contains("javascript")
                || content_type == "application/octet-stream"
        }
    }
}

fn compress_forms(
    source: &Path,
    size: u64,
    key: &str,
    out_dir: &Path,
    options: &EncodeOptions,
) -> std::io::Result<Vec<EncodedForm>> {
    let mut forms = Vec::new();
    let quality = if size > options.large_file_bytes {
        options.brotli_large_quality
    } else {
        options.brotli_quality
    };
    for encoding in [Encoding::Br, Encoding::Gzip] {
        let encoded_key = keys::encoded_key(key, encoding);
        let dest = out_dir.join(encoded_key.replace('/', "_"));
        let mut input = BufReader::with_capacity(256 * 1024, File::open(source)?);
        let output = BufWriter::new(File::create(&dest)?);
        match encoding {
            Encoding::Br => {
                let mut w = brotli::CompressorWriter::new(output, 64 * 1024, quality, 22);
                std::io::copy(&mut input, &mut w)?;
                w.into_inner().flush()?;
            }
            Encoding::Gzip => {
                // Fixed header (mtime 0, no name) keeps the bytes reproducible.
                let mut w = flate2::GzBuilder::new()
                    .write(output, flate2::Compression::new(options.gzip_level));
                std::io::copy(&mut input, &mut w)?;
                w.finish()?.flush()?;
            }
        }
        let encoded_size = std::fs::metadata(&dest)?.len();
        if (encoded_size as f64) <= size as f64 * (1.0 - options.min_saving) {
            forms.push(EncodedForm {
                encoding,
                size: encoded_size,
                key: encoded_key,
                source: dest,
            });
        } else {
            std::fs::remove_file(&dest)?;
        }
    }
    Ok(forms)
}

pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{InventoryEntry, TreeFile};

    #[test]
    fn compresses_text_keeps_images_identity_and_is_reproducible() {
        let dir = tempfile::tempdir().unwrap();
        let text = "function game() { return 42; }\n".repeat(200);
        std::fs::write(dir.path().join("a.js"), &text).unwrap();
        std::fs::write(dir.path().join("b.js"), &text).unwrap();
        std::fs::write(dir.path().join("c.png"), b"\x89PNG not really").unwrap();
        let files: Vec<TreeFile> = [("a.js", text.len()), ("b.js", text.len()), ("c.png", 15)]
            .iter()
            .map(|(p, s)| TreeFile {
                path: p.to_string(),
                size: *s as u64,
            })
            .collect();
        let inventory = Inventory {
            entries: files
                .iter()
                .map(|f| InventoryEntry {
                    path: f.path.clone(),
                    kind: if f.path.ends_with(".js") {
                        FileKind::Js
                    } else {
                        FileKind::Texture
                    },
                    size: f.size,
                    used_by: None,
                    error: None,
                    warnings: vec![],
                })
                .collect(),
        };
        let tree = FileTree {
            root: dir.path().to_owned(),
            files,
        };
        let mut last = 0.0;
        let (out, report) = encode(
            &tree,
            &inventory,
            &dir.path().join("enc1"),
            &EncodeOptions::default(),
            &mut |p| last = p,
        )
        .unwrap();
        assert_eq!(last, 1.0);
        assert_eq!(out[0].key, out[1].key, "same bytes, same key");
        assert_eq!(out[0].encodings.len(), 2);
        assert!(out[2].encodings.is_empty());
        let br = &out[0].encodings[0];
        let mut decoded = Vec::new();
        brotli::Decompressor::new(File::open(&br.source).unwrap(), 4096)
            .read_to_end(&mut decoded)
            .unwrap();
        assert_eq!(decoded, text.as_bytes());
        assert!(report.brotli_bytes < report.identity_bytes);
        let (again, _) = encode(
            &tree,
            &inventory,
            &dir.path().join("enc2"),
            &EncodeOptions::default(),
            &mut |_| {},
        )
        .unwrap();
        for (a, b) in out.iter().zip(&again) {
            for (ea, eb) in a.encodings.iter().zip(&b.encodings) {
                assert_eq!(
                    std::fs::read(&ea.source).unwrap(),
                    std::fs::read(&eb.source).unwrap()
                );
            }
        }
    }
}
