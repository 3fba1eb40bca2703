//! Stage `sign`: write the manifest for the encoded outputs and sign its exact bytes (Ed25519).
//!
//! The manifest is a pure function of the build's identity, its outputs and the CDN base URL,
//! and Ed25519 signatures are deterministic, so a re-run signs the very same bytes.

use kiln_common::keys;
use kiln_common::manifest::{
    BuildIdentity, MANIFEST_SCHEMA, Manifest, ManifestEncoding, ManifestFile,
};
use kiln_common::signing::{ManifestSignature, ManifestSigner};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::encode::OutputFile;

pub const NAME: &str = "sign";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedManifest {
    pub manifest: Manifest,
    /// The bytes that were signed and that are served.
    pub bytes: Vec<u8>,
    pub sha256: String,
    pub key: String,
    pub signature: ManifestSignature,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SignReport {
    pub kid: String,
    pub manifest_sha256: String,
    pub manifest_bytes: u64,
    pub files: u64,
}

/// `cdn_base` is the URL prefix objects are served under, e.g. `https://kiln.example/cdn`.
pub fn run(
    identity: &BuildIdentity,
    outputs: &[OutputFile],
    cdn_base: &str,
    signer: &ManifestSigner,
) -> (SignedManifest, SignReport) {
    let base = cdn_base.trim_end_matches('/');
    let mut files: Vec<ManifestFile> = outputs
        .iter()
        .map(|o| ManifestFile {
            path: o.path.clone(),
            sha256: o.sha256.clone(),
            size: o.size,
            content_type: o.content_type.clone(),
            key: o.key.clone(),
            url: format!("{base}/{}", o.key),
            encodings: o
                .encodings
                .iter()
                .map(|e| ManifestEncoding {
                    encoding: e.encoding,
                    size: e.size,
                    key: e.key.clone(),
                })
                .collect(),
        })
        .collect();
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let manifest = Manifest {
        schema: MANIFEST_SCHEMA,
        game: identity.game.clone(),
        version: identity.version.clone(),
        build_id: identity.build_id.clone(),
        package_sha256: identity.package_sha256.clone(),
        created_at: identity.created_at.clone(),
        files,
    };
    let mut bytes = serde_json::to_vec_pretty(&manifest).expect("manifest serialises");
    bytes.push(b'\n');
    let sha256 = hex::encode(Sha256::digest(&bytes));
    let signature = signer.sign(&bytes);
    let report = SignReport {
        kid: signature.kid.clone(),
        manifest_sha256: sha256.clone(),
        manifest_bytes: bytes.len() as u64,
        files: manifest.files.len() as u64,
    };
    (
        SignedManifest {
            key: keys::manifest_key(&sha256),
            manifest,
            bytes,
            sha256,
            signature,
        },
        report,
    )
}
