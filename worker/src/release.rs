//! Releases: the signed manifests a game serves, each with the game's next `sequence` and an
//! `expires` time (rollback and freeze protection, checked by the loader).
//!
//! Job layer: only the worker holds the signing key, so it signs every release — on publish,
//! when the API was asked to re-point a game (`release_requests`), and again for every live
//! release past half its lifetime.

use std::time::Duration;

use std::collections::HashMap;

use kiln_common::db::{ClassManifestRow, DbError, ReleaseRow};
use kiln_common::manifest::{Manifest, VariantChoice};
use kiln_common::storage::StorageError;
use kiln_common::{devices, rollups, variants};

use crate::job::JobContext;
use crate::stages::sign;

#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("{0}")]
    Refused(String),
}

/// Why a release was made, as stored and reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Publish,
    Release,
    Resign,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Publish => "publish",
            Self::Release => "release",
            Self::Resign => "resign",
        }
    }
}

/// Signs `build_manifest` as the game's next release, stores it and makes it live. Two
/// writers racing for one sequence: the loser signs again with the next.
pub async fn release(
    context: &JobContext,
    build_manifest: &Manifest,
    reason: Reason,
) -> Result<ReleaseRow, ReleaseError> {
    let game = &build_manifest.game;
    for _ in 0..8 {
        let sequence = context.db.next_sequence(game).await?;
        let expires = expiry(context.manifest_ttl);
        let signed = sign::release(
            build_manifest,
            sequence as u64,
            &expires,
            &context.signer,
            &context.beacon_secret,
        );
        context
            .storage
            .put_bytes(&signed.key, signed.bytes.clone().into())
            .await?;
        let row = ReleaseRow {
            game: game.clone(),
            sequence,
            build_id: build_manifest.build_id.clone(),
            manifest_key: signed.key.clone(),
            sha256: signed.sha256.clone(),
            kid: signed.signature.kid.clone(),
            signature: base64_signature(&signed.signature.signature),
            expires_at: expires,
            reason: reason.as_str().into(),
            created_at: kiln_common::db::now(),
        };
        if context.db.insert_release(&row).await? {
            tracing::info!(game = %game, sequence, build_id = %row.build_id, reason = reason.as_str(), "release signed");
            // The per-class manifests exist from the start; the API serves the base
            // manifest for a class only while they are being made.
            if let Err(e) = decide_variants(context, &row, &signed.manifest).await {
                tracing::warn!(game = %game, sequence, error = %e, "could not sign the per-class manifests yet");
            }
            return Ok(row);
        }
    }
    Err(ReleaseError::Refused(format!(
        "could not take a sequence number for {game} (too many concurrent releases)"
    )))
}

/// Decides, per device class, each model's variant of the release (measured decode times of
/// the game on that class, `kiln_common::variants`) and signs a class manifest where the
/// decision changed. Returns how many were signed.
pub async fn decide_variants(
    context: &JobContext,
    release: &ReleaseRow,
    manifest: &Manifest,
) -> Result<usize, ReleaseError> {
    if manifest.models.is_empty() {
        return Ok(0);
    }
    let since = chrono::Utc::now()
        - chrono::Duration::hours(context.variants.window_hours.min(24 * 365 * 10) as i64);
    let since = rollups::hour_of(&since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    // Trusted beacons only, one vote per client: its p90, then the median across clients.
    let sketches = context
        .db
        .decode_client_sketches(&release.game, &since)
        .await?;
    let p90 = rollups::robust_decodes(&sketches, 0.9);
    let signed_before: HashMap<String, String> = context
        .db
        .class_manifests(&release.game, release.sequence)
        .await?
        .into_iter()
        .map(|row| (row.device_class, row.choices))
        .collect();
    let mut signed = 0;
    for class in devices::CLASSES {
        let stats: variants::DecodeStats = p90
            .iter()
            .filter(|(key, _)| key.device_class == *class)
            .map(|(key, value)| ((key.subject.clone(), key.facet.clone()), *value))
            .collect();
        let choices: Vec<VariantChoice> = manifest
            .models
            .iter()
            .map(|model| variants::choose(model, class, &stats, &context.variants))
            .collect();
        let summary = choice_summary(manifest, &choices);
        if signed_before
            .get(*class)
            .is_some_and(|before| same_decisions(before, &summary))
        {
            continue;
        }
        let doc = sign::for_device_class(manifest, class, &choices, &context.signer);
        context
            .storage
            .put_bytes(&doc.key, doc.bytes.clone().into())
            .await?;
        context
            .db
            .put_class_manifest(&ClassManifestRow {
                game: release.game.clone(),
                sequence: release.sequence,
                device_class: class.to_string(),
                manifest_key: doc.key.clone(),
                sha256: doc.sha256.clone(),
                kid: doc.signature.kid.clone(),
                signature: base64_signature(&doc.signature.signature),
                choices: summary.to_string(),
                created_at: kiln_common::db::now(),
            })
            .await?;
        signed += 1;
    }
    if signed > 0 {
        tracing::info!(game = %release.game, sequence = release.sequence, classes = signed, "per-class manifests signed");
    }
    Ok(signed)
}

/// `[{asset, variant, reason, detail}]`, as stored for the dashboards.
fn choice_summary(manifest: &Manifest, choices: &[VariantChoice]) -> serde_json::Value {
    serde_json::Value::Array(
        manifest
            .models
            .iter()
            .zip(choices)
            .map(|(model, c)| {
                serde_json::json!({
                    "asset": model.path, "variant": c.variant, "reason": c.reason, "detail": c.detail,
                    "explore": c.explore.as_ref().map(|e| &e.variant),
                })
            })
            .collect(),
    )
}

/// Whether two summaries decide the same (the numbers in `detail` move with every beacon;
/// a class manifest is signed again only when a variant, its reason or what to explore
/// changes).
fn same_decisions(stored: &str, summary: &serde_json::Value) -> bool {
    let decisions = |v: &serde_json::Value| -> Vec<[String; 4]> {
        v.as_array()
            .into_iter()
            .flatten()
            .map(|c| ["asset", "variant", "reason", "explore"].map(|k| c[k].to_string()))
            .collect()
    };
    serde_json::from_str::<serde_json::Value>(stored)
        .is_ok_and(|before| decisions(&before) == decisions(summary))
}

/// A build's own (unreleased) manifest, from the store.
async fn build_manifest(context: &JobContext, build_id: &str) -> Result<Manifest, ReleaseError> {
    let Some(row) = context
        .db
        .manifests_for_build(build_id)
        .await?
        .into_iter()
        .next()
    else {
        return Err(ReleaseError::Refused(format!(
            "build {build_id} has not been published"
        )));
    };
    let bytes = context.storage.get_bytes(&row.manifest_key).await?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ReleaseError::Refused(format!("stored manifest of {build_id}: {e}")))
}

/// Signs what the API was asked for, then (with `refresh_variants`) re-decides the live
/// releases' per-class variants, and (with `resign`) re-signs live releases past half their
/// lifetime.
pub async fn tick(
    context: &JobContext,
    resign: bool,
    refresh_variants: bool,
) -> Result<(), ReleaseError> {
    for request in context.db.pending_release_requests().await? {
        if !context.db.claim_release_request(&request.id).await? {
            continue;
        }
        let outcome = match build_manifest(context, &request.build_id).await {
            Ok(manifest) if manifest.game == request.game => {
                release(context, &manifest, Reason::Release).await
            }
            Ok(manifest) => Err(ReleaseError::Refused(format!(
                "build {} belongs to {}, not {}",
                request.build_id, manifest.game, request.game
            ))),
            Err(e) => Err(e),
        };
        let outcome = outcome.map(|row| row.sequence).map_err(|e| e.to_string());
        context
            .db
            .finish_release_request(&request.id, outcome)
            .await?;
    }
    if refresh_variants {
        for live in context.db.live_releases().await? {
            let decided = match context.storage.get_bytes(&live.manifest_key).await {
                Ok(bytes) => match serde_json::from_slice::<Manifest>(&bytes) {
                    Ok(manifest) => decide_variants(context, &live, &manifest).await.map(|_| ()),
                    Err(e) => Err(ReleaseError::Refused(format!("stored release: {e}"))),
                },
                Err(e) => Err(e.into()),
            };
            if let Err(e) = decided {
                tracing::warn!(game = %live.game, sequence = live.sequence, error = %e, "could not re-decide variants");
            }
        }
    }
    if !resign {
        return Ok(());
    }
    let half_life = context.manifest_ttl / 2;
    let due = chrono::Utc::now()
        + chrono::Duration::from_std(half_life).unwrap_or(chrono::Duration::zero());
    let due = due.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    // One game's failure (its manifest unreadable, say) must not keep the others expiring.
    for live in context.db.releases_expiring(&due).await? {
        let resigned = match build_manifest(context, &live.build_id).await {
            Ok(manifest) => release(context, &manifest, Reason::Resign)
                .await
                .map(|_| ()),
            Err(e) => Err(e),
        };
        if let Err(e) = resigned {
            tracing::warn!(game = %live.game, sequence = live.sequence, error = %e, "could not re-sign the live release");
        }
    }
    Ok(())
}

/// Runs [`tick`] until `shutdown`: release requests are answered within `poll`, re-signing
/// is checked every `context.resign_interval`.
pub async fn run(
    context: std::sync::Arc<JobContext>,
    poll: Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut last_resign: Option<std::time::Instant> = None;
    let mut last_refresh: Option<std::time::Instant> = None;
    let refresh_every = Duration::from_secs(context.variants.refresh_secs);
    loop {
        let resign = last_resign.is_none_or(|t| t.elapsed() >= context.resign_interval);
        if resign {
            last_resign = Some(std::time::Instant::now());
        }
        let refresh = last_refresh.is_none_or(|t| t.elapsed() >= refresh_every);
        if refresh {
            last_refresh = Some(std::time::Instant::now());
        }
        if let Err(e) = tick(&context, resign, refresh).await {
            tracing::warn!(error = %e, "release signing failed; will retry");
        }
        tokio::select! {
            _ = tokio::time::sleep(poll) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

fn expiry(ttl: Duration) -> String {
    let at =
        chrono::Utc::now() + chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::days(7));
    at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// A signature as the database stores it.
pub(crate) fn base64_signature(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
