-- OAuth 2.1 authorization server (package oauth).
--
-- Every token kind lives in oauth_tokens, keyed by its HMAC signature: the
-- token itself is never stored, and a signature is useless without the key
-- part only its holder has. Grants, consents and tokens are owned by
-- users.id through user_id; clients and keys are platform-owned.

-- The HMAC secret that signs tokens, sealed by the secrets keeper.
CREATE TABLE oauth_keys (
    id         TEXT PRIMARY KEY,
    ciphertext TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL
);

-- Clients from dynamic registration (RFC 7591). secret_hash is the SHA-256
-- of a confidential client's secret; NULL for public clients.
-- metadata_hash identifies identical registrations; last_used_at renews on
-- every use, and clients idle for longer than the configured TTL are reaped.
CREATE TABLE oauth_clients (
    id                         TEXT PRIMARY KEY,
    secret_hash                TEXT,
    name                       TEXT NOT NULL,
    redirect_uris              TEXT NOT NULL,
    grant_types                TEXT NOT NULL,
    response_types             TEXT NOT NULL,
    scope                      TEXT NOT NULL,
    token_endpoint_auth_method TEXT NOT NULL,
    metadata                   TEXT NOT NULL,
    metadata_hash              TEXT NOT NULL,
    created_at                 TIMESTAMPTZ NOT NULL,
    last_used_at               TIMESTAMPTZ NOT NULL
);
CREATE INDEX oauth_clients_metadata_hash ON oauth_clients (metadata_hash, created_at);
CREATE INDEX oauth_clients_last_used_at ON oauth_clients (last_used_at);

-- One row per authorization a user gave a client (a token family). Its id
-- is the request id every token of the family carries. Owned by users.id
-- through user_id.
CREATE TABLE oauth_grants (
    id           TEXT PRIMARY KEY,
    user_id      BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    client_id    TEXT NOT NULL REFERENCES oauth_clients (id) ON DELETE CASCADE,
    scopes       TEXT NOT NULL,
    audience     TEXT NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL,
    last_used_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX oauth_grants_user_id ON oauth_grants (user_id);
CREATE INDEX oauth_grants_client_id ON oauth_grants (client_id);

-- Remembered consent per (user, client, scopes); id is derived from the
-- three. Owned by users.id through user_id.
CREATE TABLE oauth_consents (
    id         TEXT PRIMARY KEY,
    user_id    BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    client_id  TEXT NOT NULL REFERENCES oauth_clients (id) ON DELETE CASCADE,
    scopes     TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    UNIQUE (user_id, client_id, scopes)
);
CREATE INDEX oauth_consents_client_id ON oauth_consents (client_id);

-- Authorization codes, PKCE requests, access and refresh tokens. request_id
-- names the grant (codes and PKCE rows exist before their grant does).
-- A rotated refresh token keeps its row (active false, rotated_at set) with
-- successor: the pair it was exchanged for, sealed under a key derived from
-- the rotated token, so a duplicate exchange inside the grace window gets
-- the same pair. A PKCE row's signature is its code's, prefixed "pkce:".
-- Owned by users.id through user_id.
CREATE TABLE oauth_tokens (
    signature        TEXT PRIMARY KEY,
    kind             TEXT NOT NULL CHECK (kind IN ('code', 'pkce', 'access', 'refresh')),
    request_id       TEXT NOT NULL,
    user_id          BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    client_id        TEXT NOT NULL REFERENCES oauth_clients (id) ON DELETE CASCADE,
    scopes           TEXT NOT NULL,
    audience         TEXT NOT NULL,
    request          TEXT NOT NULL,
    active           BOOLEAN NOT NULL,
    requested_at     TIMESTAMPTZ NOT NULL,
    expires_at       TIMESTAMPTZ NOT NULL,
    rotated_at       TIMESTAMPTZ,
    successor        TEXT,
    access_signature TEXT
);
CREATE INDEX oauth_tokens_request_id ON oauth_tokens (request_id);
CREATE INDEX oauth_tokens_user_id ON oauth_tokens (user_id);
CREATE INDEX oauth_tokens_client_id ON oauth_tokens (client_id);
CREATE INDEX oauth_tokens_expires_at ON oauth_tokens (expires_at);
