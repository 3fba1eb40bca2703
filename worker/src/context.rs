//! What the build job and the release loop share, built once per process by
//! `runtime::job_context`: its own module so that `job.rs` (which makes releases) and
//! `release.rs` (which runs beside the jobs) depend on it, not on each other.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kiln_common::db::Db;
use kiln_common::signing::ManifestSigner;
use kiln_common::storage::Storage;
use kiln_stages::pipeline::PipelineOptions;

/// What every job needs, shared by all jobs of a process.
pub struct JobContext {
    pub db: Db,
    pub storage: Storage,
    pub signer: Arc<ManifestSigner>,
    /// Beacon tokens put into every release (`kiln_common::telemetry::BeaconSecret`).
    pub beacon_secret: Arc<kiln_common::telemetry::BeaconSecret>,
    pub options: PipelineOptions,
    pub work_root: PathBuf,
    /// Pause before each stage (`KILN_WORKER_STAGE_PAUSE_MS`): lets crash-recovery tests and
    /// demos catch a build mid-pipeline. The job layer's observer sleeps, and its stage writer
    /// waits as long before recording a stage's end (a busy database's lag); the pipeline
    /// knows nothing of it.
    pub stage_pause: Duration,
    /// Attempts for transient failures before the build is failed.
    pub transient_retries: u32,
    /// How long a signed release stays valid.
    pub manifest_ttl: Duration,
    /// How often live releases are checked for re-signing.
    pub resign_interval: Duration,
    /// A queued build still without its job after this long is pushed again (`requeue_orphans`).
    pub orphan_grace: Duration,
    /// Decode-aware variants: bandwidths, slow classes, how often to re-decide.
    pub variants: kiln_common::config::VariantsConfig,
}
