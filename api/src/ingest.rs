//! Telemetry ingest: beacons are validated in the handler and handed here; one writer task per
//! process writes them — raw events plus what they add to the hourly rollups — in one
//! transaction per batch, and prunes old data periodically.
//!
//! A beacon is answered `202` only once its events are committed (a group commit: the writer
//! takes everything that queued while the previous transaction ran, up to `batch_max` events,
//! so a burst of players costs the database one write per batch, not one per request). A
//! process killed at any moment therefore loses no beacon it answered `202`. What could not be
//! committed within `commit_timeout_ms` (the database down) is answered `503`, as are beacons
//! past the bounded queue (`backlog_max` events); both count as dropped.
//!
//! `KILN_TELEMETRY_ACK=queued` answers once the events are queued instead: more events/s per
//! client connection and a latency that does not include the write, but what a killed process
//! had not written yet (one batch or so) is lost; a failing write is then retried until it
//! succeeds, and only the bounded backlog answers 503.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use kiln_common::config::{TelemetryAck, TelemetryConfig};
use kiln_common::db::{Db, TelemetryEvent};
use kiln_common::metrics;
use kiln_common::rollups::{Rollup, hour_of};
use kiln_common::telemetry::BeaconSecret;
use tokio::sync::{mpsc, oneshot, watch};

/// Events received together, with the time they were received, and who waits for their
/// commit.
struct Received {
    at: String,
    /// When its handler stops waiting: received + `commit_timeout_ms`; none when nobody waits
    /// (`KILN_TELEMETRY_ACK=queued`: retried until written).
    deadline: Option<Instant>,
    events: Vec<TelemetryEvent>,
    stored: oneshot::Sender<Result<Vec<TelemetryEvent>, NotStored>>,
}

#[derive(Debug, thiserror::Error)]
#[error("the telemetry backlog is full ({0} events waiting)")]
pub struct BacklogFull(pub usize);

/// Events that were not committed: the beacon is answered `503`.
#[derive(Debug, thiserror::Error)]
#[error("telemetry could not be stored: {0}")]
pub struct NotStored(String);

fn writer_gone() -> NotStored {
    NotStored("the telemetry writer stopped".into())
}

#[derive(Clone)]
pub struct Ingest {
    queue: mpsc::UnboundedSender<Received>,
    backlog: Arc<AtomicUsize>,
    backlog_max: usize,
    commit_timeout: Duration,
    ack: TelemetryAck,
    games: Arc<KnownGames>,
    sizes: Arc<TransferSizes>,
    secret: Arc<BeaconSecret>,
}

/// The games Kiln knows, so only their names become metric labels.
struct KnownGames {
    names: RwLock<(Option<Instant>, HashSet<String>)>,
}

/// What the CDN sends for each engine version in the library, for the bytes a shared hit
/// saved; its keys are the engines and versions metric labels may name.
pub type SizeMap = HashMap<(String, String), i64>;

/// The library's engine versions are read again at least this often, and at most once a
/// second when a beacon names one not seen before.
const LIBRARY_REFRESH: Duration = Duration::from_secs(30);

#[derive(Default)]
struct TransferSizes {
    sizes: RwLock<(Option<Instant>, Arc<SizeMap>)>,
}

impl Ingest {
    /// Starts the writer; once `stopped` turns true (after the servers stopped) it commits
    /// what is still queued and returns.
    pub fn start(
        db: Db,
        config: TelemetryConfig,
        secret: BeaconSecret,
        stopped: watch::Receiver<bool>,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let (queue, received) = mpsc::unbounded_channel();
        let ingest = Self {
            queue,
            backlog: Arc::new(AtomicUsize::new(0)),
            backlog_max: config.backlog_max,
            commit_timeout: Duration::from_millis(config.commit_timeout_ms),
            ack: config.ack,
            games: Arc::new(KnownGames {
                names: RwLock::new((None, HashSet::new())),
            }),
            sizes: Default::default(),
            secret: Arc::new(secret),
        };
        let writer = Writer {
            db,
            config,
            backlog: ingest.backlog.clone(),
        };
        let task = tokio::spawn(writer.run(received, stopped));
        (ingest, task)
    }

    /// Events accepted and not yet committed (or given up on).
    pub fn waiting(&self) -> usize {
        self.backlog.load(Ordering::SeqCst)
    }

    /// Takes room for `n` events in the backlog; then [`Ingest::store`] them.
    pub fn reserve(&self, n: usize) -> Result<(), BacklogFull> {
        let before = self.backlog.fetch_add(n, Ordering::SeqCst);
        if before + n > self.backlog_max {
            self.backlog.fetch_sub(n, Ordering::SeqCst);
            return Err(BacklogFull(before));
        }
        metrics::TELEMETRY_BACKLOG.set((before + n) as i64);
        Ok(())
    }

    /// Stores validated events, room for which was [`Ingest::reserve`]d, and hands them to
    /// `accepted` (the metrics) once they are committed, with the other beacons of their batch;
    /// with `KILN_TELEMETRY_ACK=queued`, once they are queued. `Err`: why they were not.
    pub async fn store(
        &self,
        received_at: String,
        events: Vec<TelemetryEvent>,
        accepted: impl FnOnce(&[TelemetryEvent]),
    ) -> Result<(), NotStored> {
        if events.is_empty() {
            accepted(&events);
            return Ok(());
        }
        match self.ack {
            TelemetryAck::Queued => {
                accepted(&events);
                self.enqueue(received_at, events, None)?;
            }
            TelemetryAck::Commit => {
                let deadline = Instant::now() + self.commit_timeout;
                let committed = self.enqueue(received_at, events, Some(deadline))?;
                let events = committed.await.unwrap_or_else(|_| Err(writer_gone()))?;
                accepted(&events);
            }
        }
        Ok(())
    }

    /// Hands events to the writer; what it answers once they are written (or given up on).
    fn enqueue(
        &self,
        at: String,
        events: Vec<TelemetryEvent>,
        deadline: Option<Instant>,
    ) -> Result<oneshot::Receiver<Result<Vec<TelemetryEvent>, NotStored>>, NotStored> {
        let n = events.len();
        let (stored, committed) = oneshot::channel();
        let received = Received {
            at,
            deadline,
            events,
            stored,
        };
        self.queue.send(received).map_err(|_| {
            self.backlog.fetch_sub(n, Ordering::SeqCst);
            writer_gone()
        })?;
        Ok(committed)
    }

    /// Whether `game` is registered: refreshed from the database at most once a second, when
    /// a name not seen before arrives.
    pub async fn known_games(&self, db: &Db, events: &[TelemetryEvent]) -> HashSet<String> {
        let missing = {
            let names = self.games.names.read().expect("known games");
            let stale = names
                .0
                .is_none_or(|at| at.elapsed() >= Duration::from_secs(1));
            stale && events.iter().any(|e| !names.1.contains(&e.game))
        };
        if missing && let Ok(fresh) = db.game_names(None).await {
            *self.games.names.write().expect("known games") =
                (Some(Instant::now()), fresh.into_iter().collect());
        }
        let names = self.games.names.read().expect("known games");
        events
            .iter()
            .filter(|e| names.1.contains(&e.game))
            .map(|e| e.game.clone())
            .collect()
    }

    /// The secret beacon tokens are checked with.
    pub fn secret(&self) -> &BeaconSecret {
        &self.secret
    }

    /// The library's engine versions with their transfer sizes (brotli form): the only
    /// engines and versions a metric label may name, and what a shared hit saved. Cached;
    /// read again every `LIBRARY_REFRESH`, or at most once a second when a pre-warm event
    /// names one not seen before.
    pub async fn library_versions(&self, db: &Db, events: &[TelemetryEvent]) -> Arc<SizeMap> {
        let key = |e: &TelemetryEvent| {
            (
                e.engine.clone().unwrap_or_default(),
                e.version.clone().unwrap_or_default(),
            )
        };
        let refresh = {
            let sizes = self.sizes.sizes.read().expect("transfer sizes");
            match sizes.0 {
                None => true,
                Some(at) => {
                    at.elapsed() >= LIBRARY_REFRESH
                        || (at.elapsed() >= Duration::from_secs(1)
                            && events
                                .iter()
                                .any(|e| e.kind == "preheat" && !sizes.1.contains_key(&key(e))))
                }
            }
        };
        if refresh {
            match db.library_transfer_sizes().await {
                Ok(fresh) => {
                    *self.sizes.sizes.write().expect("transfer sizes") =
                        (Some(Instant::now()), Arc::new(fresh))
                }
                Err(e) => tracing::warn!(error = %e, "could not read the library's versions"),
            }
        }
        self.sizes.sizes.read().expect("transfer sizes").1.clone()
    }
}

struct Writer {
    db: Db,
    config: TelemetryConfig,
    backlog: Arc<AtomicUsize>,
}

/// One transaction's worth of beacons.
#[derive(Default)]
struct Batch {
    /// Its oldest beacon's: the batch is retried until then (for ever when nobody waits).
    deadline: Option<Instant>,
    rows: Vec<(String, Vec<TelemetryEvent>)>,
    waiting: Vec<oneshot::Sender<Result<Vec<TelemetryEvent>, NotStored>>>,
    events: usize,
    /// What `rows` adds to the rollups.
    rollup: Rollup,
}

impl Batch {
    fn take(&mut self, received: Received) {
        let hour = hour_of(&received.at);
        for e in &received.events {
            self.rollup.add(&hour, e);
        }
        self.events += received.events.len();
        self.rows.push((received.at, received.events));
        self.waiting.push(received.stored);
    }
}

impl Writer {
    async fn run(
        self,
        mut received: mpsc::UnboundedReceiver<Received>,
        mut stopped: watch::Receiver<bool>,
    ) {
        let mut prune = tokio::time::interval(Duration::from_secs(self.config.prune_interval_secs));
        loop {
            tokio::select! {
                first = received.recv() => match first {
                    Some(first) => self.commit(first, &mut received, None).await,
                    None => return,
                },
                _ = prune.tick() => self.prune().await,
                // The guard `wait_for` returns must not live across the other arms' awaits.
                _ = async { stopped.wait_for(|s| *s).await.map(|_| ()) } => break,
            }
        }
        // Stopped after the servers (`Running::shutdown`): what they queued while stopping,
        // for a few seconds at most (the database may be gone).
        let give_up = Instant::now() + Duration::from_secs(5);
        while let Ok(first) = received.try_recv() {
            self.commit(first, &mut received, Some(give_up)).await;
        }
    }

    /// Commits `first` and everything queued behind it (up to `batch_max` events) in one
    /// transaction, retrying until the oldest beacon in it has waited `commit_timeout_ms`,
    /// then answers each beacon's handler. A beacon that waited that long in the queue (behind
    /// failing batches) is answered 503 without being written, so a 503 never means stored.
    async fn commit(
        &self,
        first: Received,
        received: &mut mpsc::UnboundedReceiver<Received>,
        give_up: Option<Instant>,
    ) {
        let now = Instant::now();
        let mut batch = Batch::default();
        let mut expired = 0;
        let mut next = Some(first);
        while let Some(item) = next.take() {
            if item.deadline.is_some_and(|d| d <= now) {
                expired += item.events.len();
                let _ = item.stored.send(Err(NotStored(format!(
                    "the database took none of it for {} ms",
                    self.config.commit_timeout_ms
                ))));
            } else {
                if batch.rows.is_empty() {
                    batch.deadline = item.deadline;
                }
                batch.take(item);
            }
            if batch.events < self.config.batch_max {
                next = received.try_recv().ok();
            }
        }
        let outcome = if batch.rows.is_empty() {
            Ok(())
        } else {
            let deadline = match (batch.deadline, give_up) {
                (Some(d), Some(g)) => Some(d.min(g)),
                (d, g) => d.or(g),
            };
            self.write(&batch, deadline).await
        };
        let done = batch.events + expired;
        let left = self.backlog.fetch_sub(done, Ordering::SeqCst) - done;
        metrics::TELEMETRY_BACKLOG.set(left as i64);
        for ((_, events), waiting) in batch.rows.into_iter().zip(batch.waiting) {
            // A handler whose client went away no longer listens.
            let _ = waiting.send(match &outcome {
                Ok(()) => Ok(events),
                Err(e) => Err(NotStored(e.clone())),
            });
        }
    }

    /// Writes `batch`, retrying with backoff until `deadline` (none: until it is written).
    async fn write(&self, batch: &Batch, deadline: Option<Instant>) -> Result<(), String> {
        let mut backoff = Duration::from_millis(50);
        loop {
            let started = Instant::now();
            let write = self.db.write_telemetry(&batch.rows, &batch.rollup);
            // Past the deadline the transaction is dropped, so rolled back: not stored.
            let written = match deadline {
                Some(deadline) => tokio::time::timeout_at(deadline.into(), write).await,
                None => Ok(write.await),
            };
            let error = match written {
                Ok(Ok(())) => {
                    metrics::TELEMETRY_WRITE_DURATION.observe(started.elapsed().as_secs_f64());
                    return Ok(());
                }
                Ok(Err(e)) => e.to_string(),
                Err(_) => "the database did not answer in time".to_string(),
            };
            if deadline.is_some_and(|d| Instant::now() + backoff >= d) {
                tracing::warn!(error = %error, events = batch.events, "telemetry write failed; beacons answered 503");
                return Err(error);
            }
            tracing::warn!(error = %error, events = batch.events, "telemetry write failed; will retry");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }

    async fn prune(&self) {
        let days = |n: u64| {
            kiln_common::db::timestamp(chrono::Utc::now() - chrono::Duration::days(n as i64))
        };
        match self
            .db
            .prune_telemetry(
                &days(self.config.retention_days),
                &hour_of(&days(self.config.rollup_retention_days)),
            )
            .await
        {
            Ok((0, 0)) => {}
            Ok((events, rollups)) => {
                tracing::info!(events, rollups, "pruned telemetry past its retention")
            }
            Err(e) => tracing::warn!(error = %e, "telemetry prune failed; will retry"),
        }
    }
}
