-- Web shell: the shared rate-limit log and single-use mail tokens.

-- One row per counted request of a rate-limit bucket (for example the
-- per-IP credential bucket). at_ms is Unix milliseconds. Rows older than
-- the bucket's window are swept. Platform-owned: buckets name clients
-- (network prefixes), not accounts.
CREATE TABLE rate_limit_hits (
    bucket TEXT NOT NULL,
    at_ms  BIGINT NOT NULL
);
CREATE INDEX rate_limit_hits_bucket_at ON rate_limit_hits (bucket, at_ms);
CREATE INDEX rate_limit_hits_at ON rate_limit_hits (at_ms);

-- Single-use links sent by mail: email verification and password reset.
-- Only the SHA-256 of a token is stored; a token is deleted when used, and
-- issuing a new one of the same purpose deletes the older ones. email is
-- the address the link was sent to (a verification link proves that
-- address only). Owned by users.id through user_id.
CREATE TABLE mail_tokens (
    token_hash TEXT PRIMARY KEY CHECK (length(token_hash) = 64),
    user_id    INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    purpose    TEXT NOT NULL CHECK (purpose IN ('verify_email', 'reset_password')),
    email      TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL,
    expires_at TIMESTAMP NOT NULL
);
CREATE INDEX mail_tokens_user_id ON mail_tokens (user_id, purpose);
