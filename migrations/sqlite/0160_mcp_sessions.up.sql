-- MCP sessions (protocol 2025-11-25 and earlier) shared by every replica,
-- so that any replica serves any session and still refuses another user's
-- session id. Keyed by the SHA-256 of the session id (hex); owned by
-- users.id through user_id. client_info, client_caps and subscriptions
-- are JSON. node is the bus id of the replica holding the session's GET
-- stream, if any.
CREATE TABLE mcp_sessions (
    id_hash          TEXT PRIMARY KEY,
    user_id          INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    protocol_version TEXT NOT NULL DEFAULT '',
    client_info      TEXT,
    client_caps      TEXT,
    log_level        TEXT NOT NULL DEFAULT '',
    tools_fp         TEXT NOT NULL DEFAULT '',
    subscriptions    TEXT,
    node             TEXT NOT NULL DEFAULT '',
    created_at       TIMESTAMP NOT NULL,
    last_used_at     TIMESTAMP NOT NULL
);
CREATE INDEX mcp_sessions_user_id ON mcp_sessions (user_id, last_used_at);
CREATE INDEX mcp_sessions_last_used_at ON mcp_sessions (last_used_at);

-- A client's answer to a server-to-client request (elicitation, sampling)
-- that arrived on a replica other than the one waiting for it: held here
-- for the waiting replica, which takes it (and deletes it) when the bus
-- names it. Rows live minutes at most.
CREATE TABLE mcp_session_answers (
    id          TEXT PRIMARY KEY,
    user_id     INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    answer      TEXT NOT NULL,
    created_at  TIMESTAMP NOT NULL
);
CREATE INDEX mcp_session_answers_user_id ON mcp_session_answers (user_id);
CREATE INDEX mcp_session_answers_created_at ON mcp_session_answers (created_at);
