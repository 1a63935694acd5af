-- The requestStates (MCP protocol 2026-07-28 input-required rounds) that
-- were used: each is accepted once, on any replica. An id is random and
-- names nothing; rows are dropped once expired (the state's signature
-- refuses it by then).
CREATE TABLE mcp_spent_states (
    id         TEXT PRIMARY KEY,
    expires_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX mcp_spent_states_expires_at ON mcp_spent_states (expires_at);
