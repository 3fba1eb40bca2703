-- The live release changes only by a compare-and-set on the game's current sequence
-- (common/src/db/releases.rs `insert_release_if_live`): a writer reads what is live, decides,
-- signs `live_sequence + 1`, and its insert succeeds only while `live_sequence` is still
-- what it read (an UPDATE … WHERE live_sequence = expected: under READ COMMITTED the row
-- lock makes a second writer re-check the condition against the first one's commit).
-- 0: the game has no release yet.
ALTER TABLE games ADD COLUMN live_sequence BIGINT NOT NULL DEFAULT 0;
UPDATE games SET live_sequence = COALESCE(
    (SELECT MAX(sequence) FROM releases WHERE releases.game = games.name), 0);
UPDATE games SET live_build_id = (
    SELECT r.build_id FROM releases r
    WHERE r.game = games.name AND r.sequence = games.live_sequence)
WHERE live_sequence > 0;

-- Builds: the Idempotency-Key is matched per game (team + game + key), not per team; identical
-- bytes for the same game and version are one build unless that build failed (a re-upload
-- with a new key then makes a new build).
ALTER TABLE builds DROP CONSTRAINT builds_team_id_idempotency_key_key;
ALTER TABLE builds DROP CONSTRAINT builds_game_version_package_sha256_key;
CREATE UNIQUE INDEX builds_content ON builds (game, version, package_sha256)
    WHERE status <> 'failed';
CREATE UNIQUE INDEX builds_idempotency ON builds (team_id, game, idempotency_key);
-- Per-game upload order: a publish never replaces a build uploaded after it.
CREATE INDEX builds_upload_order ON builds (game, created_at, id);
