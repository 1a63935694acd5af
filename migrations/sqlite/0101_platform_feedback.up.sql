-- Platform feedback: text the submitter saw and approved, with snapshots of
-- their username and email at submission. Owned by the submitter (user_id):
-- exported with their account (review fields redacted) and deleted with
-- it. reviewed_by names the admin who last changed the status; deleting that
-- admin clears it (and reviewed_at) instead of deleting the feedback.
CREATE TABLE platform_feedback (
    id                 INTEGER PRIMARY KEY,
    public_id          TEXT NOT NULL UNIQUE,
    user_id            INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    category           TEXT NOT NULL,
    summary            TEXT NOT NULL,
    details            TEXT NOT NULL DEFAULT '',
    submitter_username TEXT NOT NULL,
    submitter_email    TEXT NOT NULL,
    status             TEXT NOT NULL DEFAULT 'open',
    admin_note         TEXT NOT NULL DEFAULT '',
    reviewed_by        INTEGER REFERENCES users (id) ON DELETE SET NULL,
    reviewed_at        TIMESTAMP,
    created_at         TIMESTAMP NOT NULL,
    updated_at         TIMESTAMP NOT NULL
);
CREATE INDEX platform_feedback_user_id ON platform_feedback (user_id, created_at);
CREATE INDEX platform_feedback_status ON platform_feedback (status, updated_at);
CREATE INDEX platform_feedback_reviewed_by ON platform_feedback (reviewed_by);
-- One decision mail per feedback and terminal status: the mail job inserts
-- the marker in the transaction that queues the mail, so a retried job
-- never queues a second one.
CREATE TABLE feedback_mails (
    feedback_id INTEGER NOT NULL REFERENCES platform_feedback (id) ON DELETE CASCADE,
    status      TEXT NOT NULL,
    queued_at   TIMESTAMP NOT NULL,
    PRIMARY KEY (feedback_id, status)
);
