//! API errors: a status, a stable machine-readable code and a message for people.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }
    pub fn not_found(what: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", what)
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::error!(code = self.code, message = %self.message, "request failed");
        }
        let mut response = (
            self.status,
            Json(ErrorBody {
                error: ErrorDetail {
                    code: self.code.into(),
                    message: self.message,
                },
            }),
        )
            .into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE
            || self.status == StatusCode::TOO_MANY_REQUESTS
        {
            response
                .headers_mut()
                .insert("retry-after", axum::http::HeaderValue::from_static("5"));
        }
        response
    }
}

impl From<kiln_common::db::DbError> for ApiError {
    fn from(e: kiln_common::db::DbError) -> Self {
        match e {
            kiln_common::db::DbError::Conflict(m) => Self::new(StatusCode::CONFLICT, "conflict", m),
            other => Self::unavailable(format!("database unavailable: {other}")),
        }
    }
}

impl From<kiln_common::storage::StorageError> for ApiError {
    fn from(e: kiln_common::storage::StorageError) -> Self {
        use kiln_common::storage::StorageError as E;
        match e {
            E::NotFound(key) => Self::not_found(format!("object {key} not found")),
            E::InvalidKey(key) => Self::not_found(format!("object {key} not found")),
            other => Self::unavailable(format!("object store unavailable: {other}")),
        }
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
