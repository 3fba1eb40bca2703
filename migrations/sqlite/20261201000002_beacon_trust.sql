-- Beacons Kiln can trust: an event carrying the beacon token of a manifest Kiln signed
-- (HMAC with the telemetry secret, per release, expiring) is trusted; others are stored
-- here flagged and feed no rollup, metric, variant choice or library ROI (docs/telemetry.md).
ALTER TABLE telemetry_events ADD COLUMN trusted INTEGER NOT NULL DEFAULT 0;
-- A salted hash of the client's address (IPv4, or IPv6 /64), never the address itself.
ALTER TABLE telemetry_events ADD COLUMN client TEXT;

-- Decode latencies per client (trusted beacons only): the variant choices count distinct
-- clients and give each one vote (its own p90, then the median across clients). Pruned with
-- the raw events, as it names clients.
CREATE TABLE decode_client_buckets (
    hour          TEXT NOT NULL,
    game          TEXT NOT NULL,
    asset         TEXT NOT NULL,
    variant       TEXT NOT NULL,
    device_class  TEXT NOT NULL,
    client        TEXT NOT NULL,
    bucket        INTEGER NOT NULL,
    count         INTEGER NOT NULL,
    PRIMARY KEY (hour, game, asset, variant, device_class, client, bucket)
);
CREATE INDEX decode_client_buckets_game ON decode_client_buckets (game, hour);
