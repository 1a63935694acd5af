-- Leases of the scheduled lanes: one replica runs each lane per period.
-- Platform-owned.
CREATE TABLE lane_leases (
    name       TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    expires_at TIMESTAMP NOT NULL,
    last_run_at TIMESTAMP,
    last_error TEXT NOT NULL DEFAULT ''
);
