//! The upload use case, apart from HTTP: refuse another team's game before any byte is read,
//! answer a replayed Idempotency-Key with its build, then check the package's first bytes
//! against its declared format, stream it into the object store while hashing it (memory
//! flat whatever its size, the size limit enforced as it flows), record the build and queue
//! it. Nothing is presented as done before the package is stored and the build committed;
//! whatever fails on the way removes the package it stored. `routes/uploads.rs` translates
//! HTTP into [`Upload`] and [`UploadError`] into statuses.

use bytes::Bytes;
use futures::{Stream, StreamExt};
use kiln_common::db::{Db, DbError, Inserted, NewBuild};
use kiln_common::keys;
use kiln_common::metrics;
use kiln_common::package::PackageFormat;
use kiln_common::storage::{Storage, StorageError};
use sha2::{Digest, Sha256};

/// What a team asked to upload, checked for shape by the HTTP layer.
pub struct Upload<'a> {
    pub team: &'a str,
    pub game: &'a str,
    pub version: &'a str,
    /// From the request's Content-Type; the body must be this.
    pub format: PackageFormat,
    pub idempotency_key: Option<&'a str>,
    /// Largest package accepted (`KILN_UPLOAD_MAX_BYTES`).
    pub limit: u64,
}

/// The build an upload names: `existing` when these bytes or this key made it before.
#[derive(Debug)]
pub struct Accepted {
    pub build_id: String,
    pub status: String,
    pub existing: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error("game {0:?} belongs to another team")]
    NotOwner(String),
    #[error("package larger than the {0}-byte limit")]
    TooLarge(u64),
    #[error("upload interrupted: {0}")]
    Interrupted(String),
    #[error("Content-Type says {declared} but the body is a {found} package")]
    FormatMismatch {
        declared: PackageFormat,
        found: PackageFormat,
    },
    #[error("body is not a {0} package (its first bytes are not a {0} signature)")]
    NotAPackage(PackageFormat),
    #[error("could not queue the build: {0}")]
    Queue(String),
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// What can be answered before the body is read: another team's game is refused, and a key
/// this team used for this game before names its build. Nobody's game is claimed only with
/// the build row, once the body passed every check ([`accept`]).
pub async fn before_the_body(
    db: &Db,
    upload: &Upload<'_>,
) -> Result<Option<Accepted>, UploadError> {
    if db
        .game_team(upload.game)
        .await?
        .is_some_and(|owner| owner != upload.team)
    {
        return Err(UploadError::NotOwner(upload.game.to_string()));
    }
    if let Some(key) = upload.idempotency_key
        && let Some(existing) = db
            .build_by_idempotency_key(upload.team, upload.game, key)
            .await?
    {
        return Ok(Some(Accepted {
            build_id: existing.id,
            status: existing.status,
            existing: true,
        }));
    }
    Ok(None)
}

/// Checks, stores, records and queues the package `body` carries; the build's stages are
/// `kiln_jobs::STAGES`, as its status lists them.
pub async fn accept<S, E>(
    db: &Db,
    storage: &Storage,
    upload: &Upload<'_>,
    body: S,
) -> Result<Accepted, UploadError>
where
    S: Stream<Item = Result<Bytes, E>> + Send + Unpin + 'static,
    E: std::fmt::Display,
{
    let mut stream = body;
    // The first bytes before anything is stored: the format must be what was declared.
    let mut head = Vec::new();
    while head.len() < 4 {
        match stream.next().await {
            Some(Ok(chunk)) => head.extend_from_slice(&chunk),
            Some(Err(e)) => return Err(UploadError::Interrupted(e.to_string())),
            None => break,
        }
    }
    match PackageFormat::sniff(&head) {
        Some(found) if found == upload.format => {}
        Some(found) => {
            return Err(UploadError::FormatMismatch {
                declared: upload.format,
                found,
            });
        }
        None => return Err(UploadError::NotAPackage(upload.format)),
    }

    let build_id = uuid::Uuid::now_v7().to_string();
    let package_key = keys::package_key(&build_id, upload.format.extension());
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    let limit = upload.limit;
    let head_chunk = futures::stream::once(async move { Ok::<_, E>(Bytes::from(head)) });
    let counted = head_chunk.chain(stream).map(|chunk| {
        // Why the body stopped early rides through the store's I/O error as the refusal.
        let chunk =
            chunk.map_err(|e| std::io::Error::other(UploadError::Interrupted(e.to_string())))?;
        size += chunk.len() as u64;
        if size > limit {
            return Err(std::io::Error::other(UploadError::TooLarge(limit)));
        }
        hasher.update(&chunk);
        metrics::UPLOAD_BYTES.inc_by(chunk.len() as u64);
        Ok(chunk)
    });
    match storage.put_stream(&package_key, counted).await {
        Ok(_) => {}
        Err(StorageError::Source(e)) => {
            let _ = storage.delete(&package_key).await;
            return Err(
                match e
                    .get_ref()
                    .and_then(|inner| inner.downcast_ref::<UploadError>())
                {
                    Some(UploadError::TooLarge(limit)) => UploadError::TooLarge(*limit),
                    _ => UploadError::Interrupted(e.to_string()),
                },
            );
        }
        Err(e) => {
            let _ = storage.delete(&package_key).await;
            return Err(e.into());
        }
    }
    let sha256 = hex::encode(hasher.finalize());

    let inserted = db
        .insert_build(
            NewBuild {
                id: &build_id,
                team_id: upload.team,
                game: upload.game,
                version: upload.version,
                package_key: &package_key,
                package_format: upload.format.extension(),
                package_sha256: &sha256,
                package_size: size as i64,
                idempotency_key: upload.idempotency_key,
            },
            kiln_jobs::STAGES,
        )
        .await;
    let build = match inserted {
        Ok(Inserted::New(build)) => build,
        Ok(Inserted::Existing(existing)) => {
            // Same bytes for the same game and version: keep the first upload only.
            let _ = storage.delete(&package_key).await;
            return Ok(Accepted {
                build_id: existing.id,
                status: existing.status,
                existing: true,
            });
        }
        Ok(Inserted::NotOwner) => {
            // Another team claimed the name while this body was streaming.
            let _ = storage.delete(&package_key).await;
            return Err(UploadError::NotOwner(upload.game.to_string()));
        }
        Err(e) => {
            let _ = storage.delete(&package_key).await;
            return Err(e.into());
        }
    };
    if let Err(e) = kiln_jobs::enqueue(db, &build.id).await {
        let error = UploadError::Queue(e.to_string());
        let _ = db
            .set_build_status(
                &build.id,
                kiln_common::db::BuildStatus::Failed,
                Some(&error.to_string()),
            )
            .await;
        return Err(error);
    }
    tracing::info!(build_id = %build.id, game = %upload.game, version = %upload.version, bytes = size, %sha256, "package stored and queued");
    Ok(Accepted {
        build_id: build.id,
        status: build.status,
        existing: false,
    })
}
