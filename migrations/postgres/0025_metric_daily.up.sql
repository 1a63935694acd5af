-- Per-day counts kept by the server's metrics (capability calls and
-- denials), for the admin overview. Written by a periodic flush of
-- in-memory counters, never once per call.
CREATE TABLE metric_daily (
    day TEXT NOT NULL,
    name TEXT NOT NULL,
    value BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (day, name)
);
