-- Invite codes for --signup invite: made by admins, each opens one account.
-- Only the SHA-256 of a code is kept. Platform-owned (who made a code is in
-- the audit log, not here).
CREATE TABLE invite_codes (
    id         INTEGER PRIMARY KEY,
    code_hash  TEXT NOT NULL UNIQUE,
    note       TEXT NOT NULL DEFAULT '',
    created_at TIMESTAMP NOT NULL,
    expires_at TIMESTAMP NOT NULL,
    used_at    TIMESTAMP
);
