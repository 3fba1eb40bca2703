//! Health, readiness, metrics and the OpenAPI document.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use kiln_common::db::BuildStatus;
use kiln_common::metrics;
use serde_json::json;

use crate::AppState;

#[utoipa::path(get, path = "/healthz", responses((status = 200, description = "The process is up")))]
pub async fn healthz() -> &'static str {
    "ok\n"
}

#[utoipa::path(get, path = "/readyz",
    responses((status = 200, description = "Database and object store reachable"),
              (status = 503, description = "One of them is not")))]
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

#[utoipa::path(get, path = "/metrics", responses((status = 200, content_type = "text/plain")))]
pub async fn metrics(State(state): State<AppState>) -> Response {
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
    if let Ok(oldest) = state.db.oldest_queued().await {
        let age = oldest
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(&t).ok())
            .map_or(0, |t| {
                (chrono::Utc::now() - t.with_timezone(&chrono::Utc))
                    .num_seconds()
                    .max(0)
            });
        metrics::QUEUE_OLDEST_AGE.set(age);
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

pub async fn openapi() -> Response {
    use utoipa::OpenApi;
    Json(crate::openapi::ApiDoc::openapi()).into_response()
}
