//! The job queue as the API and the worker share it: the job payload ([`ProcessBuild`]),
//! [`enqueue`], the sweep that pushes a build whose process stopped between its row and its
//! job ([`requeue_orphans`]), and opening the database with the queue's tables
//! ([`open_database`], [`migrate`]). The API depends on this crate, not on the pipeline: the
//! consumer of these jobs is `kiln-worker`'s `job.rs`.

use std::time::Duration;

use apalis::prelude::*;
use apalis_postgres::PostgresStorage;
use apalis_sqlite::SqliteStorage;
use kiln_common::config::Config;
use kiln_common::db::{Db, QueuePool};
use kiln_common::metrics;
use serde::{Deserialize, Serialize};

/// Every stage of a build in order, as its status shows them (the API writes one pending row
/// each at upload). The pipeline's own list (`kiln_stages::pipeline::STAGES`) is tested equal.
pub const STAGES: &[&str] = &[
    "unpack",
    "inventory",
    "engines",
    "vat",
    "geometry",
    "images",
    "encode",
    "sign",
    "publish",
];

/// The queue's name: the job type's path before the job layer and the API shared this crate,
/// kept so that jobs queued by an older process are consumed by a newer one.
pub const QUEUE: &str = "kiln_worker::job::ProcessBuild";

/// The queued job: the build's id and which attempt this is; everything else is read from
/// the database.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProcessBuild {
    pub build_id: String,
    /// 1 for the first attempt; a transient failure queues the next one ([`enqueue_retry`]).
    /// Missing (0) in jobs queued before retries went through the queue: counts as 1.
    #[serde(default)]
    pub attempt: u32,
}

/// Puts a build on the queue, then clears its `queue_pending` mark. A process stopped between
/// the build's commit and this push leaves the mark set: [`requeue_orphans`] pushes it later.
/// A second push of the same build is harmless (a job finds it published, or repeats it).
pub async fn enqueue(db: &Db, build_id: &str) -> Result<(), BoxDynError> {
    push(db, build_id, 1, None).await?;
    if let Err(e) = db.mark_build_queued(build_id).await {
        // Pushed: at worst the sweep pushes it once more.
        tracing::warn!(build_id, error = %e, "build queued, but its mark stays set");
    }
    Ok(())
}

/// Queues attempt `attempt` of a build to run after `delay`: how a transient failure is
/// retried with backoff without a worker slot held through the wait.
pub async fn enqueue_retry(
    db: &Db,
    build_id: &str,
    attempt: u32,
    delay: Duration,
) -> Result<(), BoxDynError> {
    push(db, build_id, attempt, Some(delay)).await
}

async fn push(
    db: &Db,
    build_id: &str,
    attempt: u32,
    delay: Option<Duration>,
) -> Result<(), BoxDynError> {
    let mut task = TaskBuilder::new(ProcessBuild {
        build_id: build_id.to_string(),
        attempt,
    });
    if let Some(delay) = delay {
        task = task.run_after(delay);
    }
    let task = task.build();
    match &db.queue {
        QueuePool::Sqlite(pool) => {
            SqliteStorage::<ProcessBuild>::new(pool)
                .with_config(apalis_sqlite::Config::default().queue(QUEUE))
                .push_task(task)
                .await?
        }
        QueuePool::Postgres(pool) => {
            PostgresStorage::<ProcessBuild>::new(pool)
                .with_config(apalis_postgres::Config::default().queue(QUEUE))
                .push_task(task)
                .await?
        }
    }
    Ok(())
}

/// Builds swept per pass; the rest wait for the next one.
const ORPHANS_PER_SWEEP: i64 = 100;

/// One sweep: pushes the job of every queued build still marked `queue_pending` and untouched
/// for `grace` (its row committed, its process stopped before the push). Each is claimed by a
/// compare-and-set first, so of several workers sweeping at once only one pushes it. Returns
/// how many were pushed.
pub async fn requeue_orphans(db: &Db, grace: Duration) -> Result<usize, BoxDynError> {
    let before =
        kiln_common::db::timestamp(chrono::Utc::now() - chrono::Duration::from_std(grace)?);
    let mut pushed = 0;
    for (id, updated_at) in db.builds_missing_a_job(&before, ORPHANS_PER_SWEEP).await? {
        if db.claim_build_missing_a_job(&id, &updated_at).await? {
            tracing::warn!(build_id = %id, since = %updated_at, "queued build had no job; queued it again");
            enqueue(db, &id).await?;
            metrics::ORPHANED_BUILDS_REQUEUED.inc();
            pushed += 1;
        }
    }
    Ok(pushed)
}

/// Creates the queue's tables (apalis' own migrations).
pub async fn setup_queue(queue: &QueuePool) -> Result<(), BoxDynError> {
    match queue {
        QueuePool::Sqlite(pool) => SqliteStorage::setup(pool).await?,
        QueuePool::Postgres(pool) => PostgresStorage::setup(pool).await?,
    }
    Ok(())
}

/// Opens the database with this process's connection budget (`KILN_DB_MAX_CONNECTIONS`, else
/// `default`), and migrates it (Kiln's tables and the job queue's) unless `migrate_on_start`
/// is off.
pub async fn open_database(config: &Config, default: u32) -> anyhow::Result<Db> {
    let db = Db::connect_with(
        &config.database_url(),
        config.db_connections(default),
        config.migrate_on_start,
    )
    .await?;
    if config.migrate_on_start {
        setup_queue_of(&db).await?;
    } else {
        let pending = db.pending_migrations().await?;
        if !pending.is_empty() {
            anyhow::bail!(
                "the database lacks {} migration(s) this version needs ({}); run `kiln-api \
                 migrate` first (KILN_MIGRATE_ON_START=false)",
                pending.len(),
                pending.join(", ")
            );
        }
    }
    Ok(db)
}

/// The job queue's tables (apalis's own migrations), as an `anyhow` error for start-up.
async fn setup_queue_of(db: &Db) -> anyhow::Result<()> {
    setup_queue(&db.queue)
        .await
        .map_err(|e| anyhow::anyhow!("queue setup: {e}"))
}

/// `kiln-api migrate`: Kiln's migrations and the job queue's tables, then nothing else; for a
/// deployment step with a role that may change the schema (the processes then start with
/// `KILN_MIGRATE_ON_START=false`).
pub async fn migrate(config: &Config) -> anyhow::Result<()> {
    let db = Db::connect_with(
        &config.database_url(),
        kiln_common::config::MIN_DB_CONNECTIONS,
        true,
    )
    .await?;
    setup_queue_of(&db).await?;
    db.close().await;
    Ok(())
}

/// Resolves when the process gets SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    tracing::info!("shutdown requested; finishing current jobs");
}
