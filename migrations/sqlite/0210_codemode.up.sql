-- Code mode: a user's saved packages, their versions and jobs, and the
-- record of every run. Package sources are content-addressed blobs under
-- "<stableID>/packages/<sha256>"; a version lists its files' digests.
CREATE TABLE code_packages (
    id             INTEGER PRIMARY KEY,
    user_id        INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name           TEXT NOT NULL,
    description    TEXT NOT NULL DEFAULT '',
    latest_version INTEGER NOT NULL,
    created_at     TIMESTAMP NOT NULL,
    updated_at     TIMESTAMP NOT NULL,
    UNIQUE (user_id, name)
);

CREATE TABLE code_package_versions (
    id           INTEGER PRIMARY KEY,
    user_id      INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    package_id   INTEGER NOT NULL REFERENCES code_packages (id) ON DELETE CASCADE,
    version      INTEGER NOT NULL,
    manifest     TEXT NOT NULL,
    files        TEXT NOT NULL,
    source_bytes INTEGER NOT NULL,
    created_at   TIMESTAMP NOT NULL,
    UNIQUE (package_id, version)
);
CREATE INDEX code_package_versions_user ON code_package_versions (user_id);

-- A package's jobs as of its latest version: when each is next due, and
-- since when one replica is running it (NULL: idle), so that no job ever
-- runs twice at once.
CREATE TABLE code_package_jobs (
    id            INTEGER PRIMARY KEY,
    user_id       INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    package_id    INTEGER NOT NULL REFERENCES code_packages (id) ON DELETE CASCADE,
    name          TEXT NOT NULL,
    export_name   TEXT NOT NULL,
    schedule      TEXT NOT NULL,
    next_run_at   TIMESTAMP NOT NULL,
    running_since TIMESTAMP,
    last_run_id   TEXT NOT NULL DEFAULT '',
    last_status   TEXT NOT NULL DEFAULT '',
    -- The authority of the credential that saved the job, which its runs
    -- never exceed: its token scopes ('*' for all) and, for a confined
    -- credential, the capabilities it is confined to (NULL: none).
    scopes        TEXT NOT NULL DEFAULT '',
    confined      TEXT,
    UNIQUE (package_id, name)
);
CREATE INDEX code_package_jobs_due ON code_package_jobs (next_run_at);
CREATE INDEX code_package_jobs_user ON code_package_jobs (user_id);

CREATE TABLE code_runs (
    id              TEXT PRIMARY KEY,
    user_id         INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    kind            TEXT NOT NULL CHECK (kind IN ('execute', 'export', 'job')),
    package_name    TEXT NOT NULL DEFAULT '',
    package_version INTEGER NOT NULL DEFAULT 0,
    export_name     TEXT NOT NULL DEFAULT '',
    status          TEXT NOT NULL CHECK (status IN ('succeeded', 'failed')),
    started_at      TIMESTAMP NOT NULL,
    duration_ms     INTEGER NOT NULL,
    error_kind      TEXT NOT NULL DEFAULT '',
    error_limit     TEXT NOT NULL DEFAULT '',
    error           TEXT NOT NULL DEFAULT '',
    logs            TEXT NOT NULL DEFAULT '[]',
    logs_truncated  BOOLEAN NOT NULL DEFAULT FALSE,
    calls           TEXT NOT NULL DEFAULT '{}',
    host_calls      INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX code_runs_user ON code_runs (user_id, started_at);
