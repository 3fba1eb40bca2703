//! The database: every query Kiln runs, for SQLite and PostgreSQL alike (through sqlx's Any
//! driver), plus the typed pool the apalis queue needs.
//!
//! Only the API's handlers and the worker's job layer call these functions; stages never do.

use serde::Serialize;
use sqlx::any::{AnyPoolOptions, install_default_drivers};
use sqlx::{AnyPool, AssertSqlSafe, Row};

use crate::config::MIN_DB_CONNECTIONS;
use crate::signing::Jwk;

mod library;
mod releases;
mod sessions;
mod telemetry;
mod trust;

pub use library::{LibraryFile, LibraryRow};
pub use releases::{ClassManifestRow, ReleaseReason, ReleaseRequestRow, ReleaseRow};
pub use sessions::SessionOwner;
pub use telemetry::{
    ClientSketchRow, DecodeRollupRow, PreheatRollupRow, RollupFilter, SketchRow, StoredEvent,
    TelemetryEvent,
};
pub use trust::TrustRow;

/// Build status as stored and as served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BuildStatus {
    Queued,
    Processing,
    Published,
    Failed,
}

impl BuildStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Processing => "processing",
            Self::Published => "published",
            Self::Failed => "failed",
        }
    }
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Published | Self::Failed)
    }
    pub fn parse(s: &str) -> Self {
        match s {
            "processing" => Self::Processing,
            "published" => Self::Published,
            "failed" => Self::Failed,
            _ => Self::Queued,
        }
    }
    pub const ALL: [BuildStatus; 4] = [
        Self::Queued,
        Self::Processing,
        Self::Published,
        Self::Failed,
    ];
}

/// The pool apalis stores jobs in: the same database, through its typed driver.
#[derive(Clone, Debug)]
pub enum QueuePool {
    Sqlite(sqlx::SqlitePool),
    Postgres(sqlx::PgPool),
}

#[derive(Clone, Debug)]
pub struct Db {
    pool: AnyPool,
    pub queue: QueuePool,
}

#[derive(Debug, Clone, sqlx::FromRow, Serialize)]
pub struct BuildRow {
    pub id: String,
    pub team_id: String,
    pub game: String,
    pub version: String,
    pub status: String,
    pub package_key: String,
    pub package_format: String,
    pub package_sha256: String,
    pub package_size: i64,
    pub idempotency_key: Option<String>,
    pub error: Option<String>,
    pub manifest_key: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

#[derive(Debug, Clone, sqlx::FromRow, Serialize, PartialEq)]
pub struct StageRow {
    pub name: String,
    pub status: String,
    pub progress: f64,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, sqlx::FromRow, Serialize)]
pub struct FinishedBuild {
    pub id: String,
    pub game: String,
    pub version: String,
    pub status: String,
    pub error: Option<String>,
    pub updated_at: String,
    pub failed_stage: Option<String>,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct FinishedStage {
    pub name: String,
    pub status: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ManifestRow {
    pub build_id: String,
    pub game: String,
    pub manifest_key: String,
    pub sha256: String,
    pub kid: String,
    pub signature: String,
    pub created_at: String,
}

pub struct NewBuild<'a> {
    pub id: &'a str,
    pub team_id: &'a str,
    pub game: &'a str,
    pub version: &'a str,
    pub package_key: &'a str,
    pub package_format: &'a str,
    pub package_sha256: &'a str,
    pub package_size: i64,
    pub idempotency_key: Option<&'a str>,
}

/// Outcome of inserting a build: new, or one that already had these bytes or this key, or
/// refused because the game belongs to another team (nothing was written).
pub enum Inserted {
    New(BuildRow),
    Existing(BuildRow),
    NotOwner,
}

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("database: {0}")]
    Sqlx(#[from] sqlx::Error),
    #[error("database migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("{0}")]
    Conflict(String),
}

impl DbError {
    /// Connection trouble and lock timeouts pass; constraint violations and bad SQL don't.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Sqlx(e) => {
                matches!(
                    e,
                    sqlx::Error::Io(_)
                        | sqlx::Error::PoolTimedOut
                        | sqlx::Error::PoolClosed
                        | sqlx::Error::WorkerCrashed
                        | sqlx::Error::Tls(_)
                ) || e.to_string().contains("database is locked")
            }
            _ => false,
        }
    }
}

pub fn now() -> String {
    timestamp(chrono::Utc::now())
}

/// A time as the database stores it (RFC 3339, milliseconds, `Z`), so stored times compare
/// as strings.
pub fn timestamp(at: chrono::DateTime<chrono::Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

const BUILD_COLUMNS: &str = "id, team_id, game, version, status, package_key, package_format, \
    package_sha256, package_size, idempotency_key, error, manifest_key, created_at, updated_at";

/// Where Kiln's own migrations are recorded (apalis uses sqlx's default table).
const MIGRATIONS_TABLE: &str = "_kiln_migrations";

/// A process's connection budget split between its two pools, adding up to `total` (at least
/// [`MIN_DB_CONNECTIONS`]): the job queue's (apalis: fetching, acknowledging, heartbeats) gets a quarter, at least
/// 2; the queries' pool the rest.
pub fn split_connections(total: u32) -> (u32, u32) {
    let total = total.max(MIN_DB_CONNECTIONS);
    let queue = (total / 4).max(2);
    (queue, total - queue)
}

impl Db {
    /// Connects with up to `max_connections` in all and runs Kiln's migrations (tests and
    /// tools; processes go through `kiln_worker::runtime::open_database`).
    pub async fn connect(url: &str, max_connections: u32) -> Result<Self, DbError> {
        Self::connect_with(url, max_connections, true).await
    }

    /// Connects with up to `max_connections` in all, split by [`split_connections`]; runs
    /// Kiln's migrations first when `migrate` is set.
    pub async fn connect_with(
        url: &str,
        max_connections: u32,
        migrate: bool,
    ) -> Result<Self, DbError> {
        let (queue_connections, query_connections) = split_connections(max_connections);
        install_default_drivers();
        let is_sqlite = url.starts_with("sqlite:");
        // The SQLite file (and its directory) is created if needed.
        if is_sqlite
            && let Some(path) = sqlite_path(url)
            && let Some(parent) = std::path::Path::new(&path).parent()
        {
            std::fs::create_dir_all(parent).map_err(|e| {
                DbError::Sqlx(sqlx::Error::Configuration(
                    format!(
                        "cannot create the database directory {}: {e}",
                        parent.display()
                    )
                    .into(),
                ))
            })?;
        }
        let queue = if is_sqlite {
            let options: sqlx::sqlite::SqliteConnectOptions = url.parse()?;
            let options = options
                .create_if_missing(true)
                .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                .busy_timeout(std::time::Duration::from_secs(30));
            QueuePool::Sqlite(
                sqlx::sqlite::SqlitePoolOptions::new()
                    .max_connections(queue_connections)
                    .connect_with(options)
                    .await?,
            )
        } else {
            QueuePool::Postgres(
                sqlx::postgres::PgPoolOptions::new()
                    .max_connections(queue_connections)
                    .connect(url)
                    .await?,
            )
        };
        let pool = AnyPoolOptions::new()
            .max_connections(query_connections)
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    if is_sqlite {
                        // Readers must wait for the queue's writers instead of failing at once.
                        sqlx::query("PRAGMA busy_timeout = 30000")
                            .execute(&mut *conn)
                            .await?;
                        sqlx::query("PRAGMA foreign_keys = ON")
                            .execute(&mut *conn)
                            .await?;
                    }
                    Ok(())
                })
            })
            .connect(url)
            .await?;
        let db = Self { pool, queue };
        if migrate {
            db.migrate().await?;
        }
        Ok(db)
    }

    /// Closes both pools, waiting for their connections to be returned.
    pub async fn close(&self) {
        self.pool.close().await;
        match &self.queue {
            QueuePool::Sqlite(pool) => pool.close().await,
            QueuePool::Postgres(pool) => pool.close().await,
        }
    }

    fn migrator(&self) -> sqlx::migrate::Migrator {
        let mut migrator = if self.is_sqlite() {
            sqlx::migrate!("../migrations/sqlite")
        } else {
            sqlx::migrate!("../migrations/postgres")
        };
        // apalis keeps its own migrations in sqlx's default table; ours live apart.
        migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
        migrator
    }

    /// Kiln's migrations (the job queue's tables are apalis's: `kiln_worker::job::setup_queue`).
    pub async fn migrate(&self) -> Result<(), DbError> {
        self.migrator().run(&self.pool).await?;
        Ok(())
    }

    /// The migrations this build knows that the database has not applied (their versions and
    /// names). Migrations newer than this build are fine: each stays compatible with the
    /// release before it, so old pods keep working during a rolling update.
    pub async fn pending_migrations(&self) -> Result<Vec<String>, DbError> {
        let applied: Vec<i64> = match sqlx::query(AssertSqlSafe(format!(
            "SELECT version FROM {MIGRATIONS_TABLE} WHERE success"
        )))
        .fetch_all(&self.pool)
        .await
        {
            Ok(rows) => rows.iter().map(|r| r.get::<i64, _>(0)).collect(),
            // No table yet: nothing applied.
            Err(sqlx::Error::Database(_)) => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        Ok(self
            .migrator()
            .iter()
            .filter(|m| !m.migration_type.is_down_migration() && !applied.contains(&m.version))
            .map(|m| format!("{} {}", m.version, m.description))
            .collect())
    }

    pub fn is_sqlite(&self) -> bool {
        matches!(self.queue, QueuePool::Sqlite(_))
    }

    pub async fn ping(&self) -> Result<(), DbError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    // ---- teams and tokens ----

    pub async fn create_team(&self, id: &str, name: &str) -> Result<(), DbError> {
        let result = sqlx::query("INSERT INTO teams (id, name, created_at) VALUES ($1, $2, $3)")
            .bind(id)
            .bind(name)
            .bind(now())
            .execute(&self.pool)
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                Err(DbError::Conflict(format!("a team named {name:?} exists")))
            }
            Err(e) => Err(e.into()),
        }
    }

    pub async fn team_exists(&self, id: &str) -> Result<bool, DbError> {
        Ok(sqlx::query("SELECT id FROM teams WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .is_some())
    }

    pub async fn create_token(&self, team_id: &str, token_hash: &str) -> Result<(), DbError> {
        sqlx::query(
            "INSERT INTO team_tokens (token_hash, team_id, created_at) VALUES ($1, $2, $3)",
        )
        .bind(token_hash)
        .bind(team_id)
        .bind(now())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn team_for_token(&self, token_hash: &str) -> Result<Option<String>, DbError> {
        Ok(
            sqlx::query("SELECT team_id FROM team_tokens WHERE token_hash = $1")
                .bind(token_hash)
                .fetch_optional(&self.pool)
                .await?
                .map(|row| row.get::<String, _>(0)),
        )
    }

    // ---- games ----

    /// Gives `game` to another team (admin): its builds move with it, so the new owner sees
    /// and can release them; the live release stays as it is. `false`: no such game.
    pub async fn transfer_game(&self, game: &str, team_id: &str) -> Result<bool, DbError> {
        let mut tx = self.pool.begin().await?;
        let moved = sqlx::query("UPDATE games SET team_id = $1 WHERE name = $2")
            .bind(team_id)
            .bind(game)
            .execute(&mut *tx)
            .await?
            .rows_affected()
            == 1;
        if !moved {
            tx.rollback().await?;
            return Ok(false);
        }
        sqlx::query("UPDATE builds SET team_id = $1 WHERE game = $2")
            .bind(team_id)
            .bind(game)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// The team that owns `game`, claiming it for `team_id` if nobody does. (Uploads claim a
    /// game only with the build that passed the upload checks: [`Db::insert_build`].)
    pub async fn claim_game(&self, game: &str, team_id: &str) -> Result<String, DbError> {
        sqlx::query(
            "INSERT INTO games (name, team_id, created_at) VALUES ($1, $2, $3) \
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(game)
        .bind(team_id)
        .bind(now())
        .execute(&self.pool)
        .await?;
        Ok(sqlx::query("SELECT team_id FROM games WHERE name = $1")
            .bind(game)
            .fetch_one(&self.pool)
            .await?
            .get::<String, _>(0))
    }

    /// The team a game belongs to, if the game exists.
    /// Every game's name, or only a team's, sorted.
    pub async fn game_names(&self, team_id: Option<&str>) -> Result<Vec<String>, DbError> {
        let rows =
            sqlx::query("SELECT name FROM games WHERE ($1 = '' OR team_id = $1) ORDER BY name")
                .bind(team_id.unwrap_or(""))
                .fetch_all(&self.pool)
                .await?;
        Ok(rows.iter().map(|r| r.get::<String, _>(0)).collect())
    }

    pub async fn game_team(&self, game: &str) -> Result<Option<String>, DbError> {
        Ok(sqlx::query("SELECT team_id FROM games WHERE name = $1")
            .bind(game)
            .fetch_optional(&self.pool)
            .await?
            .map(|r| r.get::<String, _>(0)))
    }

    // ---- builds ----

    pub async fn build(&self, id: &str) -> Result<Option<BuildRow>, DbError> {
        Ok(sqlx::query_as::<_, BuildRow>(AssertSqlSafe(format!(
            "SELECT {BUILD_COLUMNS} FROM builds WHERE id = $1"
        )))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// The build a team's `Idempotency-Key` made for one game: keys are matched per game
    /// (team + game + key), so two games using the same CI key get their own builds.
    pub async fn build_by_idempotency_key(
        &self,
        team_id: &str,
        game: &str,
        key: &str,
    ) -> Result<Option<BuildRow>, DbError> {
        Ok(sqlx::query_as::<_, BuildRow>(AssertSqlSafe(format!(
            "SELECT {BUILD_COLUMNS} FROM builds \
             WHERE team_id = $1 AND game = $2 AND idempotency_key = $3"
        )))
        .bind(team_id)
        .bind(game)
        .bind(key)
        .fetch_optional(&self.pool)
        .await?)
    }

    async fn build_by_content(
        &self,
        game: &str,
        version: &str,
        sha256: &str,
    ) -> Result<Option<BuildRow>, DbError> {
        // The one build that is not failed (at most one: `builds_content`), else the newest
        // failed one.
        Ok(sqlx::query_as::<_, BuildRow>(AssertSqlSafe(format!(
            "SELECT {BUILD_COLUMNS} FROM builds WHERE game = $1 AND version = $2 AND package_sha256 = $3 \
             ORDER BY CASE WHEN status = 'failed' THEN 1 ELSE 0 END, created_at DESC, id DESC LIMIT 1"
        )))
        .bind(game)
        .bind(version)
        .bind(sha256)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Inserts a queued build and its pending stages in one transaction, claiming the game
    /// for the team if nobody owns it (so only a build that passed the upload checks claims
    /// a name), unless a build with the same bytes (or idempotency key) exists: then that one
    /// is returned. A failed build with the same bytes is returned only to an upload without
    /// an idempotency key; one with a new key makes a new build (a retry of a failed build).
    pub async fn insert_build(
        &self,
        new: NewBuild<'_>,
        stages: &[&str],
    ) -> Result<Inserted, DbError> {
        if let Some(existing) = self
            .build_by_content(new.game, new.version, new.package_sha256)
            .await?
            && (existing.status != BuildStatus::Failed.as_str() || new.idempotency_key.is_none())
        {
            return Ok(Inserted::Existing(existing));
        }
        let at = now();
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO games (name, team_id, created_at) VALUES ($1, $2, $3) \
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(new.game)
        .bind(new.team_id)
        .bind(&at)
        .execute(&mut *tx)
        .await?;
        let owner = sqlx::query("SELECT team_id FROM games WHERE name = $1")
            .bind(new.game)
            .fetch_one(&mut *tx)
            .await?
            .get::<String, _>(0);
        if owner != new.team_id {
            tx.rollback().await?;
            return Ok(Inserted::NotOwner);
        }
        let inserted = sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO builds ({BUILD_COLUMNS}, queue_pending) VALUES \
             ($1, $2, $3, $4, 'queued', $5, $6, $7, $8, $9, NULL, NULL, $10, $10, 1)"
        )))
        .bind(new.id)
        .bind(new.team_id)
        .bind(new.game)
        .bind(new.version)
        .bind(new.package_key)
        .bind(new.package_format)
        .bind(new.package_sha256)
        .bind(new.package_size)
        .bind(new.idempotency_key)
        .bind(&at)
        .execute(&mut *tx)
        .await;
        match inserted {
            Ok(_) => {}
            // A concurrent upload of the same bytes (or key) won the race: return its build.
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                drop(tx);
                let existing = match new.idempotency_key {
                    Some(key) => {
                        self.build_by_idempotency_key(new.team_id, new.game, key)
                            .await?
                    }
                    None => None,
                };
                let existing = match existing {
                    Some(b) => Some(b),
                    None => {
                        self.build_by_content(new.game, new.version, new.package_sha256)
                            .await?
                    }
                };
                return existing
                    .map(Inserted::Existing)
                    .ok_or_else(|| DbError::Conflict("build insert conflicted".into()));
            }
            Err(e) => return Err(e.into()),
        }
        for (position, stage) in stages.iter().enumerate() {
            sqlx::query(
                "INSERT INTO build_stages (build_id, position, name, status, progress) \
                 VALUES ($1, $2, $3, 'pending', 0)",
            )
            .bind(new.id)
            .bind(position as i64)
            .bind(*stage)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        let row = self
            .build(new.id)
            .await?
            .ok_or_else(|| DbError::Conflict("inserted build vanished".into()))?;
        Ok(Inserted::New(row))
    }

    /// Puts a failed build back in the queue's hands (`POST /v1/builds/{id}/retry`): status
    /// `queued`, error and report cleared, every stage pending again; same id, same kept
    /// package. `false`: the build is not failed (any more). A conflict when a build of the
    /// same bytes and version was made since (`builds_content`): that one is the build.
    pub async fn requeue_failed_build(&self, id: &str) -> Result<bool, DbError> {
        let mut tx = self.pool.begin().await?;
        let updated = sqlx::query(
            "UPDATE builds SET status = 'queued', error = NULL, report = NULL, updated_at = $1, \
             queue_pending = 1 WHERE id = $2 AND status = 'failed'",
        )
        .bind(now())
        .bind(id)
        .execute(&mut *tx)
        .await;
        let requeued = match updated {
            Ok(done) => done.rows_affected() == 1,
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                return Err(DbError::Conflict(format!(
                    "another build of build {id}'s bytes and version exists; that one is the build"
                )));
            }
            Err(e) => return Err(e.into()),
        };
        if !requeued {
            tx.rollback().await?;
            return Ok(false);
        }
        sqlx::query(
            "UPDATE build_stages SET status = 'pending', progress = 0, started_at = NULL, \
             finished_at = NULL, error = NULL WHERE build_id = $1",
        )
        .bind(id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    pub async fn stages(&self, build_id: &str) -> Result<Vec<StageRow>, DbError> {
        Ok(sqlx::query_as::<_, StageRow>(
            "SELECT name, status, progress, started_at, finished_at, error FROM build_stages \
             WHERE build_id = $1 ORDER BY position",
        )
        .bind(build_id)
        .fetch_all(&self.pool)
        .await?)
    }

    pub async fn report(&self, build_id: &str) -> Result<Option<String>, DbError> {
        Ok(sqlx::query("SELECT report FROM builds WHERE id = $1")
            .bind(build_id)
            .fetch_optional(&self.pool)
            .await?
            .and_then(|row| row.get::<Option<String>, _>(0)))
    }

    pub async fn set_build_status(
        &self,
        id: &str,
        status: BuildStatus,
        error: Option<&str>,
    ) -> Result<(), DbError> {
        sqlx::query("UPDATE builds SET status = $1, error = $2, updated_at = $3 WHERE id = $4")
            .bind(status.as_str())
            .bind(error)
            .bind(now())
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The build's job is on the queue: the orphan sweep leaves it alone from now on.
    pub async fn mark_build_queued(&self, id: &str) -> Result<(), DbError> {
        sqlx::query("UPDATE builds SET queue_pending = 0 WHERE id = $1")
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Queued builds whose job may never have been pushed (`queue_pending`), last touched
    /// before `before`: the row committed, then its process stopped before the push.
    pub async fn builds_missing_a_job(
        &self,
        before: &str,
        limit: i64,
    ) -> Result<Vec<(String, String)>, DbError> {
        Ok(sqlx::query_as::<_, (String, String)>(
            "SELECT id, updated_at FROM builds WHERE queue_pending = 1 AND status = 'queued' \
             AND updated_at < $1 ORDER BY updated_at LIMIT $2",
        )
        .bind(before)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Takes the sweep's turn for one such build: `true` for exactly one of the processes that
    /// saw it last touched at `updated_at` (a compare-and-set on it), so one job is pushed.
    pub async fn claim_build_missing_a_job(
        &self,
        id: &str,
        updated_at: &str,
    ) -> Result<bool, DbError> {
        let done = sqlx::query(
            "UPDATE builds SET updated_at = $1 WHERE id = $2 AND updated_at = $3 \
             AND queue_pending = 1 AND status = 'queued'",
        )
        .bind(now())
        .bind(id)
        .bind(updated_at)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    pub async fn save_report(&self, id: &str, report_json: &str) -> Result<(), DbError> {
        sqlx::query("UPDATE builds SET report = $1, updated_at = $2 WHERE id = $3")
            .bind(report_json)
            .bind(now())
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Back to pending: a job that starts again (after a crash) redoes every stage.
    pub async fn reset_stages(&self, build_id: &str) -> Result<(), DbError> {
        sqlx::query(
            "UPDATE build_stages SET status = 'pending', progress = 0, started_at = NULL, \
             finished_at = NULL, error = NULL WHERE build_id = $1",
        )
        .bind(build_id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn update_stage(
        &self,
        build_id: &str,
        name: &str,
        update: StageUpdate<'_>,
    ) -> Result<(), DbError> {
        let at = now();
        let query = match update {
            StageUpdate::Started => sqlx::query(
                "UPDATE build_stages SET status = 'running', progress = 0, started_at = $1, \
                 finished_at = NULL, error = NULL WHERE build_id = $2 AND name = $3",
            )
            .bind(at),
            StageUpdate::Progress(p) => sqlx::query(
                "UPDATE build_stages SET progress = $1 WHERE build_id = $2 AND name = $3",
            )
            .bind(p),
            StageUpdate::Succeeded => sqlx::query(
                "UPDATE build_stages SET status = 'succeeded', progress = 1, finished_at = $1 \
                 WHERE build_id = $2 AND name = $3",
            )
            .bind(at),
            StageUpdate::Failed(error) => sqlx::query(
                "UPDATE build_stages SET status = 'failed', finished_at = $1, error = $2 \
                 WHERE build_id = $3 AND name = $4",
            )
            .bind(at)
            .bind(error),
        };
        query.bind(build_id).bind(name).execute(&self.pool).await?;
        Ok(())
    }

    /// Records the build's one manifest and marks the build and its publish stage done, in
    /// one transaction so no reader sees a published build with a stage still running. (Its
    /// release, which makes it live, was recorded just before.) Idempotent: a second call for the same build (a resumed job) changes
    /// nothing.
    pub async fn record_publication(
        &self,
        m: &ManifestRow,
        publish_stage: &str,
    ) -> Result<(), DbError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "UPDATE build_stages SET status = 'succeeded', progress = 1, finished_at = $1 \
             WHERE build_id = $2 AND name = $3",
        )
        .bind(now())
        .bind(&m.build_id)
        .bind(publish_stage)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO manifests (build_id, game, manifest_key, sha256, kid, signature, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (build_id) DO NOTHING",
        )
        .bind(&m.build_id)
        .bind(&m.game)
        .bind(&m.manifest_key)
        .bind(&m.sha256)
        .bind(&m.kid)
        .bind(&m.signature)
        .bind(&m.created_at)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "UPDATE builds SET status = 'published', error = NULL, manifest_key = $1, updated_at = $2 \
             WHERE id = $3",
        )
        .bind(&m.manifest_key)
        .bind(now())
        .bind(&m.build_id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub async fn manifests_for_build(&self, build_id: &str) -> Result<Vec<ManifestRow>, DbError> {
        Ok(sqlx::query_as::<_, ManifestRow>(
            "SELECT build_id, game, manifest_key, sha256, kid, signature, created_at \
             FROM manifests WHERE build_id = $1",
        )
        .bind(build_id)
        .fetch_all(&self.pool)
        .await?)
    }

    // ---- signing keys ----

    pub async fn register_key(&self, jwk: &Jwk) -> Result<(), DbError> {
        sqlx::query(
            "INSERT INTO signing_keys (kid, jwk, created_at) VALUES ($1, $2, $3) \
             ON CONFLICT (kid) DO NOTHING",
        )
        .bind(&jwk.kid)
        .bind(serde_json::to_string(jwk).expect("jwk serialises"))
        .bind(now())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn keys(&self) -> Result<Vec<Jwk>, DbError> {
        let rows = sqlx::query("SELECT jwk FROM signing_keys ORDER BY created_at, kid")
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .iter()
            .filter_map(|row| serde_json::from_str(&row.get::<String, _>(0)).ok())
            .collect())
    }

    // ---- metrics ----

    pub async fn build_counts(&self) -> Result<Vec<(String, i64)>, DbError> {
        let rows = sqlx::query("SELECT status, COUNT(*) FROM builds GROUP BY status")
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .iter()
            .map(|r| (r.get::<String, _>(0), r.get::<i64, _>(1)))
            .collect())
    }

    /// Build stages by (stage, status), over every build.
    pub async fn stage_counts(&self) -> Result<Vec<(String, String, i64)>, DbError> {
        let rows =
            sqlx::query("SELECT name, status, COUNT(*) FROM build_stages GROUP BY name, status")
                .fetch_all(&self.pool)
                .await?;
        Ok(rows
            .iter()
            .map(|r| {
                (
                    r.get::<String, _>(0),
                    r.get::<String, _>(1),
                    r.get::<i64, _>(2),
                )
            })
            .collect())
    }

    /// Builds that finished (published or failed) in the filter's range, newest first.
    pub async fn finished_builds(
        &self,
        filter: &RollupFilter,
    ) -> Result<Vec<FinishedBuild>, DbError> {
        Ok(sqlx::query_as::<_, FinishedBuild>(
            "SELECT b.id, b.game, b.version, b.status, b.error, b.updated_at, \
             (SELECT s.name FROM build_stages s WHERE s.build_id = b.id AND s.status = 'failed' \
              ORDER BY s.position LIMIT 1) AS failed_stage \
             FROM builds b WHERE b.status IN ('published', 'failed') \
             AND b.updated_at >= $1 AND b.updated_at < $2 AND ($3 = '' OR b.game = $3) \
             AND ($4 = '' OR b.team_id = $4) ORDER BY b.updated_at DESC",
        )
        .bind(&filter.from)
        .bind(&filter.to)
        .bind(filter.game.clone().unwrap_or_default())
        .bind(filter.team_id.clone().unwrap_or_default())
        .fetch_all(&self.pool)
        .await?)
    }

    /// The reports (JSON) of the `limit` newest builds published in the filter's range.
    pub async fn published_reports(
        &self,
        filter: &RollupFilter,
        limit: i64,
    ) -> Result<Vec<String>, DbError> {
        Ok(sqlx::query_scalar::<_, String>(
            "SELECT b.report FROM builds b WHERE b.status = 'published' AND b.report IS NOT NULL \
             AND b.updated_at >= $1 AND b.updated_at < $2 AND ($3 = '' OR b.game = $3) \
             AND ($4 = '' OR b.team_id = $4) ORDER BY b.updated_at DESC LIMIT $5",
        )
        .bind(&filter.from)
        .bind(&filter.to)
        .bind(filter.game.clone().unwrap_or_default())
        .bind(filter.team_id.clone().unwrap_or_default())
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Stages that finished in the filter's range, with their times.
    pub async fn finished_stages(
        &self,
        filter: &RollupFilter,
    ) -> Result<Vec<FinishedStage>, DbError> {
        Ok(sqlx::query_as::<_, FinishedStage>(
            "SELECT s.name, s.status, s.started_at, s.finished_at FROM build_stages s \
             JOIN builds b ON b.id = s.build_id \
             WHERE s.finished_at >= $1 AND s.finished_at < $2 AND ($3 = '' OR b.game = $3) \
             AND ($4 = '' OR b.team_id = $4)",
        )
        .bind(&filter.from)
        .bind(&filter.to)
        .bind(filter.game.clone().unwrap_or_default())
        .bind(filter.team_id.clone().unwrap_or_default())
        .fetch_all(&self.pool)
        .await?)
    }

    /// Seconds since the oldest queued build was uploaded (0 when none waits).
    pub async fn oldest_queued_age_seconds(&self) -> Result<i64, DbError> {
        let oldest = sqlx::query("SELECT MIN(created_at) FROM builds WHERE status = 'queued'")
            .fetch_one(&self.pool)
            .await?
            .get::<Option<String>, _>(0);
        Ok(oldest
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(&t).ok())
            .map_or(0, |t| {
                (chrono::Utc::now() - t.with_timezone(&chrono::Utc))
                    .num_seconds()
                    .max(0)
            }))
    }
}

pub enum StageUpdate<'a> {
    Started,
    Progress(f64),
    Succeeded,
    Failed(&'a str),
}

fn sqlite_path(url: &str) -> Option<String> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next()?;
    (!path.is_empty() && path != ":memory:").then(|| path.to_string())
}

#[cfg(test)]
mod tests {
    use super::split_connections;

    #[test]
    fn the_pools_add_up_to_the_budget() {
        for total in 3..=200 {
            let (queue, queries) = split_connections(total);
            assert_eq!(queue + queries, total);
            assert!(queue >= 2 && queries >= 1, "{total}: {queue} + {queries}");
        }
        assert_eq!(split_connections(16), (4, 12));
        assert_eq!(split_connections(8), (2, 6));
    }
}
