-- Mail sender rules (#30): per user, at most 200; a sender is an address
-- (bob@example.com) or a domain (@example.com). block puts the sender's
-- mail in quarantine; allow keeps it in the inbox.
CREATE TABLE mail_rules (
    id         INTEGER PRIMARY KEY,
    user_id    INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    sender     TEXT NOT NULL,
    action     TEXT NOT NULL CHECK (action IN ('allow', 'block')),
    created_at TIMESTAMP NOT NULL,
    UNIQUE (user_id, sender)
);
