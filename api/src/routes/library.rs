//! The shared engine library: the loader script, the library's entries with their ROI, and
//! removing an entry no live game needs.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::AppState;
use crate::auth::{Admin, Team};
use crate::error::{ApiError, ApiPath, ApiResult};

/// The loader, served as written (`api/sdk/kiln-loader.js`, through `kiln_common::loader`).
pub use kiln_common::loader::LOADER;

/// Cache policy of the mutable alias `/sdk/kiln-loader.js`. Five minutes, not longer: the
/// loader is the code that checks signatures and hashes, so a fix must reach pages that
/// name the alias within minutes, and revalidating it is a cheap `304` (an ETag per form).
/// Pages Kiln rewrites load the versioned path instead, which is `immutable`.
pub const LOADER_ALIAS: &str = "public, max-age=300";

/// The loader's brotli and gzip forms, compressed once, at first use.
struct LoaderForms {
    br: bytes::Bytes,
    gzip: bytes::Bytes,
}

fn compress_loader() -> LoaderForms {
    use crate::routes::cdn::{Effort, compress};
    use kiln_common::keys::Encoding;
    let input = LOADER.as_bytes();
    LoaderForms {
        br: compress(input, Encoding::Br, Effort::Best).into(),
        gzip: compress(input, Encoding::Gzip, Effort::Best).into(),
    }
}

async fn loader_forms() -> &'static LoaderForms {
    static FORMS: tokio::sync::OnceCell<LoaderForms> = tokio::sync::OnceCell::const_new();
    FORMS
        .get_or_init(|| async {
            tokio::task::spawn_blocking(compress_loader)
                .await
                .expect("loader compression")
        })
        .await
}

#[utoipa::path(get, path = "/sdk/kiln-loader.js",
    description = "The Kiln loader (no dependencies): `kiln.preheat(manifestUrl)`, `kiln.engine(name)`, `kiln.boot(config)`. See api/sdk/README.md. br/gzip by Accept-Encoding (an ETag each), `max-age=300`; the same bytes are at `/sdk/kiln-loader.{hash}.js`, `immutable`.",
    responses((status = 200, content_type = "text/javascript"), (status = 304)))]
pub async fn loader(headers: HeaderMap) -> Response {
    serve_loader(&headers, LOADER_ALIAS).await
}

#[utoipa::path(get, path = "/sdk/{file}",
    description = "The loader under its content-addressed name `kiln-loader.{hash}.js` (`hash`: the first 16 hex characters of its SHA-256; `kiln_common::loader::versioned_path()`), `Cache-Control: public, max-age=31536000, immutable`; any other name is 404.",
    params(("file" = String, Path, description = "kiln-loader.{hash}.js")),
    responses((status = 200, content_type = "text/javascript"), (status = 304),
        (status = 400, body = crate::error::ErrorBody), (status = 404, body = crate::error::ErrorBody)))]
pub async fn loader_file(
    ApiPath(file): ApiPath<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    if file != kiln_common::loader::versioned_file_name() {
        return Err(ApiError::not_found(format!("/sdk/{file} not found")));
    }
    Ok(serve_loader(&headers, kiln_common::keys::IMMUTABLE).await)
}

async fn serve_loader(headers: &HeaderMap, cache_control: &'static str) -> Response {
    use kiln_common::keys::Encoding;
    let encoding = crate::routes::cdn::accepted_encodings(headers)
        .into_iter()
        .next();
    let digest = &kiln_common::loader::sha256()[..32];
    let etag = match encoding {
        Some(e) => format!("\"{digest}-{}\"", e.token()),
        None => format!("\"{digest}\""),
    };
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
    out.insert("access-control-allow-origin", HeaderValue::from_static("*"));
    out.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    if crate::routes::cdn::etag_matches(headers, &etag) {
        return (StatusCode::NOT_MODIFIED, out).into_response();
    }
    out.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/javascript; charset=utf-8"),
    );
    let body = match encoding {
        None => bytes::Bytes::from_static(LOADER.as_bytes()),
        Some(e) => {
            out.insert(
                header::CONTENT_ENCODING,
                HeaderValue::from_static(e.token()),
            );
            let forms = loader_forms().await;
            match e {
                Encoding::Br => forms.br.clone(),
                Encoding::Gzip => forms.gzip.clone(),
            }
        }
    };
    (StatusCode::OK, out, body).into_response()
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct LibraryView {
    pub entries: Vec<LibraryEntryView>,
    /// Bytes the library stores (each entry once).
    pub bytes_stored: i64,
    /// Bytes players did not download because another game's visit had already put the
    /// engine on their device (each entry's `bytes_saved`, summed).
    pub bytes_saved: i64,
    /// An entry is flagged `low_roi` while `bytes_saved < size × min_roi`.
    pub min_roi: f64,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct LibraryEntryView {
    /// The entry's id: the SHA-256 of its bytes.
    pub id: String,
    pub engine: String,
    pub version: String,
    pub size: i64,
    pub url: String,
    pub first_build_id: String,
    pub created_at: String,
    /// Games and builds that carry it.
    pub games: i64,
    pub builds: i64,
    /// Loader outcomes reported for this engine version.
    pub hits: i64,
    pub misses: i64,
    pub fallbacks: i64,
    /// `hits / (hits + misses + fallbacks)`; null before any report.
    pub hit_rate: Option<f64>,
    /// Hits another game's visit brought (the loader's `shared`): the engine was on the
    /// device only thanks to the library. Same-game repeats would have been in the HTTP cache.
    pub shared_hits: i64,
    /// The size of its brotli form: what the CDN sends for it (its `size` where unknown).
    pub br_size: i64,
    /// `shared_hits × br_size`: bytes not downloaded thanks to the library.
    pub bytes_saved: i64,
    /// `bytes_saved / size`.
    pub roi: f64,
    pub low_roi: bool,
}

#[utoipa::path(get, path = "/v1/library",
    description = "The shared library's engine builds, with their reuse, loader outcomes and ROI (bytes saved against bytes stored). The admin token: every entry. A team token: only the entries its own games' builds carry, every count and total over its own games.",
    responses((status = 200, body = LibraryView), (status = 401, body = crate::error::ErrorBody),
        (status = 503, body = crate::error::ErrorBody)),
    security(("team_token" = []), ("admin_token" = [])))]
pub async fn list(
    State(state): State<AppState>,
    auth: Result<Team, ApiError>,
    admin: Result<Admin, ApiError>,
) -> ApiResult<Json<LibraryView>> {
    // An admin sees every entry; a team only those its own games use, counted over its own
    // games (another team's games, builds and players are not its business).
    let team = match (auth, admin) {
        (_, Ok(_)) => None,
        (Ok(Team(team)), _) => Some(team),
        (Err(e), Err(_)) => return Err(e),
    };
    let min_roi = state.config.library.min_roi;
    let base = state.config.public_url();
    let entries: Vec<LibraryEntryView> = state
        .db
        .library_for(team.as_deref())
        .await?
        .into_iter()
        .map(|e| {
            let reports = e.hits + e.misses + e.fallbacks;
            let bytes_saved = kiln_common::dashboard::bytes_saved(&e);
            let roi = kiln_common::dashboard::roi(&e);
            LibraryEntryView {
                url: format!("{base}/cdn/{}", e.object_key),
                id: e.sha256,
                engine: e.engine,
                version: e.version,
                size: e.size,
                first_build_id: e.first_build_id,
                created_at: e.created_at,
                games: e.games,
                builds: e.builds,
                hits: e.hits,
                misses: e.misses,
                fallbacks: e.fallbacks,
                hit_rate: (reports > 0).then(|| e.hits as f64 / reports as f64),
                shared_hits: e.shared_hits,
                br_size: e.br_size,
                bytes_saved,
                roi,
                low_roi: roi < min_roi,
            }
        })
        .collect();
    Ok(Json(LibraryView {
        bytes_stored: entries.iter().map(|e| e.size).sum(),
        bytes_saved: entries.iter().map(|e| e.bytes_saved).sum(),
        min_roi,
        entries,
    }))
}

#[utoipa::path(delete, path = "/v1/library/{id}",
    description = "Removes an entry and its objects (admin). Refused with 409 while a game's live release carries it.",
    params(("id" = String, Path, description = "The entry's SHA-256")),
    responses((status = 204), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody), (status = 404, body = crate::error::ErrorBody),
        (status = 409, body = crate::error::ErrorBody), (status = 503, body = crate::error::ErrorBody)),
    security(("admin_token" = [])))]
pub async fn delete(
    State(state): State<AppState>,
    _: Admin,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Response> {
    let Some(key) = state.db.library_object(&id).await? else {
        return Err(ApiError::not_found(format!("library entry {id} not found")));
    };
    let games = state.db.live_games_using(&id).await?;
    if !games.is_empty() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "in_use",
            format!(
                "library entry {id} is in the live release of {}; release those games without it first",
                games.join(", ")
            ),
        ));
    }
    // Rows first: an entry without objects is gone; objects without a row are only garbage.
    state.db.delete_library_entry(&id).await?;
    use kiln_common::keys::{Encoding, encoded_key};
    for object in [
        encoded_key(&key, Encoding::Br),
        encoded_key(&key, Encoding::Gzip),
        key,
    ] {
        state.storage.delete(&object).await?;
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}
