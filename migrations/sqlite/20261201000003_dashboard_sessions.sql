-- Dashboard logins: `POST /dashboard/session` trades a team or the admin token for a random
-- session id in an HttpOnly cookie, so the page keeps no long-lived token where a script can
-- read it. Only the id's SHA-256 is stored. `team_id` NULL: an admin session.
CREATE TABLE dashboard_sessions (
    id_hash     TEXT PRIMARY KEY,
    team_id     TEXT REFERENCES teams(id),
    created_at  TEXT NOT NULL,
    expires_at  TEXT NOT NULL
);
CREATE INDEX dashboard_sessions_expiry ON dashboard_sessions (expires_at);
