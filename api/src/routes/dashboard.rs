//! The built-in dashboard: its page (`api/dashboard/`, served as written, no external
//! requests) and its data, read from the rollups and records (`kiln_common::dashboard`).

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use kiln_common::dashboard::{self, Dashboard};
use kiln_common::db::RollupFilter;
use serde::Deserialize;

use crate::AppState;
use crate::auth::{Admin, Team};
use crate::error::{ApiError, ApiQuery, ApiResult};

const PAGE: &str = include_str!("../../dashboard/index.html");
const CSS: &str = include_str!("../../dashboard/dashboard.css");
const CHARTS: &str = include_str!("../../dashboard/charts.js");
const SCRIPT: &str = include_str!("../../dashboard/dashboard.js");

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            // Everything the page needs comes from here; nothing inline.
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static("default-src 'self'; img-src 'self' data:"),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (
                header::REFERRER_POLICY,
                HeaderValue::from_static("no-referrer"),
            ),
        ],
        body,
    )
        .into_response()
}

#[utoipa::path(get, path = "/dashboard",
    description = "The built-in dashboard (Pre-warm, Decode, Library, Pipeline) for teams without Grafana. Asks for a team or admin token; reads /v1/dashboard/data.",
    responses((status = 200, content_type = "text/html")))]
pub async fn page() -> Response {
    asset("text/html; charset=utf-8", PAGE)
}

#[utoipa::path(get, path = "/dashboard/dashboard.css", responses((status = 200, content_type = "text/css")))]
pub async fn css() -> Response {
    asset("text/css; charset=utf-8", CSS)
}

#[utoipa::path(get, path = "/dashboard/charts.js", responses((status = 200, content_type = "text/javascript")))]
pub async fn charts() -> Response {
    asset("text/javascript; charset=utf-8", CHARTS)
}

#[utoipa::path(get, path = "/dashboard/dashboard.js", responses((status = 200, content_type = "text/javascript")))]
pub async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DataQuery {
    /// One game; empty or absent: every game the token may see.
    pub game: Option<String>,
    /// RFC 3339; default 24 hours before `to`.
    #[param(format = DateTime)]
    pub from: Option<String>,
    /// RFC 3339; default now.
    #[param(format = DateTime)]
    pub to: Option<String>,
}

fn instant(
    value: Option<&str>,
    name: &str,
) -> Result<Option<chrono::DateTime<chrono::Utc>>, ApiError> {
    value
        .filter(|v| !v.is_empty())
        .map(|v| {
            chrono::DateTime::parse_from_rfc3339(v)
                .map(|t| t.with_timezone(&chrono::Utc))
                .map_err(|_| {
                    ApiError::bad_request(format!("`{name}` must be an RFC 3339 time, got {v:?}"))
                })
        })
        .transpose()
}

#[utoipa::path(get, path = "/v1/dashboard/data", params(DataQuery),
    description = "The dashboard's four views over a time range, from the hourly rollups: pre-warm hit rate (overall, per hour and device class, misses by reason, per game × engine × class with time-to-ready p50/p90), decode (per class × variant count, p50/p90/p99, fallback rate; hourly p90; the live per-class variant choices), library (entries, bytes stored and saved, ROI), pipeline (queue, builds by status, hourly outcomes, stage times, recent failures). A team token sees its own games; the admin token all.",
    responses((status = 200, content_type = "application/json"), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody), (status = 403, body = crate::error::ErrorBody),
        (status = 503, body = crate::error::ErrorBody)),
    security(("team_token" = []), ("admin_token" = [])))]
pub async fn data(
    State(state): State<AppState>,
    team: Result<Team, ApiError>,
    admin: Result<Admin, ApiError>,
    ApiQuery(query): ApiQuery<DataQuery>,
) -> ApiResult<Json<Dashboard>> {
    let team_id = match (team, admin) {
        (Ok(Team(id)), _) => Some(id),
        (Err(_), Ok(Admin)) => None,
        (Err(e), Err(_)) => return Err(e),
    };
    let to = instant(query.to.as_deref(), "to")?.unwrap_or_else(chrono::Utc::now);
    let from = instant(query.from.as_deref(), "from")?.unwrap_or(to - chrono::Duration::hours(24));
    if from >= to {
        return Err(ApiError::bad_request("`from` must be before `to`"));
    }
    let games = state.db.game_names(team_id.as_deref()).await?;
    let game = query.game.filter(|g| !g.is_empty());
    if let Some(g) = &game
        && !games.contains(g)
    {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("game {g:?} is not one of this token's games"),
        ));
    }
    let text =
        |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    // Rollups are hourly: the range takes every hour it touches.
    let filter = RollupFilter {
        from: kiln_common::rollups::hour_of(&text(from)),
        to: text(to),
        game: game.clone(),
        team_id: team_id.clone(),
    };
    let builds = RollupFilter {
        from: text(from),
        ..filter.clone()
    };
    let db = &state.db;
    let build_counts = db.build_counts().await?;
    let queue_depth = build_counts
        .iter()
        .find(|(s, _)| s == "queued")
        .map_or(0, |(_, n)| *n);
    let oldest_age_seconds = db.oldest_queued_age_seconds().await?;
    let mut library = db.library().await?;
    if let Some(team) = &team_id {
        // A team sees the engines its own games use.
        let mine = db.library_shas_of_team(team).await?;
        library.retain(|e| mine.contains(&e.sha256));
    }
    let rows = dashboard::Rows {
        preheat: db.preheat_rollups(&filter).await?,
        preheat_latency: db.latency_sketches("preheat", &filter).await?,
        decode: db.decode_rollups(&filter).await?,
        decode_latency: db.latency_sketches("decode", &filter).await?,
        choices: db
            .live_class_manifests(game.as_deref(), team_id.as_deref())
            .await?,
        library,
        min_roi: state.config.library.min_roi,
        build_counts,
        queue_depth,
        oldest_age_seconds,
        finished_builds: db.finished_builds(&builds).await?,
        finished_stages: db.finished_stages(&builds).await?,
    };
    Ok(Json(dashboard::build(
        games,
        game,
        text(from),
        text(to),
        rows,
    )))
}
