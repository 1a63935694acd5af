-- Username changes by the account holder.
--
-- users.username_changed_at: when the holder last changed their username;
-- the next change waits for the cooldown (accounts.Config).
ALTER TABLE users ADD COLUMN username_changed_at TIMESTAMP;

-- A username an account gave up stays held for that account until
-- held_until, so nobody else can take it and pass for its former holder;
-- the holder may take it back meanwhile. Owned by users.id through
-- user_id; an expired hold is free (and removed by retention).
CREATE TABLE username_holds (
    username   TEXT PRIMARY KEY CHECK (username = lower(username)),
    user_id    INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    held_until TIMESTAMP NOT NULL,
    created_at TIMESTAMP NOT NULL
);
CREATE INDEX username_holds_user_id ON username_holds (user_id);
CREATE INDEX username_holds_held_until ON username_holds (held_until);
