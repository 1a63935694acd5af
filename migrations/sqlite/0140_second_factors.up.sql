-- Second factors. Every table is owned by users.id through user_id and
-- deleted with the account.

-- One authenticator app (TOTP) per account. secret is sealed with the
-- envelope ring ("v1.<nonce>.<sealed>" under data key key_id), bound to
-- "totp:user:<stable user id>". confirmed_at is NULL while enrolment waits
-- for its first code. last_step is the last accepted 30-second step: a code
-- of that step or an earlier one is never accepted again.
CREATE TABLE user_totp (
    user_id      INTEGER PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    key_id       INTEGER NOT NULL REFERENCES data_keys (id),
    secret       TEXT NOT NULL,
    confirmed_at TIMESTAMP,
    last_step    BIGINT NOT NULL DEFAULT 0,
    created_at   TIMESTAMP NOT NULL
);

-- Single-use recovery codes: only the SHA-256 of each code is kept.
CREATE TABLE user_recovery_codes (
    id         INTEGER PRIMARY KEY,
    user_id    INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    code_hash  TEXT NOT NULL,
    used_at    TIMESTAMP,
    created_at TIMESTAMP NOT NULL,
    UNIQUE (user_id, code_hash)
);

-- Passkeys (WebAuthn credentials). credential_id is the base64url credential
-- id; credential is the JSON the relying party keeps (public key, sign
-- count, flags): no private key ever reaches the server.
CREATE TABLE user_passkeys (
    id            INTEGER PRIMARY KEY,
    user_id       INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    credential_id TEXT NOT NULL UNIQUE,
    name          TEXT NOT NULL,
    credential    TEXT NOT NULL,
    created_at    TIMESTAMP NOT NULL,
    last_used_at  TIMESTAMP
);
CREATE INDEX user_passkeys_user_id ON user_passkeys (user_id);

-- Short-lived, single-use server-side state of a sign-in or passkey
-- ceremony: a sign-in waiting for its second factor (user_id set), a
-- passkey registration (user_id set) or a passkey sign-in (user_id NULL
-- until a passkey names the account). id is the SHA-256 of the token the
-- browser holds; data is the ceremony's JSON.
CREATE TABLE login_challenges (
    id         TEXT PRIMARY KEY,
    user_id    INTEGER REFERENCES users (id) ON DELETE CASCADE,
    purpose    TEXT NOT NULL,
    data       TEXT NOT NULL DEFAULT '',
    attempts   INTEGER NOT NULL DEFAULT 0,
    created_at TIMESTAMP NOT NULL,
    expires_at TIMESTAMP NOT NULL
);
CREATE INDEX login_challenges_user_id ON login_challenges (user_id);
CREATE INDEX login_challenges_expires_at ON login_challenges (expires_at);
