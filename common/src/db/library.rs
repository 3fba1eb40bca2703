//! The shared engine library's index: entries, the builds that carry them, their reuse.

use sqlx::{AssertSqlSafe, Row};

use super::{Db, DbError, now};

/// An engine file a build carries, to index.
#[derive(Debug, Clone)]
pub struct LibraryFile {
    pub sha256: String,
    pub engine: String,
    pub version: String,
    pub size: i64,
    pub object_key: String,
    pub path: String,
    /// Its brotli form's size (what the CDN sends for it), if it has one.
    pub br_size: Option<i64>,
}

/// One library entry with its reuse and what telemetry says it saved.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct LibraryRow {
    pub sha256: String,
    pub engine: String,
    pub version: String,
    pub size: i64,
    pub object_key: String,
    pub first_build_id: String,
    pub created_at: String,
    pub games: i64,
    pub builds: i64,
    /// Games whose live release carries it.
    pub live_games: i64,
    pub hits: i64,
    pub misses: i64,
    pub fallbacks: i64,
    /// What the CDN sends for it: its brotli form's size (its `size` for an entry indexed
    /// before sizes were recorded, or one without a brotli form).
    pub br_size: i64,
    /// Hits another game's visit brought (`shared`): only these saved a download.
    pub shared_hits: i64,
}

impl Db {
    /// Indexes a published build's engine files: each distinct file once (the first build
    /// that brought it is kept), and this build's reference to it.
    pub async fn record_library(
        &self,
        build_id: &str,
        game: &str,
        files: &[LibraryFile],
    ) -> Result<(), DbError> {
        let mut tx = self.pool.begin().await?;
        let at = now();
        for f in files {
            let inserted = sqlx::query(
                "INSERT INTO library_entries (sha256, engine, version, size, object_key, \
                 first_build_id, created_at, br_size) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
                 ON CONFLICT (sha256) DO NOTHING",
            )
            .bind(&f.sha256)
            .bind(&f.engine)
            .bind(&f.version)
            .bind(f.size)
            .bind(&f.object_key)
            .bind(build_id)
            .bind(&at)
            .bind(f.br_size)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if inserted == 0
                && let Some(br_size) = f.br_size
            {
                // An entry indexed before sizes were recorded gets one now. (A plain UPDATE
                // locks only the rows it changes, unlike an upsert's DO UPDATE.)
                sqlx::query(
                    "UPDATE library_entries SET br_size = $1 \
                     WHERE sha256 = $2 AND br_size IS NULL",
                )
                .bind(br_size)
                .bind(&f.sha256)
                .execute(&mut *tx)
                .await?;
            }
            sqlx::query(
                "INSERT INTO library_refs (sha256, build_id, game, path) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (sha256, build_id, path) DO NOTHING",
            )
            .bind(&f.sha256)
            .bind(build_id)
            .bind(game)
            .bind(&f.path)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Every entry, biggest first, with reuse counts and telemetry outcomes (matched by
    /// engine and version: what the loader reports), shared hits among them.
    pub async fn library(&self) -> Result<Vec<LibraryRow>, DbError> {
        self.library_for(None).await
    }

    /// [`Db::library`] as one team sees it (`Some(team)`): only the entries its own games'
    /// builds carry, and every count (games, builds, loader outcomes) over its own games only.
    pub async fn library_for(&self, team_id: Option<&str>) -> Result<Vec<LibraryRow>, DbError> {
        // `$1`: the team, or '' for every team.
        let mine = |column: &str| {
            format!("($1 = '' OR {column} IN (SELECT name FROM games WHERE team_id = $1))")
        };
        // Outcomes come from the hourly rollups, which outlive the raw events.
        let outcome = |outcome: &str| {
            format!(
                "(SELECT CAST(COALESCE(SUM(p.count), 0) AS BIGINT) FROM preheat_hourly p \
                 WHERE p.engine = e.engine AND p.version = e.version AND p.outcome = '{outcome}' \
                 AND {})",
                mine("p.game")
            )
        };
        let sql = format!(
            "SELECT e.sha256, e.engine, e.version, e.size, e.object_key, e.first_build_id, \
             e.created_at, \
             (SELECT COUNT(DISTINCT r.game) FROM library_refs r WHERE r.sha256 = e.sha256 \
                AND {refs}) AS games, \
             (SELECT COUNT(DISTINCT r.build_id) FROM library_refs r WHERE r.sha256 = e.sha256 \
                AND {refs}) AS builds, \
             (SELECT COUNT(DISTINCT rel.game) FROM releases rel \
                JOIN library_refs r ON r.build_id = rel.build_id WHERE r.sha256 = e.sha256 \
                AND rel.sequence = (SELECT MAX(sequence) FROM releases WHERE game = rel.game) \
                AND {live}) AS live_games, \
             {} AS hits, {} AS misses, {} AS fallbacks, \
             CAST(COALESCE(e.br_size, e.size) AS BIGINT) AS br_size, \
             (SELECT CAST(COALESCE(SUM(p.shared_hits), 0) AS BIGINT) FROM preheat_hourly p \
                WHERE p.engine = e.engine AND p.version = e.version AND p.outcome = 'hit' \
                AND {shared}) AS shared_hits \
             FROM library_entries e WHERE ($1 = '' OR e.sha256 IN (SELECT r.sha256 FROM library_refs r \
                WHERE {refs})) ORDER BY e.size DESC, e.sha256",
            outcome("hit"),
            outcome("miss"),
            outcome("fallback"),
            refs = mine("r.game"),
            live = mine("rel.game"),
            shared = mine("p.game"),
        );
        Ok(sqlx::query_as::<_, LibraryRow>(AssertSqlSafe(sql))
            .bind(team_id.unwrap_or(""))
            .fetch_all(&self.pool)
            .await?)
    }

    /// What the CDN sends for each engine version in the library: the largest brotli form
    /// (or size, where none is recorded) among its entries, by (engine, version).
    pub async fn library_transfer_sizes(
        &self,
    ) -> Result<std::collections::HashMap<(String, String), i64>, DbError> {
        let rows = sqlx::query(
            "SELECT engine, version, CAST(MAX(COALESCE(br_size, size)) AS BIGINT) \
             FROM library_entries GROUP BY engine, version",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| ((r.get(0), r.get(1)), r.get::<i64, _>(2)))
            .collect())
    }

    /// The entries a team's builds carry.
    pub async fn library_shas_of_team(
        &self,
        team_id: &str,
    ) -> Result<std::collections::HashSet<String>, DbError> {
        let rows = sqlx::query(
            "SELECT DISTINCT r.sha256 FROM library_refs r \
             JOIN games g ON g.name = r.game WHERE g.team_id = $1",
        )
        .bind(team_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(|r| r.get::<String, _>(0)).collect())
    }

    /// Games whose live release carries the entry: while there is one, it must stay.
    pub async fn live_games_using(&self, sha256: &str) -> Result<Vec<String>, DbError> {
        let rows = sqlx::query(
            "SELECT DISTINCT rel.game FROM releases rel \
             JOIN library_refs r ON r.build_id = rel.build_id \
             WHERE r.sha256 = $1 \
             AND rel.sequence = (SELECT MAX(sequence) FROM releases WHERE game = rel.game) \
             ORDER BY rel.game",
        )
        .bind(sha256)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(|r| r.get::<String, _>(0)).collect())
    }

    /// The entry's object key, if the entry exists.
    pub async fn library_object(&self, sha256: &str) -> Result<Option<String>, DbError> {
        Ok(
            sqlx::query("SELECT object_key FROM library_entries WHERE sha256 = $1")
                .bind(sha256)
                .fetch_optional(&self.pool)
                .await?
                .map(|r| r.get::<String, _>(0)),
        )
    }

    pub async fn delete_library_entry(&self, sha256: &str) -> Result<(), DbError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM library_refs WHERE sha256 = $1")
            .bind(sha256)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM library_entries WHERE sha256 = $1")
            .bind(sha256)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }
}
