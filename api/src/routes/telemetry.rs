//! `POST /v1/telemetry`: the loader's beacons. Validated per event (`kiln_common::telemetry`),
//! limited per client and per game, checked for the manifest's beacon token, counted in the
//! metrics and queued for the batched writer (`crate::ingest`), which stores them with their
//! hourly rollups.

use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

use axum::Json;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use kiln_common::telemetry;
use serde::Serialize;

use crate::AppState;
use crate::error::{ApiBytes, ApiError, ApiResult};

#[derive(Serialize, utoipa::ToSchema)]
pub struct TelemetryAccepted {
    pub accepted: usize,
    /// Of `accepted`, the events without a valid manifest token: stored, flagged, but not
    /// counted in rollups, metrics, variant choices or the library's ROI.
    pub untrusted: usize,
    pub rejected: usize,
    /// Why each rejected event was rejected (`event N: …`).
    pub errors: Vec<String>,
}

/// Token buckets: `rate` requests a minute per key, bursts up to `rate`.
struct Buckets<K> {
    buckets: Mutex<HashMap<K, (f64, Instant)>>,
}

impl<K> Default for Buckets<K> {
    fn default() -> Self {
        Self {
            buckets: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Hash + Eq + Clone> Buckets<K> {
    /// Takes one request from each key's bucket, or none when one of them is empty: then
    /// `Err(seconds)` until that one has a request again.
    fn take(&self, keys: &[K], per_minute: u32) -> Result<(), u64> {
        let capacity = f64::from(per_minute.max(1));
        let now = Instant::now();
        let mut buckets = self.buckets.lock().expect("rate limiter lock");
        if buckets.len() > 100_000 {
            // Forget idle keys rather than grow without bound.
            buckets.retain(|_, (_, at)| now.duration_since(*at).as_secs() < 60);
        }
        let mut wait: f64 = 0.0;
        for key in keys {
            let (tokens, at) = buckets.entry(key.clone()).or_insert((capacity, now));
            *tokens =
                (*tokens + now.duration_since(*at).as_secs_f64() * capacity / 60.0).min(capacity);
            *at = now;
            if *tokens < 1.0 {
                wait = wait.max((1.0 - *tokens) * 60.0 / capacity);
            }
        }
        if wait > 0.0 {
            return Err(wait.ceil().max(1.0) as u64);
        }
        for key in keys {
            if let Some((tokens, _)) = buckets.get_mut(key) {
                *tokens -= 1.0;
            }
        }
        Ok(())
    }
}

/// The beacon limits: per client address, and per game named (all clients together).
#[derive(Default)]
pub struct RateLimiter {
    clients: Buckets<IpAddr>,
    games: Buckets<String>,
}

impl RateLimiter {
    /// One request from `client`; `Err(seconds)` to wait when over `per_minute`.
    pub fn allow(&self, client: IpAddr, per_minute: u32) -> Result<(), u64> {
        self.clients.take(&[client], per_minute)
    }

    /// One request for each game of `games` (unregistered names share the key `""`).
    pub fn allow_games(&self, games: &[String], per_minute: u32) -> Result<(), u64> {
        self.games.take(games, per_minute)
    }
}

fn too_many(what: &str, retry_after: u64) -> Response {
    let mut response = ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limited",
        format!("too many telemetry requests {what}; retry in {retry_after} s"),
    )
    .into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
    response
}

fn cors(headers: &mut HeaderMap) {
    headers.insert("access-control-allow-origin", HeaderValue::from_static("*"));
    headers.insert(
        "access-control-allow-methods",
        HeaderValue::from_static("POST, OPTIONS"),
    );
    headers.insert(
        "access-control-allow-headers",
        HeaderValue::from_static("content-type"),
    );
    headers.insert("access-control-max-age", HeaderValue::from_static("86400"));
}

/// CORS preflight for `application/json` posts (`text/plain` beacons need none).
#[utoipa::path(options, path = "/v1/telemetry",
    description = "CORS preflight for `application/json` beacons (`text/plain` ones need none).",
    responses((status = 204)))]
pub async fn preflight() -> Response {
    let mut headers = HeaderMap::new();
    cors(&mut headers);
    (StatusCode::NO_CONTENT, headers).into_response()
}

/// 503 with Retry-After for `accepted` events the ingest did not take (its backlog full, or
/// not committed in time); they count as dropped.
fn dropped(why: &dyn std::fmt::Display, accepted: usize) -> Response {
    kiln_common::metrics::TELEMETRY_EVENTS
        .with_label_values(&["dropped"])
        .inc_by(accepted as u64);
    let mut response = ApiError::unavailable(format!("{why}; try again later")).into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

#[utoipa::path(post, path = "/v1/telemetry",
    description = "Loader beacons: `{\"events\": [...]}` as JSON or text/plain (navigator.sendBeacon). Unknown fields are ignored; invalid events are rejected one by one and counted. An event counts in rollups, metrics, variant choices and the library's ROI only with the `beacon` token of the game's signed manifest (`{token, sequence, expires}`); others are stored flagged as untrusted. 413 over the body limit, 429 (with Retry-After) over the per-client or per-game rate, 503 while the ingest backlog is full or the database cannot take the events within `KILN_TELEMETRY_COMMIT_TIMEOUT_MS`. A 202 is sent once the events are committed (in one transaction with the other beacons that arrived meanwhile).",
    request_body(content = String, content_type = "text/plain", description = "a JSON object with an `events` array of `preheat` and `decode` events (docs/telemetry.md)"),
    responses((status = 202, body = TelemetryAccepted), (status = 400, body = crate::error::ErrorBody),
        (status = 413, body = crate::error::ErrorBody), (status = 415, body = crate::error::ErrorBody),
        (status = 429, body = crate::error::ErrorBody, description = "over the per-client or per-game rate; `Retry-After` says when to try again"),
        (status = 503, body = crate::error::ErrorBody, description = "the ingest backlog is full; nothing of the batch was kept")))]
pub async fn ingest(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    headers: HeaderMap,
    ApiBytes(body): ApiBytes,
) -> ApiResult<Response> {
    let limits = &state.config.telemetry;
    let with_cors = |mut response: Response| {
        cors(response.headers_mut());
        response
    };
    // Behind a proxy every player has the proxy's address: its header names the client.
    let client = Some(limits.client_ip_header.as_str())
        .filter(|h| !h.is_empty())
        .and_then(|h| headers.get(h))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(',').next_back())
        .and_then(|v| v.trim().parse::<IpAddr>().ok())
        .unwrap_or(peer.ip());
    if let Err(wait) = state
        .telemetry_limiter
        .allow(client, limits.rate_per_minute)
    {
        return Ok(with_cors(too_many("from this client", wait)));
    }
    if body.len() > limits.max_body_bytes {
        return Ok(with_cors(
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!("body over {} bytes", limits.max_body_bytes),
            )
            .into_response(),
        ));
    }
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !(content_type.is_empty()
        || content_type.starts_with("application/json")
        || content_type.starts_with("text/plain"))
    {
        return Ok(with_cors(
            ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "send JSON as application/json or text/plain",
            )
            .into_response(),
        ));
    }
    let parsed = match telemetry::parse(&body, limits.max_events) {
        Ok(p) => p,
        Err(e) => {
            return Ok(with_cors(
                ApiError::bad_request(e.to_string()).into_response(),
            ));
        }
    };
    let mut parsed = parsed;
    let known = state.ingest.known_games(&state.db, &parsed.events).await;
    // Per game, all clients together: registered games each, unregistered names as one.
    let games: Vec<String> = parsed
        .events
        .iter()
        .map(|e| known.get(&e.game).cloned().unwrap_or_default())
        .collect::<BTreeSet<String>>()
        .into_iter()
        .collect();
    if let Err(wait) = state
        .telemetry_limiter
        .allow_games(&games, limits.game_rate_per_minute)
    {
        return Ok(with_cors(too_many("for this game", wait)));
    }
    let untrusted = telemetry::authenticate(
        &mut parsed.events,
        state.ingest.secret(),
        client,
        chrono::Utc::now(),
    );
    let accepted = parsed.events.len();
    let rejected = parsed.rejected.len();
    if let Err(full) = state.ingest.reserve(accepted) {
        return Ok(with_cors(dropped(&full, accepted)));
    }
    let library = state
        .ingest
        .library_versions(&state.db, &parsed.events)
        .await;
    // Answered 202 only once committed: a process killed after the answer loses nothing.
    let stored = state
        .ingest
        .store(kiln_common::db::now(), parsed.events, |events| {
            kiln_common::metrics::record_telemetry(
                events,
                rejected,
                |g| known.contains(g),
                &library,
            )
        })
        .await;
    if let Err(e) = stored {
        return Ok(with_cors(dropped(&e, accepted)));
    }
    Ok(with_cors(
        (
            StatusCode::ACCEPTED,
            Json(TelemetryAccepted {
                accepted,
                untrusted,
                rejected,
                errors: parsed.rejected,
            }),
        )
            .into_response(),
    ))
}
