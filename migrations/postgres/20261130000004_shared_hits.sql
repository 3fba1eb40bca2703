-- What the shared library saves counts bytes sent (each entry's brotli form) and only the
-- hits another game's visit brought (`shared` in preheat beacons): a same-game repeat would
-- have come from the HTTP cache without the library.

-- The brotli form's size of the entry (what the CDN sends for it), set when a build indexes
-- it; entries indexed before this column have it filled by the next build carrying them.
ALTER TABLE library_entries ADD COLUMN br_size BIGINT;
-- Preheat: the engine was on the device, put there by a visit of another game (1/0).
ALTER TABLE telemetry_events ADD COLUMN shared BIGINT;
-- Of `count`, the hits with `shared` true.
ALTER TABLE preheat_hourly ADD COLUMN shared_hits BIGINT NOT NULL DEFAULT 0;
