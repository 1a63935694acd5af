-- The state every workspace has, whatever the embedder adds: its revision,
-- its event log, the results kept for idempotency keys, and jobs waiting to
-- be handed to the main database's outbox (used by the per-workspace SQLite
-- files only). Every table has a workspace_id column, indexed, so that on
-- PostgreSQL the rows of all workspaces share one table.
CREATE TABLE workspace_state (
    workspace_id TEXT PRIMARY KEY,
    revision     BIGINT NOT NULL
);

CREATE TABLE workspace_events (
    id           INTEGER PRIMARY KEY,
    workspace_id TEXT NOT NULL,
    revision     BIGINT NOT NULL,
    op           TEXT NOT NULL,
    actor        TEXT NOT NULL,
    at           TIMESTAMP NOT NULL,
    UNIQUE (workspace_id, revision)
);

CREATE TABLE workspace_idempotency (
    workspace_id TEXT NOT NULL,
    idem_key     TEXT NOT NULL,
    op           TEXT NOT NULL,
    args_hash    TEXT NOT NULL,
    result       TEXT NOT NULL,
    revision     BIGINT NOT NULL,
    created_at   TIMESTAMP NOT NULL,
    PRIMARY KEY (workspace_id, idem_key)
);

CREATE TABLE workspace_pending_jobs (
    id           INTEGER PRIMARY KEY,
    workspace_id TEXT NOT NULL,
    kind         TEXT NOT NULL,
    subject      TEXT NOT NULL,
    payload      TEXT NOT NULL
);
CREATE INDEX workspace_pending_jobs_workspace ON workspace_pending_jobs (workspace_id);
