//! The built-in dashboard: its page (`api/dashboard/`, served as written, no external
//! requests) and its data, read from the rollups and records (`kiln_common::dashboard`).

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use kiln_common::config::Config;
use kiln_common::dashboard::{self, Dashboard};
use kiln_common::db::{RollupFilter, SessionOwner};
use serde::{Deserialize, Serialize};

use crate::AppState;
use crate::auth::{Admin, Team, new_token, token_hash};
use crate::error::{ApiError, ApiQuery, ApiResult};

/// The dashboard's session cookie (HttpOnly: no script reads it).
pub const SESSION_COOKIE: &str = "kiln_session";

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
            // Everything the page needs comes from here; nothing inline; never framed.
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(
                    "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; \
                     base-uri 'none'; form-action 'self'; object-src 'none'",
                ),
            ),
            (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
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
    description = "The built-in dashboard (Pre-warm, Decode, Library, Pipeline) for teams without Grafana. Asks for a team or admin token once and trades it for a session cookie (POST /dashboard/session); reads /v1/dashboard/data.",
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

/// `POST /dashboard/session`'s body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct LoginRequest {
    /// A team token or the admin token.
    pub token: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct LoginResponse {
    /// `team` or `admin`.
    pub kind: &'static str,
    /// Seconds the session lasts.
    pub expires_in: u64,
}

fn forbidden(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
}

/// CSRF defence for cookie-authenticated requests, beside `SameSite=Strict` (which does not
/// tell origins of one site apart: the content origin may share the API's host). A browser
/// names the page that sent a request in `Origin` (every POST/DELETE, every cross-origin
/// request) and says how it relates in `Sec-Fetch-Site`; either, when present, must say
/// "this origin". Clients that send neither are not browsers and carry no ambient cookie.
fn same_origin(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let api = Config::origin_of(&state.config.public_url());
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        if Config::origin_of(origin) != api {
            return Err(forbidden(format!(
                "request from origin {origin:?}: the dashboard's session is for {api} only"
            )));
        }
    }
    if let Some(site) = headers.get("sec-fetch-site") {
        let site = site.to_str().unwrap_or("");
        if !matches!(site, "same-origin" | "none") {
            return Err(forbidden(format!(
                "Sec-Fetch-Site: {site}: the dashboard's session is for same-origin requests only"
            )));
        }
    }
    Ok(())
}

/// The session id in the request's `Cookie`, if any.
fn session_id(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// Who the request's session cookie belongs to: `None` without a cookie or with one that
/// is unknown or expired; `403` when a cookie came from another origin.
async fn session(state: &AppState, headers: &HeaderMap) -> Result<Option<SessionOwner>, ApiError> {
    let Some(id) = session_id(headers) else {
        return Ok(None);
    };
    same_origin(state, headers)?;
    Ok(state.db.dashboard_session(&token_hash(&id)).await?)
}

fn cookie(state: &AppState, value: &str, max_age: u64) -> HeaderValue {
    let secure = if state.config.public_url().starts_with("https://") {
        "; Secure"
    } else {
        ""
    };
    HeaderValue::from_str(&format!(
        "{SESSION_COOKIE}={value}; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age}{secure}"
    ))
    .expect("ascii cookie")
}

#[utoipa::path(post, path = "/dashboard/session", request_body = LoginRequest,
    description = "Dashboard login: trades a team or the admin token for a session (a random id in an `HttpOnly; SameSite=Strict; Path=/` cookie, `Secure` on https, stored hashed, lasting `KILN_DASHBOARD_SESSION_SECS`), so the page keeps no token. Same-origin only (`Origin`/`Sec-Fetch-Site` checked).",
    responses((status = 200, body = LoginResponse), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody), (status = 403, body = crate::error::ErrorBody)))]
pub async fn login(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> ApiResult<Response> {
    same_origin(&state, &headers)?;
    let request: LoginRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("expected {{\"token\": \"…\"}}: {e}")))?;
    let token = request.token.trim();
    let admin = &state.config.admin_token;
    // Compared as hashes: equal length, and no early exit on the token's prefix.
    let owner = if !admin.is_empty() && !token.is_empty() && token_hash(token) == token_hash(admin)
    {
        SessionOwner::Admin
    } else {
        match state.db.team_for_token(&token_hash(token)).await? {
            Some(team) => SessionOwner::Team(team),
            None => {
                return Err(ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "unauthorized",
                    "unknown token",
                ));
            }
        }
    };
    let id = new_token();
    let ttl = state.config.dashboard_session_secs;
    state
        .db
        .create_dashboard_session(&token_hash(&id), &owner, ttl)
        .await?;
    let kind = match owner {
        SessionOwner::Admin => "admin",
        SessionOwner::Team(_) => "team",
    };
    Ok((
        StatusCode::OK,
        [
            (header::SET_COOKIE, cookie(&state, &id, ttl)),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
        Json(LoginResponse {
            kind,
            expires_in: ttl,
        }),
    )
        .into_response())
}

#[utoipa::path(delete, path = "/dashboard/session",
    description = "Dashboard logout: the session is deleted and its cookie cleared. Same-origin only.",
    responses((status = 204), (status = 403, body = crate::error::ErrorBody)))]
pub async fn logout(State(state): State<AppState>, headers: HeaderMap) -> ApiResult<Response> {
    same_origin(&state, &headers)?;
    if let Some(id) = session_id(&headers) {
        state.db.delete_dashboard_session(&token_hash(&id)).await?;
    }
    Ok((
        StatusCode::NO_CONTENT,
        [(header::SET_COOKIE, cookie(&state, "", 0))],
    )
        .into_response())
}

#[utoipa::path(get, path = "/v1/dashboard/data", params(DataQuery),
    description = "The dashboard's four views over a time range, from the hourly rollups: pre-warm hit rate (overall, per hour and device class, misses by reason, per game × engine × class with time-to-ready p50/p90), decode (per class × variant count, p50/p90/p99, fallback rate; hourly p90; the live per-class variant choices), library (entries, bytes stored and saved, ROI), pipeline (queue, builds by status, hourly outcomes, stage times, recent failures). A team token (or a team's dashboard session cookie, same-origin only) sees its own games; the admin token all.",
    responses((status = 200, content_type = "application/json"), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody), (status = 403, body = crate::error::ErrorBody),
        (status = 503, body = crate::error::ErrorBody)),
    security(("team_token" = []), ("admin_token" = [])))]
pub async fn data(
    State(state): State<AppState>,
    headers: HeaderMap,
    team: Result<Team, ApiError>,
    admin: Result<Admin, ApiError>,
    ApiQuery(query): ApiQuery<DataQuery>,
) -> ApiResult<Json<Dashboard>> {
    let team_id = match (team, admin) {
        (Ok(Team(id)), _) => Some(id),
        (Err(_), Ok(Admin)) => None,
        (Err(e), Err(_)) => match session(&state, &headers).await? {
            Some(SessionOwner::Team(id)) => Some(id),
            Some(SessionOwner::Admin) => None,
            None => return Err(e),
        },
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
        image_bytes: db
            .published_reports(&builds, dashboard::IMAGE_REPORTS)
            .await?
            .iter()
            .filter_map(|r| dashboard::image_bytes(r))
            .collect(),
    };
    Ok(Json(dashboard::build(
        games,
        game,
        text(from),
        text(to),
        rows,
    )))
}
