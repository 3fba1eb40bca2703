-- Teams, tokens, games, builds and their stages, published manifests, signing keys.
-- Times are RFC 3339 UTC text so both databases (and the Any driver) read them alike.

CREATE TABLE teams (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    created_at  TEXT NOT NULL
);

-- Only the SHA-256 of a token is stored; the token itself is shown once.
CREATE TABLE team_tokens (
    token_hash  TEXT PRIMARY KEY,
    team_id     TEXT NOT NULL REFERENCES teams(id),
    created_at  TEXT NOT NULL
);

-- A game name belongs to the team that first uploaded it.
CREATE TABLE games (
    name           TEXT PRIMARY KEY,
    team_id        TEXT NOT NULL REFERENCES teams(id),
    live_build_id  TEXT,
    created_at     TEXT NOT NULL
);

CREATE TABLE builds (
    id               TEXT PRIMARY KEY,
    team_id          TEXT NOT NULL REFERENCES teams(id),
    game             TEXT NOT NULL REFERENCES games(name),
    version          TEXT NOT NULL,
    status           TEXT NOT NULL,
    package_key      TEXT NOT NULL,
    package_format   TEXT NOT NULL,
    package_sha256   TEXT NOT NULL,
    package_size     BIGINT NOT NULL,
    idempotency_key  TEXT,
    error            TEXT,
    report           TEXT,
    manifest_key     TEXT,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    -- Identical bytes for the same game and version are one build.
    UNIQUE (game, version, package_sha256),
    UNIQUE (team_id, idempotency_key)
);
CREATE INDEX builds_status ON builds (status);

CREATE TABLE build_stages (
    build_id     TEXT NOT NULL REFERENCES builds(id),
    position     BIGINT NOT NULL,
    name         TEXT NOT NULL,
    status       TEXT NOT NULL,
    progress     DOUBLE PRECISION NOT NULL DEFAULT 0,
    started_at   TEXT,
    finished_at  TEXT,
    error        TEXT,
    PRIMARY KEY (build_id, name)
);

-- At most one manifest per build, whatever happens to the job that publishes it.
CREATE TABLE manifests (
    build_id      TEXT PRIMARY KEY REFERENCES builds(id),
    game          TEXT NOT NULL REFERENCES games(name),
    manifest_key  TEXT NOT NULL,
    sha256        TEXT NOT NULL,
    kid           TEXT NOT NULL,
    signature     TEXT NOT NULL,
    created_at    TEXT NOT NULL
);

-- Public halves of every key that ever signed a manifest (for JWKS and rotation).
CREATE TABLE signing_keys (
    kid         TEXT PRIMARY KEY,
    jwk         TEXT NOT NULL,
    created_at  TEXT NOT NULL
);
