-- Security audit log. Identifiers are keyed hashes (HMAC-SHA-256 with a
-- platform key), never raw user ids, emails or IP addresses: the log is
-- platform-owned and outlives deleted accounts for its retention window.
CREATE TABLE audit_events (
    id        INTEGER PRIMARY KEY,
    at        TIMESTAMP NOT NULL,
    category  TEXT NOT NULL,
    action    TEXT NOT NULL,
    result    TEXT NOT NULL CHECK (result IN ('success', 'failure', 'denied')),
    reason    TEXT NOT NULL DEFAULT '',
    user_hash TEXT NOT NULL DEFAULT '',
    ip_hash   TEXT NOT NULL DEFAULT '',
    client_id TEXT NOT NULL DEFAULT ''
);
CREATE INDEX audit_events_at ON audit_events (at);
CREATE INDEX audit_events_user_hash ON audit_events (user_hash, id);

-- Named platform keys (e.g. the audit hash key), sealed with the envelope
-- data keys.
CREATE TABLE platform_keys (
    name       TEXT PRIMARY KEY,
    key_id     INTEGER NOT NULL REFERENCES data_keys (id),
    ciphertext TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL
);
