//! Releases: every signed manifest a game has served, with its sequence and expiry. The
//! live one is the highest sequence (also kept as `games.live_sequence`); a new release
//! (publish, re-point, re-sign) only ever adds the next one, through the compare-and-set
//! [`Db::insert_release_if_live`], so clients can refuse to go back and no writer acts on a
//! stale view of what is live (the rules are in `worker/src/release.rs`).

use sqlx::Row;

use super::{Db, DbError, now, timestamp};

/// Why a release was made, as stored and reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseReason {
    Publish,
    Release,
    Resign,
}

impl ReleaseReason {
    /// Every reason, for the API's documentation.
    pub const ALL: [Self; 3] = [Self::Publish, Self::Release, Self::Resign];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Publish => "publish",
            Self::Release => "release",
            Self::Resign => "resign",
        }
    }
}

#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct ReleaseRow {
    pub game: String,
    pub sequence: i64,
    pub build_id: String,
    pub manifest_key: String,
    pub sha256: String,
    pub kid: String,
    pub signature: String,
    pub expires_at: String,
    /// `publish`, `release` (re-pointed by a team) or `resign` (before expiry).
    pub reason: String,
    pub created_at: String,
}

#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct ReleaseRequestRow {
    pub id: String,
    pub game: String,
    pub build_id: String,
    /// `pending`, `signing`, `done` or `failed`.
    pub status: String,
    pub sequence: Option<i64>,
    pub error: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// A live release signed again for one device class, each model's variant chosen for it.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct ClassManifestRow {
    pub game: String,
    pub sequence: i64,
    pub device_class: String,
    pub manifest_key: String,
    pub sha256: String,
    pub kid: String,
    pub signature: String,
    /// JSON `[{asset, variant, reason, detail}]`.
    pub choices: String,
    pub created_at: String,
}

const CLASS_COLUMNS: &str =
    "game, sequence, device_class, manifest_key, sha256, kid, signature, choices, created_at";
const RELEASE_COLUMNS: &str = "game, sequence, build_id, manifest_key, sha256, kid, signature, \
    expires_at, reason, created_at";
const REQUEST_COLUMNS: &str = "id, game, build_id, status, sequence, error, created_at, updated_at";

impl Db {
    /// The game's live release: its highest sequence.
    pub async fn live_release(&self, game: &str) -> Result<Option<ReleaseRow>, DbError> {
        Ok(sqlx::query_as::<_, ReleaseRow>(sqlx::AssertSqlSafe(format!(
            "SELECT {RELEASE_COLUMNS} FROM releases WHERE game = $1 \
             ORDER BY sequence DESC LIMIT 1"
        )))
        .bind(game)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Newest first.
    pub async fn releases(&self, game: &str, limit: i64) -> Result<Vec<ReleaseRow>, DbError> {
        Ok(sqlx::query_as::<_, ReleaseRow>(sqlx::AssertSqlSafe(format!(
            "SELECT {RELEASE_COLUMNS} FROM releases WHERE game = $1 \
             ORDER BY sequence DESC LIMIT $2"
        )))
        .bind(game)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    pub async fn release(&self, game: &str, sequence: i64) -> Result<Option<ReleaseRow>, DbError> {
        Ok(sqlx::query_as::<_, ReleaseRow>(sqlx::AssertSqlSafe(format!(
            "SELECT {RELEASE_COLUMNS} FROM releases WHERE game = $1 AND sequence = $2"
        )))
        .bind(game)
        .bind(sequence)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// The release a build's publication made, if it was made.
    pub async fn publish_release(&self, build_id: &str) -> Result<Option<ReleaseRow>, DbError> {
        Ok(sqlx::query_as::<_, ReleaseRow>(sqlx::AssertSqlSafe(format!(
            "SELECT {RELEASE_COLUMNS} FROM releases WHERE build_id = $1 AND reason = 'publish' \
             ORDER BY sequence LIMIT 1"
        )))
        .bind(build_id)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Whether a build of `game` uploaded after `build_id` (per-game upload order: upload
    /// time, then id) has been made live by a publish. A publish of `build_id` must then not
    /// make it live: a build finishing late never replaces a newer one (`worker/src/release.rs`).
    pub async fn newer_build_published(&self, game: &str, build_id: &str) -> Result<bool, DbError> {
        let row = sqlx::query(
            "SELECT COUNT(*) FROM releases r JOIN builds b ON b.id = r.build_id \
             JOIN builds me ON me.id = $2 \
             WHERE r.game = $1 AND r.reason = 'publish' AND b.id <> me.id \
             AND (b.created_at > me.created_at OR (b.created_at = me.created_at AND b.id > me.id))",
        )
        .bind(game)
        .bind(build_id)
        .fetch_one(&self.pool)
        .await?;
        Ok(row.get::<i64, _>(0) > 0)
    }

    /// The compare-and-set every change of a game's live release goes through: adds `r`
    /// (whose `sequence` must be `expected + 1`) and makes its build live, only if the game's
    /// live sequence is still `expected` (0: no release yet). `false`: another writer changed
    /// what is live since it was read; nothing was written (read again and decide again).
    ///
    /// One transaction: `UPDATE games … WHERE live_sequence = expected` first, so the row is
    /// locked and the condition checked against the latest committed value (PostgreSQL's
    /// READ COMMITTED re-evaluates it after waiting for a concurrent writer's commit; SQLite
    /// holds its one write lock from that statement on), then the release row. The
    /// `(game, sequence)` primary key backs it up.
    pub async fn insert_release_if_live(
        &self,
        r: &ReleaseRow,
        expected: i64,
    ) -> Result<bool, DbError> {
        if r.sequence != expected + 1 {
            return Err(DbError::Conflict(format!(
                "release {} of {} does not follow the expected live sequence {expected}",
                r.sequence, r.game
            )));
        }
        let mut tx = self.pool.begin().await?;
        let swapped = sqlx::query(
            "UPDATE games SET live_sequence = $1, live_build_id = $2 \
             WHERE name = $3 AND live_sequence = $4",
        )
        .bind(r.sequence)
        .bind(&r.build_id)
        .bind(&r.game)
        .bind(expected)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if !swapped {
            tx.rollback().await?;
            return Ok(false);
        }
        let inserted = sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO releases ({RELEASE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
             ON CONFLICT (game, sequence) DO NOTHING"
        )))
        .bind(&r.game)
        .bind(r.sequence)
        .bind(&r.build_id)
        .bind(&r.manifest_key)
        .bind(&r.sha256)
        .bind(&r.kid)
        .bind(&r.signature)
        .bind(&r.expires_at)
        .bind(&r.reason)
        .bind(&r.created_at)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if !inserted {
            tx.rollback().await?;
            return Ok(false);
        }
        tx.commit().await?;
        Ok(true)
    }

    /// Every game's live release that expires before `before` (due for a re-sign).
    pub async fn releases_expiring(&self, before: &str) -> Result<Vec<ReleaseRow>, DbError> {
        Ok(sqlx::query_as::<_, ReleaseRow>(sqlx::AssertSqlSafe(format!(
            "SELECT {RELEASE_COLUMNS} FROM releases r WHERE r.expires_at < $1 \
             AND r.sequence = (SELECT MAX(sequence) FROM releases WHERE game = r.game)"
        )))
        .bind(before)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Every game's live release.
    pub async fn live_releases(&self) -> Result<Vec<ReleaseRow>, DbError> {
        Ok(sqlx::query_as::<_, ReleaseRow>(sqlx::AssertSqlSafe(format!(
            "SELECT {RELEASE_COLUMNS} FROM releases r \
             WHERE r.sequence = (SELECT MAX(sequence) FROM releases WHERE game = r.game) \
             ORDER BY r.game"
        )))
        .fetch_all(&self.pool)
        .await?)
    }

    // ---- per-device-class manifests (decode-aware variants) ----

    pub async fn class_manifest(
        &self,
        game: &str,
        sequence: i64,
        device_class: &str,
    ) -> Result<Option<ClassManifestRow>, DbError> {
        Ok(
            sqlx::query_as::<_, ClassManifestRow>(sqlx::AssertSqlSafe(format!(
                "SELECT {CLASS_COLUMNS} FROM class_manifests \
             WHERE game = $1 AND sequence = $2 AND device_class = $3"
            )))
            .bind(game)
            .bind(sequence)
            .bind(device_class)
            .fetch_optional(&self.pool)
            .await?,
        )
    }

    /// The class manifests of one release.
    pub async fn class_manifests(
        &self,
        game: &str,
        sequence: i64,
    ) -> Result<Vec<ClassManifestRow>, DbError> {
        Ok(
            sqlx::query_as::<_, ClassManifestRow>(sqlx::AssertSqlSafe(format!(
                "SELECT {CLASS_COLUMNS} FROM class_manifests WHERE game = $1 AND sequence = $2 \
             ORDER BY device_class"
            )))
            .bind(game)
            .bind(sequence)
            .fetch_all(&self.pool)
            .await?,
        )
    }

    /// The class manifests of every live release (for the dashboards), one game or all.
    pub async fn live_class_manifests(
        &self,
        game: Option<&str>,
        team_id: Option<&str>,
    ) -> Result<Vec<ClassManifestRow>, DbError> {
        Ok(
            sqlx::query_as::<_, ClassManifestRow>(sqlx::AssertSqlSafe(format!(
                "SELECT {CLASS_COLUMNS} FROM class_manifests c \
             WHERE c.sequence = (SELECT MAX(sequence) FROM releases WHERE game = c.game) \
             AND ($1 = '' OR c.game = $1) \
             AND ($2 = '' OR c.game IN (SELECT name FROM games WHERE team_id = $2)) \
             ORDER BY c.game, c.device_class"
            )))
            .bind(game.unwrap_or(""))
            .bind(team_id.unwrap_or(""))
            .fetch_all(&self.pool)
            .await?,
        )
    }

    /// Stores (or replaces, when the choices changed) one class manifest.
    pub async fn put_class_manifest(&self, row: &ClassManifestRow) -> Result<(), DbError> {
        sqlx::query(
            "INSERT INTO class_manifests (game, sequence, device_class, manifest_key, sha256, kid, \
             signature, choices, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
             ON CONFLICT (game, sequence, device_class) DO UPDATE SET \
             manifest_key = excluded.manifest_key, sha256 = excluded.sha256, kid = excluded.kid, \
             signature = excluded.signature, choices = excluded.choices, \
             created_at = excluded.created_at",
        )
        .bind(&row.game)
        .bind(row.sequence)
        .bind(&row.device_class)
        .bind(&row.manifest_key)
        .bind(&row.sha256)
        .bind(&row.kid)
        .bind(&row.signature)
        .bind(&row.choices)
        .bind(&row.created_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    // ---- release requests (the API asks, a worker signs) ----

    pub async fn create_release_request(
        &self,
        id: &str,
        game: &str,
        build_id: &str,
    ) -> Result<(), DbError> {
        let at = now();
        sqlx::query(
            "INSERT INTO release_requests (id, game, build_id, status, created_at, updated_at) \
             VALUES ($1, $2, $3, 'pending', $4, $4)",
        )
        .bind(id)
        .bind(game)
        .bind(build_id)
        .bind(at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn release_request(&self, id: &str) -> Result<Option<ReleaseRequestRow>, DbError> {
        Ok(
            sqlx::query_as::<_, ReleaseRequestRow>(sqlx::AssertSqlSafe(format!(
                "SELECT {REQUEST_COLUMNS} FROM release_requests WHERE id = $1"
            )))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?,
        )
    }

    /// Oldest first.
    pub async fn pending_release_requests(&self) -> Result<Vec<ReleaseRequestRow>, DbError> {
        Ok(sqlx::query_as::<_, ReleaseRequestRow>(sqlx::AssertSqlSafe(format!(
            "SELECT {REQUEST_COLUMNS} FROM release_requests WHERE status IN ('pending', 'signing') \
             ORDER BY created_at, id LIMIT 100"
        )))
        .fetch_all(&self.pool)
        .await?)
    }

    /// Takes a pending request (or one a crashed worker took over a minute ago). `false`:
    /// another worker has it.
    pub async fn claim_release_request(&self, id: &str) -> Result<bool, DbError> {
        let stale = timestamp(chrono::Utc::now() - chrono::Duration::seconds(60));
        Ok(sqlx::query(
            "UPDATE release_requests SET status = 'signing', updated_at = $1 \
             WHERE id = $2 AND (status = 'pending' OR (status = 'signing' AND updated_at < $3))",
        )
        .bind(now())
        .bind(id)
        .bind(stale)
        .execute(&self.pool)
        .await?
        .rows_affected()
            == 1)
    }

    pub async fn finish_release_request(
        &self,
        id: &str,
        outcome: Result<i64, String>,
    ) -> Result<(), DbError> {
        let (status, sequence, error) = match outcome {
            Ok(sequence) => ("done", Some(sequence), None),
            Err(e) => ("failed", None, Some(e)),
        };
        sqlx::query(
            "UPDATE release_requests SET status = $1, sequence = $2, error = $3, updated_at = $4 \
             WHERE id = $5 AND status = 'signing'",
        )
        .bind(status)
        .bind(sequence)
        .bind(error)
        .bind(now())
        .bind(id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}
