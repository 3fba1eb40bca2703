//! API errors: a status, a stable machine-readable code and a message for people, always as
//! `{"error": {"code", "message"}}`: the handlers' own errors, the extractors' rejections
//! ([`ApiJson`], [`ApiQuery`], [`ApiPath`], [`ApiBytes`]) and the bodyless errors of the router
//! itself ([`json_errors`]: no route, wrong method, timeout).

use axum::Json;
use axum::extract::rejection::{BytesRejection, JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;

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
    pub fn bad_request_code(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
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

/// axum's `Json` extractor, rejecting in the JSON error shape: `415` without an
/// `application/json` Content-Type, `400` for a body that is not JSON or not the expected
/// object (wrong types, missing fields) or holds a NUL, `413` over the body limit.
pub struct ApiJson<T>(pub T);

/// axum's `Query` extractor, rejecting with a JSON `400` (missing or mistyped fields, NUL).
pub struct ApiQuery<T>(pub T);

/// axum's `Path` extractor, rejecting with a JSON `400` (not UTF-8 once decoded, NUL).
pub struct ApiPath<T>(pub T);

/// axum's `Bytes` extractor, rejecting with a JSON `413` over the body limit (`400` otherwise).
pub struct ApiBytes(pub bytes::Bytes);

/// A rejection's status (`422`, axum's for a JSON body of the wrong shape, becomes `400`:
/// every malformed request is a `400` here) and its text as the message.
fn rejected(status: StatusCode, code: &'static str, text: String) -> ApiError {
    match status {
        StatusCode::UNPROCESSABLE_ENTITY => ApiError::new(StatusCode::BAD_REQUEST, code, text),
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(status, "payload_too_large", text),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::new(status, "unsupported_media_type", text),
        s if s.is_client_error() => ApiError::new(s, code, text),
        // A route whose handler asks for parameters it has not got: our bug, not the client's.
        s => ApiError::new(s, "internal", text),
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        rejected(r.status(), "invalid_json", r.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        rejected(r.status(), "invalid_query", r.body_text())
    }
}

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> Self {
        rejected(r.status(), "invalid_path", r.body_text())
    }
}

impl From<BytesRejection> for ApiError {
    fn from(r: BytesRejection) -> Self {
        rejected(r.status(), "bad_request", r.body_text())
    }
}

/// NUL is in no name, id or version, and PostgreSQL's text cannot hold it (it answered a
/// database error, a `503`): the extractors refuse it in paths, query strings and JSON strings.
fn nul(code: &'static str, where_: &str) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        code,
        format!("{where_} must not contain NUL (U+0000)"),
    )
}

fn has_nul(value: &serde_json::Value) -> bool {
    use serde_json::Value;
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(has_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        _ => false,
    }
}

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let Json(value) = Json::<serde_json::Value>::from_request(request, state).await?;
        if has_nul(&value) {
            return Err(nul("invalid_json", "the JSON body"));
        }
        T::deserialize(value).map(Self).map_err(|e| {
            ApiError::bad_request_code(
                "invalid_json",
                format!("Failed to deserialize the JSON body into the target type: {e}"),
            )
        })
    }
}

impl<S: Send + Sync> FromRequest<S> for ApiBytes {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        Ok(Self(bytes::Bytes::from_request(request, state).await?))
    }
}

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        if parts.uri.query().is_some_and(|q| q.contains("%00")) {
            return Err(nul("invalid_query", "the query string"));
        }
        let axum::extract::Query(value) =
            axum::extract::Query::<T>::from_request_parts(parts, state).await?;
        Ok(Self(value))
    }
}

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        if parts.uri.path().contains("%00") {
            return Err(nul("invalid_path", "the path"));
        }
        let axum::extract::Path(value) =
            axum::extract::Path::<T>::from_request_parts(parts, state).await?;
        Ok(Self(value))
    }
}

/// The status of a request the timeout layers cut off. Not `408`: Chromium takes a `408` on
/// a reused connection for a connection the server closed while idle and sends the request
/// again by itself, so a telemetry beacon that timed out would be counted twice. A `503` is
/// the server's own failure: a client retries it when it decides to.
pub const TIMEOUT_STATUS: StatusCode = StatusCode::SERVICE_UNAVAILABLE;

/// Middleware: an error response without a body (the router's `404` for no route and `405`
/// for a method the route does not take, a timeout's `503`, a `416`) gets the JSON error
/// shape (and its Content-Type); its other headers (`Allow`, `Content-Range`) stay.
pub async fn json_errors(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let response = next.run(request).await;
    let status = response.status();
    let bodyless = axum::body::HttpBody::size_hint(response.body()).exact() == Some(0);
    if status.as_u16() < 400 || !bodyless {
        return response;
    }
    let (code, message) = match status {
        StatusCode::NOT_FOUND => ("not_found", format!("no route {method} {path}")),
        StatusCode::METHOD_NOT_ALLOWED => (
            "method_not_allowed",
            format!("{path} does not take {method}"),
        ),
        // Only the timeout layers answer a bodyless 503 (the handlers' 503s carry a body).
        TIMEOUT_STATUS => ("timeout", format!("{method} {path} took too long")),
        StatusCode::RANGE_NOT_SATISFIABLE => (
            "range_not_satisfiable",
            "the range is outside the object".to_string(),
        ),
        other => (
            "error",
            other.canonical_reason().unwrap_or("error").to_string(),
        ),
    };
    let (mut parts, _) = response.into_parts();
    let (fresh, body) = ApiError::new(status, code, message)
        .into_response()
        .into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    for (name, value) in &fresh.headers {
        parts.headers.insert(name, value.clone());
    }
    Response::from_parts(parts, body)
}
