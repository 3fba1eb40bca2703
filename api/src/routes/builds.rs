//! Build status, its live event stream (SSE) and the per-file report.
//!
//! A team sees only its own builds: another team's build id answers `404`, exactly like an
//! id that does not exist, so ids leak nothing.

use std::convert::Infallible;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use kiln_common::db::{BuildRow, BuildStatus, StageRow};
use serde::Serialize;

use crate::AppState;
use crate::auth::Team;
use crate::error::{ApiError, ApiPath, ApiResult};

#[derive(Serialize, PartialEq, Clone, utoipa::ToSchema)]
pub struct BuildView {
    pub build_id: String,
    pub game: String,
    pub version: String,
    /// `queued`, `processing`, `published` or `failed`.
    pub status: String,
    pub error: Option<String>,
    pub package: PackageView,
    #[schema(value_type = Vec<Object>)]
    pub stages: Vec<StageRow>,
    /// Share of stages done, 0–1, for a progress bar.
    pub progress: f64,
    pub created_at: String,
    pub updated_at: String,
    /// Once published: the manifest object key and the game's manifest URL.
    pub manifest_key: Option<String>,
    pub manifest_url: Option<String>,
    pub report_url: String,
}

#[derive(Serialize, PartialEq, Clone, utoipa::ToSchema)]
pub struct PackageView {
    pub sha256: String,
    pub size: i64,
    pub format: String,
}

async fn owned_build(state: &AppState, team: &str, id: &str) -> ApiResult<BuildRow> {
    match state.db.build(id).await? {
        Some(build) if build.team_id == team => Ok(build),
        _ => Err(ApiError::not_found(format!("build {id} not found"))),
    }
}

async fn view(state: &AppState, build: BuildRow) -> ApiResult<BuildView> {
    let stages = state.db.stages(&build.id).await?;
    let progress = if stages.is_empty() {
        0.0
    } else {
        stages
            .iter()
            .map(|s| {
                if s.status == "succeeded" {
                    1.0
                } else {
                    s.progress.clamp(0.0, 1.0)
                }
            })
            .sum::<f64>()
            / stages.len() as f64
    };
    let base = state.config.public_url();
    Ok(BuildView {
        manifest_url: build
            .manifest_key
            .as_ref()
            .map(|_| format!("{base}/v1/games/{}/manifest", build.game)),
        report_url: format!("{base}/v1/builds/{}/report", build.id),
        build_id: build.id,
        game: build.game,
        version: build.version,
        status: build.status,
        error: build.error,
        package: PackageView {
            sha256: build.package_sha256,
            size: build.package_size,
            format: build.package_format,
        },
        stages,
        progress,
        created_at: build.created_at,
        updated_at: build.updated_at,
        manifest_key: build.manifest_key,
    })
}

#[utoipa::path(get, path = "/v1/builds/{id}",
    params(("id" = String, Path, description = "The build id")),
    responses((status = 200, body = BuildView), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody), (status = 404, body = crate::error::ErrorBody),
        (status = 503, body = crate::error::ErrorBody)),
    security(("team_token" = [])))]
pub async fn status(
    State(state): State<AppState>,
    Team(team): Team,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<BuildView>> {
    let build = owned_build(&state, &team, &id).await?;
    Ok(Json(view(&state, build).await?))
}

#[utoipa::path(get, path = "/v1/builds/{id}/events",
    description = "Server-Sent Events: a `status` event (the build view) whenever it changes, ending with `done`.",
    params(("id" = String, Path, description = "The build id")),
    responses((status = 200, content_type = "text/event-stream"), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody), (status = 404, body = crate::error::ErrorBody),
        (status = 503, body = crate::error::ErrorBody)),
    security(("team_token" = [])))]
pub async fn events(
    State(state): State<AppState>,
    Team(team): Team,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    let build = owned_build(&state, &team, &id).await?;
    // Polls the database: workers may be other processes, and the row is the truth.
    struct Poll {
        state: AppState,
        id: String,
        last: Option<BuildView>,
        done: bool,
        first: Option<BuildRow>,
    }
    let start = Poll {
        state,
        id,
        last: None,
        done: false,
        first: Some(build),
    };
    let stream = futures::stream::unfold(start, |mut poll| async move {
        if poll.done {
            return None;
        }
        loop {
            let row = match poll.first.take() {
                Some(row) => Some(row),
                None => {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    poll.state.db.build(&poll.id).await.ok().flatten()
                }
            };
            let Some(row) = row else {
                poll.done = true;
                return Some((Ok(Event::default().event("done").data("{}")), poll));
            };
            let Ok(current) = view(&poll.state, row).await else {
                continue;
            };
            if poll.last.as_ref() == Some(&current) {
                continue;
            }
            let terminal = BuildStatus::parse(&current.status).is_terminal();
            let data = serde_json::to_string(&current).unwrap_or_default();
            poll.last = Some(current);
            if terminal {
                poll.done = true;
            }
            return Some((Ok(Event::default().event("status").data(data)), poll));
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

#[utoipa::path(get, path = "/v1/builds/{id}/report",
    description = "Per file: kind, bytes before and after, compressed sizes, errors and warnings; plus each stage's report and, for a failed build, the stage, file and reason.",
    params(("id" = String, Path, description = "The build id")),
    responses((status = 200, content_type = "application/json"), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody), (status = 404, body = crate::error::ErrorBody, description = "no such build, or no report yet"),
        (status = 503, body = crate::error::ErrorBody)),
    security(("team_token" = [])))]
pub async fn report(
    State(state): State<AppState>,
    Team(team): Team,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Response> {
    let build = owned_build(&state, &team, &id).await?;
    match state.db.report(&build.id).await? {
        Some(json) => Ok(([(header::CONTENT_TYPE, "application/json")], json).into_response()),
        None => Err(ApiError::new(
            axum::http::StatusCode::NOT_FOUND,
            "report_not_ready",
            format!("build {} is {}: no report yet", build.id, build.status),
        )),
    }
}

#[utoipa::path(post, path = "/v1/builds/{id}/retry",
    description = "Runs a failed build again from its kept original package: same id, every stage reset, queued; follow it at `status_url`. Only the owning team; only a failed build.",
    params(("id" = String, Path, description = "The build's id")),
    responses(
        (status = 202, description = "Queued again", body = crate::routes::uploads::UploadResponse),
        (status = 400, description = "Unreadable build id", body = crate::error::ErrorBody),
        (status = 401, description = "No or unknown token", body = crate::error::ErrorBody),
        (status = 404, description = "No such build of this team", body = crate::error::ErrorBody),
        (status = 409, description = "The build is not failed, its package is gone, or another build of the same bytes and version exists", body = crate::error::ErrorBody),
        (status = 503, description = "The queue is unavailable", body = crate::error::ErrorBody),
    ),
    security(("team_token" = [])))]
pub async fn retry(
    State(state): State<AppState>,
    Team(team): Team,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<(
    axum::http::StatusCode,
    Json<crate::routes::uploads::UploadResponse>,
)> {
    use axum::http::StatusCode;
    let build = owned_build(&state, &team, &id).await?;
    let not_failed = |status: &str| {
        ApiError::new(
            StatusCode::CONFLICT,
            "not_failed",
            format!("build {id} is {status}; only a failed build can be retried"),
        )
    };
    if build.status != BuildStatus::Failed.as_str() {
        return Err(not_failed(&build.status));
    }
    if state.storage.head(&build.package_key).await?.is_none() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "package_gone",
            format!("build {id}'s package is no longer stored; upload it again"),
        ));
    }
    if !state.db.requeue_failed_build(&id).await? {
        // Retried by another request meanwhile.
        let now = state.db.build(&id).await?.map(|b| b.status);
        return Err(not_failed(now.as_deref().unwrap_or("gone")));
    }
    if let Err(e) = kiln_jobs::enqueue(&state.db, &id).await {
        let reason = format!("could not queue the build: {e}");
        let _ = state
            .db
            .set_build_status(&id, BuildStatus::Failed, Some(&reason))
            .await;
        return Err(ApiError::unavailable(reason));
    }
    tracing::info!(build_id = %id, game = %build.game, "failed build queued again");
    Ok((
        StatusCode::ACCEPTED,
        Json(crate::routes::uploads::response(
            &state,
            &id,
            BuildStatus::Queued.as_str(),
            false,
        )),
    ))
}
