-- Connected accounts (package integrations). Owned by users.id through
-- user_id. token_ciphertext is the sealed token set (access token, refresh
-- token, type, expiry), bound to "integration:connection:<stable user
-- id>:<public_id>" under data key key_id. refresh_at is when the refresh
-- lane renews the access token (NULL: nothing to renew).
CREATE TABLE integration_connections (
    id               INTEGER PRIMARY KEY,
    user_id          INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    public_id        TEXT NOT NULL UNIQUE,
    name             TEXT NOT NULL,
    provider         TEXT NOT NULL,
    scopes           TEXT NOT NULL DEFAULT '[]',
    status           TEXT NOT NULL,
    key_id           INTEGER NOT NULL REFERENCES data_keys (id),
    token_ciphertext TEXT NOT NULL,
    expires_at       TIMESTAMP,
    refresh_at       TIMESTAMP,
    last_used_at     TIMESTAMP,
    last_error       TEXT NOT NULL DEFAULT '',
    created_at       TIMESTAMP NOT NULL,
    updated_at       TIMESTAMP NOT NULL,
    UNIQUE (user_id, name)
);
CREATE INDEX integration_connections_refresh ON integration_connections (refresh_at);

-- Pending connect flows: one row per authorization request, keyed by the
-- hash of its state, bound to the person and their browser (binding_hash),
-- used once. verifier_ciphertext is the sealed PKCE verifier.
CREATE TABLE integration_states (
    state_hash          TEXT PRIMARY KEY,
    user_id             INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    binding_hash        TEXT NOT NULL,
    provider            TEXT NOT NULL,
    name                TEXT NOT NULL,
    key_id              INTEGER NOT NULL REFERENCES data_keys (id),
    verifier_ciphertext TEXT NOT NULL,
    created_at          TIMESTAMP NOT NULL,
    expires_at          TIMESTAMP NOT NULL
);
CREATE INDEX integration_states_user ON integration_states (user_id, created_at);
