//! The signed per-game manifest (also per device class) and the public keys that verify it.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use kiln_common::devices;
use kiln_common::keys::SHORT_LIVED;
use kiln_common::signing::{Jwk, ManifestSignature};
use serde::Serialize;

use crate::AppState;
use crate::error::{ApiError, ApiPath, ApiQuery, ApiResult};

#[derive(Serialize, utoipa::ToSchema)]
pub struct Jwks {
    #[schema(value_type = Vec<Object>)]
    pub keys: Vec<Jwk>,
}

/// Who asks for the manifest: a device class, or a device descriptor to classify. The
/// descriptor's fields are listed here rather than `#[serde(flatten)]`ed from
/// `devices::Descriptor`: query strings through a flattened struct lose their number types.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DeviceQuery {
    /// One of `ios-high`, `ios-low`, `android-high`, `android-mid`, `android-low`, `desktop`,
    /// `unknown`.
    pub device: Option<String>,
    /// Without `device`: the descriptor the rule table classifies (`docs/telemetry.md`).
    pub os: Option<String>,
    pub os_version: Option<String>,
    pub runtime: Option<String>,
    pub model: Option<String>,
    pub memory: Option<f64>,
    pub cores: Option<u32>,
}

impl DeviceQuery {
    fn class(&self) -> Result<Option<String>, ApiError> {
        if let Some(class) = &self.device {
            if !devices::CLASSES.contains(&class.as_str()) {
                return Err(ApiError::bad_request(format!(
                    "device class {class:?} is unknown; one of {}",
                    devices::CLASSES.join(", ")
                )));
            }
            return Ok(Some(class.clone()));
        }
        let descriptor = devices::Descriptor {
            os: self.os.as_ref().map(|o| o.to_ascii_lowercase()),
            os_version: self.os_version.clone(),
            runtime: self.runtime.clone(),
            model: self.model.clone(),
            memory: self.memory,
            cores: self.cores,
        };
        Ok((descriptor != devices::Descriptor::default())
            .then(|| devices::classify(&descriptor).to_string()))
    }
}

#[utoipa::path(get, path = "/v1/games/{game}/manifest",
    params(("game" = String, Path, description = "The game"), DeviceQuery),
    description = "The live manifest's exact bytes. `Kiln-Signature: keyid=<kid>, sig=<base64 Ed25519 signature over the body>`; verify with `/v1/keys`. With `device=<class>` (or a device descriptor): the same release signed for that class, each model's `choice` (variant, reason, estimates) made from measured decode times; `Kiln-Device-Class` names the class. While a new release's class manifests are being signed, the base manifest is served with `Kiln-Variant-Choice: pending`.",
    responses((status = 200, content_type = "application/json"), (status = 304),
        (status = 400, body = crate::error::ErrorBody, description = "an unknown device class, or a malformed query string"),
        (status = 404, body = crate::error::ErrorBody, description = "the game has no live release"),
        (status = 503, body = crate::error::ErrorBody)))]
pub async fn manifest(
    State(state): State<AppState>,
    ApiPath(game): ApiPath<String>,
    ApiQuery(device): ApiQuery<DeviceQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let class = device.class()?;
    let Some(mut row) = state.db.live_release(&game).await? else {
        return Err(ApiError::not_found(format!(
            "game {game:?} has no published manifest"
        )));
    };
    let mut pending = false;
    if let Some(class) = &class {
        match state.db.class_manifest(&game, row.sequence, class).await? {
            Some(signed) => {
                row.manifest_key = signed.manifest_key;
                row.sha256 = signed.sha256;
                row.kid = signed.kid;
                row.signature = signed.signature;
            }
            None => pending = true,
        }
    }
    let signature = ManifestSignature {
        kid: row.kid.clone(),
        signature: base64::engine::general_purpose::STANDARD
            .decode(&row.signature)
            .map_err(|_| ApiError::unavailable("stored signature is corrupt"))?,
    };
    // Sent compressed when the client takes it (a manifest is JSON, ~4× smaller in brotli);
    // the signature covers the identity bytes, which the client gets back by decoding.
    let encoding = crate::routes::cdn::accepted_encodings(&headers)
        .into_iter()
        .next();
    let etag = match encoding {
        Some(e) => format!("\"{}-{}\"", row.sha256, e.token()),
        None => format!("\"{}\"", row.sha256),
    };
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
        HeaderValue::from_static(
            "Kiln-Signature, Kiln-Build-Id, Kiln-Device-Class, Kiln-Variant-Choice, ETag",
        ),
    );
    if let Some(class) = &class {
        response_headers.insert(
            "kiln-device-class",
            HeaderValue::from_str(class).expect("a class name"),
        );
    }
    if pending {
        response_headers.insert("kiln-variant-choice", HeaderValue::from_static("pending"));
    }
    response_headers.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    if crate::routes::cdn::etag_matches(&headers, &etag) {
        return Ok((StatusCode::NOT_MODIFIED, response_headers).into_response());
    }
    let bytes = state.storage.get_bytes(&row.manifest_key).await?;
    response_headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let Some(encoding) = encoding else {
        return Ok((StatusCode::OK, response_headers, bytes).into_response());
    };
    let body = tokio::task::spawn_blocking(move || {
        crate::routes::cdn::compress(&bytes, encoding, crate::routes::cdn::Effort::Fast)
    })
    .await
    .map_err(|e| ApiError::unavailable(format!("compressing the manifest: {e}")))?;
    response_headers.insert(
        header::CONTENT_ENCODING,
        HeaderValue::from_static(encoding.token()),
    );
    Ok((StatusCode::OK, response_headers, body).into_response())
}

#[utoipa::path(get, path = "/v1/keys",
    description = "The manifest signing keys as a JWKS (RFC 8037 OKP/Ed25519), for compatibility: every key that ever signed except those the trust document revokes. Pages and hosts pin the trust roots and read `/v1/keys/trust` instead.",
    responses((status = 200, body = Jwks), (status = 503, body = crate::error::ErrorBody)))]
pub async fn keys(State(state): State<AppState>) -> ApiResult<Response> {
    let doc = match state.db.latest_trust_document().await? {
        Some(row) => kiln_common::trust::SignedTrust::parse(row.envelope.as_bytes())
            .and_then(|(signed, _)| kiln_common::trust::parse_trust_document(&signed))
            .ok(),
        None => None,
    };
    let keys = kiln_common::trust::unrevoked(state.db.keys().await?, doc.as_ref());
    Ok((
        [
            (header::CACHE_CONTROL, "public, max-age=300"),
            (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
        ],
        Json(Jwks { keys }),
    )
        .into_response())
}

#[utoipa::path(get, path = "/v1/keys/trust",
    description = "The newest trust document, signed by the root key(s): `{\"signed\": \"<document JSON text>\", \"signatures\": [{\"keyid\", \"sig\"}]}`; each signature is Ed25519 over the UTF-8 bytes of `signed`. The document: `{version, expires, roots: [jwk], keys: [{jwk, status: active|retired}], revoked: [kid]}` (docs/key-rotation.md). `404` before the first `kiln-worker keys init` (or first embedded start).",
    responses((status = 200, content_type = "application/json"), (status = 304), (status = 404, body = crate::error::ErrorBody),
        (status = 503, body = crate::error::ErrorBody)))]
pub async fn trust(State(state): State<AppState>, headers: HeaderMap) -> ApiResult<Response> {
    let Some(row) = state.db.latest_trust_document().await? else {
        return Err(ApiError::not_found(
            "no trust document yet: run `kiln-worker keys init`",
        ));
    };
    let etag = format!("\"{}\"", row.sha256);
    let mut response_headers = HeaderMap::new();
    // A minute, as the manifest: a rotation reaches every device before it meets the new key.
    response_headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(SHORT_LIVED));
    response_headers.insert(
        header::ETAG,
        HeaderValue::from_str(&etag).expect("hex etag"),
    );
    response_headers.insert("access-control-allow-origin", HeaderValue::from_static("*"));
    response_headers.insert(
        "access-control-expose-headers",
        HeaderValue::from_static("ETag"),
    );
    if crate::routes::cdn::etag_matches(&headers, &etag) {
        return Ok((StatusCode::NOT_MODIFIED, response_headers).into_response());
    }
    response_headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok((StatusCode::OK, response_headers, row.envelope).into_response())
}
