-- The root-signed trust documents (common/src/trust.rs): which signing keys may sign
-- manifests. Every version is kept; the newest is served at /v1/keys/trust. `envelope` is
-- the served JSON ({"signed": "<document text>", "signatures": [...]}), byte for byte.
CREATE TABLE trust_documents (
    version     BIGINT PRIMARY KEY,
    envelope    TEXT NOT NULL,
    sha256      TEXT NOT NULL,
    created_at  TEXT NOT NULL
);
