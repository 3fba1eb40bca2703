//! Configuration: environment variables (`KILN_*`) over an optional TOML file over defaults.
//!
//! `Config::default()` is the only place defaults live; the README's table is written from it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Everything a Kiln process needs to know at start.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Root of the embedded defaults: SQLite file, local object store, work dirs, dev key.
    pub data_dir: PathBuf,
    /// Address the API listens on.
    pub bind: String,
    /// Base URL clients use to reach this API (uploads, tokens, the dashboard).
    pub public_url: String,
    /// Address the content origin listens on: game files (`/play`, `/cdn`, the loader under
    /// `/sdk`) and what games read at run time (manifests, keys, telemetry). Team content is
    /// never served from the API's origin, where the dashboard and tokens live.
    pub content_bind: String,
    /// Base URL of the content origin; written into manifests (CDN URLs are
    /// `{content_url}/cdn/…`) and rewritten pages. Empty: `http://{content_bind}`.
    pub content_url: String,
    /// `sqlite://…` or `postgres://…`; empty means `sqlite://{data_dir}/kiln.db`.
    pub database_url: String,
    /// Token that may create teams and team tokens. Empty disables the admin routes.
    pub admin_token: String,
    /// Object store: a local directory unless `s3_bucket` is set.
    pub storage: StorageConfig,
    pub upload: UploadLimits,
    pub unpack: UnpackLimits,
    pub worker: WorkerConfig,
    pub animation: AnimationConfig,
    pub vat: VatSettings,
    /// The images stage: overrides on top of its own defaults (a build's `kiln.toml`
    /// `[images]` applies on top of these).
    pub images: ImagesSettings,
    pub library: LibraryConfig,
    pub telemetry: TelemetryConfig,
    pub variants: VariantsConfig,
    /// Ed25519 signing key file (32-byte seed, hex). Empty: `{data_dir}/keys/signing.key`,
    /// generated on first start.
    pub signing_key_file: String,
    /// Root key file (hex Ed25519 seeds, one per line) that signs the trust document. Only the
    /// operator's `kiln-worker keys …` commands need it (and, in the embedded default, the
    /// first start, which generates it). Empty: `{data_dir}/keys/root.key`.
    pub root_key_file: String,
    /// How long a trust document the root signs stays valid (default 180 days); `keys
    /// refresh` (or any other key command) signs a new one.
    pub trust_ttl_secs: u64,
    /// Emit logs as JSON lines instead of human-readable text.
    pub log_json: bool,
    /// How long a dashboard login (`POST /dashboard/session`) lasts, in seconds.
    pub dashboard_session_secs: u64,
    /// Address for kiln-api's `/metrics`. Empty: served on the API listener (the embedded
    /// default). Set: served only there, and the API and content origins answer 404 on it, so
    /// an Ingress that routes those ports never exposes it.
    pub metrics_bind: String,
    /// Run the database migrations when a process starts (sqlx's advisory lock makes many
    /// starting at once safe). Off when a separate step (`kiln-api migrate`, the chart's
    /// migration Job) runs them with a role that may change the schema.
    pub migrate_on_start: bool,
    /// Database connections one process may hold, all pools together. 0: the process's own
    /// default ([`API_DB_CONNECTIONS`] for kiln-api, [`WORKER_DB_CONNECTIONS`] for kiln-worker).
    pub db_max_connections: u32,
}

/// The fewest connections a process can work with: the job queue's two and one for the rest.
pub const MIN_DB_CONNECTIONS: u32 = 3;
/// kiln-api's database connections when `db_max_connections` is 0.
pub const API_DB_CONNECTIONS: u32 = 16;
/// kiln-worker's database connections when `db_max_connections` is 0.
pub const WORKER_DB_CONNECTIONS: u32 = 8;

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    /// Local object store directory; empty means `{data_dir}/objects`.
    pub local_dir: String,
    /// When set, use this S3 bucket instead of the local directory.
    pub s3_bucket: String,
    /// Custom S3 endpoint (Garage, MinIO, …); empty uses AWS.
    pub s3_endpoint: String,
    pub s3_region: String,
    /// Path-style addressing (`endpoint/bucket/key`), needed by most self-hosted stores.
    pub s3_path_style: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UploadLimits {
    /// Largest accepted package body; larger ones get `413`.
    pub max_bytes: u64,
    /// Uploads in flight at once; more get `503` with `Retry-After`.
    pub max_concurrent: usize,
    /// Whole-request timeout for an upload, in seconds.
    pub timeout_secs: u64,
    /// Timeout for every other request, in seconds.
    pub request_timeout_secs: u64,
}

/// Limits the unpack stage enforces; each one stops a class of hostile package.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct UnpackLimits {
    /// Entry count (zip bomb by many tiny files, inode exhaustion).
    pub max_entries: u64,
    /// Sum of uncompressed sizes (disk exhaustion).
    pub max_total_bytes: u64,
    /// Uncompressed/compressed ratio over the whole archive (classic compression bombs).
    pub max_ratio: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkerConfig {
    /// Workers the API runs in-process. Default: 1 with the embedded database, 0 with PostgreSQL.
    pub in_process: Option<usize>,
    /// Jobs one worker process runs at once.
    pub concurrency: usize,
    /// Where jobs unpack and process packages; empty means `{data_dir}/work`.
    pub work_dir: String,
    /// Heartbeat period; a worker silent for two periods is dead and its job is re-queued.
    pub heartbeat_secs: u64,
    /// Attempts for a transient storage/database error before the build fails.
    pub transient_retries: u32,
    /// Pause between stages, in milliseconds. Only for crash-recovery tests and demos.
    pub stage_pause_ms: u64,
    /// Address for the standalone worker's `/metrics`; empty disables it.
    pub metrics_bind: String,
    /// A queued build whose job never reached the queue (its API stopped between the two) is
    /// queued again by a worker once it has waited this long.
    pub orphan_secs: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("./kiln-data"),
            bind: "127.0.0.1:8080".into(),
            public_url: String::new(),
            content_bind: "127.0.0.1:8081".into(),
            content_url: String::new(),
            database_url: String::new(),
            admin_token: String::new(),
            storage: StorageConfig::default(),
            upload: UploadLimits::default(),
            unpack: UnpackLimits::default(),
            worker: WorkerConfig::default(),
            animation: AnimationConfig::default(),
            vat: VatSettings::default(),
            images: ImagesSettings::default(),
            library: LibraryConfig::default(),
            telemetry: TelemetryConfig::default(),
            variants: VariantsConfig::default(),
            signing_key_file: String::new(),
            root_key_file: String::new(),
            trust_ttl_secs: 180 * 24 * 3600,
            log_json: false,
            dashboard_session_secs: 12 * 3600,
            metrics_bind: String::new(),
            migrate_on_start: true,
            db_max_connections: 0,
        }
    }
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            local_dir: String::new(),
            s3_bucket: String::new(),
            s3_endpoint: String::new(),
            s3_region: "us-east-1".into(),
            s3_path_style: true,
        }
    }
}

impl Default for UploadLimits {
    fn default() -> Self {
        Self {
            max_bytes: 4 * 1024 * 1024 * 1024,
            max_concurrent: 8,
            timeout_secs: 3600,
            request_timeout_secs: 30,
        }
    }
}

impl Default for UnpackLimits {
    fn default() -> Self {
        Self {
            max_entries: 100_000,
            max_total_bytes: 4 * 1024 * 1024 * 1024,
            max_ratio: 200,
        }
    }
}

/// The animation pass (keyframe reduction and quantization within an error bound): overrides
/// on top of the stage's own defaults (`AnimationOptions::default()` in kiln-stages, the only
/// place they are written); an unset field keeps the stage's default.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AnimationConfig {
    /// Compress animations at all (off: carried through untouched).
    pub enabled: bool,
    /// Error allowed on any vertex, relative to the model's bounding-box diagonal.
    pub tolerance: Option<f64>,
    /// The same in model units; when set (> 0) it replaces `tolerance`.
    pub tolerance_abs: Option<f64>,
    /// Most bits for rotations (QUATERNION filter, 4–16); fewer where the error allows.
    pub rotation_bits: Option<u32>,
    /// Most mantissa bits for translations and scales (EXPONENTIAL filter, 1–24).
    pub translation_bits: Option<u32>,
    pub scale_bits: Option<u32>,
    /// Most mantissa bits for morph weights.
    pub weight_bits: Option<u32>,
}

/// The VAT stage's settings (vertex animation textures): the server's `[vat]` and a build's
/// `kiln.toml` `[vat]` are both this. `files` are the models to bake (the server's: in every
/// build; a build's own are added); the rest are overrides on top of the stage's own defaults
/// (`VatOptions::default()` in kiln-stages, the only place they are written, which applies
/// and checks these: `vat::select`); an unset field keeps the default.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct VatSettings {
    /// Paths inside the build, or `*` for every animated model.
    pub files: Option<Vec<String>>,
    /// `auto`, `low`, `medium`, `high`, `rgba16` or `half`.
    pub encoding: Option<String>,
    /// `relative` (offsets from the rest pose) or `absolute`.
    pub mode: Option<String>,
    pub frame_rate: Option<f64>,
    /// Error `auto` accepts, relative to the model's bounding-box diagonal.
    pub tolerance: Option<f64>,
    /// The same in model units; when set (> 0) it replaces `tolerance`.
    pub tolerance_abs: Option<f64>,
    /// Largest texture dimension: 2048, 4096 or 8192.
    pub max_size: Option<u32>,
    /// Texels per row (0: the vertex count, capped at `max_size`).
    pub width: Option<u32>,
    /// A build's per-file settings, `[vat.file."characters/fox.glb"]`: that file is baked
    /// with them (not in the server's configuration).
    pub file: BTreeMap<String, VatSettings>,
}

/// The images stage's settings: the server's `[images]` (`KILN_IMAGES_*`) and a build's
/// `kiln.toml` `[images]` are both this, each applied on top of what came before
/// (`ImageOptions::default()` in kiln-stages, the only place the defaults are written, then the
/// server's, then the build's: `images::apply`, which checks them); unset fields change nothing.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ImagesSettings {
    /// Pixel-exact re-encoding (lossless WebP or optimised PNG).
    pub lossless: Option<bool>,
    /// `true`: lossy WebP for every standalone image; or a list of globs (`["backgrounds/**"]`).
    pub lossy: Option<PathSwitch>,
    /// `true`: model variants gain a `ktx2` variant whose textures are Basis Universal
    /// (`KHR_texture_basisu`: ETC1S or UASTC, held to the bound after transcoding to ASTC, BC7
    /// and ETC2); or a list of globs of model paths (`["models/**"]`).
    pub ktx2: Option<PathSwitch>,
    /// The perceptual bound lossy keeps to (ssimulacra2, 0–100).
    pub min_ssimulacra2: Option<f64>,
    /// Images with more pixels are kept as they are (checked on the header).
    pub max_pixels: Option<u64>,
    /// Images wider or taller than this are scaled down to fit, aspect kept (never by
    /// default: an atlas' frame coordinates are in pixels).
    pub max_size: Option<u32>,
    /// Run the lossy search where lossy is off, to report what it would save.
    pub estimate_lossy: Option<bool>,
    /// `[[images.paths]] match = "ui/**"`, `min_ssimulacra2 = 90`, `lossy = true`.
    pub paths: Vec<ImagePathRule>,
}

/// `[images] lossy` or `ktx2`: on or off for every file, or on for the paths the globs match.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum PathSwitch {
    All(bool),
    Paths(Vec<String>),
}

/// `[[images.paths]]`: settings for the paths a glob matches (the last match wins).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImagePathRule {
    #[serde(rename = "match")]
    pub pattern: String,
    pub lossy: Option<bool>,
    pub min_ssimulacra2: Option<f64>,
    pub max_size: Option<u32>,
    pub ktx2: Option<bool>,
}

/// The engine split, the shared library, and the releases that serve it.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LibraryConfig {
    /// Split detected engines out of builds into the shared library.
    pub split: bool,
    /// A TOML file of extra detection rules (format of `stages/engines.toml`), checked first.
    pub rules_file: String,
    /// How long a signed release stays valid; clients refuse it after that.
    pub manifest_ttl_secs: u64,
    /// How often workers re-sign releases past half their lifetime and sign the releases the
    /// API was asked for.
    pub resign_interval_secs: u64,
    /// An entry is flagged as low-ROI while the bytes it saved are below its size × this.
    pub min_roi: f64,
}

impl Default for LibraryConfig {
    fn default() -> Self {
        Self {
            split: true,
            rules_file: String::new(),
            manifest_ttl_secs: 7 * 24 * 3600,
            resign_interval_secs: 60,
            min_roi: 10.0,
        }
    }
}

/// Loader beacons (`POST /v1/telemetry`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    pub max_body_bytes: usize,
    pub max_events: usize,
    /// Requests per minute one client (address) may send; bursts up to the same number.
    pub rate_per_minute: u32,
    /// Requests per minute naming one game (all clients together; unregistered names share
    /// one allowance); bursts up to the same number.
    pub game_rate_per_minute: u32,
    /// The secret API and workers share for beacon tokens (HMAC-SHA256 key, 32 bytes hex).
    /// Empty: `{data_dir}/keys/telemetry.key`, generated on first start.
    pub secret_file: String,
    /// Behind a proxy or CDN: the request header that carries the client's address
    /// (e.g. `x-real-ip`, `cf-connecting-ip`). Empty: the connection's peer address.
    pub client_ip_header: String,
    /// Events accepted but not yet written that one API process holds at most; past it a
    /// beacon gets 503 (its events are counted as dropped).
    pub backlog_max: usize,
    /// The most events the ingest writer commits in one transaction (it takes whatever
    /// queued while the previous one ran, up to this).
    pub batch_max: usize,
    /// How long a beacon waits for its events' commit (retried while the database fails)
    /// before it is answered 503 (`ack` = `commit` only).
    pub commit_timeout_ms: u64,
    /// When a beacon is answered 202: once its events are committed (nothing acknowledged is
    /// lost), or once they are queued (more events/s per connection and lower latency, but a
    /// process killed loses what it had not written yet).
    pub ack: TelemetryAck,
    /// Raw events are kept this many days, then pruned; hourly rollups are kept
    /// `rollup_retention_days`.
    pub retention_days: u64,
    pub rollup_retention_days: u64,
    /// How often the prune job runs.
    pub prune_interval_secs: u64,
}

/// When the telemetry ingest answers a beacon `202` (`KILN_TELEMETRY_ACK`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TelemetryAck {
    /// Once its events are committed.
    Commit,
    /// Once its events are queued for the writer.
    Queued,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            max_body_bytes: 64 * 1024,
            max_events: 200,
            rate_per_minute: 600,
            game_rate_per_minute: 60_000,
            secret_file: String::new(),
            client_ip_header: String::new(),
            backlog_max: 500_000,
            batch_max: 20_000,
            commit_timeout_ms: 5_000,
            ack: TelemetryAck::Commit,
            retention_days: 30,
            rollup_retention_days: 400,
            prune_interval_secs: 3600,
        }
    }
}

/// Decode-aware variants: which model variant each device class gets
/// (`GET /v1/games/{game}/manifest?device=<class>`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct VariantsConfig {
    /// Assumed download bandwidth per device class, bytes per second.
    pub bandwidth: std::collections::BTreeMap<String, f64>,
    /// Classes whose default (without enough measurements) is `quantized`: no decoder to
    /// initialise or crash (seed 000: wasm crashed on some low-end phones).
    pub slow_classes: Vec<String>,
    /// Classes whose devices take a model's `ktx2` variant (GPU-compressed textures) whenever
    /// their GPU format allows, for its memory, whatever measurements say of its time.
    pub low_memory_classes: Vec<String>,
    /// Measured decodes per variant needed before measurements decide.
    pub min_samples: u64,
    /// Distinct clients (trusted beacons, by salted address hash) per variant needed before
    /// measurements decide.
    pub min_clients: u64,
    /// How far back measurements count.
    pub window_hours: u64,
    /// How often workers re-decide and re-sign the per-class manifests.
    pub refresh_secs: u64,
    /// Per mille of loads that try the other candidate (`meshopt` or `quantized`) while it
    /// has too few measurements on a class; 0 turns exploring off.
    pub explore_per_mille: u32,
}

impl Default for VariantsConfig {
    fn default() -> Self {
        let bandwidth = [
            ("desktop", 5_000_000.0),
            ("ios-high", 2_500_000.0),
            ("ios-low", 1_000_000.0),
            ("android-high", 2_500_000.0),
            ("android-mid", 1_250_000.0),
            ("android-low", 500_000.0),
            ("unknown", 1_000_000.0),
        ];
        Self {
            bandwidth: bandwidth
                .into_iter()
                .map(|(c, b)| (c.to_string(), b))
                .collect(),
            slow_classes: vec!["android-low".into()],
            low_memory_classes: vec!["android-low".into(), "ios-low".into()],
            min_samples: 20,
            min_clients: 10,
            window_hours: 24 * 7,
            refresh_secs: 60,
            explore_per_mille: 50,
        }
    }
}

impl VariantsConfig {
    /// Bytes per second for `class` (the `unknown` class's, or 1 MB/s, when not configured).
    pub fn bandwidth_of(&self, class: &str) -> f64 {
        self.bandwidth
            .get(class)
            .or_else(|| self.bandwidth.get("unknown"))
            .copied()
            .filter(|b| *b > 0.0)
            .unwrap_or(1_000_000.0)
    }
}

impl Default for AnimationConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            tolerance: None,
            tolerance_abs: None,
            rotation_bits: None,
            translation_bits: None,
            scale_bits: None,
            weight_bits: None,
        }
    }
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            in_process: None,
            concurrency: 2,
            work_dir: String::new(),
            heartbeat_secs: 10,
            transient_retries: 5,
            stage_pause_ms: 0,
            metrics_bind: String::new(),
            orphan_secs: 30,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {source}")]
    Parse {
        path: PathBuf,
        source: toml::de::Error,
    },
    #[error("environment variable {name}={value:?}: {reason}")]
    Env {
        name: String,
        value: String,
        reason: String,
    },
}

impl Config {
    /// Defaults, then the TOML file named by `KILN_CONFIG` (if any), then `KILN_*` variables.
    pub fn load() -> Result<Self, ConfigError> {
        let vars: Vec<(String, String)> = std::env::vars().collect();
        Self::load_from(&vars)
    }

    pub fn load_from(vars: &[(String, String)]) -> Result<Self, ConfigError> {
        let get = |name: &str| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        let mut config = match get("KILN_CONFIG") {
            Some(path) if !path.is_empty() => Self::from_file(Path::new(&path))?,
            _ => Self::default(),
        };
        for (name, value) in vars {
            if name.starts_with("KILN_") && name != "KILN_CONFIG" {
                config.apply_env(name, value)?;
            }
        }
        Ok(config)
    }

    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        toml::from_str(&text).map_err(|source| ConfigError::Parse {
            path: path.to_owned(),
            source,
        })
    }

    fn apply_env(&mut self, name: &str, value: &str) -> Result<(), ConfigError> {
        let bad = |reason: &str| ConfigError::Env {
            name: name.into(),
            value: value.into(),
            reason: reason.into(),
        };
        let num = || {
            value
                .parse::<u64>()
                .map_err(|_| bad("expected a whole number"))
        };
        // A comma-separated list, blanks dropped.
        let list = || -> Vec<String> {
            value
                .split(',')
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(String::from)
                .collect()
        };
        let positive = || {
            value
                .parse::<f64>()
                .ok()
                .filter(|v| *v > 0.0 && v.is_finite())
                .ok_or_else(|| bad("expected a positive number"))
        };
        let non_negative = || {
            value
                .parse::<f64>()
                .ok()
                .filter(|v| *v >= 0.0 && v.is_finite())
                .ok_or_else(|| bad("expected a number ≥ 0"))
        };
        let bits = || num().and_then(|n| u32::try_from(n).map_err(|_| bad("too large")));
        let flag = || match value {
            "1" | "true" | "yes" | "on" => Ok(true),
            "0" | "false" | "no" | "off" | "" => Ok(false),
            _ => Err(bad("expected true or false")),
        };
        match name {
            "KILN_DATA_DIR" => self.data_dir = PathBuf::from(value),
            "KILN_BIND" => self.bind = value.into(),
            "KILN_PUBLIC_URL" => self.public_url = value.trim_end_matches('/').into(),
            "KILN_CONTENT_BIND" => self.content_bind = value.into(),
            "KILN_CONTENT_URL" => self.content_url = value.trim_end_matches('/').into(),
            "KILN_DATABASE_URL" => self.database_url = value.into(),
            "KILN_ADMIN_TOKEN" => self.admin_token = value.into(),
            "KILN_SIGNING_KEY_FILE" => self.signing_key_file = value.into(),
            "KILN_ROOT_KEY_FILE" => self.root_key_file = value.into(),
            "KILN_TRUST_TTL_SECS" => self.trust_ttl_secs = num()?.max(60),
            "KILN_LOG_JSON" => self.log_json = flag()?,
            "KILN_DASHBOARD_SESSION_SECS" => self.dashboard_session_secs = num()?.max(60),
            "KILN_STORAGE_DIR" => self.storage.local_dir = value.into(),
            "KILN_S3_BUCKET" => self.storage.s3_bucket = value.into(),
            "KILN_S3_ENDPOINT" => self.storage.s3_endpoint = value.into(),
            "KILN_S3_REGION" => self.storage.s3_region = value.into(),
            "KILN_S3_PATH_STYLE" => self.storage.s3_path_style = flag()?,
            "KILN_UPLOAD_MAX_BYTES" => self.upload.max_bytes = num()?,
            "KILN_UPLOAD_MAX_CONCURRENT" => self.upload.max_concurrent = num()? as usize,
            "KILN_UPLOAD_TIMEOUT_SECS" => self.upload.timeout_secs = num()?,
            "KILN_REQUEST_TIMEOUT_SECS" => self.upload.request_timeout_secs = num()?,
            "KILN_UNPACK_MAX_ENTRIES" => self.unpack.max_entries = num()?,
            "KILN_UNPACK_MAX_BYTES" => self.unpack.max_total_bytes = num()?,
            "KILN_UNPACK_MAX_RATIO" => self.unpack.max_ratio = num()?,
            "KILN_WORKERS" => self.worker.in_process = Some(num()? as usize),
            "KILN_WORKER_CONCURRENCY" => self.worker.concurrency = (num()? as usize).max(1),
            "KILN_WORK_DIR" => self.worker.work_dir = value.into(),
            "KILN_WORKER_HEARTBEAT_SECS" => self.worker.heartbeat_secs = num()?.max(1),
            "KILN_WORKER_ORPHAN_SECS" => self.worker.orphan_secs = num()?.max(1),
            "KILN_WORKER_TRANSIENT_RETRIES" => self.worker.transient_retries = num()? as u32,
            "KILN_WORKER_STAGE_PAUSE_MS" => self.worker.stage_pause_ms = num()?,
            "KILN_WORKER_METRICS_BIND" => self.worker.metrics_bind = value.into(),
            "KILN_METRICS_BIND" => self.metrics_bind = value.into(),
            "KILN_MIGRATE_ON_START" => self.migrate_on_start = flag()?,
            "KILN_DB_MAX_CONNECTIONS" => {
                self.db_max_connections = u32::try_from(num()?)
                    .ok()
                    .filter(|n| *n >= MIN_DB_CONNECTIONS)
                    .ok_or_else(|| {
                        bad(&format!(
                            "expected a whole number from {MIN_DB_CONNECTIONS}"
                        ))
                    })?
            }
            "KILN_ANIMATION" => self.animation.enabled = flag()?,
            "KILN_ENGINE_SPLIT" => self.library.split = flag()?,
            "KILN_ENGINE_RULES" => self.library.rules_file = value.into(),
            "KILN_MANIFEST_TTL_SECS" => self.library.manifest_ttl_secs = num()?.max(2),
            "KILN_RESIGN_INTERVAL_SECS" => self.library.resign_interval_secs = num()?.max(1),
            "KILN_LIBRARY_MIN_ROI" => self.library.min_roi = non_negative()?,
            "KILN_TELEMETRY_MAX_BODY_BYTES" => self.telemetry.max_body_bytes = num()? as usize,
            "KILN_TELEMETRY_MAX_EVENTS" => self.telemetry.max_events = (num()? as usize).max(1),
            "KILN_TELEMETRY_CLIENT_IP_HEADER" => {
                self.telemetry.client_ip_header = value.to_ascii_lowercase()
            }
            "KILN_TELEMETRY_RATE_PER_MINUTE" => {
                self.telemetry.rate_per_minute = (num()? as u32).max(1)
            }
            "KILN_TELEMETRY_GAME_RATE_PER_MINUTE" => {
                self.telemetry.game_rate_per_minute = (num()? as u32).max(1)
            }
            "KILN_TELEMETRY_SECRET_FILE" => self.telemetry.secret_file = value.into(),
            "KILN_TELEMETRY_BACKLOG_MAX" => self.telemetry.backlog_max = (num()? as usize).max(1),
            "KILN_TELEMETRY_BATCH_MAX" => self.telemetry.batch_max = (num()? as usize).max(1),
            "KILN_TELEMETRY_ACK" => {
                self.telemetry.ack = match value {
                    "commit" => TelemetryAck::Commit,
                    "queued" => TelemetryAck::Queued,
                    _ => return Err(bad("expected commit or queued")),
                }
            }
            "KILN_TELEMETRY_COMMIT_TIMEOUT_MS" => self.telemetry.commit_timeout_ms = num()?.max(1),
            "KILN_TELEMETRY_RETENTION_DAYS" => self.telemetry.retention_days = num()?.max(1),
            "KILN_TELEMETRY_ROLLUP_RETENTION_DAYS" => {
                self.telemetry.rollup_retention_days = num()?.max(1)
            }
            "KILN_TELEMETRY_PRUNE_INTERVAL_SECS" => {
                self.telemetry.prune_interval_secs = num()?.max(1)
            }
            "KILN_VARIANT_BANDWIDTH" => {
                // `class=bytes_per_second,…`; listed classes replace the defaults.
                for pair in value.split(',').filter(|p| !p.trim().is_empty()) {
                    let (class, rate) = pair
                        .split_once('=')
                        .ok_or_else(|| bad("class=bytes_per_second pairs"))?;
                    let rate: f64 = rate
                        .trim()
                        .parse()
                        .ok()
                        .filter(|r: &f64| *r > 0.0)
                        .ok_or_else(|| bad("a positive bytes-per-second number"))?;
                    self.variants
                        .bandwidth
                        .insert(class.trim().to_string(), rate);
                }
            }
            "KILN_VARIANT_SLOW_CLASSES" => self.variants.slow_classes = list(),
            "KILN_VARIANT_LOW_MEMORY_CLASSES" => self.variants.low_memory_classes = list(),
            "KILN_VARIANT_MIN_SAMPLES" => self.variants.min_samples = num()?.max(1),
            "KILN_VARIANT_MIN_CLIENTS" => self.variants.min_clients = num()?.max(1),
            "KILN_VARIANT_WINDOW_HOURS" => self.variants.window_hours = num()?.max(1),
            "KILN_VARIANT_REFRESH_SECS" => self.variants.refresh_secs = num()?.max(1),
            "KILN_VARIANT_EXPLORE_PER_MILLE" => {
                self.variants.explore_per_mille = num()?.min(1000) as u32
            }
            // Ranges are the stage's to enforce (the worker clamps, as for the TOML file).
            "KILN_ANIMATION_TOLERANCE" => self.animation.tolerance = Some(positive()?),
            "KILN_ANIMATION_TOLERANCE_ABS" => self.animation.tolerance_abs = Some(non_negative()?),
            "KILN_ANIMATION_ROTATION_BITS" => self.animation.rotation_bits = Some(bits()?),
            "KILN_ANIMATION_TRANSLATION_BITS" => self.animation.translation_bits = Some(bits()?),
            "KILN_ANIMATION_SCALE_BITS" => self.animation.scale_bits = Some(bits()?),
            "KILN_ANIMATION_WEIGHT_BITS" => self.animation.weight_bits = Some(bits()?),
            "KILN_VAT" => self.vat.files = Some(list()),
            "KILN_VAT_ENCODING" => self.vat.encoding = Some(value.into()),
            "KILN_VAT_MODE" => self.vat.mode = Some(value.into()),
            "KILN_VAT_FRAME_RATE" => self.vat.frame_rate = Some(positive()?),
            "KILN_VAT_TOLERANCE" => self.vat.tolerance = Some(positive()?),
            "KILN_VAT_TOLERANCE_ABS" => self.vat.tolerance_abs = Some(non_negative()?),
            "KILN_VAT_MAX_SIZE" => self.vat.max_size = Some(bits()?),
            "KILN_IMAGES_LOSSLESS" => self.images.lossless = Some(flag()?),
            "KILN_IMAGES_LOSSY" => self.images.lossy = Some(PathSwitch::All(flag()?)),
            "KILN_IMAGES_MIN_SSIMULACRA2" => self.images.min_ssimulacra2 = Some(non_negative()?),
            "KILN_IMAGES_MAX_PIXELS" => self.images.max_pixels = Some(num()?),
            "KILN_IMAGES_ESTIMATE_LOSSY" => self.images.estimate_lossy = Some(flag()?),
            "KILN_IMAGES_KTX2" => self.images.ktx2 = Some(PathSwitch::All(flag()?)),
            // Unknown KILN_ variables are ignored so that scripts may set their own.
            _ => {}
        }
        Ok(())
    }

    pub fn database_url(&self) -> String {
        if self.database_url.is_empty() {
            format!("sqlite://{}/kiln.db?mode=rwc", self.data_dir.display())
        } else {
            self.database_url.clone()
        }
    }

    pub fn is_embedded_database(&self) -> bool {
        self.database_url().starts_with("sqlite:")
    }

    pub fn public_url(&self) -> String {
        if self.public_url.is_empty() {
            format!("http://{}", self.bind)
        } else {
            self.public_url.clone()
        }
    }

    /// The content origin's base URL (game files, manifests, the loader).
    pub fn content_url(&self) -> String {
        if self.content_url.is_empty() {
            format!("http://{}", self.content_bind)
        } else {
            self.content_url.clone()
        }
    }

    /// `scheme://host[:port]` of a base URL (what a browser compares origins by).
    pub fn origin_of(url: &str) -> String {
        let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
        let host = rest.split(['/', '?', '#']).next().unwrap_or("");
        format!(
            "{}://{}",
            scheme.to_ascii_lowercase(),
            host.to_ascii_lowercase()
        )
    }

    pub fn work_dir(&self) -> PathBuf {
        if self.worker.work_dir.is_empty() {
            self.data_dir.join("work")
        } else {
            PathBuf::from(&self.worker.work_dir)
        }
    }

    pub fn signing_key_path(&self) -> PathBuf {
        if self.signing_key_file.is_empty() {
            self.data_dir.join("keys").join("signing.key")
        } else {
            PathBuf::from(&self.signing_key_file)
        }
    }

    pub fn root_key_path(&self) -> PathBuf {
        if self.root_key_file.is_empty() {
            self.data_dir.join("keys").join("root.key")
        } else {
            PathBuf::from(&self.root_key_file)
        }
    }

    /// The beacon-token secret API and workers share.
    pub fn telemetry_secret_path(&self) -> PathBuf {
        if self.telemetry.secret_file.is_empty() {
            self.data_dir.join("keys").join("telemetry.key")
        } else {
            PathBuf::from(&self.telemetry.secret_file)
        }
    }

    /// This process's database connections: `db_max_connections`, or `default` when unset.
    pub fn db_connections(&self, default: u32) -> u32 {
        if self.db_max_connections == 0 {
            default
        } else {
            self.db_max_connections
        }
    }

    /// In-process workers: on by default with the embedded database only.
    pub fn in_process_workers(&self) -> usize {
        self.worker
            .in_process
            .unwrap_or(if self.is_embedded_database() { 1 } else { 0 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn embedded_defaults_need_no_variables() {
        let config = Config::load_from(&[]).unwrap();
        assert_eq!(config.bind, "127.0.0.1:8080");
        assert!(config.is_embedded_database());
        assert_eq!(config.in_process_workers(), 1);
        assert_eq!(config.public_url(), "http://127.0.0.1:8080");
        assert_eq!(config.content_url(), "http://127.0.0.1:8081");
    }

    #[test]
    fn content_origin_is_configurable() {
        let config = Config::load_from(&vars(&[
            ("KILN_CONTENT_BIND", "0.0.0.0:9001"),
            ("KILN_CONTENT_URL", "https://games.example/"),
        ]))
        .unwrap();
        assert_eq!(config.content_bind, "0.0.0.0:9001");
        assert_eq!(config.content_url(), "https://games.example");
        assert_eq!(
            Config::origin_of("HTTPS://Games.Example:8443/play/x/"),
            "https://games.example:8443"
        );
    }

    #[test]
    fn postgres_turns_in_process_workers_off() {
        let config = Config::load_from(&vars(&[("KILN_DATABASE_URL", "postgres://x/y")])).unwrap();
        assert_eq!(config.in_process_workers(), 0);
        let config = Config::load_from(&vars(&[
            ("KILN_DATABASE_URL", "postgres://x/y"),
            ("KILN_WORKERS", "3"),
        ]))
        .unwrap();
        assert_eq!(config.in_process_workers(), 3);
    }

    #[test]
    fn deployment_settings_default_to_one_process_doing_everything() {
        let config = Config::load_from(&[]).unwrap();
        assert!(config.metrics_bind.is_empty());
        assert!(config.migrate_on_start);
        assert_eq!(config.db_connections(API_DB_CONNECTIONS), 16);
        assert_eq!(config.db_connections(WORKER_DB_CONNECTIONS), 8);
        let config = Config::load_from(&vars(&[
            ("KILN_METRICS_BIND", "0.0.0.0:9090"),
            ("KILN_MIGRATE_ON_START", "false"),
            ("KILN_DB_MAX_CONNECTIONS", "5"),
        ]))
        .unwrap();
        assert_eq!(config.metrics_bind, "0.0.0.0:9090");
        assert!(!config.migrate_on_start);
        assert_eq!(config.db_connections(API_DB_CONNECTIONS), 5);
        for bad in ["2", "0", "-1", "many"] {
            let err = Config::load_from(&vars(&[("KILN_DB_MAX_CONNECTIONS", bad)])).unwrap_err();
            assert!(err.to_string().contains("KILN_DB_MAX_CONNECTIONS"), "{err}");
        }
    }

    #[test]
    fn bad_numbers_name_the_variable() {
        let err = Config::load_from(&vars(&[("KILN_UPLOAD_MAX_BYTES", "lots")])).unwrap_err();
        assert!(err.to_string().contains("KILN_UPLOAD_MAX_BYTES"), "{err}");
    }

    #[test]
    fn toml_file_is_read_and_env_wins() {
        let dir = std::env::temp_dir().join(format!("kiln-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("kiln.toml");
        std::fs::write(&path, "bind = \"0.0.0.0:9000\"\n[upload]\nmax_bytes = 10\n").unwrap();
        let config = Config::load_from(&vars(&[
            ("KILN_CONFIG", path.to_str().unwrap()),
            ("KILN_UPLOAD_MAX_BYTES", "20"),
        ]))
        .unwrap();
        assert_eq!(config.bind, "0.0.0.0:9000");
        assert_eq!(config.upload.max_bytes, 20);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
