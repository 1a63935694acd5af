-- People's own OAuth apps for connected accounts (package integrations):
-- a client the person registered at a provider and pasted on the
-- Connections page. Owned by users.id through user_id. The endpoints are
-- stored resolved (an issuer's discovery runs when the app is added).
-- client_secret_ciphertext is the sealed client secret (empty with key_id
-- NULL for a public client), bound to "integration:app:<stable user
-- id>:<public_id>". scopes and api_hosts are JSON arrays.
CREATE TABLE integration_apps (
    id                       INTEGER PRIMARY KEY,
    user_id                  INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    public_id                TEXT NOT NULL UNIQUE,
    name                     TEXT NOT NULL,
    issuer                   TEXT NOT NULL DEFAULT '',
    auth_url                 TEXT NOT NULL,
    token_url                TEXT NOT NULL,
    revoke_url               TEXT NOT NULL DEFAULT '',
    client_id                TEXT NOT NULL,
    key_id                   INTEGER REFERENCES data_keys (id),
    client_secret_ciphertext TEXT NOT NULL DEFAULT '',
    scopes                   TEXT NOT NULL DEFAULT '[]',
    api_hosts                TEXT NOT NULL DEFAULT '[]',
    created_at               TIMESTAMP NOT NULL,
    updated_at               TIMESTAMP NOT NULL,
    UNIQUE (user_id, name)
);

-- A connection or a pending connect flow at one of the person's own apps
-- (NULL: an operator's provider). Removing the app removes them.
ALTER TABLE integration_connections ADD COLUMN app_id INTEGER REFERENCES integration_apps (id) ON DELETE CASCADE;
ALTER TABLE integration_states ADD COLUMN app_id INTEGER REFERENCES integration_apps (id) ON DELETE CASCADE;
CREATE INDEX integration_connections_app ON integration_connections (app_id);
CREATE INDEX integration_states_app ON integration_states (app_id);
