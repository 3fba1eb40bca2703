-- no-transaction
-- (SQLite cannot drop a table's UNIQUE constraint: `builds` is rebuilt, which needs foreign
-- keys off outside a transaction; the rest runs in one transaction.)
PRAGMA foreign_keys = OFF;
BEGIN;

-- The live release changes only by a compare-and-set on the game's current sequence
-- (common/src/db/releases.rs `insert_release_if_live`): a writer reads what is live, decides,
-- signs `live_sequence + 1`, and its insert succeeds only while `live_sequence` is still
-- what it read. 0: the game has no release yet.
ALTER TABLE games ADD COLUMN live_sequence INTEGER NOT NULL DEFAULT 0;
UPDATE games SET live_sequence = COALESCE(
    (SELECT MAX(sequence) FROM releases WHERE releases.game = games.name), 0);
UPDATE games SET live_build_id = (
    SELECT r.build_id FROM releases r
    WHERE r.game = games.name AND r.sequence = games.live_sequence)
WHERE live_sequence > 0;

-- Builds: the Idempotency-Key is matched per game (team + game + key), not per team; identical
-- bytes for the same game and version are one build unless that build failed (a re-upload
-- with a new key then makes a new build).
CREATE TABLE builds_new (
    id               TEXT PRIMARY KEY,
    team_id          TEXT NOT NULL REFERENCES teams(id),
    game             TEXT NOT NULL REFERENCES games(name),
    version          TEXT NOT NULL,
    status           TEXT NOT NULL,
    package_key      TEXT NOT NULL,
    package_format   TEXT NOT NULL,
    package_sha256   TEXT NOT NULL,
    package_size     INTEGER NOT NULL,
    idempotency_key  TEXT,
    error            TEXT,
    report           TEXT,
    manifest_key     TEXT,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL
);
INSERT INTO builds_new (id, team_id, game, version, status, package_key, package_format,
    package_sha256, package_size, idempotency_key, error, report, manifest_key, created_at,
    updated_at)
SELECT id, team_id, game, version, status, package_key, package_format, package_sha256,
    package_size, idempotency_key, error, report, manifest_key, created_at, updated_at
FROM builds;
DROP TABLE builds;
ALTER TABLE builds_new RENAME TO builds;
CREATE INDEX builds_status ON builds (status);
CREATE UNIQUE INDEX builds_content ON builds (game, version, package_sha256)
    WHERE status <> 'failed';
CREATE UNIQUE INDEX builds_idempotency ON builds (team_id, game, idempotency_key);
-- Per-game upload order: a publish never replaces a build uploaded after it.
CREATE INDEX builds_upload_order ON builds (game, created_at, id);

COMMIT;
PRAGMA foreign_keys = ON;
