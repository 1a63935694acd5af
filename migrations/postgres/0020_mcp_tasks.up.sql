-- Tasks of the MCP tasks extension (protocol 2026-07-28), kept in SQL so
-- that any replica can answer for one. Owned by users.id through user_id.
-- input_requests, answers, result and error are JSON.
CREATE TABLE mcp_tasks (
    id             TEXT PRIMARY KEY,
    user_id        BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    capability     TEXT NOT NULL,
    status         TEXT NOT NULL,
    input_requests TEXT,
    answers        TEXT,
    result         TEXT,
    error          TEXT,
    created_at     TIMESTAMPTZ NOT NULL,
    updated_at     TIMESTAMPTZ NOT NULL,
    expires_at     TIMESTAMPTZ NOT NULL
);
CREATE INDEX mcp_tasks_user_id ON mcp_tasks (user_id);
CREATE INDEX mcp_tasks_expires_at ON mcp_tasks (expires_at);
