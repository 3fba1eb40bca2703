//! `POST /v1/games/{game}/builds`: HTTP in and out of the upload use case (`crate::uploads`:
//! refuse, store while hashing, record, queue). Here: the request's shape (names, version,
//! Content-Type, Content-Length, Idempotency-Key), the concurrent-upload slots, reading what a
//! client still sends after an early answer, and each refusal's status. The client gets `202`
//! only once the package is stored and the build row committed.

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use futures::StreamExt;
use kiln_common::package::PackageFormat;
use serde::{Deserialize, Serialize};

use crate::AppState;
use crate::auth::Team;
use crate::error::{ApiError, ApiPath, ApiQuery, ApiResult};
use crate::uploads::{self, Accepted, Upload, UploadError};

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
        (status = 503, description = "Too many uploads at once, the database or storage down, or the upload took longer than `KILN_UPLOAD_TIMEOUT_SECS` (code `timeout`)", body = crate::error::ErrorBody),
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

    let upload = Upload {
        team: &team,
        game: &game,
        version: &query.version,
        format,
        idempotency_key: idempotency_key.as_deref(),
        limit,
    };
    // Another team's game, or a replayed key: answered before the body is read.
    if let Some(existing) = uploads::before_the_body(&state.db, &upload)
        .await
        .map_err(refused)?
    {
        return Ok(answer(&state, existing));
    }
    let _slot = state
        .upload_slots
        .clone()
        .try_acquire_owned()
        .map_err(|_| ApiError::unavailable("too many uploads in progress; retry shortly"))?;
    let stream = body
        .take()
        .expect("the body is read once")
        .into_data_stream();
    let accepted = uploads::accept(&state.db, &state.storage, &upload, stream)
        .await
        .map_err(refused)?;
    Ok(answer(&state, accepted))
}

/// `202` for a new build, `200` for the one these bytes or this key made before.
fn answer(state: &AppState, accepted: Accepted) -> (StatusCode, Json<UploadResponse>) {
    let status = if accepted.existing {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    let body = response(
        state,
        &accepted.build_id,
        &accepted.status,
        accepted.existing,
    );
    (status, Json(body))
}

/// Each refusal of the use case, as the status its cause deserves.
fn refused(error: UploadError) -> ApiError {
    match error {
        UploadError::NotOwner(game) => not_owner(&game),
        UploadError::TooLarge(limit) => too_large(limit),
        e @ (UploadError::Interrupted(_)
        | UploadError::FormatMismatch { .. }
        | UploadError::NotAPackage(_)) => ApiError::bad_request(e.to_string()),
        e @ UploadError::Queue(_) => ApiError::unavailable(e.to_string()),
        UploadError::Db(e) => e.into(),
        UploadError::Storage(e) => e.into(),
    }
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
