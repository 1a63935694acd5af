-- Workspaces: data a team shares (package workspaces). This is the
-- directory in the main database: which workspaces exist, who belongs to
-- them with which role, pending invitations and workspace API keys. The
-- state of each workspace lives elsewhere: its own database file on
-- SQLite, rows keyed by workspace_id on PostgreSQL.
CREATE TABLE workspaces (
    id                      TEXT PRIMARY KEY,
    name                    TEXT NOT NULL,
    created_at              TIMESTAMP NOT NULL,
    delete_token_hash       TEXT NOT NULL DEFAULT '',
    delete_token_expires_at TIMESTAMP
);

-- One row per member; user_id is the member's account (owner column).
CREATE TABLE workspace_members (
    id           INTEGER PRIMARY KEY,
    workspace_id TEXT NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    user_id      INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    role         TEXT NOT NULL CHECK (role IN ('owner', 'admin', 'viewer')),
    created_at   TIMESTAMP NOT NULL,
    UNIQUE (workspace_id, user_id)
);
CREATE INDEX workspace_members_user ON workspace_members (user_id);

-- Invitations by email: a single-use link (only its SHA-256 is kept) that
-- expires. user_id is the member who invited (owner column).
CREATE TABLE workspace_invitations (
    id           INTEGER PRIMARY KEY,
    workspace_id TEXT NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    user_id      INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    email        TEXT NOT NULL,
    role         TEXT NOT NULL CHECK (role IN ('owner', 'admin', 'viewer')),
    token_hash   TEXT NOT NULL UNIQUE,
    created_at   TIMESTAMP NOT NULL,
    expires_at   TIMESTAMP NOT NULL,
    accepted_at  TIMESTAMP
);
CREATE INDEX workspace_invitations_workspace ON workspace_invitations (workspace_id);
CREATE INDEX workspace_invitations_user ON workspace_invitations (user_id);
