//! Object keys: where each kind of object lives, and the headers its key implies.
//!
//! Published files are content-addressed (`files/ab/abcd….ext`): the same bytes always get the
//! same key, so publishing twice writes nothing new and a CDN may cache forever.

use serde::{Deserialize, Serialize};

/// Cache policy for content-addressed objects: they never change.
pub const IMMUTABLE: &str = "public, max-age=31536000, immutable";
/// Cache policy for the per-game manifest: it moves when a new build publishes.
pub const SHORT_LIVED: &str = "public, max-age=60";
/// Cache policy for private objects (uploaded packages).
pub const PRIVATE: &str = "private, no-store";

/// Headers an object carries in the store and on `/cdn`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectHeaders {
    pub content_type: String,
    pub content_encoding: Option<String>,
    pub cache_control: String,
}

/// A pre-compressed form of a published file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    Br,
    Gzip,
}

impl Encoding {
    /// Suffix appended to the identity key.
    pub fn suffix(self) -> &'static str {
        match self {
            Self::Br => ".br",
            Self::Gzip => ".gz",
        }
    }
    /// The `Content-Encoding` token.
    pub fn token(self) -> &'static str {
        match self {
            Self::Br => "br",
            Self::Gzip => "gzip",
        }
    }
}

/// The uploaded package of a build, kept as it came.
pub fn package_key(build_id: &str, extension: &str) -> String {
    format!("packages/{build_id}.{extension}")
}

/// Content-addressed key of a published file: its sha256 and its extension (which keeps the
/// content type derivable from the key alone).
pub fn file_key(sha256_hex: &str, logical_path: &str) -> String {
    let ext = extension_of(logical_path);
    let ext = if ext.is_empty() { "bin".into() } else { ext };
    format!("files/{}/{}.{}", &sha256_hex[..2], sha256_hex, ext)
}

/// Content-addressed key of an engine file in the shared offline library: the same bytes
/// from any team's build are one object.
pub fn library_key(sha256_hex: &str) -> String {
    format!("library/{}/{}.js", &sha256_hex[..2], sha256_hex)
}

/// Content-addressed key of a manifest.
pub fn manifest_key(sha256_hex: &str) -> String {
    format!("manifests/{sha256_hex}.json")
}

pub fn encoded_key(identity_key: &str, encoding: Encoding) -> String {
    format!("{identity_key}{}", encoding.suffix())
}

/// Lower-case extension of a path, restricted to `[a-z0-9]` so it is safe inside a key.
pub fn extension_of(path: &str) -> String {
    let name = path.rsplit('/').next().unwrap_or(path);
    match name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => {
            let ext = ext.to_ascii_lowercase();
            if !ext.is_empty() && ext.len() <= 16 && ext.bytes().all(|b| b.is_ascii_alphanumeric())
            {
                ext
            } else {
                String::new()
            }
        }
        _ => String::new(),
    }
}

/// The extension of an image format told by its first bytes (PNG, JPEG, WebP, GIF, AVIF,
/// KTX2), whatever the file's name says.
pub fn image_extension(head: &[u8]) -> Option<&'static str> {
    if head.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("png")
    } else if head.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some("jpg")
    } else if head.len() >= 12 && &head[..4] == b"RIFF" && &head[8..12] == b"WEBP" {
        Some("webp")
    } else if head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a") {
        Some("gif")
    } else if head.len() >= 12 && &head[4..8] == b"ftyp" && &head[8..12] == b"avif" {
        Some("avif")
    } else if head.starts_with(b"\xABKTX 20\xBB\r\n\x1A\n") {
        Some("ktx2")
    } else {
        None
    }
}

/// Content type for a logical path, with `charset=utf-8` on text so browsers never guess.
pub fn content_type_for(path: &str) -> String {
    let ext = extension_of(path);
    let mime = match ext.as_str() {
        // Types mime_guess lacks or gets wrong for games.
        "glb" => "model/gltf-binary".to_string(),
        "gltf" => "model/gltf+json".to_string(),
        "wasm" => "application/wasm".to_string(),
        "mjs" | "js" => "text/javascript".to_string(),
        "ktx2" => "image/ktx2".to_string(),
        "basis" => "application/octet-stream".to_string(),
        "bin" | "" => "application/octet-stream".to_string(),
        _ => mime_guess::from_ext(&ext)
            .first_raw()
            .unwrap_or("application/octet-stream")
            .to_string(),
    };
    if mime.starts_with("text/")
        || mime == "application/json"
        || mime == "model/gltf+json"
        || mime == "image/svg+xml"
    {
        format!("{mime}; charset=utf-8")
    } else {
        mime
    }
}

/// Headers for a key: content type from the extension under any encoding suffix.
pub fn headers_for_key(key: &str) -> ObjectHeaders {
    let (identity, encoding) = if let Some(k) = key.strip_suffix(".br") {
        (k, Some("br"))
    } else if let Some(k) = key
        .strip_suffix(".gz")
        .filter(|_| key.starts_with("files/") || key.starts_with("library/"))
    {
        (k, Some("gzip"))
    } else {
        (key, None)
    };
    let cache_control = if key.starts_with("files/")
        || key.starts_with("manifests/")
        || key.starts_with("library/")
    {
        IMMUTABLE
    } else {
        PRIVATE
    };
    ObjectHeaders {
        content_type: if key.starts_with("packages/") {
            if key.ends_with(".zip") {
                "application/zip".into()
            } else {
                "application/gzip".into()
            }
        } else {
            content_type_for(identity)
        },
        content_encoding: encoding.map(str::to_string),
        cache_control: cache_control.into(),
    }
}

/// A key is safe when it is relative, has no empty, `.` or `..` segment and only plain
/// characters: it can then never name a path outside the store's root.
pub fn is_safe_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 512
        && !key.starts_with('/')
        && key.split('/').all(|segment| {
            !segment.is_empty()
                && segment != "."
                && segment != ".."
                && segment
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
        })
}

/// Published objects only: what `/cdn` is allowed to serve.
pub fn is_public_key(key: &str) -> bool {
    is_safe_key(key)
        && (key.starts_with("files/")
            || key.starts_with("manifests/")
            || key.starts_with("library/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_keys_are_content_addressed_with_extension() {
        let sha = "ab".repeat(32);
        assert_eq!(
            file_key(&sha, "js/Three.MODULE.JS"),
            format!("files/ab/{sha}.js")
        );
        assert_eq!(file_key(&sha, "LICENSE"), format!("files/ab/{sha}.bin"));
        assert_eq!(file_key(&sha, "weird.e$t"), format!("files/ab/{sha}.bin"));
    }

    #[test]
    fn headers_follow_the_key() {
        let h = headers_for_key("files/ab/abc.js.br");
        assert_eq!(h.content_type, "text/javascript; charset=utf-8");
        assert_eq!(h.content_encoding.as_deref(), Some("br"));
        assert_eq!(h.cache_control, IMMUTABLE);
        assert_eq!(
            headers_for_key("files/ab/abc.glb").content_type,
            "model/gltf-binary"
        );
        assert_eq!(headers_for_key("packages/x.tar.gz").content_encoding, None);
        assert_eq!(headers_for_key("packages/x.tar.gz").cache_control, PRIVATE);
    }

    #[test]
    fn unsafe_keys_are_refused() {
        for key in [
            "",
            "/etc/passwd",
            "files/../../x",
            "files//x",
            "files/./x",
            "a\\b",
            "files/%2e%2e",
        ] {
            assert!(!is_safe_key(key), "{key}");
        }
        assert!(!is_public_key("packages/abc.zip"));
        assert!(is_public_key("files/ab/abc.js"));
    }
}
