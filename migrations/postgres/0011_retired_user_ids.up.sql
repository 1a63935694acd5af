-- Identities are never reused. When an account's users row is deleted
-- (by whatever path), the trigger below records its stable id and its
-- internal id here, and neither is ever given to another account:
-- accounts mints a fresh stable id for an email whose hash is retired
-- (internal ids come from an identity sequence, which never goes back).
-- The second trigger refuses an insert that would reuse either.
-- Platform-owned: these rows are what outlives an account, and they hold
-- no user data.
CREATE TABLE retired_user_ids (
    stable_id   TEXT PRIMARY KEY,
    internal_id BIGINT NOT NULL UNIQUE,
    retired_at  TIMESTAMPTZ NOT NULL
);

CREATE FUNCTION users_retire_ids() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO retired_user_ids (stable_id, internal_id, retired_at)
    VALUES (OLD.stable_user_id, OLD.id, now())
    ON CONFLICT DO NOTHING;
    RETURN OLD;
END
$$;

CREATE TRIGGER users_retire_ids AFTER DELETE ON users
    FOR EACH ROW EXECUTE FUNCTION users_retire_ids();

CREATE FUNCTION users_refuse_retired_ids() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM retired_user_ids WHERE stable_id = NEW.stable_user_id OR internal_id = NEW.id) THEN
        RAISE EXCEPTION 'users: a retired account id is never reused' USING ERRCODE = 'unique_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER users_refuse_retired_ids BEFORE INSERT ON users
    FOR EACH ROW EXECUTE FUNCTION users_refuse_retired_ids();
