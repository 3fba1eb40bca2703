//! Prometheus metrics, all in base units. One registry per process; the API serves it at
//! `/metrics` and a standalone worker on `KILN_WORKER_METRICS_BIND`.

use std::sync::LazyLock;

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

pub static REGISTRY: LazyLock<Registry> = LazyLock::new(Registry::new);

/// Every metric Kiln defines, for [`catalog`].
static DEFINED: std::sync::Mutex<Vec<Box<dyn prometheus::core::Collector>>> =
    std::sync::Mutex::new(Vec::new());

fn register<T: prometheus::core::Collector + Clone + 'static>(metric: T) -> T {
    REGISTRY
        .register(Box::new(metric.clone()))
        .expect("metric names are unique");
    DEFINED
        .lock()
        .expect("metrics list")
        .push(Box::new(metric.clone()));
    metric
}

/// The series names Kiln exports, with histograms' `_bucket`, `_sum` and `_count` — also
/// for labelled metrics no event has touched yet (a scrape lists those only once they
/// have). Dashboards and alert rules may name exactly these.
pub fn catalog() -> Vec<String> {
    init();
    let mut names = Vec::new();
    for collector in DEFINED.lock().expect("metrics list").iter() {
        for family in collector.collect() {
            let name = family.name().to_string();
            if family.get_field_type() == prometheus::proto::MetricType::HISTOGRAM {
                names.extend(["_bucket", "_sum", "_count"].map(|s| format!("{name}{s}")));
            }
            names.push(name);
        }
    }
    names.sort();
    names
}

pub static HTTP_REQUESTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(
            Opts::new(
                "kiln_http_requests_total",
                "HTTP requests by route, method and status",
            ),
            &["route", "method", "status"],
        )
        .unwrap(),
    )
});

pub static HTTP_DURATION: LazyLock<HistogramVec> = LazyLock::new(|| {
    register(
        HistogramVec::new(
            HistogramOpts::new("kiln_http_request_duration_seconds", "HTTP request latency")
                .buckets(vec![
                    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                    30.0, 60.0,
                ]),
            &["route", "method"],
        )
        .unwrap(),
    )
});

pub static UPLOAD_BYTES: LazyLock<IntCounter> = LazyLock::new(|| {
    register(
        IntCounter::new(
            "kiln_upload_bytes_total",
            "Package bytes received by uploads",
        )
        .unwrap(),
    )
});

/// Image bytes of processed builds before and after the images stage (`form`: `before`,
/// `after`): the pipeline dashboard's bytes saved.
pub static IMAGE_BYTES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "kiln_image_bytes_total",
        "Image bytes of processed builds, before and after the images stage",
        &["form"],
    )
});

pub static BUILDS: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register(IntGaugeVec::new(Opts::new("kiln_builds", "Builds by status"), &["status"]).unwrap())
});

pub static QUEUE_DEPTH: LazyLock<IntGauge> = LazyLock::new(|| {
    register(IntGauge::new("kiln_queue_depth", "Builds waiting for a worker").unwrap())
});

pub static QUEUE_OLDEST_AGE: LazyLock<IntGauge> = LazyLock::new(|| {
    register(
        IntGauge::new(
            "kiln_queue_oldest_job_age_seconds",
            "Age of the oldest build waiting for a worker",
        )
        .unwrap(),
    )
});

pub static STAGE_DURATION: LazyLock<HistogramVec> = LazyLock::new(|| {
    register(
        HistogramVec::new(
            HistogramOpts::new("kiln_stage_duration_seconds", "Pipeline stage durations").buckets(
                vec![
                    0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
                    900.0,
                ],
            ),
            &["stage", "outcome"],
        )
        .unwrap(),
    )
});

/// Release attempts by reason (`publish`, `release`, `resign`) and outcome: `won` (signed
/// and live), `lost` (live moved while signing: decided again), `superseded` (a publish a
/// newer build's publish beat), `moved` (a re-sign whose release is no longer live),
/// `gave_up`.
pub static RELEASE_ATTEMPTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "kiln_release_attempts_total",
        "Release compare-and-set attempts by reason and outcome",
        &["reason", "outcome"],
    )
});

pub static JOBS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(
            Opts::new(
                "kiln_jobs_total",
                "Build jobs finished by outcome (published, failed, retried, already-published, already-failed)",
            ),
            &["outcome"],
        )
        .unwrap(),
    )
});

/// Queued builds found without a job (their API stopped between the build's commit and the
/// push) and pushed again by a worker's sweep.
pub static ORPHANED_BUILDS_REQUEUED: LazyLock<IntCounter> = LazyLock::new(|| {
    register(
        IntCounter::new(
            "kiln_orphaned_builds_requeued_total",
            "Queued builds found without a job and queued again by a worker",
        )
        .unwrap(),
    )
});

fn counter_vec(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    register(IntCounterVec::new(Opts::new(name, help), labels).unwrap())
}

fn gauge_vec(name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    register(IntGaugeVec::new(Opts::new(name, help), labels).unwrap())
}

fn gauge(name: &str, help: &str) -> IntGauge {
    register(IntGauge::new(name, help).unwrap())
}

/// Client-side latencies: 1 ms … 60 s.
fn client_histogram(name: &str, help: &str, labels: &[&str]) -> HistogramVec {
    register(
        HistogramVec::new(
            HistogramOpts::new(name, help).buckets(vec![
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                60.0,
            ]),
            labels,
        )
        .unwrap(),
    )
}

pub static PREHEAT_OUTCOMES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "kiln_preheat_outcomes_total",
        "Loader engine outcomes reported by beacons, by game, engine, outcome, reason and device class",
        &["game", "engine", "outcome", "reason", "device_class"],
    )
});

pub static PREHEAT_DURATION: LazyLock<HistogramVec> = LazyLock::new(|| {
    client_histogram(
        "kiln_preheat_duration_seconds",
        "Time until the engine was ready in the player's page, as beacons report it",
        &["engine", "outcome", "device_class"],
    )
});

pub static DECODE_DURATION: LazyLock<HistogramVec> = LazyLock::new(|| {
    client_histogram(
        "kiln_decode_duration_seconds",
        "Model decode time on players' devices, by variant, decoder and device class",
        &["variant", "decoder", "device_class"],
    )
});

pub static DECODE_FALLBACKS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "kiln_decode_fallbacks_total",
        "Model loads that used the fallback variant, by device class and reason",
        &["device_class", "reason"],
    )
});

pub static LIBRARY_BYTES_SAVED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "kiln_library_bytes_saved_total",
        "Engine bytes (brotli, as the CDN sends them) players did not download because another game's visit had put the engine on their device",
        &["engine"],
    )
});

pub static TELEMETRY_EVENTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "kiln_telemetry_events_total",
        "Beacon events received, by result (accepted; of those, untrusted: without a valid manifest token; rejected; or dropped when the ingest backlog was full)",
        &["result"],
    )
});

pub static TELEMETRY_BACKLOG: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "kiln_telemetry_ingest_backlog",
        "Telemetry events accepted but not yet written to the database",
    )
});

pub static TELEMETRY_WRITE_DURATION: LazyLock<prometheus::Histogram> = LazyLock::new(|| {
    register(
        prometheus::Histogram::with_opts(
            HistogramOpts::new(
                "kiln_telemetry_write_duration_seconds",
                "One batched write of telemetry events and their rollups",
            )
            .buckets(vec![
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ]),
        )
        .unwrap(),
    )
});

pub static BUILD_STAGES: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    gauge_vec(
        "kiln_build_stages",
        "Build stages by stage and status",
        &["stage", "status"],
    )
});

pub static WORKER_JOBS_RUNNING: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "kiln_worker_jobs_running",
        "Build jobs this process is running now",
    )
});

/// Queue consumers that lost their queue (a failed poll or heartbeat): their jobs ran to the
/// end and a new consumer started (`job::consume`).
pub static WORKER_QUEUE_FAILURES: LazyLock<IntCounter> = LazyLock::new(|| {
    register(
        IntCounter::new(
            "kiln_worker_queue_failures_total",
            "Queue consumers that lost their queue and were started again after their jobs finished",
        )
        .unwrap(),
    )
});

pub static WORKER_CONCURRENCY: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "kiln_worker_concurrency",
        "Build jobs this process may run at once (0 where it runs no workers)",
    )
});

pub static LIBRARY_ENTRIES: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "kiln_library_entries",
        "Engine builds in the shared library",
    )
});

pub static LIBRARY_BYTES_STORED: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "kiln_library_bytes_stored",
        "Bytes the shared library stores (each engine build once)",
    )
});

pub static LIBRARY_RETIREMENT_CANDIDATES: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "kiln_library_retirement_candidates",
        "Library entries whose ROI is below KILN_LIBRARY_MIN_ROI",
    )
});

pub static LIBRARY_VERSION_BYTES: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    gauge_vec(
        "kiln_library_version_bytes",
        "Bytes stored per engine version",
        &["engine", "version"],
    )
});

pub static LIBRARY_VERSION_GAMES: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    gauge_vec(
        "kiln_library_version_games",
        "Games whose builds carry the engine version",
        &["engine", "version"],
    )
});

pub static LIBRARY_VERSION_ROI: LazyLock<prometheus::GaugeVec> = LazyLock::new(|| {
    register(
        prometheus::GaugeVec::new(
            Opts::new(
                "kiln_library_version_roi",
                "Bytes saved by pre-warm hits over bytes stored, per engine version",
            ),
            &["engine", "version"],
        )
        .unwrap(),
    )
});

/// The label for a value a client sent: kept only when it is in the closed set the server
/// knows (`known`), else `other`, so no beacon can add series.
fn closed_label(value: Option<&str>, known: impl Fn(&str) -> bool) -> &str {
    match value {
        Some(v) if known(v) => v,
        _ => "other",
    }
}

/// Counts a beacon's events. Every label comes from a closed set: device classes from the
/// rule table; outcomes, reasons, variants and decoders from the parser's fixed lists;
/// `game` only for games Kiln knows (`known_game`) and `engine` only for engines the
/// library holds (`library`, (engine, version) → transfer size), else `other`. Only trusted
/// events (a valid manifest token) are counted; the untrusted ones are counted apart in
/// `kiln_telemetry_events_total{result="untrusted"}`. A shared pre-warm hit adds what the
/// CDN sends for the engine version (its brotli form) to the bytes saved.
pub fn record_telemetry(
    events: &[crate::db::TelemetryEvent],
    rejected: usize,
    known_game: impl Fn(&str) -> bool,
    library: &std::collections::HashMap<(String, String), i64>,
) {
    let known_engine = |name: &str| library.keys().any(|(engine, _)| engine == name);
    let one_of = |value: Option<&str>, allowed: &[&str]| -> String {
        match value {
            None => String::new(),
            Some(v) if allowed.contains(&v) => v.to_string(),
            Some(_) => "other".into(),
        }
    };
    let mut untrusted = 0;
    for e in events.iter() {
        if !e.trusted {
            untrusted += 1;
            continue;
        }
        let class = closed_label(Some(e.device_class.as_str()), |c| {
            crate::devices::CLASSES.contains(&c)
        });
        match e.kind.as_str() {
            "preheat" => {
                let engine = closed_label(e.engine.as_deref(), known_engine);
                let outcome = one_of(e.outcome.as_deref(), crate::telemetry::OUTCOMES);
                let reason = one_of(e.reason.as_deref(), crate::telemetry::REASONS);
                let game = closed_label(Some(e.game.as_str()), &known_game);
                PREHEAT_OUTCOMES
                    .with_label_values(&[game, engine, outcome.as_str(), reason.as_str(), class])
                    .inc();
                if let Some(ms) = e.ms {
                    PREHEAT_DURATION
                        .with_label_values(&[engine, outcome.as_str(), class])
                        .observe(ms / 1000.0);
                }
                if outcome == "hit"
                    && e.shared == Some(true)
                    && let Some(bytes) = library.get(&(
                        e.engine.clone().unwrap_or_default(),
                        e.version.clone().unwrap_or_default(),
                    ))
                {
                    LIBRARY_BYTES_SAVED
                        .with_label_values(&[engine])
                        .inc_by((*bytes).max(0) as u64);
                }
            }
            "decode" => {
                let variant = one_of(e.variant.as_deref(), crate::telemetry::VARIANTS);
                let decoder = one_of(e.decoder.as_deref(), crate::telemetry::DECODERS);
                if let Some(ms) = e.ms {
                    DECODE_DURATION
                        .with_label_values(&[variant.as_str(), decoder.as_str(), class])
                        .observe(ms / 1000.0);
                }
                if e.fallback == Some(true) {
                    let reason = one_of(e.reason.as_deref(), crate::telemetry::DECODE_REASONS);
                    DECODE_FALLBACKS
                        .with_label_values(&[class, reason.as_str()])
                        .inc();
                }
            }
            _ => {}
        }
    }
    TELEMETRY_EVENTS
        .with_label_values(&["accepted"])
        .inc_by(events.len() as u64);
    TELEMETRY_EVENTS
        .with_label_values(&["untrusted"])
        .inc_by(untrusted);
    TELEMETRY_EVENTS
        .with_label_values(&["rejected"])
        .inc_by(rejected as u64);
}

/// Touches every metric so a scrape lists them all from the start.
pub fn init() {
    LazyLock::force(&HTTP_REQUESTS);
    LazyLock::force(&HTTP_DURATION);
    LazyLock::force(&UPLOAD_BYTES);
    LazyLock::force(&IMAGE_BYTES);
    LazyLock::force(&BUILDS);
    LazyLock::force(&QUEUE_DEPTH);
    LazyLock::force(&QUEUE_OLDEST_AGE);
    LazyLock::force(&STAGE_DURATION);
    LazyLock::force(&JOBS);
    LazyLock::force(&ORPHANED_BUILDS_REQUEUED);
    LazyLock::force(&RELEASE_ATTEMPTS);
    LazyLock::force(&PREHEAT_OUTCOMES);
    LazyLock::force(&PREHEAT_DURATION);
    LazyLock::force(&DECODE_DURATION);
    LazyLock::force(&DECODE_FALLBACKS);
    LazyLock::force(&LIBRARY_BYTES_SAVED);
    LazyLock::force(&TELEMETRY_EVENTS);
    LazyLock::force(&TELEMETRY_BACKLOG);
    LazyLock::force(&TELEMETRY_WRITE_DURATION);
    LazyLock::force(&BUILD_STAGES);
    LazyLock::force(&WORKER_JOBS_RUNNING);
    LazyLock::force(&WORKER_CONCURRENCY);
    LazyLock::force(&WORKER_QUEUE_FAILURES);
    LazyLock::force(&LIBRARY_ENTRIES);
    LazyLock::force(&LIBRARY_BYTES_STORED);
    LazyLock::force(&LIBRARY_RETIREMENT_CANDIDATES);
    LazyLock::force(&LIBRARY_VERSION_BYTES);
    LazyLock::force(&LIBRARY_VERSION_GAMES);
    LazyLock::force(&LIBRARY_VERSION_ROI);
}

/// The registry in Prometheus text format.
pub fn render() -> String {
    let mut buf = Vec::new();
    TextEncoder::new()
        .encode(&REGISTRY.gather(), &mut buf)
        .expect("text encoding never fails");
    String::from_utf8(buf).expect("prometheus text is UTF-8")
}
