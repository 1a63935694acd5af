-- A former address is released by its owner proving, again, that they
-- control it: a mail token of purpose release_email, whose email is the
-- former address, mailed to it. SQLite cannot alter a CHECK constraint,
-- so the table is rebuilt.
CREATE TABLE mail_tokens_new (
    token_hash TEXT PRIMARY KEY CHECK (length(token_hash) = 64),
    user_id    INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    purpose    TEXT NOT NULL CHECK (purpose IN ('verify_email', 'reset_password', 'change_email', 'release_email')),
    email      TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL,
    expires_at TIMESTAMP NOT NULL
);
INSERT INTO mail_tokens_new (token_hash, user_id, purpose, email, created_at, expires_at)
    SELECT token_hash, user_id, purpose, email, created_at, expires_at FROM mail_tokens;
DROP TABLE mail_tokens;
ALTER TABLE mail_tokens_new RENAME TO mail_tokens;
CREATE INDEX mail_tokens_user_id ON mail_tokens (user_id, purpose);
