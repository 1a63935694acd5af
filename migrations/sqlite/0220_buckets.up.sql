-- Storage buckets: a user's durable key/value state, addressed by
-- (user_id, storage_id). kind and bound_name say what a bucket is bound to
-- (a code run, a package, a package job) so retention can find the ones
-- whose owner object is gone. Keys compare bytewise (code point order), so
-- listings by prefix are index ranges.
CREATE TABLE storage_buckets (
    id         INTEGER PRIMARY KEY,
    user_id    INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    storage_id TEXT NOT NULL,
    kind       TEXT NOT NULL CHECK (kind IN ('exec', 'package', 'job', 'named')),
    bound_name TEXT NOT NULL DEFAULT '',
    bytes      INTEGER NOT NULL DEFAULT 0,
    key_count  INTEGER NOT NULL DEFAULT 0,
    created_at TIMESTAMP NOT NULL,
    updated_at TIMESTAMP NOT NULL,
    UNIQUE (user_id, storage_id)
);
CREATE INDEX storage_buckets_bound ON storage_buckets (kind, updated_at);

-- One row per key. bytes is the key's and the value's length, the amount
-- charged to the owner's budget; revision is the owner's usage revision of
-- the write that set it (never reused, so a compare-and-set cannot mistake
-- a recreated key for the one it read).
CREATE TABLE storage_entries (
    id         INTEGER PRIMARY KEY,
    user_id    INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    bucket_id  INTEGER NOT NULL REFERENCES storage_buckets (id) ON DELETE CASCADE,
    entry_key  TEXT NOT NULL,
    value      TEXT NOT NULL,
    bytes      INTEGER NOT NULL,
    revision   INTEGER NOT NULL,
    updated_at TIMESTAMP NOT NULL,
    UNIQUE (bucket_id, entry_key)
);
CREATE INDEX storage_entries_user ON storage_entries (user_id);

-- The authoritative byte and key counters of a user's buckets: every write
-- reserves against them in its own transaction, with the limit checked by
-- the UPDATE; revision grows with every write.
CREATE TABLE storage_usage (
    user_id    INTEGER PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    bytes      INTEGER NOT NULL DEFAULT 0,
    key_count  INTEGER NOT NULL DEFAULT 0,
    revision   INTEGER NOT NULL DEFAULT 0,
    updated_at TIMESTAMP NOT NULL
);
