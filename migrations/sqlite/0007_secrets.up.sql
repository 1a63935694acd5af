-- Envelope encryption: data keys wrapped by the secrets keeper (platform-owned),
-- and per-user named secrets sealed under them.
CREATE TABLE data_keys (
    id          INTEGER PRIMARY KEY,
    wrapped_key TEXT NOT NULL,
    created_at  TIMESTAMP NOT NULL,
    retired_at  TIMESTAMP
);

-- Owned by users.id through user_id. ciphertext is "v1.<nonce>.<sealed>",
-- bound to "secret:user:<stable user id>:<name>", under data key key_id.
CREATE TABLE user_secrets (
    id          INTEGER PRIMARY KEY,
    user_id     INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    key_id      INTEGER NOT NULL REFERENCES data_keys (id),
    ciphertext  TEXT NOT NULL,
    created_at  TIMESTAMP NOT NULL,
    updated_at  TIMESTAMP NOT NULL,
    UNIQUE (user_id, name)
);
CREATE INDEX user_secrets_key_id ON user_secrets (key_id);
