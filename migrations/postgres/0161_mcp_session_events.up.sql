-- The SSE events sent on the streams of shared MCP sessions, kept for a
-- short window so that a client reconnecting with Last-Event-ID (to any
-- replica) is sent what it missed, and only for its own session. Owned by
-- users.id through user_id; rows live minutes (sqlsessions.EventTTL).
CREATE TABLE mcp_session_events (
    session_hash TEXT NOT NULL,
    id           TEXT NOT NULL,
    user_id      BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    stream_id    TEXT NOT NULL,
    seq          BIGINT NOT NULL,
    message      TEXT NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (session_hash, id)
);
CREATE INDEX mcp_session_events_stream ON mcp_session_events (session_hash, stream_id, seq);
CREATE INDEX mcp_session_events_user_id ON mcp_session_events (user_id);
CREATE INDEX mcp_session_events_created_at ON mcp_session_events (created_at);
