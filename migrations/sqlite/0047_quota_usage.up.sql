-- Daily call counters per user and capability class, shared by every
-- replica (each flushes its in-memory counts in batches). day is the UTC
-- date, YYYY-MM-DD; rows older than seven days are purged. Owned by
-- users.id through user_id.
CREATE TABLE quota_usage (
    id      INTEGER PRIMARY KEY,
    user_id INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    class   TEXT NOT NULL,
    day     TEXT NOT NULL,
    calls   BIGINT NOT NULL,
    UNIQUE (user_id, class, day)
);
CREATE INDEX quota_usage_day ON quota_usage (day);
