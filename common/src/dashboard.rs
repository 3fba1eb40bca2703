//! The built-in dashboard's data (`GET /v1/dashboard/data`): the rollups and the database's
//! build, library and variant records, shaped into the four views (Pre-warm, Decode,
//! Library, Pipeline). Plain functions of rows; the handler reads the rows.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::db::{
    ClassManifestRow, DecodeRollupRow, FinishedBuild, FinishedStage, LibraryRow, PreheatRollupRow,
    SketchRow,
};
use crate::rollups::merge_quantiles;

/// Everything the views are made of, as read from the database.
pub struct Rows {
    pub preheat: Vec<PreheatRollupRow>,
    pub preheat_latency: Vec<SketchRow>,
    pub decode: Vec<DecodeRollupRow>,
    pub decode_latency: Vec<SketchRow>,
    pub choices: Vec<ClassManifestRow>,
    pub library: Vec<LibraryRow>,
    pub min_roi: f64,
    pub build_counts: Vec<(String, i64)>,
    pub queue_depth: i64,
    pub oldest_age_seconds: i64,
    pub finished_builds: Vec<FinishedBuild>,
    pub finished_stages: Vec<FinishedStage>,
    /// The images stage's bytes before and after, of the newest published builds' reports
    /// ([`image_bytes`]).
    pub image_bytes: Vec<(u64, u64)>,
}

/// The images stage's bytes before and after in a build report (JSON), if it has them.
pub fn image_bytes(report: &str) -> Option<(u64, u64)> {
    #[derive(serde::Deserialize)]
    struct Report {
        stages: Stages,
    }
    #[derive(serde::Deserialize)]
    struct Stages {
        images: Images,
    }
    #[derive(serde::Deserialize)]
    struct Images {
        bytes_before: u64,
        bytes_after: u64,
    }
    let r: Report = serde_json::from_str(report).ok()?;
    Some((r.stages.images.bytes_before, r.stages.images.bytes_after))
}

/// How many of the newest published builds' reports the pipeline view reads.
pub const IMAGE_REPORTS: i64 = 200;

#[derive(Debug, Serialize)]
pub struct Dashboard {
    pub games: Vec<String>,
    pub game: Option<String>,
    pub from: String,
    pub to: String,
    pub prewarm: Prewarm,
    pub decode: Decode,
    pub library: Library,
    pub pipeline: Pipeline,
}

#[derive(Debug, Default, Serialize)]
pub struct Totals {
    pub events: i64,
    pub hits: i64,
    pub misses: i64,
    pub fallbacks: i64,
    pub errors: i64,
    pub hit_rate: Option<f64>,
}

impl Totals {
    fn add(&mut self, outcome: &str, n: i64) {
        self.events += n;
        match outcome {
            "hit" => self.hits += n,
            "miss" => self.misses += n,
            "fallback" => self.fallbacks += n,
            _ => self.errors += n,
        }
        self.hit_rate = rate(self.hits, self.events);
    }
}

#[derive(Debug, Serialize)]
pub struct Prewarm {
    pub totals: Totals,
    pub hourly: Vec<PrewarmHour>,
    pub misses_by_reason: Vec<ReasonCount>,
    pub rows: Vec<PrewarmRow>,
}

#[derive(Debug, Serialize)]
pub struct PrewarmHour {
    pub hour: String,
    /// A device class, or `all`.
    pub device_class: String,
    pub events: i64,
    pub hits: i64,
    pub hit_rate: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct ReasonCount {
    pub reason: String,
    pub count: i64,
}

#[derive(Debug, Serialize)]
pub struct PrewarmRow {
    pub game: String,
    pub engine: String,
    pub version: String,
    pub device_class: String,
    pub events: i64,
    pub hits: i64,
    pub hit_rate: Option<f64>,
    /// Time to ready over every outcome.
    pub p50_ms: Option<f64>,
    pub p90_ms: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct Decode {
    pub rows: Vec<DecodeRow>,
    pub hourly: Vec<DecodeHour>,
    pub choices: Vec<Choice>,
}

#[derive(Debug, Serialize)]
pub struct DecodeRow {
    pub device_class: String,
    pub variant: String,
    pub count: i64,
    pub p50_ms: Option<f64>,
    pub p90_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub fallbacks: i64,
    pub fallback_rate: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct DecodeHour {
    pub hour: String,
    pub device_class: String,
    pub variant: String,
    pub count: i64,
    pub p90_ms: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct Choice {
    pub game: String,
    pub asset: String,
    pub device_class: String,
    pub variant: String,
    pub reason: String,
    pub detail: String,
}

#[derive(Debug, Serialize)]
pub struct Library {
    pub totals: LibraryTotals,
    pub entries: Vec<LibraryEntry>,
}

#[derive(Debug, Serialize)]
pub struct LibraryTotals {
    pub entries: i64,
    pub bytes_stored: i64,
    pub bytes_saved: i64,
}

#[derive(Debug, Serialize)]
pub struct LibraryEntry {
    pub sha256: String,
    pub engine: String,
    pub version: String,
    pub size: i64,
    pub games: i64,
    pub builds: i64,
    pub live_builds: i64,
    pub hits: i64,
    /// Hits another game's visit brought: the ones `bytes_saved` counts.
    pub shared_hits: i64,
    pub misses: i64,
    /// The brotli form's size: what one shared hit saved.
    pub br_size: i64,
    pub bytes_saved: i64,
    pub roi: f64,
    pub low_roi: bool,
}

#[derive(Debug, Serialize)]
pub struct Pipeline {
    pub queue: Queue,
    pub builds_by_status: BTreeMap<String, i64>,
    pub hourly: Vec<BuildHour>,
    pub stages: Vec<StageStats>,
    pub recent_failures: Vec<Failure>,
    pub images: ImageBytes,
}

/// What the images stage did to the newest published builds (up to [`IMAGE_REPORTS`]).
#[derive(Debug, Default, Serialize)]
pub struct ImageBytes {
    pub builds: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub bytes_saved: u64,
}

#[derive(Debug, Serialize)]
pub struct Queue {
    pub depth: i64,
    pub oldest_age_seconds: i64,
}

#[derive(Debug, Default, Serialize)]
pub struct BuildHour {
    pub hour: String,
    pub published: i64,
    pub failed: i64,
}

#[derive(Debug, Serialize)]
pub struct StageStats {
    pub stage: String,
    pub succeeded: i64,
    pub failed: i64,
    pub p50_seconds: Option<f64>,
    pub p90_seconds: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct Failure {
    pub build_id: String,
    pub game: String,
    pub version: String,
    pub stage: Option<String>,
    pub error: Option<String>,
    pub at: String,
}

fn rate(part: i64, whole: i64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

/// `shared_hits × br_size`: the bytes players did not download because another game's visit
/// had already put the engine on their device. Only those hits count (a repeat visit of the
/// same game would have had it from the HTTP cache anyway), and at the size the CDN would
/// have sent (the brotli form), not the engine's uncompressed size.
pub fn bytes_saved(entry: &LibraryRow) -> i64 {
    entry.shared_hits.saturating_mul(entry.br_size)
}

/// Bytes saved over bytes stored (the entry's size).
pub fn roi(entry: &LibraryRow) -> f64 {
    if entry.size > 0 {
        bytes_saved(entry) as f64 / entry.size as f64
    } else {
        0.0
    }
}

/// The library as its gauges show it: size, entries below the ROI floor, and per engine
/// version (several builds of one version, different bytes, add up; games counted per entry)
/// bytes stored, games, and bytes saved over bytes stored.
#[derive(Debug, Clone, PartialEq)]
pub struct LibrarySummary {
    pub entries: i64,
    pub bytes_stored: i64,
    pub retirement_candidates: i64,
    pub versions: Vec<VersionSummary>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct VersionSummary {
    pub engine: String,
    pub version: String,
    pub bytes: i64,
    pub games: i64,
    pub roi: f64,
}

pub fn library_summary(entries: &[LibraryRow], min_roi: f64) -> LibrarySummary {
    let mut versions: std::collections::BTreeMap<(&str, &str), (i64, i64, i64)> =
        Default::default();
    for e in entries {
        let v = versions.entry((&e.engine, &e.version)).or_default();
        v.0 += e.size;
        v.1 = v.1.max(e.games);
        v.2 += bytes_saved(e);
    }
    LibrarySummary {
        entries: entries.len() as i64,
        bytes_stored: entries.iter().map(|e| e.size).sum(),
        retirement_candidates: entries.iter().filter(|e| roi(e) < min_roi).count() as i64,
        versions: versions
            .into_iter()
            .map(
                |((engine, version), (bytes, games, saved))| VersionSummary {
                    engine: engine.to_string(),
                    version: version.to_string(),
                    bytes,
                    games,
                    roi: if bytes > 0 {
                        saved as f64 / bytes as f64
                    } else {
                        0.0
                    },
                },
            )
            .collect(),
    }
}

pub fn build(
    games: Vec<String>,
    game: Option<String>,
    from: String,
    to: String,
    rows: Rows,
) -> Dashboard {
    Dashboard {
        prewarm: prewarm(&rows),
        decode: decode(&rows),
        library: library(&rows),
        pipeline: pipeline(&rows),
        games,
        game,
        from,
        to,
    }
}

fn prewarm(rows: &Rows) -> Prewarm {
    let mut totals = Totals::default();
    let mut hourly: BTreeMap<(String, String), Totals> = BTreeMap::new();
    let mut reasons: BTreeMap<String, i64> = BTreeMap::new();
    let mut by_key: BTreeMap<(String, String, String, String), Totals> = BTreeMap::new();
    for r in &rows.preheat {
        totals.add(&r.outcome, r.count);
        for class in [r.device_class.as_str(), "all"] {
            hourly
                .entry((r.hour.clone(), class.to_string()))
                .or_default()
                .add(&r.outcome, r.count);
        }
        if r.outcome == "miss" {
            *reasons.entry(r.reason.clone()).or_default() += r.count;
        }
        by_key
            .entry((
                r.game.clone(),
                r.engine.clone(),
                r.version.clone(),
                r.device_class.clone(),
            ))
            .or_default()
            .add(&r.outcome, r.count);
    }
    // Latency sketches are keyed by engine (not version): shared by the engine's versions.
    let latency = merge_quantiles(
        &rows.preheat_latency,
        |s| (s.game.clone(), s.subject.clone(), s.device_class.clone()),
        &[0.5, 0.9],
    );
    let mut misses_by_reason: Vec<ReasonCount> = reasons
        .into_iter()
        .map(|(reason, count)| ReasonCount { reason, count })
        .collect();
    misses_by_reason.sort_by(|a, b| b.count.cmp(&a.count).then(a.reason.cmp(&b.reason)));
    Prewarm {
        totals,
        hourly: hourly
            .into_iter()
            .map(|((hour, device_class), t)| PrewarmHour {
                hour,
                device_class,
                events: t.events,
                hits: t.hits,
                hit_rate: t.hit_rate,
            })
            .collect(),
        misses_by_reason,
        rows: by_key
            .into_iter()
            .map(|((game, engine, version, device_class), t)| {
                let q = latency.get(&(game.clone(), engine.clone(), device_class.clone()));
                PrewarmRow {
                    p50_ms: q.map(|(_, v)| v[0]),
                    p90_ms: q.map(|(_, v)| v[1]),
                    game,
                    engine,
                    version,
                    device_class,
                    events: t.events,
                    hits: t.hits,
                    hit_rate: t.hit_rate,
                }
            })
            .collect(),
    }
}

fn decode(rows: &Rows) -> Decode {
    let mut counts: BTreeMap<(String, String), (i64, i64)> = BTreeMap::new();
    let mut hourly_counts: BTreeMap<(String, String, String), i64> = BTreeMap::new();
    for r in &rows.decode {
        let c = counts
            .entry((r.device_class.clone(), r.variant.clone()))
            .or_default();
        c.0 += r.count;
        c.1 += r.fallbacks;
        *hourly_counts
            .entry((r.hour.clone(), r.device_class.clone(), r.variant.clone()))
            .or_default() += r.count;
    }
    let overall = merge_quantiles(
        &rows.decode_latency,
        |s| (s.device_class.clone(), s.facet.clone()),
        &[0.5, 0.9, 0.99],
    );
    let per_hour = merge_quantiles(
        &rows.decode_latency,
        |s| (s.hour.clone(), s.device_class.clone(), s.facet.clone()),
        &[0.9],
    );
    let choices = rows
        .choices
        .iter()
        .flat_map(|m| {
            let list: Vec<serde_json::Value> = serde_json::from_str(&m.choices).unwrap_or_default();
            list.into_iter().map(move |c| {
                let field = |k: &str| c[k].as_str().unwrap_or("").to_string();
                Choice {
                    game: m.game.clone(),
                    asset: field("asset"),
                    device_class: m.device_class.clone(),
                    variant: field("variant"),
                    reason: field("reason"),
                    detail: field("detail"),
                }
            })
        })
        .collect();
    Decode {
        rows: counts
            .into_iter()
            .map(|((device_class, variant), (count, fallbacks))| {
                let q = overall.get(&(device_class.clone(), variant.clone()));
                DecodeRow {
                    p50_ms: q.map(|(_, v)| v[0]),
                    p90_ms: q.map(|(_, v)| v[1]),
                    p99_ms: q.map(|(_, v)| v[2]),
                    fallback_rate: rate(fallbacks, count),
                    device_class,
                    variant,
                    count,
                    fallbacks,
                }
            })
            .collect(),
        hourly: hourly_counts
            .into_iter()
            .map(|((hour, device_class, variant), count)| {
                let p90 = per_hour
                    .get(&(hour.clone(), device_class.clone(), variant.clone()))
                    .map(|(_, v)| v[0]);
                DecodeHour {
                    hour,
                    device_class,
                    variant,
                    count,
                    p90_ms: p90,
                }
            })
            .collect(),
        choices,
    }
}

fn library(rows: &Rows) -> Library {
    let entries: Vec<LibraryEntry> = rows
        .library
        .iter()
        .map(|e| LibraryEntry {
            sha256: e.sha256.clone(),
            engine: e.engine.clone(),
            version: e.version.clone(),
            size: e.size,
            games: e.games,
            builds: e.builds,
            live_builds: e.live_games,
            hits: e.hits,
            shared_hits: e.shared_hits,
            misses: e.misses,
            br_size: e.br_size,
            bytes_saved: bytes_saved(e),
            roi: roi(e),
            low_roi: roi(e) < rows.min_roi,
        })
        .collect();
    Library {
        totals: LibraryTotals {
            entries: entries.len() as i64,
            bytes_stored: entries.iter().map(|e| e.size).sum(),
            bytes_saved: entries.iter().map(|e| e.bytes_saved).sum(),
        },
        entries,
    }
}

fn pipeline(rows: &Rows) -> Pipeline {
    let mut hourly: BTreeMap<String, BuildHour> = BTreeMap::new();
    for b in &rows.finished_builds {
        let hour = crate::rollups::hour_of(&b.updated_at);
        let h = hourly.entry(hour.clone()).or_insert_with(|| BuildHour {
            hour,
            ..BuildHour::default()
        });
        if b.status == "published" {
            h.published += 1;
        } else {
            h.failed += 1;
        }
    }
    let mut stages: BTreeMap<String, (i64, i64, Vec<f64>)> = BTreeMap::new();
    for s in &rows.finished_stages {
        let entry = stages.entry(s.name.clone()).or_default();
        match s.status.as_str() {
            "succeeded" => {
                entry.0 += 1;
                let seconds = |t: &Option<String>| {
                    t.as_deref()
                        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                };
                if let (Some(a), Some(b)) = (seconds(&s.started_at), seconds(&s.finished_at)) {
                    entry
                        .2
                        .push((b - a).num_milliseconds().max(0) as f64 / 1000.0);
                }
            }
            "failed" => entry.1 += 1,
            _ => {}
        }
    }
    let percentile = |values: &mut Vec<f64>, q: f64| {
        values.sort_by(f64::total_cmp);
        (!values.is_empty()).then(|| values[(q * (values.len() - 1) as f64).round() as usize])
    };
    let counts: HashMap<&str, i64> = rows
        .build_counts
        .iter()
        .map(|(s, n)| (s.as_str(), *n))
        .collect();
    let mut images = ImageBytes::default();
    for (before, after) in &rows.image_bytes {
        images.builds += 1;
        images.bytes_before += before;
        images.bytes_after += after;
    }
    images.bytes_saved = images.bytes_before.saturating_sub(images.bytes_after);
    Pipeline {
        images,
        queue: Queue {
            depth: rows.queue_depth,
            oldest_age_seconds: rows.oldest_age_seconds,
        },
        builds_by_status: ["queued", "processing", "published", "failed"]
            .into_iter()
            .map(|s| (s.to_string(), counts.get(s).copied().unwrap_or(0)))
            .collect(),
        hourly: hourly.into_values().collect(),
        stages: stages
            .into_iter()
            .map(|(stage, (succeeded, failed, mut times))| StageStats {
                p50_seconds: percentile(&mut times, 0.5),
                p90_seconds: percentile(&mut times, 0.9),
                stage,
                succeeded,
                failed,
            })
            .collect(),
        recent_failures: rows
            .finished_builds
            .iter()
            .filter(|b| b.status == "failed")
            .take(20)
            .map(|b| Failure {
                build_id: b.id.clone(),
                game: b.game.clone(),
                version: b.version.clone(),
                stage: b.failed_stage.clone(),
                error: b.error.clone(),
                at: b.updated_at.clone(),
            })
            .collect(),
    }
}

#[cfg(test)]
mod library_summary_tests {
    use super::*;

    fn entry(sha: &str, version: &str, size: i64, games: i64, shared_hits: i64) -> LibraryRow {
        LibraryRow {
            sha256: sha.into(),
            engine: "three".into(),
            version: version.into(),
            size,
            object_key: format!("library/{sha}.js"),
            first_build_id: "b".into(),
            created_at: "2026-01-01T00:00:00Z".into(),
            games,
            builds: games,
            live_games: games,
            hits: shared_hits,
            misses: 0,
            fallbacks: 0,
            br_size: size / 4,
            shared_hits,
        }
    }

    /// Two builds of one version add up (bytes and savings), games are the most any entry
    /// has; an entry below the ROI floor is a retirement candidate.
    #[test]
    fn versions_add_up_and_low_roi_entries_are_counted() {
        let entries = [
            entry("a", "0.160.0", 400, 2, 40),
            entry("b", "0.160.0", 800, 3, 0),
            entry("c", "0.150.0", 100, 1, 0),
        ];
        let s = library_summary(&entries, 10.0);
        assert_eq!(
            (s.entries, s.bytes_stored, s.retirement_candidates),
            (3, 1300, 2)
        );
        let v160 = s.versions.iter().find(|v| v.version == "0.160.0").unwrap();
        assert_eq!((v160.bytes, v160.games), (1200, 3));
        // 40 shared hits × 100 brotli bytes over 1 200 bytes stored.
        assert!((v160.roi - 4000.0 / 1200.0).abs() < 1e-12);
        let v150 = s.versions.iter().find(|v| v.version == "0.150.0").unwrap();
        assert_eq!(v150.roi, 0.0);
    }
}

#[cfg(test)]
mod image_bytes_tests {
    use super::*;

    /// A build report's images stage totals are read; a report without that stage (or not a
    /// report) counts for nothing.
    #[test]
    fn the_images_stage_totals_come_from_the_report() {
        let report = r#"{"stages":{"images":{"bytes_before":1200,"bytes_after":700,"files":[]},"encode":{}},"files":[]}"#;
        assert_eq!(image_bytes(report), Some((1200, 700)));
        assert_eq!(image_bytes(r#"{"stages":{"encode":{}}}"#), None);
        assert_eq!(image_bytes("not json"), None);
        let rows = Rows {
            preheat: Vec::new(),
            preheat_latency: Vec::new(),
            decode: Vec::new(),
            decode_latency: Vec::new(),
            choices: Vec::new(),
            library: Vec::new(),
            min_roi: 1.0,
            build_counts: Vec::new(),
            queue_depth: 0,
            oldest_age_seconds: 0,
            finished_builds: Vec::new(),
            finished_stages: Vec::new(),
            image_bytes: vec![(1200, 700), (300, 300)],
        };
        let images = pipeline(&rows).images;
        assert_eq!(
            (
                images.builds,
                images.bytes_before,
                images.bytes_after,
                images.bytes_saved
            ),
            (2, 1500, 1000, 500)
        );
    }
}
