//! Prometheus metrics, all in base units. One registry per process; the API serves it at
//! `/metrics` and a standalone worker on `KILN_WORKER_METRICS_BIND`.

use std::sync::LazyLock;

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

pub static REGISTRY: LazyLock<Registry> = LazyLock::new(Registry::new);

fn register<T: prometheus::core::Collector + Clone + 'static>(metric: T) -> T {
    REGISTRY
        .register(Box::new(metric.clone()))
        .expect("metric names are unique");
    metric
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

pub static JOBS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(
            Opts::new("kiln_jobs_total", "Build jobs finished by outcome"),
            &["outcome"],
        )
        .unwrap(),
    )
});

pub static PREHEAT_OUTCOMES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(
            Opts::new(
                "kiln_preheat_outcomes_total",
                "Loader engine outcomes reported by beacons, by engine, outcome, reason and device class",
            ),
            &["engine", "outcome", "reason", "device_class"],
        )
        .unwrap(),
    )
});

pub static TELEMETRY_EVENTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(
            Opts::new(
                "kiln_telemetry_events_total",
                "Beacon events received, by result (accepted or rejected)",
            ),
            &["result"],
        )
        .unwrap(),
    )
});

/// Counts a beacon's events. Labels are bounded: engines come from the detection table's
/// names as the loader reports them, so unknown names are folded into `other`.
pub fn record_telemetry(events: &[crate::db::TelemetryEvent], rejected: usize) {
    for e in events {
        if e.kind != "preheat" {
            continue;
        }
        let engine = e.engine.as_deref().unwrap_or("none");
        let engine = if engine.len() <= 32
            && engine
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
        {
            engine
        } else {
            "other"
        };
        PREHEAT_OUTCOMES
            .with_label_values(&[
                engine,
                e.outcome.as_deref().unwrap_or(""),
                e.reason.as_deref().unwrap_or(""),
                e.device_class.as_deref().unwrap_or("unknown"),
            ])
            .inc();
    }
    TELEMETRY_EVENTS
        .with_label_values(&["accepted"])
        .inc_by(events.len() as u64);
    TELEMETRY_EVENTS
        .with_label_values(&["rejected"])
        .inc_by(rejected as u64);
}

/// Touches every metric so a scrape lists them all from the start.
pub fn init() {
    LazyLock::force(&HTTP_REQUESTS);
    LazyLock::force(&HTTP_DURATION);
    LazyLock::force(&UPLOAD_BYTES);
    LazyLock::force(&BUILDS);
    LazyLock::force(&QUEUE_DEPTH);
    LazyLock::force(&QUEUE_OLDEST_AGE);
    LazyLock::force(&STAGE_DURATION);
    LazyLock::force(&JOBS);
    LazyLock::force(&PREHEAT_OUTCOMES);
    LazyLock::force(&TELEMETRY_EVENTS);
}

/// The registry in Prometheus text format.
pub fn render() -> String {
    let mut buf = Vec::new();
    TextEncoder::new()
        .encode(&REGISTRY.gather(), &mut buf)
        .expect("text encoding never fails");
    String::from_utf8(buf).expect("prometheus text is UTF-8")
}
