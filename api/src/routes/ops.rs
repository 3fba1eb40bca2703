//! Health, readiness, metrics and the OpenAPI document.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use kiln_common::db::BuildStatus;
use kiln_common::metrics;
use serde_json::json;

use crate::AppState;
use crate::error::ApiError;

#[utoipa::path(get, path = "/healthz", responses((status = 200, description = "The process is up", content_type = "text/plain")))]
pub async fn healthz() -> &'static str {
    "ok\n"
}

#[utoipa::path(get, path = "/readyz",
    responses((status = 200, description = "Database and object store reachable", content_type = "application/json"),
              (status = 503, description = "One of them is not: `{\"database\", \"storage\"}`, each `ok` or why not", content_type = "application/json")))]
pub async fn readyz(State(state): State<AppState>) -> Response {
    let db = state.db.ping().await;
    let storage = state.storage.check().await;
    let body = json!({
        "database": db.as_ref().map(|_| "ok".to_string()).unwrap_or_else(|e| e.to_string()),
        "storage": storage.as_ref().map(|_| "ok".to_string()).unwrap_or_else(|e| e.to_string()),
    });
    let status = if db.is_ok() && storage.is_ok() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

#[utoipa::path(get, path = "/metrics", responses(
    (status = 200, content_type = "text/plain"),
    (status = 404, description = "`KILN_METRICS_BIND` is set: metrics are served only on that \
        listener", body = crate::error::ErrorBody),
))]
pub async fn metrics(State(state): State<AppState>) -> Response {
    if !state.config.metrics_bind.is_empty() {
        return ApiError::not_found("metrics are served on KILN_METRICS_BIND").into_response();
    }
    render_metrics(&state).await
}

/// `/metrics` on its own listener (`KILN_METRICS_BIND`): what Prometheus scrapes, on a port an
/// Ingress does not route.
pub async fn metrics_listener(State(state): State<AppState>) -> Response {
    render_metrics(&state).await
}

async fn render_metrics(state: &AppState) -> Response {
    // Build gauges come from the database: every API replica reports the same truth.
    if let Ok(counts) = state.db.build_counts().await {
        for status in BuildStatus::ALL {
            let n = counts
                .iter()
                .find(|(s, _)| s == status.as_str())
                .map_or(0, |(_, n)| *n);
            metrics::BUILDS.with_label_values(&[status.as_str()]).set(n);
            if status == BuildStatus::Queued {
                metrics::QUEUE_DEPTH.set(n);
            }
        }
    }
    if let Ok(age) = state.db.oldest_queued_age_seconds().await {
        metrics::QUEUE_OLDEST_AGE.set(age);
    }
    if let Ok(stages) = state.db.stage_counts().await {
        metrics::BUILD_STAGES.reset();
        for (stage, status, n) in stages {
            metrics::BUILD_STAGES
                .with_label_values(&[&stage, &status])
                .set(n);
        }
    }
    if let Ok(entries) = state.db.library().await {
        library_gauges(&entries, state.config.library.min_roi);
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        metrics::render(),
    )
        .into_response()
}

#[utoipa::path(get, path = "/v1/openapi.json", description = "This document.",
    responses((status = 200, content_type = "application/json")))]
pub async fn openapi() -> Response {
    use utoipa::OpenApi;
    Json(crate::openapi::ApiDoc::openapi()).into_response()
}

/// The library's size, reuse and ROI per engine version (`dashboard::library_summary`), as
/// gauges.
fn library_gauges(entries: &[kiln_common::db::LibraryRow], min_roi: f64) {
    let summary = kiln_common::dashboard::library_summary(entries, min_roi);
    metrics::LIBRARY_ENTRIES.set(summary.entries);
    metrics::LIBRARY_BYTES_STORED.set(summary.bytes_stored);
    metrics::LIBRARY_RETIREMENT_CANDIDATES.set(summary.retirement_candidates);
    metrics::LIBRARY_VERSION_BYTES.reset();
    metrics::LIBRARY_VERSION_GAMES.reset();
    metrics::LIBRARY_VERSION_ROI.reset();
    for v in &summary.versions {
        let labels = [v.engine.as_str(), v.version.as_str()];
        metrics::LIBRARY_VERSION_BYTES
            .with_label_values(&labels)
            .set(v.bytes);
        metrics::LIBRARY_VERSION_GAMES
            .with_label_values(&labels)
            .set(v.games);
        metrics::LIBRARY_VERSION_ROI
            .with_label_values(&labels)
            .set(v.roi);
    }
}
