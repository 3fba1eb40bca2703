//! Releases: point a game's live manifest at one of its published builds (a rollback is a
//! release of an older build, with a new, higher sequence), and the game's release history.

use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use kiln_common::db::ReleaseRow;
use serde::{Deserialize, Serialize};

use crate::AppState;
use crate::auth::Team;
use crate::error::{ApiError, ApiJson, ApiPath, ApiResult};

#[derive(Deserialize, utoipa::ToSchema)]
pub struct ReleaseRequest {
    /// A published build of this game.
    pub build_id: String,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct ReleaseView {
    pub game: String,
    pub sequence: i64,
    pub build_id: String,
    pub expires: String,
    /// `publish`, `release` or `resign`.
    pub reason: String,
    pub created_at: String,
    pub manifest_sha256: String,
}

impl From<ReleaseRow> for ReleaseView {
    fn from(r: ReleaseRow) -> Self {
        Self {
            game: r.game,
            sequence: r.sequence,
            build_id: r.build_id,
            expires: r.expires_at,
            reason: r.reason,
            created_at: r.created_at,
            manifest_sha256: r.sha256,
        }
    }
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct PendingRelease {
    pub request_id: String,
    pub status: String,
}

/// How long the request waits for a worker to sign before answering 202.
const WAIT: Duration = Duration::from_secs(20);

#[utoipa::path(post, path = "/v1/games/{game}/releases",
    description = "Makes a published build of the game live: a worker signs its manifest with the game's next sequence. 201 with the release once signed; 202 if no worker signed it within 20 s (it still will).",
    params(("game" = String, Path, description = "The game")),
    request_body = ReleaseRequest,
    responses((status = 201, body = ReleaseView), (status = 202, body = PendingRelease),
        (status = 400, body = crate::error::ErrorBody, description = "not a release request"),
        (status = 401, body = crate::error::ErrorBody),
        (status = 404, body = crate::error::ErrorBody, description = "no such build of this team's game"),
        (status = 409, body = crate::error::ErrorBody, description = "the build is not published, or releasing it failed"),
        (status = 415, body = crate::error::ErrorBody, description = "not application/json"),
        (status = 503, body = crate::error::ErrorBody)),
    security(("team_token" = [])))]
pub async fn create(
    State(state): State<AppState>,
    Team(team): Team,
    ApiPath(game): ApiPath<String>,
    ApiJson(request): ApiJson<ReleaseRequest>,
) -> ApiResult<Response> {
    let build = match state.db.build(&request.build_id).await? {
        Some(b) if b.team_id == team && b.game == game => b,
        _ => {
            return Err(ApiError::not_found(format!(
                "build {} of game {game} not found",
                request.build_id
            )));
        }
    };
    if build.status != "published" {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_published",
            format!(
                "build {} is {}; only a published build can be released",
                build.id, build.status
            ),
        ));
    }
    let id = uuid::Uuid::now_v7().to_string();
    state
        .db
        .create_release_request(&id, &game, &build.id)
        .await?;
    let started = Instant::now();
    while started.elapsed() < WAIT {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let Some(row) = state.db.release_request(&id).await? else {
            break;
        };
        match (row.status.as_str(), row.sequence) {
            ("done", Some(sequence)) => {
                let release = state
                    .db
                    .release(&game, sequence)
                    .await?
                    .ok_or_else(|| ApiError::unavailable("release vanished"))?;
                return Ok((StatusCode::CREATED, Json(ReleaseView::from(release))).into_response());
            }
            ("failed", _) => {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    "release_failed",
                    row.error.unwrap_or_else(|| "release failed".into()),
                ));
            }
            _ => {}
        }
    }
    Ok((
        StatusCode::ACCEPTED,
        Json(PendingRelease {
            request_id: id,
            status: "pending".into(),
        }),
    )
        .into_response())
}

#[utoipa::path(get, path = "/v1/games/{game}/releases",
    description = "The game's releases, newest (live) first.",
    params(("game" = String, Path, description = "The game")),
    responses((status = 200, body = Vec<ReleaseView>), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody),
        (status = 404, body = crate::error::ErrorBody, description = "not one of this team's games"),
        (status = 503, body = crate::error::ErrorBody)),
    security(("team_token" = [])))]
pub async fn list(
    State(state): State<AppState>,
    Team(team): Team,
    ApiPath(game): ApiPath<String>,
) -> ApiResult<Json<Vec<ReleaseView>>> {
    if state.db.game_team(&game).await?.as_deref() != Some(team.as_str()) {
        return Err(ApiError::not_found(format!("game {game} not found")));
    }
    Ok(Json(
        state
            .db
            .releases(&game, 100)
            .await?
            .into_iter()
            .map(ReleaseView::from)
            .collect(),
    ))
}
