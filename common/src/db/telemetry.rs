//! Loader telemetry: raw events, their hourly rollups and latency sketches, pruning, and the
//! reads the dashboards and the variant choices make.

use sqlx::{AssertSqlSafe, Row};

use super::{Db, DbError};
use crate::rollups::Rollup;

/// A validated loader event (`common/src/telemetry.rs`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TelemetryEvent {
    /// `preheat`, `decode` or `manifest`.
    pub kind: String,
    pub game: String,
    pub engine: Option<String>,
    pub version: Option<String>,
    pub outcome: Option<String>,
    pub reason: Option<String>,
    /// Pre-warm: ms until the engine was ready; decode: ms the decode took.
    pub ms: Option<f64>,
    pub prewarmed: Option<bool>,
    /// Decode: the model's path in the build, its variant and the decoder used.
    pub asset: Option<String>,
    pub variant: Option<String>,
    pub decoder: Option<String>,
    /// Pre-warm: the engine's size; decode: the variant's size.
    pub bytes: Option<i64>,
    /// Decode: another variant than the chosen one was used.
    pub fallback: Option<bool>,
    /// By the rule table (`common/rules/device-classes.toml`); `unknown` without a device.
    pub device_class: String,
    pub os: Option<String>,
    pub runtime: Option<String>,
    pub device_model: Option<String>,
    /// The device descriptor as sent (JSON).
    pub device: Option<String>,
}

/// A stored event, as the tests read it back.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct StoredEvent {
    pub id: i64,
    pub received_at: String,
    pub kind: String,
    pub game: String,
    pub engine: Option<String>,
    pub version: Option<String>,
    pub outcome: Option<String>,
    pub reason: Option<String>,
    pub ms: Option<f64>,
    pub asset: Option<String>,
    pub variant: Option<String>,
    pub decoder: Option<String>,
    pub device_class: Option<String>,
    pub device_model: Option<String>,
}

/// Pre-warm counts of one hour and key.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct PreheatRollupRow {
    pub hour: String,
    pub game: String,
    pub engine: String,
    pub version: String,
    pub device_class: String,
    pub outcome: String,
    pub reason: String,
    pub count: i64,
    pub bytes: i64,
    pub ms_sum: f64,
}

/// Decode counts of one hour and key.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct DecodeRollupRow {
    pub hour: String,
    pub game: String,
    pub asset: String,
    pub variant: String,
    pub decoder: String,
    pub device_class: String,
    pub count: i64,
    pub fallbacks: i64,
    pub bytes: i64,
    pub ms_sum: f64,
}

/// One latency bucket's count.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct SketchRow {
    pub hour: String,
    pub game: String,
    pub subject: String,
    pub facet: String,
    pub device_class: String,
    pub bucket: i64,
    pub count: i64,
}

/// Which rollups a dashboard query reads: a time range (hours, RFC 3339, `from` inclusive,
/// `to` exclusive), one game or all, and, for a team's token, only the team's games.
#[derive(Debug, Clone, Default)]
pub struct RollupFilter {
    pub from: String,
    pub to: String,
    pub game: Option<String>,
    pub team_id: Option<String>,
}

const EVENT_COLUMNS: &[&str] = &[
    "received_at",
    "kind",
    "game",
    "engine",
    "version",
    "outcome",
    "reason",
    "ms",
    "prewarmed",
    "asset",
    "variant",
    "decoder",
    "bytes",
    "fallback",
    "device_class",
    "os",
    "runtime",
    "device_model",
    "device",
];

/// `($1, $2, …), ($n+1, …)` for `rows` rows of `columns` values.
fn placeholders(rows: usize, columns: usize) -> String {
    (0..rows)
        .map(|r| {
            let values: Vec<String> = (1..=columns)
                .map(|c| format!("${}", r * columns + c))
                .collect();
            format!("({})", values.join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Rows per multi-row statement: under SQLite's 32 766 and PostgreSQL's 65 535 parameters.
const ROWS_PER_STATEMENT: usize = 1000;

/// The `WHERE` of a rollup query: `$1` from, `$2` to, `$3` game or '', `$4` team or ''.
const ROLLUP_WHERE: &str = "hour >= $1 AND hour < $2 AND ($3 = '' OR game = $3) \
    AND ($4 = '' OR game IN (SELECT name FROM games WHERE team_id = $4))";

impl Db {
    /// Writes received events and what they add to the rollups, in one transaction: a
    /// failure leaves neither, so the caller can retry the whole batch.
    pub async fn write_telemetry(
        &self,
        batches: &[(String, Vec<TelemetryEvent>)],
        rollup: &Rollup,
    ) -> Result<(), DbError> {
        let mut tx = self.pool.begin().await?;
        let rows: Vec<(&String, &TelemetryEvent)> = batches
            .iter()
            .flat_map(|(at, events)| events.iter().map(move |e| (at, e)))
            .collect();
        for chunk in rows.chunks(ROWS_PER_STATEMENT / 2) {
            let sql = format!(
                "INSERT INTO telemetry_events ({}) VALUES {}",
                EVENT_COLUMNS.join(", "),
                placeholders(chunk.len(), EVENT_COLUMNS.len())
            );
            let mut query = sqlx::query(AssertSqlSafe(sql));
            for (at, e) in chunk {
                query = query
                    .bind(*at)
                    .bind(&e.kind)
                    .bind(&e.game)
                    .bind(&e.engine)
                    .bind(&e.version)
                    .bind(&e.outcome)
                    .bind(&e.reason)
                    .bind(e.ms)
                    .bind(e.prewarmed.map(i64::from))
                    .bind(&e.asset)
                    .bind(&e.variant)
                    .bind(&e.decoder)
                    .bind(e.bytes)
                    .bind(e.fallback.map(i64::from))
                    .bind(&e.device_class)
                    .bind(&e.os)
                    .bind(&e.runtime)
                    .bind(&e.device_model)
                    .bind(&e.device);
            }
            query.execute(&mut *tx).await?;
        }
        let preheat: Vec<_> = rollup.preheat.iter().collect();
        for chunk in preheat.chunks(ROWS_PER_STATEMENT / 4) {
            let sql = format!(
                "INSERT INTO preheat_hourly (hour, game, engine, version, device_class, outcome, \
                 reason, count, bytes, ms_sum) VALUES {} \
                 ON CONFLICT (hour, game, engine, version, device_class, outcome, reason) DO UPDATE \
                 SET count = preheat_hourly.count + excluded.count, \
                 bytes = preheat_hourly.bytes + excluded.bytes, \
                 ms_sum = preheat_hourly.ms_sum + excluded.ms_sum",
                placeholders(chunk.len(), 10)
            );
            let mut query = sqlx::query(AssertSqlSafe(sql));
            for (k, s) in chunk {
                query = query
                    .bind(&k.hour)
                    .bind(&k.game)
                    .bind(&k.engine)
                    .bind(&k.version)
                    .bind(&k.device_class)
                    .bind(&k.outcome)
                    .bind(&k.reason)
                    .bind(s.count)
                    .bind(s.bytes)
                    .bind(s.ms_sum);
            }
            query.execute(&mut *tx).await?;
        }
        let decode: Vec<_> = rollup.decode.iter().collect();
        for chunk in decode.chunks(ROWS_PER_STATEMENT / 4) {
            let sql = format!(
                "INSERT INTO decode_hourly (hour, game, asset, variant, decoder, device_class, \
                 count, fallbacks, bytes, ms_sum) VALUES {} \
                 ON CONFLICT (hour, game, asset, variant, decoder, device_class) DO UPDATE \
                 SET count = decode_hourly.count + excluded.count, \
                 fallbacks = decode_hourly.fallbacks + excluded.fallbacks, \
                 bytes = decode_hourly.bytes + excluded.bytes, \
                 ms_sum = decode_hourly.ms_sum + excluded.ms_sum",
                placeholders(chunk.len(), 10)
            );
            let mut query = sqlx::query(AssertSqlSafe(sql));
            for (k, s) in chunk {
                query = query
                    .bind(&k.hour)
                    .bind(&k.game)
                    .bind(&k.asset)
                    .bind(&k.variant)
                    .bind(&k.decoder)
                    .bind(&k.device_class)
                    .bind(s.count)
                    .bind(s.fallbacks)
                    .bind(s.bytes)
                    .bind(s.ms_sum);
            }
            query.execute(&mut *tx).await?;
        }
        let latency: Vec<_> = rollup.latency.iter().collect();
        for chunk in latency.chunks(ROWS_PER_STATEMENT / 4) {
            let sql = format!(
                "INSERT INTO latency_buckets (hour, kind, game, subject, facet, device_class, \
                 bucket, count) VALUES {} \
                 ON CONFLICT (hour, kind, game, subject, facet, device_class, bucket) DO UPDATE \
                 SET count = latency_buckets.count + excluded.count",
                placeholders(chunk.len(), 8)
            );
            let mut query = sqlx::query(AssertSqlSafe(sql));
            for (k, n) in chunk {
                query = query
                    .bind(&k.hour)
                    .bind(k.kind)
                    .bind(&k.game)
                    .bind(&k.subject)
                    .bind(&k.facet)
                    .bind(&k.device_class)
                    .bind(i64::from(k.bucket))
                    .bind(**n);
            }
            query.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Deletes raw events received before `events_before` and rollup hours before
    /// `rollups_before` (both RFC 3339), in slices so no statement holds the database long.
    /// Returns (events, rollup rows) deleted.
    pub async fn prune_telemetry(
        &self,
        events_before: &str,
        rollups_before: &str,
    ) -> Result<(u64, u64), DbError> {
        let mut events = 0;
        loop {
            let n = sqlx::query(
                "DELETE FROM telemetry_events WHERE id IN \
                 (SELECT id FROM telemetry_events WHERE received_at < $1 LIMIT 10000)",
            )
            .bind(events_before)
            .execute(&self.pool)
            .await?
            .rows_affected();
            events += n;
            if n < 10_000 {
                break;
            }
        }
        let mut rollups = 0;
        for table in ["preheat_hourly", "decode_hourly", "latency_buckets"] {
            rollups += sqlx::query(AssertSqlSafe(format!(
                "DELETE FROM {table} WHERE hour < $1"
            )))
            .bind(rollups_before)
            .execute(&self.pool)
            .await?
            .rows_affected();
        }
        Ok((events, rollups))
    }

    /// A game's events, oldest first.
    pub async fn telemetry_for_game(&self, game: &str) -> Result<Vec<StoredEvent>, DbError> {
        Ok(sqlx::query_as::<_, StoredEvent>(
            "SELECT id, received_at, kind, game, engine, version, outcome, reason, ms, asset, \
             variant, decoder, device_class, device_model \
             FROM telemetry_events WHERE game = $1 ORDER BY id",
        )
        .bind(game)
        .fetch_all(&self.pool)
        .await?)
    }

    pub async fn count_telemetry_events(&self) -> Result<i64, DbError> {
        Ok(sqlx::query("SELECT COUNT(*) FROM telemetry_events")
            .fetch_one(&self.pool)
            .await?
            .get::<i64, _>(0))
    }

    pub async fn preheat_rollups(
        &self,
        filter: &RollupFilter,
    ) -> Result<Vec<PreheatRollupRow>, DbError> {
        let sql = format!(
            "SELECT hour, game, engine, version, device_class, outcome, reason, count, bytes, \
             ms_sum FROM preheat_hourly WHERE {ROLLUP_WHERE} ORDER BY hour"
        );
        Ok(bind_filter(
            sqlx::query_as::<_, PreheatRollupRow>(AssertSqlSafe(sql)),
            filter,
        )
        .fetch_all(&self.pool)
        .await?)
    }

    pub async fn decode_rollups(
        &self,
        filter: &RollupFilter,
    ) -> Result<Vec<DecodeRollupRow>, DbError> {
        let sql = format!(
            "SELECT hour, game, asset, variant, decoder, device_class, count, fallbacks, bytes, \
             ms_sum FROM decode_hourly WHERE {ROLLUP_WHERE} ORDER BY hour"
        );
        Ok(bind_filter(
            sqlx::query_as::<_, DecodeRollupRow>(AssertSqlSafe(sql)),
            filter,
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// Latency buckets of `kind` (`preheat` or `decode`).
    pub async fn latency_sketches(
        &self,
        kind: &str,
        filter: &RollupFilter,
    ) -> Result<Vec<SketchRow>, DbError> {
        let sql = format!(
            "SELECT hour, game, subject, facet, device_class, bucket, count FROM latency_buckets \
             WHERE kind = $5 AND {ROLLUP_WHERE}"
        );
        Ok(
            bind_filter(sqlx::query_as::<_, SketchRow>(AssertSqlSafe(sql)), filter)
                .bind(kind)
                .fetch_all(&self.pool)
                .await?,
        )
    }
}

fn bind_filter<'q, O>(
    query: sqlx::query::QueryAs<'q, sqlx::Any, O, sqlx::any::AnyArguments>,
    filter: &RollupFilter,
) -> sqlx::query::QueryAs<'q, sqlx::Any, O, sqlx::any::AnyArguments> {
    query
        .bind(filter.from.clone())
        .bind(filter.to.clone())
        .bind(filter.game.clone().unwrap_or_default())
        .bind(filter.team_id.clone().unwrap_or_default())
}
