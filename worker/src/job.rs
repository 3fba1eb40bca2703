//! The build job: load the package, run the pipeline, store its outputs, record the result.
//!
//! This layer only orchestrates. It owns the I/O the stages must not do (database, object
//! store, the async runtime) and the policy around failures: permanent ones end the build at
//! once; transient ones queue the build's next attempt with a backoff (a job of its own, so
//! no slot is held through the wait) and end it after the retry limit. `publish` is observed
//! like every stage of the pipeline.

use std::sync::Arc;
use std::time::Duration;

use apalis::prelude::*;
use apalis_postgres::PostgresStorage;
use apalis_sqlite::SqliteStorage;
use kiln_common::db::{
    BuildRow, BuildStatus, Db, DbError, LibraryFile, ManifestRow, QueuePool, StageUpdate,
};
use kiln_common::manifest::BuildIdentity;
use kiln_common::metrics;
use kiln_common::storage::{Storage, StorageError};
use kiln_jobs::{ProcessBuild, requeue_orphans};
use tokio::sync::mpsc;

use kiln_stages::pipeline::{self, StageObserver};
use kiln_stages::stages::publish::{self, PublishPlan, UploadSource};
use kiln_stages::stages::{PackageFormat, StageError, unpack};

pub use crate::context::JobContext;

/// Runs [`requeue_orphans`] every `every` until `shutdown`.
async fn sweep_orphans(
    db: Db,
    grace: Duration,
    every: Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        if let Err(e) = requeue_orphans(&db, grace).await {
            tracing::warn!(error = %e, "orphaned-build sweep failed; will retry");
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

/// Runs `count` queue consumers until `shutdown` resolves; in-flight jobs finish first (or
/// are handed back to the queue by apalis when the process stops).
pub async fn run_workers(
    context: Arc<JobContext>,
    count: usize,
    concurrency: usize,
    heartbeat: Duration,
    shutdown: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<()> {
    crate::memory::configure();
    metrics::WORKER_CONCURRENCY.add((count * concurrency) as i64);
    let mut handles = Vec::new();
    // Releases are signed here too: only workers hold the key.
    handles.push(tokio::spawn(crate::release::run(
        context.clone(),
        Duration::from_secs(1),
        shutdown.clone(),
    )));
    // Builds whose API stopped between their commit and their push.
    handles.push(tokio::spawn(sweep_orphans(
        context.db.clone(),
        context.orphan_grace,
        (context.orphan_grace / 4).clamp(Duration::from_millis(250), Duration::from_secs(10)),
        shutdown.clone(),
    )));
    for n in 0..count {
        let context = context.clone();
        handles.push(tokio::spawn(consume(
            context,
            n,
            concurrency,
            heartbeat,
            shutdown.clone(),
        )));
    }
    for handle in handles {
        handle.await?;
    }
    Ok(())
}

/// How a consumer's run ended.
enum Ended {
    /// Shutdown was asked for; the jobs it had taken ran to the end.
    Stopped,
    /// Its connection to the queue failed (a failed poll or heartbeat); the jobs it had taken
    /// ran to the end all the same.
    Failed(String),
}

/// One queue consumer, until `shutdown`. apalis's own `run_until` returns at the first error
/// the backend reports (a heartbeat that found its worker row gone, a fetch that timed out on a
/// loaded database) and drops the jobs it was running with it: the build stayed `processing`
/// with nothing running it, and the process went on without a consumer. Here a failed run is
/// drained like a stopped one (apalis finishes in-flight jobs once its backend is closed), then
/// a new consumer with a new name starts after a short wait.
async fn consume(
    context: Arc<JobContext>,
    n: usize,
    concurrency: usize,
    heartbeat: Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let queue = context.db.queue.clone();
    loop {
        // Unique per process and start: a restarted worker is a new worker, so the jobs
        // of the dead one are recognised as orphaned and re-queued.
        let name = format!(
            "kiln-worker-{}-{}-{n}",
            std::process::id(),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let worker = WorkerContext::new(&name);
        tracing::info!(worker = %name, "worker started");
        // The two backends are different types; the worker around them is the same.
        macro_rules! consume {
            ($backend:expr) => {
                drain_until(
                    WorkerBuilder::new(worker.clone())
                        .backend($backend)
                        .concurrency(concurrency)
                        .data(context.clone())
                        .build(process_build)
                        .stream(),
                    &worker,
                    &mut shutdown,
                )
                .await
            };
        }
        let poll = Duration::from_millis(250);
        let ended = match &queue {
            QueuePool::Sqlite(pool) => {
                let config = apalis_sqlite::Config::default()
                    .queue(kiln_jobs::QUEUE)
                    .heartbeat_interval(heartbeat);
                consume!(
                    SqliteStorage::<ProcessBuild>::new(pool)
                        .with_config(config)
                        .poll_with_interval(poll)
                )
            }
            QueuePool::Postgres(pool) => {
                let config = apalis_postgres::Config::default()
                    .queue(kiln_jobs::QUEUE)
                    .heartbeat_interval(heartbeat);
                consume!(
                    PostgresStorage::<ProcessBuild>::new(pool)
                        .with_config(config)
                        .poll_with_interval(poll)
                )
            }
        };
        match ended {
            Ended::Stopped => {
                tracing::info!(worker = %name, "worker stopped");
                return;
            }
            Ended::Failed(error) => {
                metrics::WORKER_QUEUE_FAILURES.inc();
                tracing::error!(worker = %name, %error, "worker lost its queue; its jobs ran to the end, starting a new one");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = shutdown.wait_for(|s| *s) => return,
                }
            }
        }
    }
}

/// Drives a worker's event stream until it ends: once `shutdown` is set it pauses the worker
/// (no new job; the backend's heartbeats go on), waits for its jobs to end, then stops it; on
/// an error from its backend it stops it at once (it then takes no new job and ends when its
/// jobs have).
///
/// Pause first, because apalis stops polling its backend while a stopped worker still has jobs
/// running: a heartbeat caught between its two statements then keeps its transaction open until
/// they end. On SQLite that transaction holds the write lock, so every write of the running
/// job waited out the 30 s busy timeout and failed (CI saw a SIGTERM-ed worker give up its
/// build that way).
async fn drain_until<S>(
    events: S,
    worker: &WorkerContext,
    shutdown: &mut tokio::sync::watch::Receiver<bool>,
) -> Ended
where
    S: futures::Stream<Item = Result<Event, WorkerError>>,
{
    use futures::StreamExt;
    let mut events = std::pin::pin!(events);
    let mut stopping = false;
    let mut draining = false;
    let mut failure = None;
    let mut drained = tokio::time::interval(Duration::from_millis(50));
    loop {
        tokio::select! {
            biased;
            event = events.next() => match event {
                None => {
                    return match (stopping || draining, failure) {
                        (false, Some(error)) => Ended::Failed(error),
                        (false, None) => Ended::Failed("the queue's stream ended".into()),
                        (true, _) => Ended::Stopped,
                    };
                }
                Some(Err(e)) => {
                    // Drain: no new job; the stream ends once the running ones have (a failed
                    // backend alone would close, then wait for a stop that never comes).
                    tracing::warn!(worker = worker.name(), error = %e, "queue poll failed; finishing this consumer's jobs");
                    failure.get_or_insert(e.to_string());
                    let _ = worker.stop();
                }
                Some(Ok(_)) => {}
            },
            _ = shutdown.wait_for(|s| *s), if !stopping && !draining => {
                if worker.pause().is_err() {
                    // Not running (not started, or already stopping): stop it as it is.
                    stopping = true;
                    if worker.stop().is_err() {
                        // Not started: it holds no job.
                        return Ended::Stopped;
                    }
                } else {
                    draining = true;
                }
            }
            _ = drained.tick(), if draining && !stopping => {
                if worker.task_count() == 0 {
                    stopping = true;
                    let _ = worker.stop();
                }
            }
        }
    }
}

/// The apalis handler.
async fn process_build(
    job: ProcessBuild,
    context: Data<Arc<JobContext>>,
) -> Result<(), BoxDynError> {
    let context: Arc<JobContext> = (*context).clone();
    let id = job.build_id;
    // USE: running jobs over `kiln_worker_concurrency` is the workers' utilisation.
    struct Running;
    impl Drop for Running {
        fn drop(&mut self) {
            metrics::WORKER_JOBS_RUNNING.dec();
        }
    }
    metrics::WORKER_JOBS_RUNNING.inc();
    let _running = Running;
    let attempt = job.attempt.max(1);
    let attempts = context.transient_retries.max(1);
    let result = run_once(&context, &id).await;
    // The build's buffers are dropped: their pages go back to the system, not to the next build.
    crate::memory::release_free_memory();
    match result {
        Ok(outcome) => {
            metrics::JOBS.with_label_values(&[outcome]).inc();
            Ok(())
        }
        // A bad package: retrying the same bytes would fail the same way.
        Err(JobError::Permanent(reason)) => {
            tracing::warn!(build_id = %id, %reason, "build failed");
            fail_build(&context.db, &id, &reason).await
        }
        // Worth another attempt, later: queued again with a delay, so this worker's slot goes
        // to other builds meanwhile (and a worker that stops during the wait loses nothing).
        Err(JobError::Transient(reason)) if attempt < attempts => {
            let backoff = retry_backoff(attempt);
            tracing::warn!(build_id = %id, attempt, %reason, ?backoff, "transient failure, queued again");
            kiln_jobs::enqueue_retry(&context.db, &id, attempt + 1, backoff).await?;
            metrics::JOBS.with_label_values(&["retried"]).inc();
            Ok(())
        }
        Err(JobError::Transient(reason)) => {
            let reason = format!("gave up after {attempts} attempts: {reason}");
            tracing::error!(build_id = %id, %reason, "build failed");
            fail_build(&context.db, &id, &reason).await
        }
    }
}

async fn fail_build(db: &Db, id: &str, reason: &str) -> Result<(), BoxDynError> {
    db.set_build_status(id, BuildStatus::Failed, Some(reason))
        .await?;
    metrics::JOBS.with_label_values(&["failed"]).inc();
    Ok(())
}

/// How long a build waits in the queue after its `attempt`-th transient failure: 0.5 s,
/// doubling, at most 16 s (the queue schedules in whole seconds, so the first ones run as soon
/// as a worker polls).
fn retry_backoff(attempt: u32) -> Duration {
    Duration::from_millis(250 * 2u64.pow(attempt.min(6)))
}

#[derive(Debug)]
enum JobError {
    Permanent(String),
    Transient(String),
}

impl JobError {
    fn reason(&self) -> &str {
        match self {
            Self::Permanent(reason) | Self::Transient(reason) => reason,
        }
    }
}

impl From<DbError> for JobError {
    fn from(e: DbError) -> Self {
        if e.is_transient() {
            Self::Transient(e.to_string())
        } else {
            Self::Permanent(e.to_string())
        }
    }
}

impl From<crate::release::ReleaseError> for JobError {
    fn from(e: crate::release::ReleaseError) -> Self {
        use crate::release::ReleaseError;
        match e {
            ReleaseError::Db(e) => e.into(),
            ReleaseError::Storage(e) => e.into(),
            // Only a run of lost sequence races: worth another attempt.
            ReleaseError::Refused(reason) => Self::Transient(reason),
        }
    }
}

impl From<StorageError> for JobError {
    fn from(e: StorageError) -> Self {
        if e.is_transient() {
            Self::Transient(e.to_string())
        } else {
            Self::Permanent(e.to_string())
        }
    }
}

/// One attempt at the whole build. Safe to repeat: every output is content-addressed and
/// the manifest row is written once.
async fn run_once(context: &JobContext, id: &str) -> Result<&'static str, JobError> {
    let Some(build) = context.db.build(id).await? else {
        return Err(JobError::Permanent(format!("build {id} does not exist")));
    };
    match BuildStatus::parse(&build.status) {
        BuildStatus::Published => return Ok("already-published"),
        BuildStatus::Failed => return Ok("already-failed"),
        _ => {}
    }
    context
        .db
        .set_build_status(id, BuildStatus::Processing, None)
        .await?;
    context.db.reset_stages(id).await?;

    let work_dir = context.work_root.join(id);
    let _ = tokio::fs::remove_dir_all(&work_dir).await;
    tokio::fs::create_dir_all(&work_dir)
        .await
        .map_err(|e| JobError::Transient(format!("work directory {}: {e}", work_dir.display())))?;
    let result = build_in(context, &build, &work_dir).await;
    // The work dir is scratch: the package stays in the store, the outputs are published.
    let _ = tokio::fs::remove_dir_all(&work_dir).await;
    result
}

async fn build_in(
    context: &JobContext,
    build: &BuildRow,
    work_dir: &std::path::Path,
) -> Result<&'static str, JobError> {
    let format = PackageFormat::from_extension(&build.package_format).ok_or_else(|| {
        JobError::Permanent(format!("unknown package format {}", build.package_format))
    })?;
    let package = work_dir.join(format!("package.{}", format.extension()));
    context
        .storage
        .get_to_file(&build.package_key, &package)
        .await?;

    let identity = BuildIdentity {
        game: build.game.clone(),
        version: build.version.clone(),
        build_id: build.id.clone(),
        package_sha256: build.package_sha256.clone(),
        created_at: build.created_at.clone(),
    };

    // Stage events flow from the blocking pipeline thread, then from `publish` here, to one
    // writer task: every stage, publish included, goes through the same observer.
    let (events, receiver) = mpsc::unbounded_channel();
    let writer = tokio::spawn(write_stage_events(
        context.db.clone(),
        build.id.clone(),
        receiver,
        context.stage_pause,
    ));
    let signer = context.signer.clone();
    let options = context.options.clone();
    let mut observer = ChannelObserver::new(events, context.stage_pause);
    let dir = work_dir.join("pipeline");
    let (prepared, mut observer) = tokio::task::spawn_blocking(move || {
        let prepared = pipeline::prepare(
            &package,
            format,
            &dir,
            &identity,
            &signer,
            &options,
            &mut observer,
        );
        (prepared, observer)
    })
    .await
    .map_err(|e| JobError::Transient(format!("pipeline thread: {e}")))?;

    let outcome = match prepared {
        Ok(prepared) => {
            save_report(context, &build.id, &prepared.report).await?;
            let images = &prepared.report.stages.get("images");
            for form in ["before", "after"] {
                let bytes = images
                    .and_then(|r| r[format!("bytes_{form}").as_str()].as_u64())
                    .unwrap_or(0);
                metrics::IMAGE_BYTES
                    .with_label_values(&[form])
                    .inc_by(bytes);
            }
            // The pause is for the pipeline's stages (tests catch a build between them); this
            // thread is the runtime's, where a blocking sleep would stall other tasks.
            observer.pause = Duration::ZERO;
            publish_step(context, build, &prepared, &mut observer).await
        }
        Err(failed) => {
            save_report(context, &build.id, &failed.report).await?;
            let reason = failed.error.to_string();
            Err(if failed.error.permanent {
                JobError::Permanent(reason)
            } else {
                JobError::Transient(reason)
            })
        }
    };
    drop(observer);
    let _ = writer.await;
    outcome
}

/// Stage `publish`, observed like the pipeline's stages: objects first, the manifest last,
/// the library entries, the release that makes the build live, then the one database row
/// naming the manifest (which marks the stage done in the same transaction).
async fn publish_step(
    context: &JobContext,
    build: &BuildRow,
    prepared: &pipeline::Prepared,
    observer: &mut ChannelObserver,
) -> Result<&'static str, JobError> {
    observer.started(publish::NAME);
    let started = std::time::Instant::now();
    let result = publish_build(context, build, prepared, observer).await;
    match &result {
        Ok(_) => observer.succeeded(publish::NAME, started.elapsed()),
        Err(e) => observer.failed(publish::NAME, started.elapsed(), e.reason()),
    }
    result
}

async fn publish_build(
    context: &JobContext,
    build: &BuildRow,
    prepared: &pipeline::Prepared,
    observer: &mut ChannelObserver,
) -> Result<&'static str, JobError> {
    let db = &context.db;
    execute_plan(&context.storage, &prepared.plan, &mut |done| {
        observer.progress(publish::NAME, done);
        async {}
    })
    .await?;
    let signed = &prepared.signed;
    let library: Vec<LibraryFile> = prepared
        .engines
        .iter()
        .map(|e| LibraryFile {
            sha256: e.sha256.clone(),
            engine: e.name.clone(),
            version: e.version.clone(),
            size: e.size as i64,
            object_key: e.library_key.clone(),
            path: e.path.clone(),
            // The library copy carries the build file's forms (the publish plan).
            br_size: signed
                .manifest
                .files
                .iter()
                .find(|f| f.path == e.path)
                .and_then(|f| {
                    f.encodings
                        .iter()
                        .find(|form| form.encoding == kiln_common::keys::Encoding::Br)
                })
                .map(|form| form.size as i64),
        })
        .collect();
    db.record_library(&build.id, &build.game, &library).await?;
    // The release makes the build live; a resumed job finds the one it already made.
    if db.publish_release(&build.id).await?.is_none() {
        crate::release::release(context, &signed.manifest, crate::release::Reason::Publish).await?;
    }
    // Every stage's end is in its row before the build reads as published: the writer task
    // may lag behind the pipeline (a busy database), and a reader must never see a published
    // build with a stage still running.
    observer.flush().await;
    db.record_publication(
        &ManifestRow {
            build_id: build.id.clone(),
            game: build.game.clone(),
            manifest_key: signed.key.clone(),
            sha256: signed.sha256.clone(),
            kid: signed.signature.kid.clone(),
            signature: crate::release::base64_signature(&signed.signature.signature),
            created_at: kiln_common::db::now(),
        },
        publish::NAME,
    )
    .await?;
    tracing::info!(build_id = %build.id, manifest = %signed.key, files = signed.manifest.files.len(), "build published");
    Ok("published")
}

/// Stores every object of the plan that the store lacks, then the manifest.
pub async fn execute_plan<F, Fut>(
    storage: &Storage,
    plan: &PublishPlan,
    progress: &mut F,
) -> Result<publish::PublishReport, StorageError>
where
    F: FnMut(f64) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut report = publish::PublishReport {
        objects: 0,
        bytes: 0,
        already_stored: 0,
    };
    let total = plan.objects.len() + 1;
    for (n, upload) in plan.objects.iter().chain([&plan.manifest]).enumerate() {
        report.objects += 1;
        let stored = storage.head(&upload.key).await?;
        if stored.is_some_and(|meta| meta.size == upload.size) {
            report.already_stored += 1;
        } else {
            match &upload.source {
                UploadSource::File(path) => {
                    storage.put_file(&upload.key, path).await?;
                }
                UploadSource::Bytes(bytes) => {
                    storage.put_bytes(&upload.key, bytes.clone().into()).await?;
                }
            }
            report.bytes += upload.size;
        }
        if n % 16 == 15 {
            progress((n + 1) as f64 / total as f64).await;
        }
    }
    Ok(report)
}

async fn save_report(
    context: &JobContext,
    build_id: &str,
    report: &pipeline::BuildReport,
) -> Result<(), JobError> {
    let json = serde_json::to_string(report).map_err(|e| JobError::Permanent(e.to_string()))?;
    context.db.save_report(build_id, &json).await?;
    Ok(())
}

enum StageEvent {
    Started(&'static str),
    Progress(&'static str, f64),
    Succeeded(&'static str),
    Failed(&'static str, String),
    /// Answered once every event sent before it is written.
    Flush(tokio::sync::oneshot::Sender<()>),
}

struct ChannelObserver {
    events: mpsc::UnboundedSender<StageEvent>,
    last_progress: f64,
    pause: Duration,
}

impl ChannelObserver {
    fn new(events: mpsc::UnboundedSender<StageEvent>, pause: Duration) -> Self {
        Self {
            events,
            last_progress: 0.0,
            pause,
        }
    }

    /// Waits until every event sent so far is in the database.
    async fn flush(&self) {
        let (done, written) = tokio::sync::oneshot::channel();
        if self.events.send(StageEvent::Flush(done)).is_ok() {
            let _ = written.await;
        }
    }
}

impl StageObserver for ChannelObserver {
    fn started(&mut self, stage: &'static str) {
        // On the pipeline's blocking thread, before the stage is shown as running.
        if !self.pause.is_zero() {
            std::thread::sleep(self.pause);
        }
        self.last_progress = 0.0;
        let _ = self.events.send(StageEvent::Started(stage));
    }
    fn progress(&mut self, stage: &'static str, done: f64) {
        // A row update per 5 % is plenty for a progress bar.
        if done - self.last_progress >= 0.05 {
            self.last_progress = done;
            let _ = self.events.send(StageEvent::Progress(stage, done));
        }
    }
    fn succeeded(&mut self, stage: &'static str, elapsed: Duration) {
        metrics::STAGE_DURATION
            .with_label_values(&[stage, "succeeded"])
            .observe(elapsed.as_secs_f64());
        let _ = self.events.send(StageEvent::Succeeded(stage));
    }
    fn failed(&mut self, stage: &'static str, elapsed: Duration, error: &str) {
        metrics::STAGE_DURATION
            .with_label_values(&[stage, "failed"])
            .observe(elapsed.as_secs_f64());
        let _ = self
            .events
            .send(StageEvent::Failed(stage, error.to_string()));
    }
}

async fn write_stage_events(
    db: Db,
    build_id: String,
    mut events: mpsc::UnboundedReceiver<StageEvent>,
    pause: Duration,
) {
    while let Some(event) = events.recv().await {
        let error: String;
        let (stage, update) = match event {
            StageEvent::Flush(done) => {
                let _ = done.send(());
                continue;
            }
            StageEvent::Started(s) => (s, StageUpdate::Started),
            StageEvent::Progress(s, p) => (s, StageUpdate::Progress(p)),
            StageEvent::Succeeded(s) => {
                // The test pause also delays recording a stage's end, as a busy database
                // would: the writer then lags behind the pipeline (see `flush`).
                if !pause.is_zero() {
                    tokio::time::sleep(pause).await;
                }
                (s, StageUpdate::Succeeded)
            }
            StageEvent::Failed(s, e) => {
                error = e;
                (s, StageUpdate::Failed(&error))
            }
        };
        if let Err(e) = db.update_stage(&build_id, stage, update).await {
            tracing::warn!(%build_id, stage, error = %e, "could not record stage progress");
        }
    }
}

/// Unpack errors are the package's fault; the CLI shows them the same way as the API.
pub fn is_package_error(error: &unpack::UnpackError) -> bool {
    error.is_permanent()
}

#[cfg(test)]
mod tests {
    /// The stages a build's status lists (written by the API at upload, from `kiln-jobs`) are
    /// the pipeline's, in its order.
    #[test]
    fn the_queue_lists_the_pipelines_stages() {
        assert_eq!(kiln_jobs::STAGES, kiln_stages::pipeline::STAGES);
    }
}
