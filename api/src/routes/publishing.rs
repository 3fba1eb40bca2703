//! The signed per-game manifest and the public keys that verify it.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use kiln_common::keys::SHORT_LIVED;
use kiln_common::signing::{Jwk, ManifestSignature};
use serde::Serialize;

use crate::AppState;
use crate::error::{ApiError, ApiResult};

#[derive(Serialize, utoipa::ToSchema)]
pub struct Jwks {
    #[schema(value_type = Vec<Object>)]
    pub keys: Vec<Jwk>,
}

#[utoipa::path(get, path = "/v1/games/{game}/manifest",
    description = "The live manifest's exact bytes. `Kiln-Signature: keyid=<kid>, sig=<base64 Ed25519 signature over the body>`; verify with `/v1/keys`.",
    responses((status = 200, content_type = "application/json"), (status = 304), (status = 404, body = crate::error::ErrorBody)))]
pub async fn manifest(
    State(state): State<AppState>,
    Path(game): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let Some(row) = state.db.live_release(&game).await? else {
        return Err(ApiError::not_found(format!(
            "game {game:?} has no published manifest"
        )));
    };
    let signature = ManifestSignature {
        kid: row.kid.clone(),
        signature: base64::engine::general_purpose::STANDARD
            .decode(&row.signature)
            .map_err(|_| ApiError::unavailable("stored signature is corrupt"))?,
    };
    let etag = format!("\"{}\"", row.sha256);
    let mut response_headers = HeaderMap::new();
    response_headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(SHORT_LIVED));
    response_headers.insert(
        header::ETAG,
        HeaderValue::from_str(&etag).expect("hex etag"),
    );
    response_headers.insert(
        "kiln-signature",
        HeaderValue::from_str(&signature.header_value()).expect("ascii signature"),
    );
    response_headers.insert(
        "kiln-build-id",
        HeaderValue::from_str(&row.build_id).expect("uuid"),
    );
    // Hosts and games on other origins verify it in the browser: they need the signature.
    response_headers.insert("access-control-allow-origin", HeaderValue::from_static("*"));
    response_headers.insert(
        "access-control-expose-headers",
        HeaderValue::from_static("Kiln-Signature, Kiln-Build-Id, ETag"),
    );
    if crate::routes::cdn::etag_matches(&headers, &etag) {
        return Ok((StatusCode::NOT_MODIFIED, response_headers).into_response());
    }
    let bytes = state.storage.get_bytes(&row.manifest_key).await?;
    response_headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok((StatusCode::OK, response_headers, bytes).into_response())
}

#[utoipa::path(get, path = "/v1/keys",
    description = "Every manifest signing key as a JWKS (RFC 8037 OKP/Ed25519). Old keys stay listed so old manifests still verify after rotation.",
    responses((status = 200, body = Jwks)))]
pub async fn keys(State(state): State<AppState>) -> ApiResult<Response> {
    let keys = state.db.keys().await?;
    Ok((
        [
            (header::CACHE_CONTROL, "public, max-age=300"),
            (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
        ],
        Json(Jwks { keys }),
    )
        .into_response())
}
