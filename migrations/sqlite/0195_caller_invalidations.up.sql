-- Caller-cache invalidations written for other processes on the same
-- database when no cluster bus links them (SQLite, or --bus-url local): an
-- operator command (enclave user suspend, admin revoke, user delete) runs
-- in a process of its own, and the serving process reads these rows every
-- second to drop what it cached. Payloads are identifiers ("u:<id>",
-- "g:<grant id>", "*"), never content; rows live an hour.
CREATE TABLE caller_invalidations (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    node       TEXT NOT NULL,
    payload    TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL
);
CREATE INDEX caller_invalidations_created_at ON caller_invalidations (created_at);
