//! The Kiln loader's bytes and the paths it is served at, in one place for the API (which
//! serves it) and the worker (whose page rewrite points pages at it).
//!
//! `/sdk/kiln-loader.js` is the mutable alias (short-lived caching); the versioned path
//! `/sdk/kiln-loader.{hash}.js` names these exact bytes and is cached forever, so a page that
//! uses it never revalidates the loader. The hash is computed from the same bytes the API
//! serves, so the path the worker writes into pages is always one the API answers.

use std::sync::OnceLock;

use sha2::{Digest, Sha256};

/// The loader, served as written (`api/sdk/kiln-loader.js`).
pub const LOADER: &str = include_str!("../../api/sdk/kiln-loader.js");

/// The mutable alias: always the current loader.
pub const PATH: &str = "/sdk/kiln-loader.js";

/// Hex characters of the loader's SHA-256 in its versioned path.
pub const HASH_LEN: usize = 16;

/// The loader's full SHA-256, hex.
pub fn sha256() -> &'static str {
    static SHA: OnceLock<String> = OnceLock::new();
    SHA.get_or_init(|| hex::encode(Sha256::digest(LOADER)))
}

/// The first [`HASH_LEN`] hex characters of the loader's SHA-256: its version in paths.
pub fn hash() -> &'static str {
    &sha256()[..HASH_LEN]
}

/// The loader's file name under `/sdk/` in its versioned form: `kiln-loader.{hash}.js`.
pub fn versioned_file_name() -> String {
    format!("kiln-loader.{}.js", hash())
}

/// The immutable, content-addressed path of the current loader:
/// `/sdk/kiln-loader.{hash}.js` (relative to the Kiln's public URL).
pub fn versioned_path() -> String {
    format!("/sdk/{}", versioned_file_name())
}

/// The path pages should load the loader from: the versioned one ([`versioned_path`]).
pub fn loader_path() -> String {
    versioned_path()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versioned_path_names_these_bytes() {
        let path = versioned_path();
        assert_eq!(path, loader_path());
        let hash = path
            .strip_prefix("/sdk/kiln-loader.")
            .and_then(|p| p.strip_suffix(".js"))
            .unwrap();
        assert_eq!(hash.len(), HASH_LEN);
        assert!(hash.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(hash, &hex::encode(Sha256::digest(LOADER.as_bytes()))[..16]);
        assert!(LOADER.contains("preheat"));
    }
}
