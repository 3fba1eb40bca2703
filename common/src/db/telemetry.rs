//! Loader telemetry: raw events, their hourly rollups and latency sketches, pruning, and the
//! reads the dashboards and the variant choices make.

use serde_json::{Value, json};
use sqlx::{AssertSqlSafe, Row};

use super::{Db, DbError};
use crate::rollups::Rollup;
pub use crate::rollups::{ClientSketchRow, SketchRow};
pub use crate::telemetry::TelemetryEvent;

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
    /// Pre-warm: 1 when the hit was shared (another game's visit brought the engine), 0 not.
    pub shared: Option<i64>,
    /// 1 when the event carried a valid manifest token, 0 not.
    pub trusted: Option<i64>,
    pub client: Option<String>,
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
    /// Of `count`, the hits another game's visit brought (`shared`).
    pub shared_hits: i64,
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

/// Which rollups a dashboard query reads: a time range (hours, RFC 3339, `from` inclusive,
/// `to` exclusive), one game or all, and, for a team's token, only the team's games.
#[derive(Debug, Clone, Default)]
pub struct RollupFilter {
    pub from: String,
    pub to: String,
    pub game: Option<String>,
    pub team_id: Option<String>,
}

/// A table written from JSON arrays: its columns with the type PostgreSQL reads each as
/// (SQLite takes JSON's own types), and what an existing row does with a new one.
struct JsonTable {
    name: &'static str,
    columns: &'static [(&'static str, &'static str)],
    on_conflict: &'static str,
}

const TEXT: &str = "text";
const BIGINT: &str = "bigint";
const DOUBLE: &str = "double precision";

const EVENTS: JsonTable = JsonTable {
    name: "telemetry_events",
    columns: &[
        ("received_at", TEXT),
        ("kind", TEXT),
        ("game", TEXT),
        ("engine", TEXT),
        ("version", TEXT),
        ("outcome", TEXT),
        ("reason", TEXT),
        ("ms", DOUBLE),
        ("prewarmed", BIGINT),
        ("asset", TEXT),
        ("variant", TEXT),
        ("decoder", TEXT),
        ("bytes", BIGINT),
        ("fallback", BIGINT),
        ("device_class", TEXT),
        ("os", TEXT),
        ("runtime", TEXT),
        ("device_model", TEXT),
        ("device", TEXT),
        ("shared", BIGINT),
        ("trusted", BIGINT),
        ("client", TEXT),
    ],
    on_conflict: "",
};

const PREHEAT_HOURLY: JsonTable = JsonTable {
    name: "preheat_hourly",
    columns: &[
        ("hour", TEXT),
        ("game", TEXT),
        ("engine", TEXT),
        ("version", TEXT),
        ("device_class", TEXT),
        ("outcome", TEXT),
        ("reason", TEXT),
        ("count", BIGINT),
        ("bytes", BIGINT),
        ("ms_sum", DOUBLE),
        ("shared_hits", BIGINT),
    ],
    on_conflict: "ON CONFLICT (hour, game, engine, version, device_class, outcome, reason) \
        DO UPDATE SET count = preheat_hourly.count + excluded.count, \
        shared_hits = preheat_hourly.shared_hits + excluded.shared_hits, \
        bytes = preheat_hourly.bytes + excluded.bytes, \
        ms_sum = preheat_hourly.ms_sum + excluded.ms_sum",
};

const DECODE_HOURLY: JsonTable = JsonTable {
    name: "decode_hourly",
    columns: &[
        ("hour", TEXT),
        ("game", TEXT),
        ("asset", TEXT),
        ("variant", TEXT),
        ("decoder", TEXT),
        ("device_class", TEXT),
        ("count", BIGINT),
        ("fallbacks", BIGINT),
        ("bytes", BIGINT),
        ("ms_sum", DOUBLE),
    ],
    on_conflict: "ON CONFLICT (hour, game, asset, variant, decoder, device_class) \
        DO UPDATE SET count = decode_hourly.count + excluded.count, \
        fallbacks = decode_hourly.fallbacks + excluded.fallbacks, \
        bytes = decode_hourly.bytes + excluded.bytes, \
        ms_sum = decode_hourly.ms_sum + excluded.ms_sum",
};

const LATENCY_BUCKETS: JsonTable = JsonTable {
    name: "latency_buckets",
    columns: &[
        ("hour", TEXT),
        ("kind", TEXT),
        ("game", TEXT),
        ("subject", TEXT),
        ("facet", TEXT),
        ("device_class", TEXT),
        ("bucket", BIGINT),
        ("count", BIGINT),
    ],
    on_conflict: "ON CONFLICT (hour, kind, game, subject, facet, device_class, bucket) \
        DO UPDATE SET count = latency_buckets.count + excluded.count",
};

const DECODE_CLIENT_BUCKETS: JsonTable = JsonTable {
    name: "decode_client_buckets",
    columns: &[
        ("hour", TEXT),
        ("game", TEXT),
        ("asset", TEXT),
        ("variant", TEXT),
        ("device_class", TEXT),
        ("client", TEXT),
        ("bucket", BIGINT),
        ("count", BIGINT),
    ],
    on_conflict: "ON CONFLICT (hour, game, asset, variant, device_class, client, bucket) \
        DO UPDATE SET count = decode_client_buckets.count + excluded.count",
};

/// Rows per JSON-array statement.
const ROWS_PER_STATEMENT: usize = 5000;

/// One raw event as the JSON array `EVENTS` reads, in its column order.
fn event_row(received_at: &str, e: &TelemetryEvent) -> Value {
    json!([
        received_at,
        e.kind,
        e.game,
        e.engine,
        e.version,
        e.outcome,
        e.reason,
        e.ms,
        e.prewarmed.map(i64::from),
        e.asset,
        e.variant,
        e.decoder,
        e.bytes,
        e.fallback.map(i64::from),
        e.device_class,
        e.os,
        e.runtime,
        e.device_model,
        e.device,
        e.shared.map(i64::from),
        i64::from(e.trusted),
        e.client,
    ])
}

/// The `WHERE` of a rollup query: `$1` from, `$2` to, `$3` game or '', `$4` team or ''.
const ROLLUP_WHERE: &str = "hour >= $1 AND hour < $2 AND ($3 = '' OR game = $3) \
    AND ($4 = '' OR game IN (SELECT name FROM games WHERE team_id = $4))";

impl Db {
    /// `INSERT … SELECT` from the JSON array of rows in `$1`, in each database's dialect.
    /// One parameter per statement instead of one per value: binding thousands of
    /// parameters costs more than the database's own JSON unpacking.
    fn json_insert(&self, table: &JsonTable) -> String {
        let columns: Vec<&str> = table.columns.iter().map(|(c, _)| *c).collect();
        let (values, source): (Vec<String>, &str) = if self.is_sqlite() {
            let values = (0..columns.len())
                .map(|i| format!("value ->> {i}"))
                .collect();
            // `WHERE true`: SQLite's parser needs it between a SELECT and ON CONFLICT.
            (values, "json_each($1) WHERE true")
        } else {
            let values = table
                .columns
                .iter()
                .enumerate()
                .map(|(i, (_, ty))| format!("(r ->> {i})::{ty}"))
                .collect();
            (values, "jsonb_array_elements($1::jsonb) AS r")
        };
        format!(
            "INSERT INTO {} ({}) SELECT {} FROM {source} {}",
            table.name,
            columns.join(", "),
            values.join(", "),
            table.on_conflict
        )
    }

    async fn insert_json_rows(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        table: &JsonTable,
        rows: &[Value],
    ) -> Result<(), DbError> {
        let sql = self.json_insert(table);
        for chunk in rows.chunks(ROWS_PER_STATEMENT) {
            sqlx::query(AssertSqlSafe(sql.clone()))
                .bind(Value::Array(chunk.to_vec()).to_string())
                .execute(&mut **tx)
                .await?;
        }
        Ok(())
    }

    /// Writes received events and what they add to the rollups, in one transaction: a
    /// failure leaves neither, so the caller can retry the whole batch. Rollup rows are
    /// upserted in key order, so two API processes writing the same hour can't deadlock.
    pub async fn write_telemetry(
        &self,
        batches: &[(String, Vec<TelemetryEvent>)],
        rollup: &Rollup,
    ) -> Result<(), DbError> {
        // A durable commit: a beacon is answered `202` only once this returns (api/src/ingest.rs),
        // so a database crash right after must not lose it (no `synchronous_commit = off`).
        let mut tx = self.pool.begin().await?;
        let events: Vec<Value> = batches
            .iter()
            .flat_map(|(at, events)| events.iter().map(move |e| event_row(at, e)))
            .collect();
        self.insert_json_rows(&mut tx, &EVENTS, &events).await?;
        let mut preheat: Vec<_> = rollup.preheat.iter().collect();
        preheat.sort_by(|a, b| a.0.cmp(b.0));
        let preheat: Vec<Value> = preheat
            .into_iter()
            .map(|(k, s)| {
                json!([
                    k.hour,
                    k.game,
                    k.engine,
                    k.version,
                    k.device_class,
                    k.outcome,
                    k.reason,
                    s.count,
                    s.bytes,
                    s.ms_sum,
                    s.shared_hits
                ])
            })
            .collect();
        self.insert_json_rows(&mut tx, &PREHEAT_HOURLY, &preheat)
            .await?;
        let mut decode: Vec<_> = rollup.decode.iter().collect();
        decode.sort_by(|a, b| a.0.cmp(b.0));
        let decode: Vec<Value> = decode
            .into_iter()
            .map(|(k, s)| {
                json!([
                    k.hour,
                    k.game,
                    k.asset,
                    k.variant,
                    k.decoder,
                    k.device_class,
                    s.count,
                    s.fallbacks,
                    s.bytes,
                    s.ms_sum
                ])
            })
            .collect();
        self.insert_json_rows(&mut tx, &DECODE_HOURLY, &decode)
            .await?;
        let mut latency: Vec<_> = rollup.latency.iter().collect();
        latency.sort_by(|a, b| a.0.cmp(b.0));
        let latency: Vec<Value> = latency
            .into_iter()
            .map(|(k, n)| {
                json!([
                    k.hour,
                    k.kind,
                    k.game,
                    k.subject,
                    k.facet,
                    k.device_class,
                    k.bucket,
                    n
                ])
            })
            .collect();
        self.insert_json_rows(&mut tx, &LATENCY_BUCKETS, &latency)
            .await?;
        let mut per_client: Vec<_> = rollup.client_latency.iter().collect();
        per_client.sort_by(|a, b| a.0.cmp(b.0));
        let per_client: Vec<Value> = per_client
            .into_iter()
            .map(|(k, n)| {
                json!([
                    k.hour,
                    k.game,
                    k.asset,
                    k.variant,
                    k.device_class,
                    k.client,
                    k.bucket,
                    n
                ])
            })
            .collect();
        self.insert_json_rows(&mut tx, &DECODE_CLIENT_BUCKETS, &per_client)
            .await?;
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
        // Per-client sketches name clients (salted hashes): kept as long as raw events.
        let hour_before = crate::rollups::hour_of(events_before);
        events += sqlx::query("DELETE FROM decode_client_buckets WHERE hour < $1")
            .bind(&hour_before)
            .execute(&self.pool)
            .await?
            .rows_affected();
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
             variant, decoder, device_class, device_model, shared, trusted, client \
             FROM telemetry_events WHERE game = $1 ORDER BY id",
        )
        .bind(game)
        .fetch_all(&self.pool)
        .await?)
    }

    /// The newest raw event's id (0 when none): ids only grow, so the difference between two
    /// readings is how many events were written in between (without counting the table).
    pub async fn last_telemetry_id(&self) -> Result<i64, DbError> {
        Ok(
            sqlx::query("SELECT COALESCE(MAX(id), 0) FROM telemetry_events")
                .fetch_one(&self.pool)
                .await?
                .get::<i64, _>(0),
        )
    }

    pub async fn preheat_rollups(
        &self,
        filter: &RollupFilter,
    ) -> Result<Vec<PreheatRollupRow>, DbError> {
        let sql = format!(
            "SELECT hour, game, engine, version, device_class, outcome, reason, count, \
             shared_hits, bytes, ms_sum FROM preheat_hourly WHERE {ROLLUP_WHERE} ORDER BY hour"
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

impl Db {
    /// Each client's decode-latency buckets of `game` from `since_hour` on (trusted beacons
    /// only), for the variant choices' robust statistic.
    pub async fn decode_client_sketches(
        &self,
        game: &str,
        since_hour: &str,
    ) -> Result<Vec<ClientSketchRow>, DbError> {
        Ok(sqlx::query_as::<_, ClientSketchRow>(
            "SELECT asset, variant, device_class, client, bucket, CAST(SUM(count) AS BIGINT) AS count \
             FROM decode_client_buckets WHERE game = $1 AND hour >= $2 \
             GROUP BY asset, variant, device_class, client, bucket",
        )
        .bind(game)
        .bind(since_hour)
        .fetch_all(&self.pool)
        .await?)
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
