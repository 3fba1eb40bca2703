-- The shared engine library, the releases that make a build live (sequence + expiry, for
-- rollback and freeze protection), release requests from the API, and loader telemetry.

-- One row per distinct engine file (by content); stored once under `object_key`.
CREATE TABLE library_entries (
    sha256          TEXT PRIMARY KEY,
    engine          TEXT NOT NULL,
    version         TEXT NOT NULL,
    size            BIGINT NOT NULL,
    object_key      TEXT NOT NULL,
    first_build_id  TEXT NOT NULL,
    created_at      TEXT NOT NULL
);
CREATE INDEX library_entries_engine ON library_entries (engine, version);

-- Which builds (of which games) carry each library entry, and at which path.
CREATE TABLE library_refs (
    sha256    TEXT NOT NULL REFERENCES library_entries(sha256) ON DELETE CASCADE,
    build_id  TEXT NOT NULL REFERENCES builds(id),
    game      TEXT NOT NULL,
    path      TEXT NOT NULL,
    PRIMARY KEY (sha256, build_id, path)
);
CREATE INDEX library_refs_build ON library_refs (build_id);

-- Every signed release of a game; the live one is the highest sequence.
CREATE TABLE releases (
    game          TEXT NOT NULL REFERENCES games(name),
    sequence      BIGINT NOT NULL,
    build_id      TEXT NOT NULL REFERENCES builds(id),
    manifest_key  TEXT NOT NULL,
    sha256        TEXT NOT NULL,
    kid           TEXT NOT NULL,
    signature     TEXT NOT NULL,
    expires_at    TEXT NOT NULL,
    reason        TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    PRIMARY KEY (game, sequence)
);
CREATE INDEX releases_build ON releases (build_id);

-- `POST /v1/games/{game}/releases` asks; a worker (which holds the signing key) signs.
CREATE TABLE release_requests (
    id          TEXT PRIMARY KEY,
    game        TEXT NOT NULL REFERENCES games(name),
    build_id    TEXT NOT NULL REFERENCES builds(id),
    status      TEXT NOT NULL,
    sequence    BIGINT,
    error       TEXT,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);
CREATE INDEX release_requests_status ON release_requests (status);

-- Loader beacons as received (validated). The dashboards aggregate them.
CREATE TABLE telemetry_events (
    id            BIGSERIAL PRIMARY KEY,
    received_at   TEXT NOT NULL,
    kind          TEXT NOT NULL,
    game          TEXT NOT NULL,
    engine        TEXT,
    version       TEXT,
    outcome       TEXT,
    reason        TEXT,
    ms            DOUBLE PRECISION,
    prewarmed     BIGINT,
    device_class  TEXT,
    device        TEXT
);
CREATE INDEX telemetry_events_engine ON telemetry_events (engine, version, outcome);
CREATE INDEX telemetry_events_game ON telemetry_events (game, received_at);
