//! Start-up shared by `kiln-worker` and the API's in-process workers.

use std::sync::Arc;
use std::time::Duration;

use kiln_common::config::{AnimationConfig, Config, LibraryConfig, VatSettings};
use kiln_common::db::Db;
use kiln_common::signing::{KeyOrigin, ManifestSigner};
use kiln_common::storage::Storage;

use crate::context::JobContext;
use kiln_stages::pipeline::PipelineOptions;
use kiln_stages::stages::animation::{AnimationOptions, Tolerance};
use kiln_stages::stages::engines::{EngineOptions, EngineRules};
use kiln_stages::stages::geometry::GeometryOptions;
use kiln_stages::stages::images::{self, ImageOptions};
use kiln_stages::stages::vat::{self, VatSelection};

/// The pipeline options a configuration implies.
pub fn pipeline_options(config: &Config) -> anyhow::Result<PipelineOptions> {
    Ok(PipelineOptions {
        unpack: config.unpack.clone(),
        cdn_base: format!("{}/cdn", config.content_url()),
        api_base: config.public_url(),
        content_base: config.content_url(),
        engines: engine_options(&config.library)?,
        geometry: GeometryOptions {
            animation: animation_options(&config.animation),
            ..GeometryOptions::default()
        },
        vat: vat_selection(&config.vat)?,
        images: images::apply(&config.images, &ImageOptions::default())
            .map_err(|e| anyhow::anyhow!("KILN_IMAGES_* / [images]: {e}"))?,
        ..PipelineOptions::default()
    })
}

/// The engine split's options: the shipped detection table plus a team's extra rules.
pub fn engine_options(config: &LibraryConfig) -> anyhow::Result<EngineOptions> {
    let extra = if config.rules_file.is_empty() {
        None
    } else {
        Some(
            std::fs::read_to_string(&config.rules_file)
                .map_err(|e| anyhow::anyhow!("engine rules file {}: {e}", config.rules_file))?,
        )
    };
    Ok(EngineOptions {
        split: config.split,
        rules: Arc::new(EngineRules::load(extra.as_deref()).map_err(anyhow::Error::msg)?),
    })
}

/// The VAT stage's selection from the `[vat]` configuration: overrides checked the same way
/// as a build's `kiln.toml` `[vat]`, on top of the stage's own defaults
/// (`VatOptions::default()`).
pub fn vat_selection(config: &VatSettings) -> anyhow::Result<VatSelection> {
    if !config.file.is_empty() {
        anyhow::bail!("[vat] configuration: [vat.file.*] belongs in a build's kiln.toml");
    }
    vat::select(config, &VatSelection::default())
        .map_err(|e| anyhow::anyhow!("[vat] configuration: {e}"))
}

/// The animation pass's options: the `[animation]` overrides on top of the stage's own
/// defaults (`AnimationOptions::default()`, the only place they are written); `None` when
/// the pass is off.
pub fn animation_options(config: &AnimationConfig) -> Option<AnimationOptions> {
    let defaults = AnimationOptions::default();
    config.enabled.then(|| AnimationOptions {
        tolerance: match (config.tolerance_abs, config.tolerance) {
            (Some(abs), _) if abs > 0.0 => Tolerance::Absolute(abs),
            (_, Some(relative)) => Tolerance::Relative(relative),
            _ => defaults.tolerance,
        },
        rotation_bits: config
            .rotation_bits
            .unwrap_or(defaults.rotation_bits)
            .clamp(4, 16),
        translation_bits: config
            .translation_bits
            .unwrap_or(defaults.translation_bits)
            .clamp(1, 24),
        scale_bits: config
            .scale_bits
            .unwrap_or(defaults.scale_bits)
            .clamp(1, 24),
        weight_bits: config
            .weight_bits
            .unwrap_or(defaults.weight_bits)
            .clamp(1, 24),
        ..defaults.clone()
    })
}

/// Loads (or, on first start, generates) the signing key and publishes its public half.
pub async fn load_signer(config: &Config, db: &Db) -> anyhow::Result<Arc<ManifestSigner>> {
    let path = config.signing_key_path();
    let (signer, origin) = ManifestSigner::load_or_generate(&path)?;
    if origin == KeyOrigin::Generated {
        tracing::warn!(
            kid = signer.kid(),
            path = %path.display(),
            "generated a development signing key; set KILN_SIGNING_KEY_FILE in production"
        );
    } else {
        tracing::info!(kid = signer.kid(), "signing key loaded");
    }
    db.register_key(&signer.public_jwk()).await?;
    Ok(Arc::new(signer))
}

/// The roots the trust document lists, after checking that it lists `signer` (issuing the
/// first document where there is none: `keys::ensure_listed`). Rewritten pages pin these.
/// A worker learns a new signing key or root when it restarts (docs/key-rotation.md).
pub async fn trust_roots(
    config: &Config,
    db: &Db,
    signer: &ManifestSigner,
) -> anyhow::Result<Vec<kiln_common::signing::Jwk>> {
    let doc = crate::keys::ensure_listed(config, db, signer).await?;
    tracing::info!(
        version = doc.version,
        expires = %doc.expires,
        roots = doc.roots.len(),
        "trust document"
    );
    Ok(doc.roots)
}

/// Loads (or, on first start, generates) the secret beacon tokens are made with; the API
/// reads the same file (`KILN_TELEMETRY_SECRET_FILE`).
pub fn load_beacon_secret(config: &Config) -> anyhow::Result<kiln_common::telemetry::BeaconSecret> {
    let path = config.telemetry_secret_path();
    let (secret, generated) = kiln_common::telemetry::BeaconSecret::load_or_generate(&path)?;
    if generated {
        tracing::warn!(
            path = %path.display(),
            "generated a telemetry secret; set KILN_TELEMETRY_SECRET_FILE (shared by API and workers) in production"
        );
    }
    Ok(secret)
}

/// What jobs and the release loop need: keys, trust roots, options, a work dir. `db` comes
/// from [`open_database`], which set up the job queue.
pub async fn job_context(
    config: &Config,
    db: Db,
    storage: Storage,
) -> anyhow::Result<Arc<JobContext>> {
    let signer = load_signer(config, &db).await?;
    let trust_roots = trust_roots(config, &db, &signer).await?;
    let beacon_secret = Arc::new(load_beacon_secret(config)?);
    let work_root = config.work_dir();
    tokio::fs::create_dir_all(&work_root).await?;
    Ok(Arc::new(JobContext {
        db,
        storage,
        signer,
        beacon_secret,
        options: PipelineOptions {
            trust_roots,
            ..pipeline_options(config)?
        },
        work_root,
        stage_pause: Duration::from_millis(config.worker.stage_pause_ms),
        transient_retries: config.worker.transient_retries,
        manifest_ttl: Duration::from_secs(config.library.manifest_ttl_secs),
        resign_interval: Duration::from_secs(config.library.resign_interval_secs),
        orphan_grace: Duration::from_secs(config.worker.orphan_secs),
        variants: config.variants.clone(),
    }))
}
