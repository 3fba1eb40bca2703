//! Parts shared by the API and the worker: configuration, database, object storage, keys,
//! manifest types, signing keys, the loader's bytes and paths, loader telemetry and metrics.
//! The database, object storage, metrics and dashboards are the `services` feature (default);
//! without it only the pure parts build (the fuzz targets use that).

pub mod config;
pub mod csp;
#[cfg(feature = "services")]
pub mod dashboard;
#[cfg(feature = "services")]
pub mod db;
pub mod devices;
pub mod keys;
pub mod loader;
pub mod manifest;
#[cfg(feature = "services")]
pub mod metrics;
pub mod package;
pub mod rollups;
pub mod signing;
#[cfg(feature = "services")]
pub mod storage;
pub mod telemetry;
pub mod trust;
pub mod variants;

/// Logs to stderr, human-readable or JSON lines; `RUST_LOG` filters (default `info`).
#[cfg(feature = "services")]
pub fn init_tracing(json: bool) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        EnvFilter::new("info,sqlx=warn,aws_config=warn,aws_smithy_runtime=warn")
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
