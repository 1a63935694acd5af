-- Memory search that reads only the caller's part of the full-text index.
--
-- The full-text index is rebuilt with rowids that carry the owner and the
-- status: rowid = user_id * 2^33 + (archived ? 2^32 : 0) + memories.id.
-- Every term's list of rows is ordered by rowid, so one owner's entries
-- (with one status) are a contiguous range of it: a search bounds its
-- MATCH by that rowid range, and the index seeks to the owner's part of
-- each word and stops after it, whatever other users hold. (The scope
-- words of 0230 made every search intersect the word's entries of every
-- user with the owner's whole list of memories.) memories.id and user_id
-- must stay below 2^32 and 2^30; the triggers refuse anything else rather
-- than index it under another owner's range.
DROP TRIGGER memories_fts_insert;
DROP TRIGGER memories_fts_update;
DROP TRIGGER memories_fts_delete;
DROP TABLE memory_fts;
CREATE VIRTUAL TABLE memory_fts USING fts5 (
    text, tags,
    content = '', contentless_delete = 1, detail = column,
    tokenize = 'porter unicode61'
);
CREATE TRIGGER memories_fts_insert AFTER INSERT ON memories BEGIN
    SELECT RAISE(ABORT, 'memories: id or user_id beyond the full-text index range')
        WHERE new.id NOT BETWEEN 1 AND 4294967295 OR new.user_id NOT BETWEEN 1 AND 1073741823;
    INSERT INTO memory_fts (rowid, text, tags)
        VALUES (new.user_id * 8589934592 + (new.status = 'archived') * 4294967296 + new.id, new.text, new.tags);
END;
CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories BEGIN
    DELETE FROM memory_fts WHERE rowid = old.user_id * 8589934592 + (old.status = 'archived') * 4294967296 + old.id;
END;
CREATE TRIGGER memories_fts_update AFTER UPDATE OF text, tags, status ON memories BEGIN
    DELETE FROM memory_fts WHERE rowid = old.user_id * 8589934592 + (old.status = 'archived') * 4294967296 + old.id;
    INSERT INTO memory_fts (rowid, text, tags)
        VALUES (new.user_id * 8589934592 + (new.status = 'archived') * 4294967296 + new.id, new.text, new.tags);
END;
INSERT INTO memory_fts (rowid, text, tags)
    SELECT user_id * 8589934592 + (status = 'archived') * 4294967296 + id, text, tags FROM memories;

-- How many memories each user keeps, by status, kept by triggers in the
-- transaction of every write: a search weighs each word by its rarity
-- among the caller's memories, and a save checks the per-user bound,
-- without counting rows. Derived data: not exported, deleted with the
-- account.
CREATE TABLE memory_counts (
    user_id  INTEGER PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    active   INTEGER NOT NULL DEFAULT 0,
    archived INTEGER NOT NULL DEFAULT 0
);
INSERT INTO memory_counts (user_id, active, archived)
    SELECT user_id, SUM(status = 'active'), SUM(status = 'archived') FROM memories GROUP BY user_id;
CREATE TRIGGER memories_count_insert AFTER INSERT ON memories BEGIN
    INSERT INTO memory_counts (user_id, active, archived) VALUES (new.user_id, new.status = 'active', new.status = 'archived')
        ON CONFLICT (user_id) DO UPDATE SET active = active + excluded.active, archived = archived + excluded.archived;
END;
CREATE TRIGGER memories_count_delete AFTER DELETE ON memories BEGIN
    UPDATE memory_counts SET active = active - (old.status = 'active'), archived = archived - (old.status = 'archived')
        WHERE user_id = old.user_id;
END;
CREATE TRIGGER memories_count_status AFTER UPDATE OF status ON memories WHEN new.status <> old.status BEGIN
    UPDATE memory_counts SET active = active + (new.status = 'active') - (old.status = 'active'),
        archived = archived + (new.status = 'archived') - (old.status = 'archived')
        WHERE user_id = new.user_id;
END;

-- memoryList pages newest first by (created_at, public_id): its cursors
-- name a memory the caller has seen, never a row id of the whole table.
CREATE INDEX memories_user_created ON memories (user_id, created_at, public_id);
