//! Releases: the signed manifests a game serves, each with the game's next `sequence` and an
//! `expires` time (rollback and freeze protection, checked by the loader).
//!
//! Job layer: only the worker holds the signing key, so it signs every release — on publish,
//! when the API was asked to re-point a game (`release_requests`), and again for every live
//! release past half its lifetime.
//!
//! # Releases only move forward on purpose
//!
//! What is live changes only through one compare-and-set on the game's current sequence
//! ([`Db::insert_release_if_live`](kiln_common::db::Db::insert_release_if_live)). Every writer
//! reads what is live, decides with [`decide`], signs `live + 1`, and its insert succeeds only
//! if live is still what it read; a writer that loses reads again and decides again (it never
//! reuses a decision made on what was live before). The rules [`decide`] applies:
//!
//! - **re-sign** ([`Reason::Resign`]) re-signs only what is live now: the release it was due
//!   for must still be the live one; if live moved (a publish, a release request or another
//!   worker's re-sign got there first) there is nothing to do — the new live release is fresh.
//! - **publish** ([`Reason::Publish`]) makes its build live only if no build of the game
//!   uploaded after it (per-game upload order: upload time, then build id) has already been
//!   made live by a publish: a build that finishes late never replaces a newer one. It is then
//!   still published (releasable on request), only not live.
//! - **release request** ([`Reason::Release`], `POST /v1/games/{game}/releases`, rollback) is
//!   on purpose: it wins at the moment it is signed, whatever is live (a later publish of a
//!   build uploaded after the last published one, or another request, moves live on again).

use std::time::Duration;

use std::collections::HashMap;

use kiln_common::db::{ClassManifestRow, DbError, ReleaseRow};
use kiln_common::manifest::{Manifest, VariantChoice};
use kiln_common::metrics;
use kiln_common::storage::StorageError;
use kiln_common::{devices, rollups, variants};

use crate::context::JobContext;
use kiln_stages::stages::sign;

#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("{0}")]
    Refused(String),
}

pub use kiln_common::db::ReleaseReason as Reason;

/// What a writer found when it read the live release, for [`decide`].
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    /// The live release's sequence and build, if the game has one.
    pub live: Option<(i64, &'a str)>,
    /// Publish only: a build uploaded after this one has been made live by a publish.
    pub newer_published: bool,
}

/// What a writer does with what it saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Sign `build_id` as `sequence` (live + 1), inserted only if live is still `expected`.
    Sign { sequence: i64, expected: i64 },
    /// Publish: a newer build is already live by its publish; this one stays unreleased.
    Superseded,
    /// Re-sign: the release it was due for is no longer live; nothing to do.
    Moved,
}

/// The release rules (module docs), as a plain function of what was read. `due` is, for a
/// re-sign, the sequence of the live release it was found due for.
pub fn decide(reason: Reason, seen: Seen<'_>, build_id: &str, due: Option<i64>) -> Decision {
    let live_sequence = seen.live.map_or(0, |(sequence, _)| sequence);
    let sign = Decision::Sign {
        sequence: live_sequence + 1,
        expected: live_sequence,
    };
    match reason {
        Reason::Resign => match seen.live {
            Some((sequence, live_build)) if Some(sequence) == due && live_build == build_id => sign,
            _ => Decision::Moved,
        },
        Reason::Publish if seen.newer_published => Decision::Superseded,
        Reason::Publish | Reason::Release => sign,
    }
}

/// How a release attempt ended.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Signed and live.
    Signed(Box<ReleaseRow>),
    /// See [`Decision::Superseded`].
    Superseded,
    /// See [`Decision::Moved`].
    Moved,
}

/// Compare-and-set attempts before a writer gives up (it is retried: a job as a transient
/// failure, a release request or re-sign on the next tick).
const ATTEMPTS: usize = 16;

/// Signs `build_manifest` as the game's next release by the rules (module docs): reads what
/// is live, decides, signs `live + 1` and stores it only if live did not move meanwhile;
/// otherwise reads and decides again. `due`: for a re-sign, the live sequence it is for.
pub async fn release(
    context: &JobContext,
    build_manifest: &Manifest,
    reason: Reason,
) -> Result<Outcome, ReleaseError> {
    release_as(context, build_manifest, reason, None).await
}

/// Re-signs `live` (a game's live release found due): only if it is still live.
pub async fn resign(context: &JobContext, live: &ReleaseRow) -> Result<Outcome, ReleaseError> {
    let current = context.db.live_release(&live.game).await?;
    if current.as_ref().map(|r| r.sequence) != Some(live.sequence) {
        count(Reason::Resign, "moved");
        return Ok(Outcome::Moved);
    }
    let manifest = build_manifest(context, &live.build_id).await?;
    release_as(context, &manifest, Reason::Resign, Some(live.sequence)).await
}

async fn release_as(
    context: &JobContext,
    build_manifest: &Manifest,
    reason: Reason,
    due: Option<i64>,
) -> Result<Outcome, ReleaseError> {
    let game = &build_manifest.game;
    let build_id = &build_manifest.build_id;
    for _ in 0..ATTEMPTS {
        // Live first, then the rest: anything that changes what the decision depends on
        // (a publish, a release) also moves the live sequence, so the set below fails.
        let live = context.db.live_release(game).await?;
        let newer_published =
            reason == Reason::Publish && context.db.newer_build_published(game, build_id).await?;
        let seen = Seen {
            live: live.as_ref().map(|r| (r.sequence, r.build_id.as_str())),
            newer_published,
        };
        let (sequence, expected) = match decide(reason, seen, build_id, due) {
            Decision::Sign { sequence, expected } => (sequence, expected),
            Decision::Superseded => {
                tracing::info!(game = %game, build_id = %build_id, live = ?seen.live, "published, not made live: a build uploaded after it is live by its publish");
                count(reason, "superseded");
                return Ok(Outcome::Superseded);
            }
            Decision::Moved => {
                tracing::debug!(game = %game, due = ?due, live = ?seen.live, "live release moved; no re-sign needed");
                count(reason, "moved");
                return Ok(Outcome::Moved);
            }
        };
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
            build_id: build_id.clone(),
            manifest_key: signed.key.clone(),
            sha256: signed.sha256.clone(),
            kid: signed.signature.kid.clone(),
            signature: base64_signature(&signed.signature.signature),
            expires_at: expires,
            reason: reason.as_str().into(),
            created_at: kiln_common::db::now(),
        };
        if !context.db.insert_release_if_live(&row, expected).await? {
            // Live moved since it was read: read it again and decide again.
            tracing::debug!(game = %game, sequence, reason = reason.as_str(), "lost the release race; deciding again");
            count(reason, "lost");
            continue;
        }
        count(reason, "won");
        tracing::info!(game = %game, sequence, build_id = %row.build_id, reason = reason.as_str(), "release signed");
        // The per-class manifests exist from the start; the API serves the base
        // manifest for a class only while they are being made.
        if let Err(e) = decide_variants(context, &row, &signed.manifest).await {
            tracing::warn!(game = %game, sequence, error = %e, "could not sign the per-class manifests yet");
        }
        return Ok(Outcome::Signed(Box::new(row)));
    }
    count(reason, "gave_up");
    Err(ReleaseError::Refused(format!(
        "could not make a release of {game} (live moved {ATTEMPTS} times while signing)"
    )))
}

fn count(reason: Reason, outcome: &str) {
    metrics::RELEASE_ATTEMPTS
        .with_label_values(&[reason.as_str(), outcome])
        .inc();
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

/// `[{asset, variant, reason, detail, explore, ktx2}]`, as stored for the dashboards.
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
                    "ktx2": c.ktx2.as_ref().map(|k| serde_json::json!({"take": k.take, "reason": k.reason})),
                })
            })
            .collect(),
    )
}

/// Whether two summaries decide the same (the numbers in `detail` move with every beacon;
/// a class manifest is signed again only when a variant, its reason, what to explore or the
/// ktx2 decision changes).
fn same_decisions(stored: &str, summary: &serde_json::Value) -> bool {
    let decisions = |v: &serde_json::Value| -> Vec<[String; 5]> {
        v.as_array()
            .into_iter()
            .flatten()
            .map(|c| ["asset", "variant", "reason", "explore", "ktx2"].map(|k| c[k].to_string()))
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
                match release(context, &manifest, Reason::Release).await {
                    Ok(Outcome::Signed(row)) => Ok(*row),
                    Ok(other) => Err(ReleaseError::Refused(format!(
                        "release of {} not made: {other:?}",
                        request.build_id
                    ))),
                    Err(e) => Err(e),
                }
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
        // Only what is live now is re-signed; `resign` checks again at the set.
        if let Err(e) = self::resign(context, &live).await {
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
