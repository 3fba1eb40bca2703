//! Kiln's HTTP service. Handlers translate HTTP to database, storage and queue calls; the
//! pipeline runs in workers (in this process in the embedded mode, or `kiln-worker`s).

pub mod auth;
pub mod demo;
pub mod error;
pub mod ingest;
pub mod openapi;
pub mod play_index;
pub mod routes;
pub mod uploads;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use kiln_common::config::Config;
use kiln_common::db::Db;
use kiln_common::metrics;
use kiln_common::storage::Storage;
use tokio::sync::{Semaphore, watch};
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

#[derive(Clone)]
pub struct AppState {
    pub db: Db,
    pub storage: Storage,
    pub config: Arc<Config>,
    pub upload_slots: Arc<Semaphore>,
    pub telemetry_limiter: Arc<routes::telemetry::RateLimiter>,
    pub ingest: ingest::Ingest,
    /// Parsed manifests `/play/` serves from, by immutable key.
    pub manifests: Arc<play_index::ManifestCache>,
}

pub fn router(state: AppState) -> Router {
    use routes::{
        builds, cdn, dashboard, library, ops, publishing, releases, teams, telemetry, uploads,
    };
    let upload_timeout = Duration::from_secs(state.config.upload.timeout_secs);
    let request_timeout = Duration::from_secs(state.config.upload.request_timeout_secs);
    // Uploads and event streams run long; everything else gets the short timeout.
    let long = Router::new()
        .route("/v1/games/{game}/builds", post(uploads::upload))
        .route("/v1/builds/{id}/events", get(builds::events))
        .layer(TimeoutLayer::with_status_code(
            error::TIMEOUT_STATUS,
            upload_timeout,
        ));
    let short = Router::new()
        .route("/v1/builds/{id}", get(builds::status))
        .route("/v1/builds/{id}/report", get(builds::report))
        .route("/v1/builds/{id}/retry", post(builds::retry))
        .route("/v1/games/{game}/transfer", post(teams::transfer_game))
        .route("/v1/games/{game}/manifest", get(publishing::manifest))
        .route("/v1/keys", get(publishing::keys))
        .route("/v1/keys/trust", get(publishing::trust))
        .route(
            "/v1/games/{game}/releases",
            post(releases::create).get(releases::list),
        )
        .route(
            "/v1/telemetry",
            post(telemetry::ingest).options(telemetry::preflight),
        )
        .route("/v1/library", get(library::list))
        .route("/v1/library/{id}", axum::routing::delete(library::delete))
        .route("/v1/teams", post(teams::create_team))
        .route("/v1/teams/{id}/tokens", post(teams::create_token))
        .route("/v1/openapi.json", get(ops::openapi))
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::metrics))
        .route("/dashboard", get(dashboard::page))
        .route("/dashboard/", get(dashboard::page))
        .route("/dashboard/dashboard.css", get(dashboard::css))
        .route("/dashboard/charts.js", get(dashboard::charts))
        .route("/dashboard/dashboard.js", get(dashboard::script))
        .route(
            "/dashboard/session",
            post(dashboard::login).delete(dashboard::logout),
        )
        .route("/v1/dashboard/data", get(dashboard::data))
        // Team content lives on the content origin only ([`content_router`]); old links and
        // pages that name this origin are sent there.
        .route("/play/{*rest}", get(cdn::to_content_origin))
        .route("/cdn/{*rest}", get(cdn::to_content_origin))
        .route("/sdk/{*rest}", get(cdn::to_content_origin))
        .layer(TimeoutLayer::with_status_code(
            error::TIMEOUT_STATUS,
            request_timeout,
        ));
    long.merge(short)
        // No route (404), a method the route does not take (405), a timeout (503): JSON too.
        .layer(middleware::from_fn(error::json_errors))
        .layer(middleware::map_response(api_origin_headers))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            record_request,
        ))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

/// `KILN_METRICS_BIND`'s listener: `/metrics` and `/healthz`, nothing else.
pub fn metrics_router(state: AppState) -> Router {
    Router::new()
        .route("/metrics", get(routes::ops::metrics_listener))
        .route("/healthz", get(routes::ops::healthz))
        .layer(middleware::from_fn(error::json_errors))
        .with_state(state)
}

/// The content origin (`KILN_CONTENT_URL`): game files and what games need from Kiln at run
/// time (manifests, keys, telemetry), nothing that takes a token. A team's pages run here,
/// apart from the dashboard and the API, so they can read neither's storage.
pub fn content_router(state: AppState) -> Router {
    use routes::{cdn, library, publishing, telemetry};
    let request_timeout = Duration::from_secs(state.config.upload.request_timeout_secs);
    Router::new()
        .route("/v1/games/{game}/manifest", get(publishing::manifest))
        .route("/v1/keys", get(publishing::keys))
        // The loader fetches the trust document beside the manifest it met an unknown key in.
        .route("/v1/keys/trust", get(publishing::trust))
        .route(
            "/v1/telemetry",
            post(telemetry::ingest).options(telemetry::preflight),
        )
        .route("/healthz", get(routes::ops::healthz))
        // What games load: other origins may read its Resource Timing (transfer sizes).
        .merge(
            Router::new()
                .route("/sdk/kiln-loader.js", get(library::loader))
                .route("/sdk/{file}", get(library::loader_file))
                .route("/cdn/{*key}", get(cdn::object))
                .route("/play/{game}/", get(cdn::play_root))
                .route("/play/{game}/{*path}", get(cdn::play))
                .route("/play/{game}/@{build_id}/", get(cdn::play_build_root))
                .route("/play/{game}/@{build_id}/{*path}", get(cdn::play_build))
                .layer(middleware::map_response(timing_allow_origin)),
        )
        .fallback(cdn::content_not_found)
        .layer(TimeoutLayer::with_status_code(
            error::TIMEOUT_STATUS,
            request_timeout,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            cdn::content_security_policy,
        ))
        // Bodyless errors (404, 405, a timeout's 503) in the one JSON shape, as on the API origin.
        .layer(middleware::from_fn(error::json_errors))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            record_request,
        ))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

/// Nothing of the API origin may be framed by another page (clickjacking the dashboard).
async fn api_origin_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        "x-frame-options",
        axum::http::HeaderValue::from_static("DENY"),
    );
    if !headers.contains_key(axum::http::header::CONTENT_SECURITY_POLICY) {
        headers.insert(
            axum::http::header::CONTENT_SECURITY_POLICY,
            axum::http::HeaderValue::from_static("default-src 'none'; frame-ancestors 'none'"),
        );
    }
    response
}

/// `Timing-Allow-Origin: *` on every response (errors and `304`s too), so a page on another
/// origin (a game's host, the loader) can read transfer and encoded sizes from Resource
/// Timing and tell a cache hit from a download.
async fn timing_allow_origin(mut response: Response) -> Response {
    response.headers_mut().insert(
        "timing-allow-origin",
        axum::http::HeaderValue::from_static("*"),
    );
    response
}

/// RED metrics per route template (never per raw path: bounded label values).
async fn record_request(State(_): State<AppState>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched".to_string(), |p| p.as_str().to_string());
    let method = request.method().as_str().to_string();
    let start = Instant::now();
    let response = next.run(request).await;
    metrics::HTTP_DURATION
        .with_label_values(&[&route, &method])
        .observe(start.elapsed().as_secs_f64());
    metrics::HTTP_REQUESTS
        .with_label_values(&[&route, &method, response.status().as_str()])
        .inc();
    response
}

/// A started API: its addresses, and how to stop it.
pub struct Running {
    pub addr: SocketAddr,
    /// The content origin's listener.
    pub content_addr: SocketAddr,
    /// `/metrics`' own listener, when `KILN_METRICS_BIND` is set.
    pub metrics_addr: Option<SocketAddr>,
    pub state: AppState,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// The telemetry writer, stopped only after the servers: handlers answering during the
    /// graceful shutdown still wait for their beacons' commit.
    ingest: (watch::Sender<bool>, tokio::task::JoinHandle<()>),
}

impl Running {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The content origin's base URL (`KILN_CONTENT_URL`, or the bound listener's).
    pub fn content_url(&self) -> String {
        self.state.config.content_url()
    }

    /// Stops accepting requests and lets in-process workers finish their jobs.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
        let (stop_ingest, ingest) = self.ingest;
        let _ = stop_ingest.send(true);
        let _ = ingest.await;
    }

    pub fn stop_handle(&self) -> watch::Sender<bool> {
        self.stop.clone()
    }
}

/// Binds, migrates, and starts serving (and in-process workers, if configured).
pub async fn start(mut config: Config) -> anyhow::Result<Running> {
    metrics::init();
    let listener = tokio::net::TcpListener::bind(&config.bind).await?;
    let addr = listener.local_addr()?;
    if config.public_url.is_empty() {
        config.public_url = format!("http://{addr}");
    }
    let content_listener = tokio::net::TcpListener::bind(&config.content_bind)
        .await
        .map_err(|e| anyhow::anyhow!("content origin {}: {e}", config.content_bind))?;
    let content_addr = content_listener.local_addr()?;
    if config.content_url.is_empty() {
        config.content_url = format!("http://{content_addr}");
    }
    if kiln_common::config::Config::origin_of(&config.content_url)
        == kiln_common::config::Config::origin_of(&config.public_url)
    {
        anyhow::bail!(
            "KILN_CONTENT_URL ({}) must be another origin than the API's ({}): team pages \
             would run beside the dashboard",
            config.content_url,
            config.public_url
        );
    }
    // Migrated here unless a separate step does it: the queue's tables must exist before the
    // first upload pushes a job.
    let db = kiln_jobs::open_database(&config, kiln_common::config::API_DB_CONNECTIONS).await?;
    let storage = Storage::from_config(&config.storage, &config.data_dir).await?;
    let config = Arc::new(config);
    let (stop, stopped) = watch::channel(false);
    let mut tasks = Vec::new();
    let (beacon_secret, _) =
        kiln_common::telemetry::BeaconSecret::load_or_generate(&config.telemetry_secret_path())?;
    let (stop_ingest, ingest_stopped) = watch::channel(false);
    let (ingest, ingest_task) = ingest::Ingest::start(
        db.clone(),
        config.telemetry.clone(),
        beacon_secret,
        ingest_stopped,
    );
    let state = AppState {
        ingest,
        db: db.clone(),
        storage: storage.clone(),
        upload_slots: Arc::new(Semaphore::new(config.upload.max_concurrent.max(1))),
        telemetry_limiter: Default::default(),
        manifests: Default::default(),
        config: config.clone(),
    };

    let workers = config.in_process_workers();
    if workers > 0 {
        tasks.push(embedded_workers(&config, db, storage, workers, stopped.clone()).await?);
    }

    let mut servers = vec![
        (listener, router(state.clone())),
        (content_listener, content_router(state.clone())),
    ];
    let metrics_addr = if config.metrics_bind.is_empty() {
        None
    } else {
        let metrics_listener = tokio::net::TcpListener::bind(&config.metrics_bind)
            .await
            .map_err(|e| anyhow::anyhow!("metrics listener {}: {e}", config.metrics_bind))?;
        let metrics_addr = metrics_listener.local_addr()?;
        servers.push((metrics_listener, metrics_router(state.clone())));
        Some(metrics_addr)
    };
    for (listener, app) in servers {
        tasks.push(serve(listener, app, stopped.clone()));
    }
    tracing::info!(
        %addr,
        %content_addr,
        ?metrics_addr,
        content_url = %config.content_url,
        storage = ?state.storage,
        embedded_database = config.is_embedded_database(),
        in_process_workers = workers,
        "kiln-api listening"
    );
    Ok(Running {
        addr,
        content_addr,
        metrics_addr,
        state,
        stop,
        tasks,
        ingest: (stop_ingest, ingest_task),
    })
}

/// Serves `app` on `listener` until `stopped` turns true.
fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    mut server_stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let shutdown = async move {
            let _ = server_stop.wait_for(|s| *s).await;
        };
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        // TCP_NODELAY on every accepted connection: a response goes out as headers and body
        // in separate writes, and with Nagle's algorithm the body would wait for the
        // client's delayed ACK of the headers (40 ms or more per request on a kept-alive
        // connection). Writes are already buffered into whole responses by hyper.
        let listener = listener.tap_io(|stream| {
            if let Err(e) = stream.set_nodelay(true) {
                tracing::debug!(error = %e, "could not set TCP_NODELAY on a connection");
            }
        });
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::error!(error = %e, "server stopped");
        }
    })
}

/// The embedded mode's queue consumers, in this process (`KILN_WORKERS`).
#[cfg(feature = "embedded-worker")]
async fn embedded_workers(
    config: &Config,
    db: kiln_common::db::Db,
    storage: Storage,
    workers: usize,
    stopped: watch::Receiver<bool>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let context = kiln_worker::runtime::job_context(config, db, storage).await?;
    let heartbeat = Duration::from_secs(config.worker.heartbeat_secs);
    let concurrency = config.worker.concurrency;
    Ok(tokio::spawn(async move {
        if let Err(e) =
            kiln_worker::job::run_workers(context, workers, concurrency, heartbeat, stopped).await
        {
            tracing::error!(error = %e, "in-process workers stopped");
        }
    }))
}

/// Built without the pipeline: in-process workers are a configuration error, said at start.
#[cfg(not(feature = "embedded-worker"))]
async fn embedded_workers(
    _: &Config,
    _: kiln_common::db::Db,
    _: Storage,
    workers: usize,
    _: watch::Receiver<bool>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    anyhow::bail!(
        "KILN_WORKERS={workers}, but this kiln-api was built without in-process workers \
         (feature embedded-worker); set KILN_WORKERS=0 and run kiln-worker"
    )
}
