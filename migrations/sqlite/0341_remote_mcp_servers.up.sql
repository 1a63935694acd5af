-- Remote MCP servers a user added (package integrations/remotemcp). Owned
-- by users.id through user_id. name is the short name prefixing the
-- server's tools (mcp_<name>__<tool>). auth is 'none' or 'oauth'; for
-- 'oauth' the authorization server's endpoints and enclave's client id
-- there are kept in clear (they are public), while the token set (access
-- and refresh token, client secret of a dynamic registration) is sealed in
-- token_ciphertext under data key key_id, bound to
-- "remotemcp:server:<stable user id>:<public_id>". tools is the last tool
-- list read from the server (sanitised JSON), tools_at when it was read.
CREATE TABLE remote_mcp_servers (
    id                     INTEGER PRIMARY KEY,
    user_id                INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    public_id              TEXT NOT NULL UNIQUE,
    name                   TEXT NOT NULL,
    url                    TEXT NOT NULL,
    status                 TEXT NOT NULL,
    auth                   TEXT NOT NULL,
    issuer                 TEXT NOT NULL DEFAULT '',
    authorization_endpoint TEXT NOT NULL DEFAULT '',
    token_endpoint         TEXT NOT NULL DEFAULT '',
    revocation_endpoint    TEXT NOT NULL DEFAULT '',
    client_id              TEXT NOT NULL DEFAULT '',
    scopes                 TEXT NOT NULL DEFAULT '',
    key_id                 INTEGER REFERENCES data_keys (id),
    token_ciphertext       TEXT NOT NULL DEFAULT '',
    expires_at             TIMESTAMP,
    refresh_at             TIMESTAMP,
    tools                  TEXT NOT NULL DEFAULT '[]',
    tools_at               TIMESTAMP,
    last_error             TEXT NOT NULL DEFAULT '',
    created_at             TIMESTAMP NOT NULL,
    updated_at             TIMESTAMP NOT NULL,
    UNIQUE (user_id, name)
);
CREATE INDEX remote_mcp_servers_refresh ON remote_mcp_servers (refresh_at);

-- Pending consents at a remote server's authorization server: keyed by
-- the hash of the OAuth state, bound to the person and their browser
-- (binding_hash), used once. verifier_ciphertext is the sealed PKCE
-- verifier.
CREATE TABLE remote_mcp_states (
    state_hash          TEXT PRIMARY KEY,
    user_id             INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    server_id           INTEGER NOT NULL REFERENCES remote_mcp_servers (id) ON DELETE CASCADE,
    binding_hash        TEXT NOT NULL,
    key_id              INTEGER NOT NULL REFERENCES data_keys (id),
    verifier_ciphertext TEXT NOT NULL,
    created_at          TIMESTAMP NOT NULL,
    expires_at          TIMESTAMP NOT NULL
);
CREATE INDEX remote_mcp_states_user ON remote_mcp_states (user_id, created_at);
