-- Device telemetry: decode events beside pre-warm ones, the device each came from, hourly
-- rollups (counts and latency sketches) for the dashboards and variant choices, and the
-- per-device-class manifests workers sign from them.

ALTER TABLE telemetry_events ADD COLUMN asset TEXT;
ALTER TABLE telemetry_events ADD COLUMN variant TEXT;
ALTER TABLE telemetry_events ADD COLUMN decoder TEXT;
ALTER TABLE telemetry_events ADD COLUMN bytes BIGINT;
ALTER TABLE telemetry_events ADD COLUMN fallback BIGINT;
ALTER TABLE telemetry_events ADD COLUMN os TEXT;
ALTER TABLE telemetry_events ADD COLUMN runtime TEXT;
-- The raw model stays here; only its class goes into rollups and metric labels.
ALTER TABLE telemetry_events ADD COLUMN device_model TEXT;
CREATE INDEX telemetry_events_received ON telemetry_events (received_at);
-- The library's outcomes now come from the rollups; one index less to keep on every insert.
DROP INDEX telemetry_events_engine;

-- Pre-warm outcomes per hour × game × engine version × device class × outcome × reason.
CREATE TABLE preheat_hourly (
    hour          TEXT NOT NULL,
    game          TEXT NOT NULL,
    engine        TEXT NOT NULL,
    version       TEXT NOT NULL,
    device_class  TEXT NOT NULL,
    outcome       TEXT NOT NULL,
    reason        TEXT NOT NULL,
    count         BIGINT NOT NULL,
    bytes         BIGINT NOT NULL,
    ms_sum        DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (hour, game, engine, version, device_class, outcome, reason)
);
CREATE INDEX preheat_hourly_engine ON preheat_hourly (engine, version);

-- Decodes per hour × game × asset × variant × decoder × device class.
CREATE TABLE decode_hourly (
    hour          TEXT NOT NULL,
    game          TEXT NOT NULL,
    asset         TEXT NOT NULL,
    variant       TEXT NOT NULL,
    decoder       TEXT NOT NULL,
    device_class  TEXT NOT NULL,
    count         BIGINT NOT NULL,
    fallbacks     BIGINT NOT NULL,
    bytes         BIGINT NOT NULL,
    ms_sum        DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (hour, game, asset, variant, decoder, device_class)
);

-- Latency sketches (common/src/rollups.rs): events per logarithmic bucket. kind 'preheat':
-- subject = engine, facet = outcome; kind 'decode': subject = asset, facet = variant.
CREATE TABLE latency_buckets (
    hour          TEXT NOT NULL,
    kind          TEXT NOT NULL,
    game          TEXT NOT NULL,
    subject       TEXT NOT NULL,
    facet         TEXT NOT NULL,
    device_class  TEXT NOT NULL,
    bucket        BIGINT NOT NULL,
    count         BIGINT NOT NULL,
    PRIMARY KEY (hour, kind, game, subject, facet, device_class, bucket)
);
CREATE INDEX latency_buckets_game ON latency_buckets (kind, game, hour);

-- A live release re-decided for one device class: the same files and sequence, each model's
-- variant chosen for the class, signed by a worker.
CREATE TABLE class_manifests (
    game          TEXT NOT NULL,
    sequence      BIGINT NOT NULL,
    device_class  TEXT NOT NULL,
    manifest_key  TEXT NOT NULL,
    sha256        TEXT NOT NULL,
    kid           TEXT NOT NULL,
    signature     TEXT NOT NULL,
    -- JSON: [{asset, variant, reason, detail}], for the dashboards and audits.
    choices       TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    PRIMARY KEY (game, sequence, device_class)
);
