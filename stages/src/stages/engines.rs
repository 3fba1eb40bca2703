//! Stage `engines`: find the game engine in a build by its content, split it into the
//! shared offline library, and rewrite the build's pages to get it through the loader.
//!
//! Detection reads `engines.toml` (see [`rules`]); every match becomes an [`EngineFile`]
//! whose bytes the job layer stores once under a content-addressed library key. The engine
//! stays in the build as the pages' last-resort fallback; only the pages change.

pub mod html;
pub mod modules;
pub mod rules;

use std::sync::Arc;

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::{Stage, StageError};
pub use crate::ir::EngineFile;
use crate::ir::{FileKind, FileTree, Files, Inventory};
pub use html::BootLinks;
use html::{BootEngine, PageInputs, PageRewrite, relative_to, rewrite_page};
pub use rules::{Detection, EngineRules};

pub const NAME: &str = "engines";

#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Off: engines stay in the build as they are.
    pub split: bool,
    pub rules: Arc<EngineRules>,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            split: true,
            rules: Arc::new(EngineRules::load(None).expect("the shipped table parses")),
        }
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct EnginesReport {
    pub engines: Vec<EngineFile>,
    /// Pages now loading their engine through the loader.
    pub pages: Vec<PageReport>,
    /// Bytes of engine files the library now serves.
    pub bytes_moved: u64,
    /// Every file of the build as uploaded.
    pub build_bytes: u64,
    /// What a player who holds the engine no longer downloads: `bytes_moved / build_bytes`.
    pub package_reduction: f64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PageReport {
    pub path: String,
    #[serde(flatten)]
    pub rewrite: PageRewrite,
}

#[derive(Debug, thiserror::Error)]
pub enum EnginesError {
    #[error("{path}: {reason}")]
    Io { path: String, reason: String },
    #[error("{0}")]
    Page(String),
}

impl StageError for EnginesError {
    /// A page that cannot be rewritten is the build's; an unreadable file is the machine's.
    fn is_permanent(&self) -> bool {
        matches!(self, Self::Page(_))
    }

    fn file(&self) -> Option<String> {
        match self {
            Self::Io { path, .. } => Some(path.clone()),
            Self::Page(_) => None,
        }
    }
}

/// The build's files, and where its rewritten pages find Kiln.
#[derive(Clone, Copy)]
pub struct EnginesInput<'a> {
    pub files: Files<'a>,
    pub links: &'a BootLinks,
    /// `library_url(key)`: the library object's public URL.
    pub library_url: &'a dyn Fn(&str) -> String,
}

/// The engines stage: detects engines and rewrites the pages in place; the tree comes back
/// with the pages' new sizes.
pub struct Step;

impl Stage for Step {
    const NAME: &'static str = NAME;
    type Input<'a> = EnginesInput<'a>;
    type Options = EngineOptions;
    type Output = FileTree;
    type Report = EnginesReport;
    type Error = EnginesError;

    fn run(
        input: EnginesInput<'_>,
        options: &EngineOptions,
        _progress: &mut dyn FnMut(f64),
    ) -> Result<(FileTree, EnginesReport), EnginesError> {
        let mut tree = input.files.tree.clone();
        let report = split(
            &mut tree,
            input.files.inventory,
            options,
            input.links,
            input.library_url,
        )?;
        Ok((tree, report))
    }
}

fn split(
    tree: &mut FileTree,
    inventory: &Inventory,
    options: &EngineOptions,
    links: &BootLinks,
    library_url: &dyn Fn(&str) -> String,
) -> Result<EnginesReport, EnginesError> {
    let mut report = EnginesReport {
        build_bytes: tree.files.iter().map(|f| f.size).sum(),
        ..Default::default()
    };
    if !options.split {
        return Ok(report);
    }
    let io = |path: &str, e: std::io::Error| EnginesError::Io {
        path: path.to_string(),
        reason: e.to_string(),
    };
    let min_bytes = options.rules.min_bytes();
    for entry in &inventory.entries {
        if entry.kind != FileKind::Js || entry.size < min_bytes || entry.error.is_some() {
            continue;
        }
        let bytes = std::fs::read(tree.root.join(&entry.path)).map_err(|e| io(&entry.path, e))?;
        let found = options.rules.detect(&entry.path, &bytes);
        let Some(first) = found.first() else { continue };
        if found.len() > 1 {
            report.warnings.push(format!(
                "{}: matches several engines ({}); taken as {}",
                entry.path,
                found
                    .iter()
                    .map(|d| d.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                first.name
            ));
        }
        let sha256 = hex::encode(Sha256::digest(&bytes));
        report.engines.push(EngineFile {
            path: entry.path.clone(),
            name: first.name.clone(),
            version: first.version.clone(),
            library_key: kiln_common::keys::library_key(&sha256),
            sha256,
            size: bytes.len() as u64,
            global: first.global.clone(),
            module: first.module,
        });
    }
    report.bytes_moved = report.engines.iter().map(|e| e.size).sum();
    report.package_reduction = if report.build_bytes == 0 {
        0.0
    } else {
        report.bytes_moved as f64 / report.build_bytes as f64
    };
    if report.engines.is_empty() {
        return Ok(report);
    }
    let models: Vec<String> = inventory
        .entries
        .iter()
        .filter(|e| matches!(e.kind, FileKind::Glb | FileKind::Gltf) && e.error.is_none())
        .map(|e| e.path.clone())
        .collect();
    let assets: Vec<String> = inventory
        .entries
        .iter()
        .filter(|e| {
            !matches!(
                e.kind,
                FileKind::Html | FileKind::Js | FileKind::Glb | FileKind::Gltf
            )
        })
        .map(|e| e.path.clone())
        .collect();
    let root = tree.root.clone();
    let paths: std::collections::BTreeSet<String> =
        tree.files.iter().map(|f| f.path.clone()).collect();
    let read = |p: &str| -> Option<String> {
        if !paths.contains(p) {
            return None;
        }
        std::fs::read_to_string(root.join(p)).ok()
    };

    for entry in &inventory.entries {
        if entry.kind != FileKind::Html || entry.error.is_some() {
            continue;
        }
        let path = tree.root.join(&entry.path);
        let bytes = std::fs::read(&path).map_err(|e| io(&entry.path, e))?;
        let Ok(text) = String::from_utf8(bytes) else {
            report.warnings.push(format!(
                "{}: not UTF-8; left as it is (its engine loads the old way)",
                entry.path
            ));
            continue;
        };
        let boot: Vec<BootEngine> = report
            .engines
            .iter()
            .map(|e| BootEngine {
                name: e.name.clone(),
                version: e.version.clone(),
                sha256: e.sha256.clone(),
                size: e.size,
                url: library_url(&e.library_key),
                path: relative_to(&entry.path, &e.path),
                global: e.global.clone(),
                module: e.module,
                build_path: e.path.clone(),
            })
            .collect();
        let inputs = PageInputs {
            engines: &boot,
            links,
            read: &read,
            models: &models,
            assets: &assets,
        };
        let Some((rewritten, rewrite)) =
            rewrite_page(&entry.path, &text, &inputs).map_err(EnginesError::Page)?
        else {
            continue;
        };
        std::fs::write(&path, &rewritten).map_err(|e| io(&entry.path, e))?;
        if let Some(file) = tree.files.iter_mut().find(|f| f.path == entry.path) {
            file.size = rewritten.len() as u64;
        }
        report.pages.push(PageReport {
            path: entry.path.clone(),
            rewrite,
        });
    }
    for engine in &report.engines {
        let used = report
            .pages
            .iter()
            .any(|p| p.rewrite.engines.contains(&engine.path));
        if !used {
            report.warnings.push(format!(
                "{}: {} {} is in the library but no page loads it with a <script> or an import the rewrite can follow; the game loads it the old way",
                engine.path, engine.name, engine.version
            ));
        }
    }
    Ok(report)
}
