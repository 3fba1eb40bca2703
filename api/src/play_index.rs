//! Parsed manifests for `/play/`: each build's files by path, cached by an immutable key so
//! a request for a game's file costs no store read and no JSON parsing.
//!
//! Keys are the manifest's own object key (content-addressed: a release, re-signed or
//! re-pointed, is a new key) or `@{game}/{build_id}` for a build's own manifest (a build has
//! exactly one). Either names the same bytes forever, so entries never go stale; the cache
//! is bounded (entries and files) and forgets the least recently used first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kiln_common::keys::{self, Encoding};
use kiln_common::manifest::Manifest;
use kiln_common::storage::Storage;

use crate::error::{ApiError, ApiResult};

/// One file of a build as `/play/` serves it: everything `serve` needs without the store.
#[derive(Debug, Clone)]
pub struct PlayFile {
    /// The identity object's key.
    pub key: String,
    pub size: u64,
    /// Pre-compressed forms and their sizes.
    pub forms: Vec<(Encoding, u64)>,
    /// Served with `no-cache` on the live routes (revalidated every visit).
    pub is_html: bool,
}

/// A build's files by path.
#[derive(Debug)]
pub struct BuildIndex {
    pub build_id: String,
    files: HashMap<String, PlayFile>,
    /// The build's `[csp]` extension, added to the policy its files are served with.
    pub csp: kiln_common::csp::Extension,
}

impl BuildIndex {
    pub fn of(manifest: &Manifest) -> Self {
        let files = manifest
            .files
            .iter()
            .map(|f| {
                let file = PlayFile {
                    is_html: keys::headers_for_key(&f.key)
                        .content_type
                        .starts_with("text/html"),
                    key: f.key.clone(),
                    size: f.size,
                    forms: f.encodings.iter().map(|e| (e.encoding, e.size)).collect(),
                };
                (f.path.clone(), file)
            })
            .collect();
        Self {
            build_id: manifest.build_id.clone(),
            files,
            csp: manifest.csp.clone(),
        }
    }

    pub fn file(&self, path: &str) -> Option<&PlayFile> {
        self.files.get(path)
    }

    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

/// A bounded least-recently-used map of [`BuildIndex`]es, shared by every request.
pub struct ManifestCache {
    max_entries: usize,
    max_files: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    tick: u64,
    files: usize,
    entries: HashMap<String, (Arc<BuildIndex>, u64)>,
}

impl Default for ManifestCache {
    /// 256 manifests and 200 000 files in all (tens of MB at most).
    fn default() -> Self {
        Self::new(256, 200_000)
    }
}

impl ManifestCache {
    pub fn new(max_entries: usize, max_files: usize) -> Self {
        Self {
            max_entries: max_entries.max(1),
            max_files,
            inner: Mutex::new(Inner::default()),
        }
    }

    pub fn get(&self, key: &str) -> Option<Arc<BuildIndex>> {
        let mut inner = self.inner.lock().expect("manifest cache");
        inner.tick += 1;
        let tick = inner.tick;
        let (index, used) = inner.entries.get_mut(key)?;
        *used = tick;
        Some(index.clone())
    }

    pub fn insert(&self, key: &str, index: Arc<BuildIndex>) {
        let mut inner = self.inner.lock().expect("manifest cache");
        inner.tick += 1;
        let tick = inner.tick;
        inner.files += index.len();
        if let Some((old, _)) = inner.entries.insert(key.to_string(), (index, tick)) {
            inner.files -= old.len();
        }
        // Forget the least recently used until within bounds; the newest always stays.
        while inner.entries.len() > self.max_entries
            || (inner.files > self.max_files && inner.entries.len() > 1)
        {
            let oldest = inner
                .entries
                .iter()
                .filter(|(k, _)| k.as_str() != key)
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone());
            let Some(oldest) = oldest else { break };
            if let Some((old, _)) = inner.entries.remove(&oldest) {
                inner.files -= old.len();
            }
        }
    }

    pub fn len(&self) -> usize {
        self.inner.lock().expect("manifest cache").entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The index cached under `cache_key`, or the manifest at `manifest_key` read from the
    /// store, parsed and cached under `cache_key`.
    pub async fn load(
        &self,
        storage: &Storage,
        cache_key: &str,
        manifest_key: &str,
    ) -> ApiResult<Arc<BuildIndex>> {
        if let Some(index) = self.get(cache_key) {
            return Ok(index);
        }
        let bytes = storage.get_bytes(manifest_key).await?;
        let manifest: Manifest = serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::unavailable(format!("stored manifest unreadable: {e}")))?;
        let index = Arc::new(BuildIndex::of(&manifest));
        self.insert(cache_key, index.clone());
        Ok(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(build: &str, files: usize) -> Arc<BuildIndex> {
        Arc::new(BuildIndex {
            build_id: build.into(),
            files: (0..files)
                .map(|i| {
                    (
                        format!("f{i}"),
                        PlayFile {
                            key: format!("files/00/{i}.js"),
                            size: 1,
                            forms: vec![],
                            is_html: false,
                        },
                    )
                })
                .collect(),
            csp: Default::default(),
        })
    }

    #[test]
    fn forgets_the_least_recently_used_within_bounds() {
        let cache = ManifestCache::new(2, 10);
        cache.insert("a", index("a", 1));
        cache.insert("b", index("b", 1));
        assert!(cache.get("a").is_some()); // a is now newer than b
        cache.insert("c", index("c", 1));
        assert!(cache.get("b").is_none());
        assert!(cache.get("a").is_some() && cache.get("c").is_some());
        // Too many files: the oldest go until within bounds, and the newest stays even
        // when it alone is over the bound.
        cache.insert("d", index("d", 9));
        assert_eq!(cache.len(), 2);
        assert!(cache.get("a").is_none());
        assert!(cache.get("d").is_some());
        cache.insert("e", index("e", 20));
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.get("e").unwrap().build_id, "e");
    }
}
