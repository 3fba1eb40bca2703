//! Trust documents: every version the root signed; the newest is the one served.

use sha2::{Digest, Sha256};
use sqlx::Row;

use super::{Db, DbError, now};

/// One stored trust document: its version and the exact served envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustRow {
    pub version: i64,
    pub envelope: String,
    pub sha256: String,
}

impl Db {
    pub async fn latest_trust_document(&self) -> Result<Option<TrustRow>, DbError> {
        let row = sqlx::query(
            "SELECT version, envelope, sha256 FROM trust_documents ORDER BY version DESC LIMIT 1",
        )
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| TrustRow {
            version: r.get(0),
            envelope: r.get(1),
            sha256: r.get(2),
        }))
    }

    /// Stores a new version; `false` when that version exists already (another process
    /// issued it first: read the latest and decide again).
    pub async fn insert_trust_document(
        &self,
        version: u64,
        envelope: &str,
    ) -> Result<bool, DbError> {
        let sha256 = hex::encode(Sha256::digest(envelope.as_bytes()));
        let inserted = sqlx::query(
            "INSERT INTO trust_documents (version, envelope, sha256, created_at) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (version) DO NOTHING",
        )
        .bind(version as i64)
        .bind(envelope)
        .bind(sha256)
        .bind(now())
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(inserted == 1)
    }

    /// Live releases and their per-class manifests signed by `kid`: `(game, sequence,
    /// device class or "")`.
    pub async fn live_signed_by(&self, kid: &str) -> Result<Vec<(String, i64, String)>, DbError> {
        let rows = sqlx::query(
            "SELECT r.game, r.sequence, '' FROM releases r WHERE r.kid = $1 \
               AND r.sequence = (SELECT MAX(sequence) FROM releases WHERE game = r.game) \
             UNION ALL \
             SELECT c.game, c.sequence, c.device_class FROM class_manifests c WHERE c.kid = $1 \
               AND c.sequence = (SELECT MAX(sequence) FROM releases WHERE game = c.game) \
             ORDER BY 1, 3",
        )
        .bind(kid)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect())
    }
}
