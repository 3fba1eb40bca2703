//! Stage `sign`: write the manifest for the encoded outputs and sign its exact bytes (Ed25519).
//!
//! The manifest is a pure function of the build's identity, its outputs and the CDN base URL,
//! and Ed25519 signatures are deterministic, so a re-run signs the very same bytes.

use kiln_common::keys::{self, Encoding};
use kiln_common::manifest::{
    BeaconToken, BuildIdentity, MANIFEST_SCHEMA, Manifest, ManifestEncoding, ManifestEngine,
    ManifestFile, ManifestImage, ManifestImageEncoding, ManifestModel, ManifestVat, ModelVariant,
    VariantChoice,
};
use kiln_common::signing::ManifestSigner;
use kiln_common::telemetry::BeaconSecret;
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::Stage;
use crate::ir::{EngineFile, ModelPaths, OutputFile, ServedImage};
pub use crate::ir::{SignedManifest, VatBaked};

pub const NAME: &str = "sign";

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SignReport {
    pub kid: String,
    pub manifest_sha256: String,
    pub manifest_bytes: u64,
    pub files: u64,
}

/// What the build's pages load first, and what a model's own path serves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Serving {
    /// `kiln.toml` `[models] serve`: the variant every `.glb` model's own path serves (the
    /// build opted in; `quantized` is read by every glTF loader without a decoder).
    pub variant: Option<String>,
    /// Absolute, immutable URLs the pages fetch first (manifest `warm`).
    pub warm: Vec<String>,
    /// Models the pages load through `kiln.model` (manifest `warm_models`).
    pub warm_models: Vec<String>,
    /// The rewritten pages' folder (manifest `page_base`), where there are any.
    pub page_base: Option<String>,
    /// The build's checked `kiln.toml` `[csp]` extension (manifest `csp`).
    pub csp: kiln_common::csp::Extension,
}

/// What the manifest describes: the build, its encoded outputs and what earlier stages made
/// of them, and the key that signs it.
#[derive(Clone, Copy)]
pub struct SignInput<'a> {
    pub identity: &'a BuildIdentity,
    pub outputs: &'a [OutputFile],
    pub models: &'a [ModelPaths],
    pub vat: &'a [VatBaked],
    /// Images whose path serves re-encoded bytes, with their originals.
    pub images: &'a [ServedImage],
    pub engines: &'a [EngineFile],
    pub serving: &'a Serving,
    pub signer: &'a ManifestSigner,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SignOptions {
    /// The URL prefix objects are served under, e.g. `https://kiln.example/cdn`.
    pub cdn_base: String,
}

/// The sign stage: the build's manifest, signed. It cannot fail.
pub struct Step;

impl Stage for Step {
    const NAME: &'static str = NAME;
    type Input<'a> = SignInput<'a>;
    type Options = SignOptions;
    type Output = SignedManifest;
    type Report = SignReport;
    type Error = std::convert::Infallible;

    fn run(
        input: SignInput<'_>,
        options: &SignOptions,
        _progress: &mut dyn FnMut(f64),
    ) -> Result<(SignedManifest, SignReport), std::convert::Infallible> {
        Ok(sign(input, &options.cdn_base))
    }
}

fn sign(input: SignInput<'_>, cdn_base: &str) -> (SignedManifest, SignReport) {
    let SignInput {
        identity,
        outputs,
        models,
        vat,
        images,
        engines,
        serving,
        signer,
    } = input;
    let base = cdn_base.trim_end_matches('/');
    // A model's own path serves the variant the build opted into, where there is one.
    let served = |o: &OutputFile| -> Option<&OutputFile> {
        let m = models.iter().find(|m| m.source == o.path)?;
        let chosen = match serving.variant.as_deref()? {
            "quantized" => &m.quantized,
            "meshopt" => &m.meshopt,
            _ => return None,
        };
        let glb = |p: &str| p.to_ascii_lowercase().ends_with(".glb");
        if !glb(&o.path) || !glb(chosen) {
            return None;
        }
        outputs.iter().find(|v| v.path == *chosen)
    };
    let mut files: Vec<ManifestFile> = outputs
        .iter()
        .map(|o| (o.path.clone(), served(o).unwrap_or(o)))
        .map(|(path, o)| ManifestFile {
            path,
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
    let models = models
        .iter()
        .filter_map(|m| model_entry(m, outputs, base))
        .collect();
    let manifest = Manifest {
        schema: MANIFEST_SCHEMA,
        game: identity.game.clone(),
        version: identity.version.clone(),
        build_id: identity.build_id.clone(),
        sequence: None,
        expires: None,
        package_sha256: identity.package_sha256.clone(),
        created_at: identity.created_at.clone(),
        files,
        models,
        device_class: None,
        engines: engines
            .iter()
            .filter_map(|e| {
                let output = outputs.iter().find(|o| o.path == e.path)?;
                Some(ManifestEngine {
                    name: e.name.clone(),
                    version: e.version.clone(),
                    sha256: e.sha256.clone(),
                    size: e.size,
                    url: format!("{base}/{}", e.library_key),
                    fallback_url: format!("{base}/{}", output.key),
                    path: e.path.clone(),
                    global: e.global.clone(),
                    module: e.module,
                })
            })
            .collect(),
        images: images
            .iter()
            .filter_map(|image| {
                let encoding = |name: &str, path: &str| {
                    let o = outputs.iter().find(|o| o.path == path)?;
                    Some(ManifestImageEncoding {
                        encoding: name.to_string(),
                        content_type: o.content_type.clone(),
                        size: o.size,
                        url: format!("{base}/{}", o.key),
                    })
                };
                Some(ManifestImage {
                    path: image.path.clone(),
                    served: image.encoding.clone(),
                    encodings: vec![
                        encoding(&image.encoding, &image.path)?,
                        encoding("original", &image.original)?,
                    ],
                })
            })
            .collect(),
        vat: vat
            .iter()
            .filter_map(|v| {
                let output = outputs.iter().find(|o| o.path == v.path)?;
                Some(ManifestVat {
                    source: v.source.clone(),
                    mesh: v.mesh.clone(),
                    path: v.path.clone(),
                    url: format!("{base}/{}", output.key),
                    encoding: v.encoding.clone(),
                })
            })
            .collect(),
        warm: serving.warm.clone(),
        warm_models: serving.warm_models.clone(),
        page_base: serving.page_base.clone(),
        csp: serving.csp.clone(),
        beacon: None,
    };
    let signed = sign_manifest(manifest, signer);
    let report = SignReport {
        kid: signed.signature.kid.clone(),
        manifest_sha256: signed.sha256.clone(),
        manifest_bytes: signed.bytes.len() as u64,
        files: signed.manifest.files.len() as u64,
    };
    (signed, report)
}

/// A release of a build: its manifest with the game's next `sequence`, an `expires` time and
/// the beacon token for both (`HMAC(secret, game|sequence|expires)`, which the API checks on
/// beacons), signed anew. What `/v1/games/{game}/manifest` serves; the per-class manifests
/// made from it carry the same token.
pub fn release(
    build_manifest: &Manifest,
    sequence: u64,
    expires: &str,
    signer: &ManifestSigner,
    beacon: &BeaconSecret,
) -> SignedManifest {
    let mut manifest = build_manifest.clone();
    manifest.sequence = Some(sequence);
    manifest.expires = Some(expires.to_string());
    manifest.beacon = Some(BeaconToken {
        token: beacon.token(&manifest.game, sequence, expires),
        expires: expires.to_string(),
    });
    sign_manifest(manifest, signer)
}

/// A release re-decided for one device class: the same manifest (files, sequence, expiry)
/// with `device_class` set and each model's `choice`, signed on its own.
pub fn for_device_class(
    release_manifest: &Manifest,
    class: &str,
    choices: &[VariantChoice],
    signer: &ManifestSigner,
) -> SignedManifest {
    let mut manifest = release_manifest.clone();
    manifest.device_class = Some(class.to_string());
    for (model, choice) in manifest.models.iter_mut().zip(choices) {
        model.choice = Some(choice.clone());
    }
    sign_manifest(manifest, signer)
}

fn sign_manifest(manifest: Manifest, signer: &ManifestSigner) -> SignedManifest {
    let mut bytes = serde_json::to_vec_pretty(&manifest).expect("manifest serialises");
    bytes.push(b'\n');
    let sha256 = hex::encode(Sha256::digest(&bytes));
    let signature = signer.sign(&bytes);
    SignedManifest {
        key: keys::manifest_key(&sha256),
        manifest,
        bytes,
        sha256,
        signature,
    }
}

/// A model's variants with their sizes; the preferred one is the smallest after brotli,
/// which is what the CDN sends (meshopt data can compress worse than plain quantized data).
fn model_entry(model: &ModelPaths, outputs: &[OutputFile], base: &str) -> Option<ManifestModel> {
    let find = |path: &str| outputs.iter().find(|o| o.path == path);
    let variant = |name: &str, path: &str, gpu_formats: &[String]| {
        let output = find(path)?;
        let brotli = output
            .encodings
            .iter()
            .find(|e| e.encoding == Encoding::Br)
            .map_or(output.size, |e| e.size);
        Some(ModelVariant {
            variant: name.to_string(),
            path: path.to_string(),
            url: format!("{base}/{}", output.key),
            size: output.size,
            brotli_size: brotli,
            // The ktx2 variant's geometry is the meshopt variant's.
            needs_decoder: name == "meshopt" || name == "ktx2",
            gpu_formats: gpu_formats.to_vec(),
        })
    };
    let ktx2 = model
        .ktx2
        .as_ref()
        .and_then(|(path, formats)| variant("ktx2", path, formats));
    let variants: Vec<ModelVariant> = [
        variant("meshopt", &model.meshopt, &[]),
        variant("quantized", &model.quantized, &[]),
        variant("original", &model.source, &[]),
        ktx2,
    ]
    .into_iter()
    .flatten()
    .collect();
    // The ktx2 variant is for the devices whose GPU format it names, which the loader knows:
    // never the preferred one.
    let preferred = variants
        .iter()
        .filter(|v| v.variant != "original" && v.variant != "ktx2")
        .min_by_key(|v| v.brotli_size)?
        .variant
        .clone();
    Some(ManifestModel {
        path: model.source.clone(),
        preferred,
        fallback: "quantized".into(),
        variants,
        choice: None,
    })
}
