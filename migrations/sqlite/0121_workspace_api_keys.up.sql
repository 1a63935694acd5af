-- Workspace API keys: made by an owner for one workspace with a maximum
-- role; a call with one acts as the owner who made it, confined to that
-- workspace's capabilities, with at most that role. Only the SHA-256 of a
-- key is kept. user_id is the account that made it (owner column).
CREATE TABLE workspace_api_keys (
    id           INTEGER PRIMARY KEY,
    workspace_id TEXT NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    user_id      INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name         TEXT NOT NULL,
    max_role     TEXT NOT NULL CHECK (max_role IN ('owner', 'admin', 'viewer')),
    key_hash     TEXT NOT NULL UNIQUE,
    created_at   TIMESTAMP NOT NULL,
    last_used_at TIMESTAMP,
    revoked_at   TIMESTAMP
);
CREATE INDEX workspace_api_keys_workspace ON workspace_api_keys (workspace_id);
CREATE INDEX workspace_api_keys_user ON workspace_api_keys (user_id);
