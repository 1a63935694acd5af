-- Workspace files: each row one version of a file, its bytes a blob under
-- the workspace's prefix. Deletion is two-phase: a tombstone (deleted_at,
-- cleanup_pending) commits with the op, then a job deletes the blob and
-- confirms (purged_at). Tombstones stay in the workspace's history.
CREATE TABLE workspace_files (
    id              INTEGER PRIMARY KEY,
    workspace_id    TEXT NOT NULL,
    file_id         TEXT NOT NULL,
    version         BIGINT NOT NULL,
    name            TEXT NOT NULL,
    content_type    TEXT NOT NULL,
    size            BIGINT NOT NULL,
    sha256          TEXT NOT NULL,
    blob_key        TEXT NOT NULL,
    uploaded_by     TEXT NOT NULL,
    uploaded_at     TIMESTAMP NOT NULL,
    deleted_at      TIMESTAMP,
    deleted_by      TEXT NOT NULL DEFAULT '',
    delete_reason   TEXT NOT NULL DEFAULT '',
    cleanup_pending BOOLEAN NOT NULL DEFAULT FALSE,
    purged_at       TIMESTAMP,
    UNIQUE (workspace_id, file_id, version)
);
CREATE INDEX workspace_files_name ON workspace_files (workspace_id, name);
