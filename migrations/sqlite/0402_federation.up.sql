-- Sign-in with external identity providers (package federation).
--
-- linked_identities: an account's identities at external providers, one
-- row per (issuer, subject), which never moves to another account. Only the
-- issuer and subject are kept: the provider's email decided the link once
-- and is not stored.
CREATE TABLE linked_identities (
    id           INTEGER PRIMARY KEY,
    user_id      INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    provider     TEXT NOT NULL,
    issuer       TEXT NOT NULL,
    subject      TEXT NOT NULL,
    created_at   TIMESTAMP NOT NULL,
    last_used_at TIMESTAMP NOT NULL,
    UNIQUE (issuer, subject)
);
CREATE INDEX linked_identities_user ON linked_identities (user_id);

-- federation_states: a sign-in started at a provider, single-use and bound
-- to the browser that started it (binding_hash is the SHA-256 of a cookie
-- only that browser holds). user_id is set when a signed-in person links
-- an identity. A row with link_subject set is a link waiting for the person
-- to prove user_id's account (its verified email matched the identity's).
-- Rows past expires_at are purged.
CREATE TABLE federation_states (
    state_hash   TEXT PRIMARY KEY,
    binding_hash TEXT NOT NULL,
    provider     TEXT NOT NULL,
    nonce        TEXT NOT NULL,
    verifier     TEXT NOT NULL,
    return_to    TEXT NOT NULL,
    link_issuer  TEXT NOT NULL DEFAULT '',
    link_subject TEXT NOT NULL DEFAULT '',
    user_id      INTEGER REFERENCES users (id) ON DELETE CASCADE,
    expires_at   TIMESTAMP NOT NULL
);
CREATE INDEX federation_states_expires_at ON federation_states (expires_at);
CREATE INDEX federation_states_user ON federation_states (user_id);
