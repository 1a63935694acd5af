-- How many memories each user keeps, by status, kept by a trigger in the
-- transaction of every write: a search weighs each word by its rarity
-- among the caller's memories, and a save checks the per-user bound,
-- without counting rows. Derived data: not exported, deleted with the
-- account.
CREATE TABLE memory_counts (
    user_id  BIGINT PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    active   BIGINT NOT NULL DEFAULT 0,
    archived BIGINT NOT NULL DEFAULT 0
);
INSERT INTO memory_counts (user_id, active, archived)
    SELECT user_id, COUNT(*) FILTER (WHERE status = 'active'), COUNT(*) FILTER (WHERE status = 'archived')
    FROM memories GROUP BY user_id;

CREATE FUNCTION memories_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO memory_counts (user_id, active, archived)
        VALUES (NEW.user_id, (NEW.status = 'active')::int, (NEW.status = 'archived')::int)
        ON CONFLICT (user_id) DO UPDATE SET active = memory_counts.active + EXCLUDED.active,
            archived = memory_counts.archived + EXCLUDED.archived;
    ELSIF TG_OP = 'DELETE' THEN
        UPDATE memory_counts SET active = active - (OLD.status = 'active')::int,
            archived = archived - (OLD.status = 'archived')::int
        WHERE user_id = OLD.user_id;
    ELSIF NEW.status <> OLD.status THEN
        UPDATE memory_counts SET active = active + (NEW.status = 'active')::int - (OLD.status = 'active')::int,
            archived = archived + (NEW.status = 'archived')::int - (OLD.status = 'archived')::int
        WHERE user_id = NEW.user_id;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER memories_count AFTER INSERT OR DELETE OR UPDATE OF status ON memories
    FOR EACH ROW EXECUTE FUNCTION memories_count();

-- memoryList pages newest first by (created_at, public_id): its cursors
-- name a memory the caller has seen, never a row id of the whole table.
CREATE INDEX memories_user_created ON memories (user_id, created_at, public_id);
