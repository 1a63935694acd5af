-- Identities are never reused. When an account's users row is deleted
-- (by whatever path), the trigger below records its stable id and its
-- internal id here, and neither is ever given to another account:
-- accounts mints a fresh stable id for an email whose hash is retired, and
-- picks internal ids above every retired one (SQLite would otherwise hand
-- a deleted highest rowid to the next insert). The second trigger refuses
-- an insert that would reuse either. Platform-owned: these rows are what
-- outlives an account, and they hold no user data.
CREATE TABLE retired_user_ids (
    stable_id   TEXT PRIMARY KEY,
    internal_id BIGINT NOT NULL UNIQUE,
    retired_at  TIMESTAMP NOT NULL
);

CREATE TRIGGER users_retire_ids AFTER DELETE ON users
BEGIN
    INSERT OR IGNORE INTO retired_user_ids (stable_id, internal_id, retired_at)
    VALUES (OLD.stable_user_id, OLD.id, strftime('%Y-%m-%d %H:%M:%f+00:00', 'now'));
END;

-- AFTER INSERT: in a BEFORE trigger an automatic rowid is not known yet.
CREATE TRIGGER users_refuse_retired_ids AFTER INSERT ON users
WHEN EXISTS (SELECT 1 FROM retired_user_ids WHERE stable_id = NEW.stable_user_id OR internal_id = NEW.id)
BEGIN
    SELECT RAISE(ABORT, 'users: a retired account id is never reused');
END;
