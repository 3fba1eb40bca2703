//! The published manifest: every file of a build, where it is, and the build's identity.
//!
//! The signature covers the manifest's exact bytes, so the bytes are produced once (by the
//! worker's `sign` stage) and served unchanged; clients verify before parsing.

use serde::{Deserialize, Serialize};

use crate::keys::Encoding;

pub const MANIFEST_SCHEMA: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub schema: u32,
    pub game: String,
    pub version: String,
    pub build_id: String,
    /// Per game, strictly increasing with every release (publish, re-point, re-sign): a
    /// client rejects a manifest with a lower sequence than one it has seen (rollback).
    /// Absent on a build's own manifest, present on every release the API serves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence: Option<u64>,
    /// RFC 3339; a client rejects the manifest after it (freeze). Re-signed before then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<String>,
    /// SHA-256 of the package as uploaded.
    pub package_sha256: String,
    /// When the package was uploaded (RFC 3339); fixed per build so re-runs give equal bytes.
    pub created_at: String,
    /// Sorted by `path`.
    pub files: Vec<ManifestFile>,
    /// Each glTF model's variants (`meshopt`, `quantized`, `original`), in `files` order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<ManifestModel>,
    /// Engine files split into the shared offline library (`docs/engines.md`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub engines: Vec<ManifestEngine>,
    /// Set on a per-device-class manifest (`?device=<class>`): each model's `choice` is
    /// made for this class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_class: Option<String>,
    /// Every image the images stage re-encoded: what its path serves and every encoding
    /// published (the original among them), for hosts and classes that choose.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ManifestImage>,
    /// Vertex animation texture bakes, one per mesh (`docs/vat.md`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vat: Vec<ManifestVat>,
    /// Immutable URLs the build's pages fetch first (their modules, the models they name):
    /// a host's `kiln.preheat` warms them before the game opens.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warm: Vec<String>,
    /// Models the pages load through `kiln.model`: warmed in the device's variant.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warm_models: Vec<String>,
    /// The build's folder under `/play/{game}/@{build}/` that its rewritten pages load from
    /// (their `<base>`): a host warms `warm_models` there, at the URLs the page fetches, not at
    /// their `/cdn/files/…` URLs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_base: Option<String>,
    /// The build's `kiln.toml` `[csp]` extension (checked: nothing that reaches the API
    /// origin), added to the policy its pages are served with (`kiln_common::csp`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub csp: crate::csp::Extension,
    /// On a release: the token the loader sends with its beacons of this game, so Kiln
    /// counts them in its decisions (`docs/telemetry.md`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beacon: Option<BeaconToken>,
}

/// `HMAC-SHA256(telemetry secret, game|sequence|expires)`, hex, valid until `expires`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BeaconToken {
    pub token: String,
    pub expires: String,
}

/// One engine file of the build, served from the shared library.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestEngine {
    /// As in the detection table, e.g. `three`, `phaser`.
    pub name: String,
    pub version: String,
    pub sha256: String,
    pub size: u64,
    /// The library copy: content-addressed, shared by every game with the same bytes.
    pub url: String,
    /// The build's own copy, the last resort when the library copy can't be had.
    pub fallback_url: String,
    /// Where the file sits in the build.
    pub path: String,
    /// The global a classic (UMD) build defines; ES module builds define none.
    pub global: String,
    /// An ES module (loaded by `import`) rather than a classic script.
    pub module: bool,
}

/// One mesh baked into vertex animation textures: its `vat.json` names the mesh, textures and
/// shaders beside it (all of them in `files`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestVat {
    /// The model it was baked from.
    pub source: String,
    pub mesh: String,
    /// Path of its `vat.json` in the build.
    pub path: String,
    pub url: String,
    pub encoding: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestModel {
    /// The model's path in the build (what the game asks for).
    pub path: String,
    /// The variant to load by default: the smallest after brotli.
    pub preferred: String,
    /// The variant to load where the preferred one can't be decoded.
    pub fallback: String,
    pub variants: Vec<ModelVariant>,
    /// On a per-device-class manifest: the variant to load on that class, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub choice: Option<VariantChoice>,
}

/// The variant a device class gets for one model, with the numbers behind it (audit).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VariantChoice {
    pub variant: String,
    /// `measured`, `default` or `slow_class` (`common/src/variants.rs`).
    pub reason: String,
    pub detail: String,
    pub estimates: Vec<VariantEstimate>,
    /// While a candidate lacks measurements on this class: the share of loads (0–1) that
    /// should use it instead, so its decode time gets measured. Absent once both are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explore: Option<Exploration>,
    /// Whether a device of this class that can take the model's `ktx2` variant (its GPU
    /// format among the variant's `gpu_formats`) should; absent when the model has none.
    /// `variant` is then the choice for devices that do not take it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ktx2: Option<Ktx2Choice>,
}

/// The per-class decision on a model's GPU-texture (`ktx2`) variant
/// (`common/src/variants.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ktx2Choice {
    pub take: bool,
    /// `low_memory_class`, `measured` or `default`.
    pub reason: String,
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exploration {
    pub variant: String,
    /// Per mille of loads, so the manifest stays exact (no floats).
    pub per_mille: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VariantEstimate {
    pub variant: String,
    /// After brotli: what the CDN sends.
    pub bytes: u64,
    /// `bytes` over the class's assumed bandwidth.
    pub transfer_ms: u64,
    /// Measured on the class (trusted beacons): the median over clients of each client's
    /// p90; absent without measurements.
    pub decode_p90_ms: Option<u64>,
    pub samples: u64,
    /// Distinct clients behind `samples`.
    #[serde(default)]
    pub clients: u64,
    pub total_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelVariant {
    pub variant: String,
    pub path: String,
    pub url: String,
    pub size: u64,
    pub brotli_size: u64,
    pub needs_decoder: bool,
    /// The GPU formats (`astc`, `bc7`, `etc2`) a `ktx2` variant's textures keep their bounds
    /// on: a loader sends it only to a device that transcodes to one of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_formats: Vec<String>,
}

/// An image and its published encodings; its `path` in `files` serves `served`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestImage {
    pub path: String,
    /// The encoding the path serves (`webp-lossless`, `png-optimized`, `webp-lossy`).
    pub served: String,
    pub encodings: Vec<ManifestImageEncoding>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestImageEncoding {
    /// `original` or the stage's encoding name.
    pub encoding: String,
    pub content_type: String,
    pub size: u64,
    pub url: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestFile {
    /// Path inside the build, `/`-separated.
    pub path: String,
    pub sha256: String,
    pub size: u64,
    pub content_type: String,
    /// Content-addressed object key.
    pub key: String,
    /// Absolute URL of the identity bytes.
    pub url: String,
    /// Pre-compressed forms; the CDN negotiates them from `Accept-Encoding` at the same URL.
    pub encodings: Vec<ManifestEncoding>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestEncoding {
    pub encoding: Encoding,
    pub size: u64,
    pub key: String,
}

/// The identity of a build, as the job layer knows it from the database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildIdentity {
    pub game: String,
    pub version: String,
    pub build_id: String,
    pub package_sha256: String,
    pub created_at: String,
}
