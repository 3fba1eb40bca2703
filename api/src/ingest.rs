//! Telemetry ingest: beacons are validated in the handler and handed here; one writer task per
//! process batches them — raw events plus what they add to the hourly rollups — into one
//! transaction every `flush_ms` or `batch_max` events, and prunes old data periodically.
//!
//! A beacon is answered as soon as its events are queued, so a burst of players costs the
//! database one write per batch rather than one per request. The queue is bounded
//! (`backlog_max` events): past it, beacons get 503 and their events count as dropped.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use kiln_common::config::TelemetryConfig;
use kiln_common::db::{Db, TelemetryEvent};
use kiln_common::metrics;
use kiln_common::rollups::{Rollup, hour_of};
use kiln_common::telemetry::BeaconSecret;
use tokio::sync::{mpsc, watch};

/// Events received together, with the time they were received.
type Received = (String, Vec<TelemetryEvent>);

#[derive(Debug, thiserror::Error)]
#[error("the telemetry backlog is full ({0} events waiting)")]
pub struct BacklogFull(pub usize);

#[derive(Clone)]
pub struct Ingest {
    queue: mpsc::UnboundedSender<Received>,
    backlog: Arc<AtomicUsize>,
    backlog_max: usize,
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
    /// Starts the writer; it flushes what is queued and returns once `stopped` turns true.
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
            pending: Vec::new(),
            pending_events: 0,
            rollup: Rollup::default(),
        };
        let task = tokio::spawn(writer.run(received, stopped));
        (ingest, task)
    }

    /// Takes room for `n` events in the backlog; then [`Ingest::send`] them.
    pub fn reserve(&self, n: usize) -> Result<(), BacklogFull> {
        let before = self.backlog.fetch_add(n, Ordering::SeqCst);
        if before + n > self.backlog_max {
            self.backlog.fetch_sub(n, Ordering::SeqCst);
            return Err(BacklogFull(before));
        }
        metrics::TELEMETRY_BACKLOG.set((before + n) as i64);
        Ok(())
    }

    /// Queues validated events, room for which was [`Ingest::reserve`]d.
    pub fn send(&self, received_at: String, events: Vec<TelemetryEvent>) {
        if events.is_empty() {
            return;
        }
        // The writer ends only after the server, so it is there to receive.
        if self.queue.send((received_at, events)).is_err() {
            tracing::warn!("telemetry writer gone; events lost");
        }
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
    pending: Vec<Received>,
    pending_events: usize,
    /// What `pending` adds to the rollups, kept up to date as beacons arrive.
    rollup: Rollup,
}

impl Writer {
    async fn run(
        mut self,
        mut received: mpsc::UnboundedReceiver<Received>,
        mut stopped: watch::Receiver<bool>,
    ) {
        let flush_every = Duration::from_millis(self.config.flush_ms);
        let mut prune = tokio::time::interval(Duration::from_secs(self.config.prune_interval_secs));
        let mut flush = tokio::time::interval(flush_every);
        flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                batch = received.recv() => match batch {
                    Some(batch) => {
                        self.take(batch);
                        if self.pending_events >= self.config.batch_max {
                            self.flush().await;
                        }
                    }
                    None => break,
                },
                _ = flush.tick() => self.flush().await,
                _ = prune.tick() => self.prune().await,
                // The guard `wait_for` returns must not live across the other arms' awaits.
                _ = async { stopped.wait_for(|s| *s).await.map(|_| ()) } => break,
            }
        }
        // Stopping: beacons the server still answers during its graceful shutdown land here
        // for a moment longer.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            while let Ok(batch) = received.try_recv() {
                self.take(batch);
            }
            self.flush().await;
            if (self.pending.is_empty() && received.is_empty()) || Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(flush_every.min(Duration::from_millis(100))).await;
        }
    }

    fn take(&mut self, (received_at, events): Received) {
        let hour = hour_of(&received_at);
        for e in &events {
            self.rollup.add(&hour, e);
        }
        self.pending_events += events.len();
        self.pending.push((received_at, events));
    }

    /// Writes what is pending; on a database error keeps it for the next flush.
    async fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let started = Instant::now();
        match self.db.write_telemetry(&self.pending, &self.rollup).await {
            Ok(()) => {
                metrics::TELEMETRY_WRITE_DURATION.observe(started.elapsed().as_secs_f64());
                let left = self
                    .backlog
                    .fetch_sub(self.pending_events, Ordering::SeqCst)
                    - self.pending_events;
                metrics::TELEMETRY_BACKLOG.set(left as i64);
                self.pending.clear();
                self.pending_events = 0;
                self.rollup = Rollup::default();
            }
            Err(e) => {
                tracing::warn!(error = %e, events = self.pending_events, "telemetry write failed; will retry");
            }
        }
    }

    async fn prune(&self) {
        let days = |n: u64| {
            (chrono::Utc::now() - chrono::Duration::days(n as i64))
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
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
