//! CDN origin: published objects by key, with the headers a CDN needs.
//!
//! `Cache-Control: immutable` (keys are content-addressed), a strong `ETag` and `304`, single
//! `Range` requests (`206`/`416`), and `Content-Encoding` negotiation over the pre-compressed
//! forms. `/play/{game}/…` serves the live build by its own paths so a browser can run it.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use kiln_common::keys::{self, Encoding};
use kiln_common::manifest::Manifest;

use crate::AppState;
use crate::error::{ApiError, ApiResult};

#[utoipa::path(get, path = "/cdn/{key}",
    params(("key" = String, Path, description = "Object key from the manifest, e.g. files/ab/ab….js")),
    responses((status = 200), (status = 206), (status = 304), (status = 404), (status = 416)))]
pub async fn object(
    State(state): State<AppState>,
    Path(key): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    if !keys::is_public_key(&key) {
        return Err(ApiError::not_found(format!("object {key} not found")));
    }
    serve(&state, &key, &headers, keys::IMMUTABLE).await
}

/// `GET /play/{game}/{path}`: the live build's file at `path`, so relative URLs inside the
/// game keep working. Short-lived, because the live build moves.
pub async fn play(
    State(state): State<AppState>,
    Path((game, path)): Path<(String, String)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let path = if path.is_empty() || path.ends_with('/') {
        format!("{path}index.html")
    } else {
        path
    };
    let row = state
        .db
        .live_release(&game)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("game {game:?} has no published build")))?;
    let bytes = state.storage.get_bytes(&row.manifest_key).await?;
    let manifest: Manifest = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::unavailable(format!("stored manifest unreadable: {e}")))?;
    let file = manifest
        .files
        .iter()
        .find(|f| f.path == path)
        .ok_or_else(|| ApiError::not_found(format!("{path} is not in {game}'s live build")))?;
    serve(&state, &file.key, &headers, keys::SHORT_LIVED).await
}

pub async fn play_root(
    state: State<AppState>,
    Path(game): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    play(state, Path((game, String::new())), headers).await
}

/// True when `If-None-Match` names `etag` (or is `*`).
pub fn etag_matches(headers: &HeaderMap, etag: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().trim_start_matches("W/"))
        .any(|t| t == etag || t == "*")
}

/// Encodings the client accepts, best first, among those we have forms for.
fn accepted_encodings(headers: &HeaderMap) -> Vec<Encoding> {
    let mut accepted: Vec<(Encoding, f32)> = Vec::new();
    for value in headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
    {
        for item in value.split(',') {
            let mut parts = item.split(';');
            let name = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.trim().strip_prefix("q="))
                .filter_map(|q| q.parse::<f32>().ok())
                .next()
                .unwrap_or(1.0);
            let encoding = match name.as_str() {
                "br" => Encoding::Br,
                "gzip" | "x-gzip" => Encoding::Gzip,
                _ => continue,
            };
            if q > 0.0 {
                accepted.push((encoding, q));
            }
        }
    }
    // Higher q first; at equal q, brotli (smaller) before gzip.
    accepted.sort_by(|a, b| {
        b.1.partial_cmp(&a.1)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then((a.0 != Encoding::Br).cmp(&(b.0 != Encoding::Br)))
    });
    accepted.into_iter().map(|(e, _)| e).collect()
}

/// Parses a single `bytes=` range against `size` into an inclusive `(first, last)`.
/// `None`: ignore the header (multiple ranges, other units, garbage) and send everything.
/// `Some(Err)`: unsatisfiable.
fn parse_range(value: &str, size: u64) -> Option<Result<(u64, u64), ()>> {
    let spec = value.trim().strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None;
    }
    let (start, end) = spec.split_once('-')?;
    let (start, end) = (start.trim(), end.trim());
    let range = if start.is_empty() {
        let suffix: u64 = end.parse().ok()?;
        if suffix == 0 || size == 0 {
            return Some(Err(()));
        }
        (size.saturating_sub(suffix), size - 1)
    } else {
        let first: u64 = start.parse().ok()?;
        let last = if end.is_empty() {
            size.saturating_sub(1)
        } else {
            end.parse::<u64>().ok()?.min(size.saturating_sub(1))
        };
        if first >= size || last < first {
            return Some(Err(()));
        }
        (first, last)
    };
    Some(Ok(range))
}

fn etag_for(key: &str, encoding: Option<Encoding>) -> String {
    let name = key.rsplit('/').next().unwrap_or(key);
    let digest = name.split('.').next().unwrap_or(name);
    match encoding {
        Some(e) => format!("\"{digest}-{}\"", e.token()),
        None => format!("\"{digest}\""),
    }
}

async fn serve(
    state: &AppState,
    key: &str,
    headers: &HeaderMap,
    cache_control: &'static str,
) -> ApiResult<Response> {
    let range_header = headers.get(header::RANGE).and_then(|v| v.to_str().ok());
    // A range names bytes of one representation; we serve ranges of the identity bytes only.
    let mut chosen: Option<(Encoding, String)> = None;
    if range_header.is_none() && (key.starts_with("files/") || key.starts_with("library/")) {
        for encoding in accepted_encodings(headers) {
            let encoded = keys::encoded_key(key, encoding);
            if state.storage.head(&encoded).await?.is_some() {
                chosen = Some((encoding, encoded));
                break;
            }
        }
    }
    let encoding = chosen.as_ref().map(|(e, _)| *e);
    let object_key = chosen.as_ref().map_or(key, |(_, k)| k.as_str());
    let etag = etag_for(key, encoding);

    let mut out = HeaderMap::new();
    out.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(cache_control),
    );
    out.insert(
        header::ETAG,
        HeaderValue::from_str(&etag).expect("hex etag"),
    );
    out.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    out.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    out.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    out.insert("access-control-allow-origin", HeaderValue::from_static("*"));
    if etag_matches(headers, &etag) {
        return Ok((StatusCode::NOT_MODIFIED, out).into_response());
    }

    let meta = state
        .storage
        .head(object_key)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("object {key} not found")))?;
    out.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(&meta.headers.content_type).expect("ascii content type"),
    );
    if let Some(e) = encoding {
        out.insert(
            header::CONTENT_ENCODING,
            HeaderValue::from_static(e.token()),
        );
    }
    // If-Range: a range only applies to the representation the client already has part of.
    let if_range_ok = headers
        .get(header::IF_RANGE)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|v| v.trim() == etag);
    let range = match range_header {
        Some(value) if if_range_ok => parse_range(value, meta.size),
        _ => None,
    };
    match range {
        Some(Err(())) => {
            out.insert(
                header::CONTENT_RANGE,
                HeaderValue::from_str(&format!("bytes */{}", meta.size)).expect("ascii"),
            );
            Ok((StatusCode::RANGE_NOT_SATISFIABLE, out).into_response())
        }
        Some(Ok((first, last))) => {
            let (_, stream) = state.storage.open(object_key, Some((first, last))).await?;
            out.insert(
                header::CONTENT_RANGE,
                HeaderValue::from_str(&format!("bytes {first}-{last}/{}", meta.size))
                    .expect("ascii"),
            );
            out.insert(header::CONTENT_LENGTH, HeaderValue::from(last - first + 1));
            Ok((StatusCode::PARTIAL_CONTENT, out, Body::from_stream(stream)).into_response())
        }
        None => {
            let (_, stream) = state.storage.open(object_key, None).await?;
            out.insert(header::CONTENT_LENGTH, HeaderValue::from(meta.size));
            Ok((StatusCode::OK, out, Body::from_stream(stream)).into_response())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(parse_range("bytes=0-9", 100), Some(Ok((0, 9))));
        assert_eq!(parse_range("bytes=90-", 100), Some(Ok((90, 99))));
        assert_eq!(parse_range("bytes=-10", 100), Some(Ok((90, 99))));
        assert_eq!(parse_range("bytes=50-500", 100), Some(Ok((50, 99))));
        assert_eq!(parse_range("bytes=100-", 100), Some(Err(())));
        assert_eq!(parse_range("bytes=9-3", 100), Some(Err(())));
        assert_eq!(parse_range("bytes=0-1,5-6", 100), None);
        assert_eq!(parse_range("items=0-1", 100), None);
    }

    #[test]
    fn encodings_follow_q_values() {
        let mut h = HeaderMap::new();
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("gzip, deflate, br"),
        );
        assert_eq!(accepted_encodings(&h), vec![Encoding::Br, Encoding::Gzip]);
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("br;q=0.5, gzip;q=0.9"),
        );
        assert_eq!(accepted_encodings(&h), vec![Encoding::Gzip, Encoding::Br]);
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("br;q=0, identity"),
        );
        assert!(accepted_encodings(&h).is_empty());
    }
}
