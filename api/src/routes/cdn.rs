//! CDN origin: published objects by key, with the headers a CDN needs.
//!
//! `Cache-Control: immutable` (keys are content-addressed), a strong `ETag` and `304`, single
//! `Range` requests (`206`/`416`), and `Content-Encoding` negotiation over the pre-compressed
//! forms. `/play/{game}/…` serves the live build by its own paths so a browser can run it;
//! `/play/{game}/@{build_id}/…` serves one build's files, cached forever.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use kiln_common::keys::{self, Encoding};

use crate::AppState;
use crate::error::{ApiError, ApiPath, ApiResult};
use crate::play_index::PlayFile;

#[utoipa::path(get, path = "/cdn/{key}",
    params(("key" = String, Path, description = "Object key from the manifest, e.g. files/ab/ab….js")),
    responses((status = 200, content_type = "*/*"), (status = 206, content_type = "*/*"), (status = 304), (status = 400, body = crate::error::ErrorBody), (status = 404, body = crate::error::ErrorBody), (status = 416, body = crate::error::ErrorBody), (status = 503, body = crate::error::ErrorBody)))]
pub async fn object(
    State(state): State<AppState>,
    ApiPath(key): ApiPath<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    if !keys::is_public_key(&key) {
        return Err(ApiError::not_found(format!("object {key} not found")));
    }
    serve(&state, &key, None, &headers, keys::IMMUTABLE).await
}

/// Cache policy of a live-build HTML page: a minute, as long as the live manifest's, so a
/// release or rollback reaches players within a minute, a repeat visit inside it needs no
/// request at all, and after it the page is revalidated (strong ETag: a `304`). Everything the
/// page loads comes from the build's immutable folder, so only the page is ever revalidated.
pub const LIVE_PAGE: &str = "public, max-age=60";

/// A request path inside a build: a directory means its `index.html`.
fn file_path(path: &str) -> String {
    if path.is_empty() || path.ends_with('/') {
        format!("{path}index.html")
    } else {
        path.to_string()
    }
}

#[utoipa::path(get, path = "/play/{game}/{path}",
    description = "The game's live build by its own paths (`/play/{game}/` is its `index.html`), so relative URLs inside the game keep working. HTML pages `Cache-Control: no-cache` (revalidated every visit), other files `max-age=60`; ETag/304, ranges and br/gzip as on /cdn.",
    params(("game" = String, Path), ("path" = String, Path, description = "a file's path in the build")),
    responses((status = 200, content_type = "*/*"), (status = 206, content_type = "*/*"), (status = 304), (status = 400, body = crate::error::ErrorBody), (status = 404, body = crate::error::ErrorBody), (status = 416, body = crate::error::ErrorBody), (status = 503, body = crate::error::ErrorBody)))]
/// `GET /play/{game}/{path}`: the live build's file at `path`. Pages are revalidated on
/// every visit and other files are short-lived, because the live build moves; the
/// build-scoped route ([`play_build`]) is the one to cache forever.
pub async fn play(
    State(state): State<AppState>,
    ApiPath((game, path)): ApiPath<(String, String)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let path = file_path(&path);
    // One database read per request: the live release can move at any time (release,
    // rollback). Its manifest is immutable under its key, so the parsed files are cached.
    let row = state
        .db
        .live_release(&game)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("game {game:?} has no published build")))?;
    let index = state
        .manifests
        .load(&state.storage, &row.manifest_key, &row.manifest_key)
        .await?;
    let file = index
        .file(&path)
        .ok_or_else(|| ApiError::not_found(format!("{path} is not in {game}'s live build")))?;
    let cache_control = if file.is_html {
        LIVE_PAGE
    } else {
        keys::SHORT_LIVED
    };
    let response = serve(&state, &file.key, Some(file), &headers, cache_control).await?;
    Ok(with_build_policy(&state, &index, response))
}

#[utoipa::path(get, path = "/play/{game}/",
    description = "The live build's `index.html` (as `/play/{game}/index.html`).",
    params(("game" = String, Path)),
    responses((status = 200, content_type = "*/*"), (status = 206, content_type = "*/*"), (status = 304), (status = 400, body = crate::error::ErrorBody), (status = 404, body = crate::error::ErrorBody), (status = 416, body = crate::error::ErrorBody), (status = 503, body = crate::error::ErrorBody)))]
pub async fn play_root(
    state: State<AppState>,
    ApiPath(game): ApiPath<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    play(state, ApiPath((game, String::new())), headers).await
}

#[utoipa::path(get, path = "/play/{game}/@{build_id}/{path}",
    description = "File `path` of one published build of the game (`/play/{game}/@{build_id}/` is its `index.html`), any build with a manifest, live or not: `Cache-Control: public, max-age=31536000, immutable`, ETag/304, ranges and br/gzip as on /cdn. Rewritten pages set `<base href=\"/play/{game}/@{build_id}/\">`, so everything they load comes from here.",
    params(("game" = String, Path), ("build_id" = String, Path), ("path" = String, Path, description = "a file's path in the build")),
    responses((status = 200, content_type = "*/*"), (status = 206, content_type = "*/*"), (status = 304), (status = 400, body = crate::error::ErrorBody), (status = 404, body = crate::error::ErrorBody), (status = 416, body = crate::error::ErrorBody), (status = 503, body = crate::error::ErrorBody)))]
/// `GET /play/{game}/@{build_id}/{path}`: a file of that exact build, cached forever.
pub async fn play_build(
    State(state): State<AppState>,
    ApiPath((game, build_id, path)): ApiPath<(String, String, String)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let path = file_path(&path);
    let not_found = || ApiError::not_found(format!("{game:?} has no published build {build_id}"));
    // A build's manifest never changes: once found, neither the database nor the store is
    // asked again for it.
    let cache_key = format!("@{game}/{build_id}");
    let index = match state.manifests.get(&cache_key) {
        Some(index) => index,
        None => {
            let row = state
                .db
                .manifests_for_build(&build_id)
                .await?
                .into_iter()
                .find(|m| m.game == game)
                .ok_or_else(not_found)?;
            state
                .manifests
                .load(&state.storage, &cache_key, &row.manifest_key)
                .await?
        }
    };
    let file = index
        .file(&path)
        .ok_or_else(|| ApiError::not_found(format!("{path} is not in build {build_id}")))?;
    let response = serve(&state, &file.key, Some(file), &headers, keys::IMMUTABLE).await?;
    Ok(with_build_policy(&state, &index, response))
}

#[utoipa::path(get, path = "/play/{game}/@{build_id}/",
    description = "One build's `index.html` (as `/play/{game}/@{build_id}/index.html`).",
    params(("game" = String, Path), ("build_id" = String, Path)),
    responses((status = 200, content_type = "*/*"), (status = 206, content_type = "*/*"), (status = 304), (status = 400, body = crate::error::ErrorBody), (status = 404, body = crate::error::ErrorBody), (status = 416, body = crate::error::ErrorBody), (status = 503, body = crate::error::ErrorBody)))]
pub async fn play_build_root(
    state: State<AppState>,
    ApiPath((game, build_id)): ApiPath<(String, String)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    play_build(state, ApiPath((game, build_id, String::new())), headers).await
}

/// A build's file carries the build's policy: Kiln's, plus the build's `[csp]` extension.
fn with_build_policy(
    state: &AppState,
    index: &crate::play_index::BuildIndex,
    mut response: Response,
) -> Response {
    let origin = kiln_common::config::Config::origin_of(&state.config.content_url());
    if let Ok(value) = HeaderValue::from_str(&kiln_common::csp::policy(&origin, &index.csp)) {
        response
            .headers_mut()
            .insert(header::CONTENT_SECURITY_POLICY, value);
    }
    response
}

/// Every response of the content origin has a Content-Security-Policy: a build's files get
/// their build's (set by the `/play` handlers), everything else Kiln's own (an HTML object
/// opened from `/cdn` runs under it too).
pub async fn content_security_policy(
    State(state): State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let mut response = next.run(request).await;
    if !response
        .headers()
        .contains_key(header::CONTENT_SECURITY_POLICY)
    {
        let origin = kiln_common::config::Config::origin_of(&state.config.content_url());
        let policy = kiln_common::csp::policy(&origin, &Default::default());
        if let Ok(value) = HeaderValue::from_str(&policy) {
            response
                .headers_mut()
                .insert(header::CONTENT_SECURITY_POLICY, value);
        }
    }
    response
}

/// On the API origin, `/play`, `/cdn` and `/sdk` answer `308` to the same path on the
/// content origin: links, pages and manifests written before the origins were split keep
/// working, and the bytes still only ever come from the content origin (a team's page never
/// runs beside the dashboard). `Access-Control-Allow-Origin: *` lets a page's `fetch` follow.
pub async fn to_content_origin(State(state): State<AppState>, uri: axum::http::Uri) -> Response {
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let target = format!("{}{path}", state.config.content_url());
    match HeaderValue::from_str(&target) {
        Ok(location) => (
            StatusCode::PERMANENT_REDIRECT,
            [
                (header::LOCATION, location),
                (
                    header::CACHE_CONTROL,
                    HeaderValue::from_static("public, max-age=3600"),
                ),
                (
                    header::ACCESS_CONTROL_ALLOW_ORIGIN,
                    HeaderValue::from_static("*"),
                ),
            ],
        )
            .into_response(),
        Err(_) => ApiError::not_found("no such path").into_response(),
    }
}

/// Anything else on the content origin: a `404` that says where the API is.
pub async fn content_not_found(State(state): State<AppState>, uri: axum::http::Uri) -> Response {
    ApiError::not_found(format!(
        "{} is not served on the content origin (game files, manifests, keys, telemetry); \
         the API is at {}",
        uri.path(),
        state.config.public_url()
    ))
    .into_response()
}

/// True when `If-None-Match` names `etag` (or is `*`). `*` matches any current
/// representation (RFC 9110 13.1.2): ask only once the object is known to exist.
pub fn etag_matches(headers: &HeaderMap, etag: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().trim_start_matches("W/"))
        .any(|t| t == etag || t == "*")
}

/// How hard [`compress`] works: `Best` for bytes compressed once and kept (the loader),
/// `Fast` for bytes compressed per request (manifests, a few KB).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effort {
    Best,
    Fast,
}

/// `input` in `encoding`. Deterministic (gzip with a fixed header: mtime 0, no name), so the
/// same bytes give the same form, and the same ETag, on every replica and start.
pub fn compress(input: &[u8], encoding: Encoding, effort: Effort) -> Vec<u8> {
    use std::io::Write;
    match encoding {
        Encoding::Br => {
            // Quality 11, window 22: the same as the pipeline gives published scripts.
            let quality = if effort == Effort::Best { 11 } else { 5 };
            let mut out = Vec::new();
            {
                let mut w = brotli::CompressorWriter::new(&mut out, 64 * 1024, quality, 22);
                w.write_all(input).expect("compress to memory");
            }
            out
        }
        Encoding::Gzip => {
            let level = if effort == Effort::Best {
                flate2::Compression::best()
            } else {
                flate2::Compression::default()
            };
            let mut w = flate2::GzBuilder::new().write(Vec::new(), level);
            w.write_all(input).expect("compress to memory");
            w.finish().expect("compress to memory")
        }
    }
}

/// Encodings the client accepts, best first, among those we have forms for.
pub fn accepted_encodings(headers: &HeaderMap) -> Vec<Encoding> {
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

/// Serves the object at `key` (identity) or one of its pre-compressed forms. `known`: what
/// a manifest says of it (size and forms), so no store lookups are needed before opening
/// the bytes; without it (`/cdn`), the store is asked which forms exist.
async fn serve(
    state: &AppState,
    key: &str,
    known: Option<&PlayFile>,
    headers: &HeaderMap,
    cache_control: &'static str,
) -> ApiResult<Response> {
    let range_header = headers.get(header::RANGE).and_then(|v| v.to_str().ok());
    // A range names bytes of one representation; we serve ranges of the identity bytes only.
    let mut chosen: Option<(Encoding, String, u64)> = None;
    if range_header.is_none() && (key.starts_with("files/") || key.starts_with("library/")) {
        for encoding in accepted_encodings(headers) {
            let encoded = keys::encoded_key(key, encoding);
            match known {
                Some(file) => {
                    if let Some((_, size)) = file.forms.iter().find(|(e, _)| *e == encoding) {
                        chosen = Some((encoding, encoded, *size));
                        break;
                    }
                }
                None => {
                    if let Some(meta) = state.storage.head(&encoded).await? {
                        chosen = Some((encoding, encoded, meta.size));
                        break;
                    }
                }
            }
        }
    }
    let encoding = chosen.as_ref().map(|(e, _, _)| *e);
    let object_key = chosen.as_ref().map_or(key, |(_, k, _)| k.as_str());
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
    // Existence first: a 304 says "what you have is current", which nothing missing is.
    // `chosen` and `known` come from the store and a manifest, so only `/cdn` without a
    // pre-compressed form asks the store here.
    let size = match (&chosen, known) {
        (Some((_, _, size)), _) => *size,
        (None, Some(file)) => file.size,
        (None, None) => {
            state
                .storage
                .head(object_key)
                .await?
                .ok_or_else(|| ApiError::not_found(format!("object {key} not found")))?
                .size
        }
    };
    if etag_matches(headers, &etag) {
        return Ok((StatusCode::NOT_MODIFIED, out).into_response());
    }
    let content_type = keys::headers_for_key(object_key).content_type;
    out.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(&content_type).expect("ascii content type"),
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
        Some(value) if if_range_ok => parse_range(value, size),
        _ => None,
    };
    match range {
        Some(Err(())) => {
            out.insert(
                header::CONTENT_RANGE,
                HeaderValue::from_str(&format!("bytes */{size}")).expect("ascii"),
            );
            Ok((StatusCode::RANGE_NOT_SATISFIABLE, out).into_response())
        }
        Some(Ok((first, last))) => {
            let (_, stream) = state.storage.open(object_key, Some((first, last))).await?;
            out.insert(
                header::CONTENT_RANGE,
                HeaderValue::from_str(&format!("bytes {first}-{last}/{size}")).expect("ascii"),
            );
            out.insert(header::CONTENT_LENGTH, HeaderValue::from(last - first + 1));
            Ok((StatusCode::PARTIAL_CONTENT, out, Body::from_stream(stream)).into_response())
        }
        None => {
            let (meta, stream) = state.storage.open(object_key, None).await?;
            // The store's size, not the manifest's: the length must match the bytes sent.
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
