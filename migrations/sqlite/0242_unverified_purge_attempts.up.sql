-- The unverified sign-up purge's record of its attempts on an account,
-- for its schedule: never-attempted accounts go first, an account whose
-- attempt failed before anything was removed waits until purge_retry_at.
-- purge_failure is the class of the last failure (a deletion stage, never
-- the cause's text).
ALTER TABLE users ADD COLUMN purge_attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE users ADD COLUMN purge_attempted_at TIMESTAMP;
ALTER TABLE users ADD COLUMN purge_retry_at TIMESTAMP;
ALTER TABLE users ADD COLUMN purge_failure TEXT;
