-- Retention program and idempotent capability calls.
--
-- users.first_verified_at: when the account first proved an address. An
-- email change leaves email_verified_at NULL until the new address is
-- verified, so only accounts that never verified any address (this column
-- NULL) are purged as unverified sign-ups. Existing accounts that are
-- verified now, or that hold a former address (they changed email, so
-- their first address was verified), count as verified once.
ALTER TABLE users ADD COLUMN first_verified_at TIMESTAMP;
UPDATE users SET first_verified_at = COALESCE(email_verified_at, created_at)
WHERE email_verified_at IS NOT NULL
   OR EXISTS (SELECT 1 FROM email_claims c WHERE c.user_id = users.id AND c.email <> users.email);
CREATE INDEX users_unverified ON users (created_at) WHERE first_verified_at IS NULL;

-- users.self_signup: the account was opened by its holder on the sign-up
-- page (not by an operator or admin). Only such accounts are purged as
-- unverified sign-ups; accounts that existed before this migration are
-- not (their origin is unknown).
ALTER TABLE users ADD COLUMN self_signup BOOLEAN NOT NULL DEFAULT FALSE;

-- Results of capability calls made with an idempotency key, per user and
-- capability, kept 24 hours. key_hash is the SHA-256 of the caller's key;
-- args_hash the SHA-256 of the canonical arguments. state is 'running'
-- while the first call runs (the claim), then 'done' with result: the
-- outcome sealed under data key key_id, bound to the row and its owner
-- (a result may hold a value shown once, such as a new credential).
-- Owned by users.id through user_id; never exported.
CREATE TABLE idempotency_keys (
    id           INTEGER PRIMARY KEY,
    user_id      INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    capability   TEXT NOT NULL,
    key_hash     TEXT NOT NULL,
    args_hash    TEXT NOT NULL,
    state        TEXT NOT NULL CHECK (state IN ('running', 'done')),
    result       TEXT,
    key_id       INTEGER REFERENCES data_keys (id),
    created_at   TIMESTAMP NOT NULL,
    completed_at TIMESTAMP,
    UNIQUE (user_id, capability, key_hash)
);
CREATE INDEX idempotency_keys_created_at ON idempotency_keys (created_at);
