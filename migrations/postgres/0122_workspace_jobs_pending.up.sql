-- On SQLite an op records its jobs in the workspace's own file and moves
-- them to the main outbox after it commits. jobs_pending_at is set (in the
-- main database, before the op commits) whenever an op leaves jobs, and
-- cleared when they are moved, so a sweep finds jobs a crash or a failed
-- move left behind without opening every workspace file.
ALTER TABLE workspaces ADD COLUMN jobs_pending_at TIMESTAMP;
CREATE INDEX workspaces_jobs_pending_at ON workspaces (jobs_pending_at);
