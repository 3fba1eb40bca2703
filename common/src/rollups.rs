//! Hourly telemetry rollups, as plain data: what one batch of events adds to the hourly
//! counts and to the latency sketches.
//!
//! Latencies go into logarithmic buckets (the DDSketch scheme: bucket `i` holds values in
//! `(γ^(i-1), γ^i]`, γ = (1+α)/(1−α)), so any quantile read back is within α = 2 % of the
//! true value, and sketches merge by adding counts — per hour in the database, across hours
//! and games in a query.

use std::collections::HashMap;

use crate::telemetry::TelemetryEvent;

/// One latency bucket's count.
#[derive(Debug, Clone, serde::Serialize)]
#[cfg_attr(feature = "services", derive(sqlx::FromRow))]
pub struct SketchRow {
    pub hour: String,
    pub game: String,
    pub subject: String,
    pub facet: String,
    pub device_class: String,
    pub bucket: i64,
    pub count: i64,
}

/// One client's decode-latency bucket, as the variant choices read it.
#[derive(Debug, Clone, serde::Serialize)]
#[cfg_attr(feature = "services", derive(sqlx::FromRow))]
pub struct ClientSketchRow {
    pub asset: String,
    pub variant: String,
    pub device_class: String,
    pub client: String,
    pub bucket: i64,
    pub count: i64,
}

/// Relative accuracy of every quantile read from the buckets.
pub const ALPHA: f64 = 0.02;
const GAMMA: f64 = (1.0 + ALPHA) / (1.0 - ALPHA);
/// Latencies below this (ms) share the lowest bucket.
const MIN_MS: f64 = 0.001;

/// The bucket a latency (ms) falls in.
pub fn bucket_of(ms: f64) -> i32 {
    (ms.max(MIN_MS).ln() / GAMMA.ln()).ceil() as i32
}

/// The value a bucket stands for: within `ALPHA` of every value in it.
pub fn bucket_value(bucket: i32) -> f64 {
    2.0 * GAMMA.powi(bucket) / (GAMMA + 1.0)
}

/// The `q` quantile (0–1) of a sketch given as (bucket, count) pairs in any order; `None` when
/// it is empty.
pub fn quantile(buckets: &[(i32, i64)], q: f64) -> Option<f64> {
    let mut sorted: Vec<(i32, i64)> = buckets.iter().copied().filter(|(_, n)| *n > 0).collect();
    sorted.sort_unstable();
    let total: i64 = sorted.iter().map(|(_, n)| n).sum();
    if total == 0 {
        return None;
    }
    // The rank of the q quantile among `total` values, as numpy's "lower" method.
    let rank = (q.clamp(0.0, 1.0) * (total - 1) as f64).floor() as i64;
    let mut seen = 0;
    for (bucket, n) in &sorted {
        seen += n;
        if seen > rank {
            return Some(bucket_value(*bucket));
        }
    }
    sorted.last().map(|(b, _)| bucket_value(*b))
}

/// The hour an RFC 3339 UTC timestamp falls in, as the rollups key it: `2026-11-30T21:00:00Z`.
pub fn hour_of(timestamp: &str) -> String {
    format!("{}:00:00Z", &timestamp[..13.min(timestamp.len())])
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PreheatKey {
    pub hour: String,
    pub game: String,
    pub engine: String,
    pub version: String,
    pub device_class: String,
    pub outcome: String,
    /// Empty for hits.
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DecodeKey {
    pub hour: String,
    pub game: String,
    pub asset: String,
    pub variant: String,
    pub decoder: String,
    pub device_class: String,
}

/// Which sketch a latency belongs to: pre-warm (`subject` = engine, `facet` = outcome) or
/// decode (`subject` = asset, `facet` = variant).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LatencyKey {
    pub hour: String,
    pub kind: &'static str,
    pub game: String,
    pub subject: String,
    pub facet: String,
    pub device_class: String,
    pub bucket: i32,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sums {
    pub count: i64,
    /// Pre-warm hits another game's visit brought (`shared`; always 0 for decode).
    pub shared_hits: i64,
    /// Decodes that fell back to another variant (always 0 for pre-warm).
    pub fallbacks: i64,
    pub bytes: i64,
    pub ms_sum: f64,
}

/// One client's decode latencies: the variant choices count each client once.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientLatencyKey {
    pub hour: String,
    pub game: String,
    pub asset: String,
    pub variant: String,
    pub device_class: String,
    pub client: String,
    pub bucket: i32,
}

/// What a batch adds to the rollups; written with one upsert per key.
#[derive(Debug, Default)]
pub struct Rollup {
    pub preheat: HashMap<PreheatKey, Sums>,
    pub decode: HashMap<DecodeKey, Sums>,
    pub latency: HashMap<LatencyKey, i64>,
    pub client_latency: HashMap<ClientLatencyKey, i64>,
}

impl Rollup {
    pub fn is_empty(&self) -> bool {
        self.preheat.is_empty()
            && self.decode.is_empty()
            && self.latency.is_empty()
            && self.client_latency.is_empty()
    }

    /// Adds one event received in `hour`. Manifest events, and events without a valid
    /// manifest token (untrusted), are kept raw only.
    pub fn add(&mut self, hour: &str, e: &TelemetryEvent) {
        if !e.trusted {
            return;
        }
        let text = |v: &Option<String>| v.clone().unwrap_or_default();
        let (kind, subject, facet) = match e.kind.as_str() {
            "preheat" => {
                let sums = self
                    .preheat
                    .entry(PreheatKey {
                        hour: hour.to_string(),
                        game: e.game.clone(),
                        engine: text(&e.engine),
                        version: text(&e.version),
                        device_class: e.device_class.clone(),
                        outcome: text(&e.outcome),
                        reason: text(&e.reason),
                    })
                    .or_default();
                sums.count += 1;
                sums.shared_hits +=
                    i64::from(e.outcome.as_deref() == Some("hit") && e.shared == Some(true));
                sums.bytes += e.bytes.unwrap_or(0);
                sums.ms_sum += e.ms.unwrap_or(0.0);
                ("preheat", text(&e.engine), text(&e.outcome))
            }
            "decode" => {
                let sums = self
                    .decode
                    .entry(DecodeKey {
                        hour: hour.to_string(),
                        game: e.game.clone(),
                        asset: text(&e.asset),
                        variant: text(&e.variant),
                        decoder: text(&e.decoder),
                        device_class: e.device_class.clone(),
                    })
                    .or_default();
                sums.count += 1;
                sums.fallbacks += i64::from(e.fallback == Some(true));
                sums.bytes += e.bytes.unwrap_or(0);
                sums.ms_sum += e.ms.unwrap_or(0.0);
                ("decode", text(&e.asset), text(&e.variant))
            }
            _ => return,
        };
        if let (Some(ms), "decode", Some(client)) = (e.ms, kind, &e.client) {
            *self
                .client_latency
                .entry(ClientLatencyKey {
                    hour: hour.to_string(),
                    game: e.game.clone(),
                    asset: text(&e.asset),
                    variant: text(&e.variant),
                    device_class: e.device_class.clone(),
                    client: client.clone(),
                    bucket: bucket_of(ms),
                })
                .or_default() += 1;
        }
        if let Some(ms) = e.ms {
            *self
                .latency
                .entry(LatencyKey {
                    hour: hour.to_string(),
                    kind,
                    game: e.game.clone(),
                    subject,
                    facet,
                    device_class: e.device_class.clone(),
                    bucket: bucket_of(ms),
                })
                .or_default() += 1;
        }
    }
}

/// Which sketch a stored bucket belongs to, across hours and games.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SketchKey {
    pub subject: String,
    pub facet: String,
    pub device_class: String,
}

/// Merges stored buckets by `key` and reads each sketch's count and quantiles `qs`.
pub fn merge_quantiles<K: std::hash::Hash + Eq>(
    rows: &[SketchRow],
    key: impl Fn(&SketchRow) -> K,
    qs: &[f64],
) -> HashMap<K, (i64, Vec<f64>)> {
    let mut sketches: HashMap<K, HashMap<i32, i64>> = HashMap::new();
    for row in rows {
        *sketches
            .entry(key(row))
            .or_default()
            .entry(row.bucket as i32)
            .or_default() += row.count;
    }
    sketches
        .into_iter()
        .filter_map(|(k, buckets)| {
            let buckets: Vec<(i32, i64)> = buckets.into_iter().collect();
            let count = buckets.iter().map(|(_, n)| n).sum();
            let values: Option<Vec<f64>> = qs.iter().map(|q| quantile(&buckets, *q)).collect();
            Some((k, (count, values?)))
        })
        .collect()
}

/// Count and `q` quantile per (subject, facet, device class).
pub fn quantiles_by_key(rows: &[SketchRow], q: f64) -> HashMap<SketchKey, (u64, f64)> {
    merge_quantiles(
        rows,
        |r| SketchKey {
            subject: r.subject.clone(),
            facet: r.facet.clone(),
            device_class: r.device_class.clone(),
        },
        &[q],
    )
    .into_iter()
    .map(|(k, (n, v))| (k, (n as u64, v[0])))
    .collect()
}

/// What the variant choices read per (asset, variant, device class): decodes, distinct
/// clients, and the robust decode time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RobustDecode {
    pub samples: u64,
    pub clients: u64,
    /// The median over clients of each client's `q` quantile: every client has one vote
    /// however many beacons it sends, and fewer than half the clients can't move it past
    /// the values honest clients report.
    pub ms: f64,
}

/// Per-client sketches (`decode_client_buckets`) → [`RobustDecode`] per (asset, variant,
/// device class), each client's `q` quantile (p90) then the median across clients.
pub fn robust_decodes(rows: &[ClientSketchRow], q: f64) -> HashMap<SketchKey, RobustDecode> {
    let mut per_client: HashMap<(SketchKey, &str), Vec<(i32, i64)>> = HashMap::new();
    for row in rows {
        per_client
            .entry((
                SketchKey {
                    subject: row.asset.clone(),
                    facet: row.variant.clone(),
                    device_class: row.device_class.clone(),
                },
                row.client.as_str(),
            ))
            .or_default()
            .push((row.bucket as i32, row.count));
    }
    let mut by_key: HashMap<SketchKey, (u64, Vec<f64>)> = HashMap::new();
    for ((key, _), buckets) in per_client {
        let Some(value) = quantile(&buckets, q) else {
            continue;
        };
        let n: i64 = buckets.iter().map(|(_, n)| n).sum();
        let entry = by_key.entry(key).or_default();
        entry.0 += n.max(0) as u64;
        entry.1.push(value);
    }
    by_key
        .into_iter()
        .map(|(key, (samples, mut values))| {
            values.sort_by(f64::total_cmp);
            // The lower median: with an even count, the honest half's upper end can't be
            // pushed by the other half.
            let ms = values[(values.len() - 1) / 2];
            (
                key,
                RobustDecode {
                    samples,
                    clients: values.len() as u64,
                    ms,
                },
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exact quantile by the same rank rule, for comparison.
    fn exact(values: &mut [f64], q: f64) -> f64 {
        values.sort_by(f64::total_cmp);
        values[(q * (values.len() - 1) as f64).floor() as usize]
    }

    #[test]
    fn quantiles_are_within_alpha_and_sketches_merge() {
        // A skewed spread like decode times: 0.2 ms … 3 s.
        let mut state = 12345u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut values: Vec<f64> = (0..20_000).map(|_| 0.2 * (9.6 * next()).exp()).collect();
        let (mut a, mut b) = (HashMap::<i32, i64>::new(), HashMap::<i32, i64>::new());
        for (n, v) in values.iter().enumerate() {
            *(if n % 3 == 0 { &mut a } else { &mut b })
                .entry(bucket_of(*v))
                .or_default() += 1;
        }
        // Merge = add counts, as the database's upsert and the queries' SUM do.
        let mut merged = a.clone();
        for (k, n) in &b {
            *merged.entry(*k).or_default() += n;
        }
        let merged: Vec<(i32, i64)> = merged.into_iter().collect();
        for q in [0.0, 0.5, 0.9, 0.99, 1.0] {
            let want = exact(&mut values, q);
            let got = quantile(&merged, q).unwrap();
            assert!(
                (got - want).abs() <= ALPHA * want + 1e-9,
                "q{q}: {got} vs {want}"
            );
        }
        assert_eq!(quantile(&[], 0.5), None);
        assert_eq!(quantile(&[(3, 0)], 0.5), None);
    }

    #[test]
    fn events_roll_up_by_hour_and_key() {
        let event = |kind: &str, class: &str, ms: Option<f64>| TelemetryEvent {
            kind: kind.into(),
            game: "g".into(),
            engine: Some("three".into()),
            version: Some("0.150.1".into()),
            outcome: Some("hit".into()),
            asset: Some("m.glb".into()),
            variant: Some("meshopt".into()),
            decoder: Some("wasm-simd".into()),
            fallback: Some(ms.is_none()),
            bytes: Some(100),
            ms,
            device_class: class.into(),
            trusted: true,
            client: Some("c1".into()),
            ..TelemetryEvent::default()
        };
        let mut r = Rollup::default();
        let hour = hour_of("2026-11-30T21:59:59Z");
        assert_eq!(hour, "2026-11-30T21:00:00Z");
        r.add(&hour, &event("preheat", "desktop", Some(4.0)));
        r.add(
            &hour,
            &TelemetryEvent {
                shared: Some(true),
                ..event("preheat", "desktop", Some(4.0))
            },
        );
        r.add(&hour, &event("decode", "android-low", Some(100.0)));
        r.add(&hour, &event("decode", "android-low", None));
        r.add(&hour, &event("manifest", "desktop", Some(1.0)));
        assert_eq!(r.preheat.len(), 1);
        let p = r.preheat.values().next().unwrap();
        assert_eq!((p.count, p.bytes, p.ms_sum), (2, 200, 8.0));
        assert_eq!(p.shared_hits, 1, "one of the two hits was shared");
        let d = r.decode.values().next().unwrap();
        assert_eq!((d.count, d.fallbacks), (2, 1));
        // Two latency keys: the preheat bucket (2 events) and one decode (the fallback had none).
        let mut counts: Vec<i64> = r.latency.values().copied().collect();
        counts.sort_unstable();
        assert_eq!(counts, vec![1, 2]);
        // The decode's latency, per client too.
        assert_eq!(r.client_latency.len(), 1);
        // Without a valid manifest token an event feeds no rollup.
        let mut untrusted = Rollup::default();
        untrusted.add(
            &hour,
            &TelemetryEvent {
                trusted: false,
                ..event("decode", "android-low", Some(100.0))
            },
        );
        assert!(untrusted.is_empty());
    }

    fn client_rows(rows: &[(&str, &[f64])]) -> Vec<ClientSketchRow> {
        let mut out = Vec::new();
        for (client, values) in rows {
            for v in *values {
                out.push(ClientSketchRow {
                    asset: "m.glb".into(),
                    variant: "meshopt".into(),
                    device_class: "android-low".into(),
                    client: client.to_string(),
                    bucket: i64::from(bucket_of(*v)),
                    count: 1,
                });
            }
        }
        out
    }

    #[test]
    fn each_client_gets_one_vote_and_extremes_do_not_move_the_median() {
        let honest: Vec<(String, Vec<f64>)> = (0..10)
            .map(|i| (format!("c{i}"), vec![100.0 + i as f64; 5]))
            .collect();
        let mut rows: Vec<(&str, &[f64])> = honest
            .iter()
            .map(|(c, v)| (c.as_str(), v.as_slice()))
            .collect();
        let base = robust_decodes(&client_rows(&rows), 0.9);
        let key = SketchKey {
            subject: "m.glb".into(),
            facet: "meshopt".into(),
            device_class: "android-low".into(),
        };
        let before = base[&key];
        assert_eq!((before.samples, before.clients), (50, 10));
        // One chatty client with 1 000 near-zero decodes, and four clients reporting 1 ms
        // or 600 s: the median over clients stays within the honest range.
        let chatty = vec![0.01; 1000];
        let low = vec![1.0; 20];
        let high = vec![600_000.0; 20];
        rows.push(("chatty", &chatty));
        rows.push(("low1", &low));
        rows.push(("low2", &low));
        rows.push(("high1", &high));
        rows.push(("high2", &high));
        let after = robust_decodes(&client_rows(&rows), 0.9)[&key];
        assert_eq!(after.clients, 15);
        assert!(
            (100.0 * 0.98..=109.0 * 1.02).contains(&after.ms),
            "{after:?} vs {before:?}"
        );
    }
}
