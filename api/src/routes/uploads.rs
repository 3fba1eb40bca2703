//! `POST /v1/games/{game}/builds`: stream a package into object storage, then queue it.
//!
//! The body goes to the store chunk by chunk while its SHA-256 is computed, so memory stays
//! flat whatever the size. Only when the object is stored and the build row committed does
//! the client get `202`.

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use bytes::Bytes;
use futures::StreamExt;
use kiln_common::db::{Inserted, NewBuild};
use kiln_common::keys;
use kiln_common::metrics;
use kiln_common::package::PackageFormat;
use kiln_common::storage::StorageError;
use kiln_jobs::STAGES;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::AppState;
use crate::auth::Team;
use crate::error::{ApiError, ApiPath, ApiQuery, ApiResult};

#[derive(Deserialize, utoipa::IntoParams)]
pub struct UploadQuery {
    /// The game's version this package is (`1.4.2`, a commit, a CI run id).
    #[param(min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9._+-]+$")]
    pub version: String,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct UploadResponse {
    pub build_id: String,
    pub status: String,
    pub status_url: String,
    pub events_url: String,
    pub report_url: String,
    /// True when these bytes (or this idempotency key) were uploaded before: nothing new runs.
    pub existing: bool,
}

/// Game names end up in URLs and keys: lower-case letters, digits, `-` and `_`.
pub fn valid_game(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && !name.starts_with(['-', '_'])
}

fn valid_version(v: &str) -> bool {
    (1..=128).contains(&v.len())
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'+'))
}

fn format_from_content_type(headers: &HeaderMap) -> ApiResult<PackageFormat> {
    let value = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mime = value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match mime.as_str() {
        "application/zip" | "application/x-zip-compressed" => Ok(PackageFormat::Zip),
        "application/gzip"
        | "application/x-gzip"
        | "application/x-tar+gzip"
        | "application/tar+gzip" => Ok(PackageFormat::TarGz),
        _ => Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!(
                "Content-Type {value:?} is not a package: send application/zip or application/gzip (tar.gz)"
            ),
        )),
    }
}

/// Why the body stream stopped early.
#[derive(Debug)]
enum BodyStop {
    TooLarge(u64),
    Client(String),
}

impl std::fmt::Display for BodyStop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooLarge(limit) => write!(f, "package larger than the {limit}-byte limit"),
            Self::Client(e) => write!(f, "upload interrupted: {e}"),
        }
    }
}

impl std::error::Error for BodyStop {}

#[utoipa::path(
    post,
    path = "/v1/games/{game}/builds",
    params(("game" = String, Path, description = "Game name: a-z, 0-9, - and _"), UploadQuery,
           ("Idempotency-Key" = Option<String>, Header, min_length = 1, max_length = 255, description = "Same key (for the same game), same build; a new key after a failed build of the same bytes makes a new build")),
    request_body(content = Vec<u8>, content_type = "application/zip", description = "The package (zip or tar.gz)"),
    responses(
        (status = 202, description = "Stored and queued", body = UploadResponse),
        (status = 200, description = "These bytes were uploaded before (and did not fail, or no new Idempotency-Key came), or this key was used for this game: the existing build", body = UploadResponse),
        (status = 400, description = "Bad game name, version, Idempotency-Key or query string; body is not the declared format, or was cut short", body = crate::error::ErrorBody),
        (status = 401, description = "No or unknown token", body = crate::error::ErrorBody),
        (status = 403, description = "The game belongs to another team", body = crate::error::ErrorBody),
        (status = 413, description = "Package over the size limit", body = crate::error::ErrorBody),
        (status = 415, description = "Content-Type is not a package", body = crate::error::ErrorBody),
        (status = 408, description = "The upload took longer than `KILN_UPLOAD_TIMEOUT_SECS`", body = crate::error::ErrorBody),
        (status = 503, description = "Too many uploads at once, or the database or storage down", body = crate::error::ErrorBody),
    ),
    security(("team_token" = []))
)]
pub async fn upload(
    State(state): State<AppState>,
    Team(team): Team,
    ApiPath(game): ApiPath<String>,
    ApiQuery(query): ApiQuery<UploadQuery>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<(StatusCode, Json<UploadResponse>)> {
    // A client that sent `Expect: 100-continue` waits for us and sends no body after a
    // refusal; reading it would ask for it (hyper answers `100 Continue` on the first read).
    let waits_for_continue = headers
        .get(header::EXPECT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
    let mut unread = Some(body);
    let answer = receive(state, team, game, query, headers, &mut unread).await;
    // Answered before reading the body (a refusal, or the build an Idempotency-Key names):
    // read what the client is still sending, within bounds, so that closing the connection
    // does not reset it before the client has read the answer.
    if let Some(body) = unread
        && !waits_for_continue
    {
        drain(body).await;
    }
    answer
}

/// At most this much of a body answered before it was read is read and dropped, for at most
/// [`DRAIN_SECS`]; past either, the connection closes with the rest unread.
const DRAIN_MAX_BYTES: u64 = 16 << 20;
const DRAIN_SECS: u64 = 5;

async fn drain(body: Body) {
    let mut stream = body.into_data_stream();
    let mut read = 0u64;
    let _ = tokio::time::timeout(std::time::Duration::from_secs(DRAIN_SECS), async {
        while let Some(Ok(chunk)) = stream.next().await {
            read += chunk.len() as u64;
            if read > DRAIN_MAX_BYTES {
                break;
            }
        }
    })
    .await;
}

/// The upload itself; `body` is taken once the checks that need no body have passed.
async fn receive(
    state: AppState,
    team: String,
    game: String,
    query: UploadQuery,
    headers: HeaderMap,
    body: &mut Option<Body>,
) -> ApiResult<(StatusCode, Json<UploadResponse>)> {
    if !valid_game(&game) {
        return Err(ApiError::bad_request(
            "game names are 1-64 characters of a-z, 0-9, - and _",
        ));
    }
    if !valid_version(&query.version) {
        return Err(ApiError::bad_request(
            "version is 1-128 characters of A-Z, a-z, 0-9, ., -, _ and +",
        ));
    }
    let format = format_from_content_type(&headers)?;
    let limit = state.config.upload.max_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit) {
        return Err(too_large(limit));
    }
    let idempotency_key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    if idempotency_key
        .as_ref()
        .is_some_and(|k| k.is_empty() || k.len() > 255)
    {
        return Err(ApiError::bad_request(
            "Idempotency-Key must be 1-255 characters",
        ));
    }

    // Another team's game is refused before the body is read. Nobody's game is claimed
    // only with the build row, once the body passed every check (a rejected upload claims
    // nothing: `Db::insert_build`).
    if state
        .db
        .game_team(&game)
        .await?
        .is_some_and(|owner| owner != team)
    {
        return Err(not_owner(&game));
    }
    if let Some(key) = &idempotency_key
        && let Some(existing) = state.db.build_by_idempotency_key(&team, &game, key).await?
    {
        return Ok((
            StatusCode::OK,
            Json(response(&state, &existing.id, &existing.status, true)),
        ));
    }

    let _slot = state
        .upload_slots
        .clone()
        .try_acquire_owned()
        .map_err(|_| ApiError::unavailable("too many uploads in progress; retry shortly"))?;

    // Look at the first bytes before storing anything: the format must be what was declared.
    let mut stream = body
        .take()
        .expect("the body is read once")
        .into_data_stream();
    let mut head = Vec::new();
    while head.len() < 4 {
        match stream.next().await {
            Some(Ok(chunk)) => head.extend_from_slice(&chunk),
            Some(Err(e)) => return Err(ApiError::bad_request(format!("upload interrupted: {e}"))),
            None => break,
        }
    }
    match PackageFormat::sniff(&head) {
        Some(found) if found == format => {}
        Some(found) => {
            return Err(ApiError::bad_request(format!(
                "Content-Type says {format} but the body is a {found} package"
            )));
        }
        None => {
            return Err(ApiError::bad_request(format!(
                "body is not a {format} package (its first bytes are not a {format} signature)"
            )));
        }
    }

    let build_id = uuid::Uuid::now_v7().to_string();
    let package_key = keys::package_key(&build_id, format.extension());
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    let head_chunk = futures::stream::once(async move { Ok::<_, axum::Error>(Bytes::from(head)) });
    let counted = head_chunk.chain(stream).map(|chunk| {
        let chunk = chunk.map_err(|e| std::io::Error::other(BodyStop::Client(e.to_string())))?;
        size += chunk.len() as u64;
        if size > limit {
            return Err(std::io::Error::other(BodyStop::TooLarge(limit)));
        }
        hasher.update(&chunk);
        metrics::UPLOAD_BYTES.inc_by(chunk.len() as u64);
        Ok(chunk)
    });
    match state.storage.put_stream(&package_key, counted).await {
        Ok(_) => {}
        Err(StorageError::Source(e)) => {
            let _ = state.storage.delete(&package_key).await;
            return Err(
                match e
                    .get_ref()
                    .and_then(|inner| inner.downcast_ref::<BodyStop>())
                {
                    Some(BodyStop::TooLarge(limit)) => too_large(*limit),
                    _ => ApiError::bad_request(format!("upload interrupted: {e}")),
                },
            );
        }
        Err(e) => {
            let _ = state.storage.delete(&package_key).await;
            return Err(e.into());
        }
    }
    let sha256 = hex::encode(hasher.finalize());

    let inserted = state
        .db
        .insert_build(
            NewBuild {
                id: &build_id,
                team_id: &team,
                game: &game,
                version: &query.version,
                package_key: &package_key,
                package_format: format.extension(),
                package_sha256: &sha256,
                package_size: size as i64,
                idempotency_key: idempotency_key.as_deref(),
            },
            STAGES,
        )
        .await;
    let build = match inserted {
        Ok(Inserted::New(build)) => build,
        Ok(Inserted::Existing(existing)) => {
            // Same bytes for the same game and version: keep the first upload only.
            let _ = state.storage.delete(&package_key).await;
            return Ok((
                StatusCode::OK,
                Json(response(&state, &existing.id, &existing.status, true)),
            ));
        }
        Ok(Inserted::NotOwner) => {
            // Another team claimed the name while this body was streaming.
            let _ = state.storage.delete(&package_key).await;
            return Err(not_owner(&game));
        }
        Err(e) => {
            let _ = state.storage.delete(&package_key).await;
            return Err(e.into());
        }
    };
    if let Err(e) = kiln_jobs::enqueue(&state.db, &build.id).await {
        let reason = format!("could not queue the build: {e}");
        let _ = state
            .db
            .set_build_status(
                &build.id,
                kiln_common::db::BuildStatus::Failed,
                Some(&reason),
            )
            .await;
        return Err(ApiError::unavailable(reason));
    }
    tracing::info!(build_id = %build.id, %game, version = %query.version, bytes = size, %sha256, "package stored and queued");
    Ok((
        StatusCode::ACCEPTED,
        Json(response(&state, &build.id, &build.status, false)),
    ))
}

fn not_owner(game: &str) -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "forbidden",
        format!("game {game:?} belongs to another team"),
    )
}

fn too_large(limit: u64) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        format!("package larger than the {limit}-byte limit"),
    )
}

pub(crate) fn response(state: &AppState, id: &str, status: &str, existing: bool) -> UploadResponse {
    let base = state.config.public_url();
    UploadResponse {
        build_id: id.to_string(),
        status: status.to_string(),
        status_url: format!("{base}/v1/builds/{id}"),
        events_url: format!("{base}/v1/builds/{id}/events"),
        report_url: format!("{base}/v1/builds/{id}/report"),
        existing,
    }
}
