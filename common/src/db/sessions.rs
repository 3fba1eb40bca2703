//! Dashboard sessions: a login's hashed id, whose it is (a team, or the admin), and its expiry.

use sqlx::Row;

use super::{Db, DbError, now, timestamp};

/// Who a live dashboard session belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionOwner {
    Admin,
    Team(String),
}

impl Db {
    /// Stores a new session (`id_hash`: the SHA-256 of its id) lasting `ttl_secs`; expired
    /// sessions are removed on the way.
    pub async fn create_dashboard_session(
        &self,
        id_hash: &str,
        owner: &SessionOwner,
        ttl_secs: u64,
    ) -> Result<(), DbError> {
        let created = now();
        let expires = timestamp(chrono::Utc::now() + chrono::Duration::seconds(ttl_secs as i64));
        sqlx::query("DELETE FROM dashboard_sessions WHERE expires_at <= $1")
            .bind(&created)
            .execute(&self.pool)
            .await?;
        let team = match owner {
            SessionOwner::Admin => None,
            SessionOwner::Team(id) => Some(id.clone()),
        };
        sqlx::query(
            "INSERT INTO dashboard_sessions (id_hash, team_id, created_at, expires_at) \
             VALUES ($1, $2, $3, $4)",
        )
        .bind(id_hash)
        .bind(team)
        .bind(&created)
        .bind(&expires)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The owner of a session that has not expired.
    pub async fn dashboard_session(&self, id_hash: &str) -> Result<Option<SessionOwner>, DbError> {
        let row = sqlx::query(
            "SELECT team_id FROM dashboard_sessions WHERE id_hash = $1 AND expires_at > $2",
        )
        .bind(id_hash)
        .bind(now())
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| match r.get::<Option<String>, _>(0) {
            Some(team) => SessionOwner::Team(team),
            None => SessionOwner::Admin,
        }))
    }

    /// Logout: the session is gone.
    pub async fn delete_dashboard_session(&self, id_hash: &str) -> Result<(), DbError> {
        sqlx::query("DELETE FROM dashboard_sessions WHERE id_hash = $1")
            .bind(id_hash)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}
