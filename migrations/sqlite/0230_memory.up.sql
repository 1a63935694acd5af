-- Memories: short texts a user's agents keep and recall, with tags, a
-- free-text provenance (source), who wrote them (writer) and a status.
-- public_id is the id callers see; id is the full-text index's rowid.
CREATE TABLE memories (
    id         INTEGER PRIMARY KEY,
    public_id  TEXT NOT NULL UNIQUE,
    user_id    INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    text       TEXT NOT NULL,
    tags       TEXT NOT NULL DEFAULT '[]',
    source     TEXT NOT NULL DEFAULT '',
    writer     TEXT NOT NULL DEFAULT '',
    status     TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'archived')),
    created_at TIMESTAMP NOT NULL,
    updated_at TIMESTAMP NOT NULL
);
CREATE INDEX memories_user ON memories (user_id, id);

-- The full-text index of memories, kept by the triggers below: a
-- contentless FTS5 table (it holds no copy of the text; a deleted memory
-- leaves nothing in it) that records in which column a word is, not
-- where (detail=column: smaller, faster, and memories are short). scope
-- holds the owner and the owner with the status as words ("u<user_id>
-- u<user_id><status>"), so that a search reads the posting lists of its
-- owner's memories only; searches also join memories and filter by owner
-- in the same query. Ranking is BM25 over text (weight 2) and tags.
CREATE VIRTUAL TABLE memory_fts USING fts5 (
    scope, text, tags,
    content = '', contentless_delete = 1, detail = column,
    tokenize = 'porter unicode61'
);
INSERT INTO memory_fts (memory_fts, rank) VALUES ('rank', 'bm25(0.0, 2.0, 1.0)');
CREATE TRIGGER memories_fts_insert AFTER INSERT ON memories BEGIN
    INSERT INTO memory_fts (rowid, scope, text, tags) VALUES (new.id, 'u' || new.user_id || ' u' || new.user_id || new.status, new.text, new.tags);
END;
CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories BEGIN
    DELETE FROM memory_fts WHERE rowid = old.id;
END;
CREATE TRIGGER memories_fts_update AFTER UPDATE OF text, tags, status ON memories BEGIN
    DELETE FROM memory_fts WHERE rowid = old.id;
    INSERT INTO memory_fts (rowid, scope, text, tags) VALUES (new.id, 'u' || new.user_id || ' u' || new.user_id || new.status, new.text, new.tags);
END;

-- Embeddings of memories, when an embedder is configured: derived data,
-- never exported, removed with their memory. fingerprint digests the
-- model, the requested dimensions and the embedded text, so an unchanged
-- memory is not embedded again; model and dimensions say which rows a
-- model change makes stale. vector is little-endian float32.
CREATE TABLE memory_vectors (
    memory_id   INTEGER PRIMARY KEY REFERENCES memories (id) ON DELETE CASCADE,
    user_id     INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    model       TEXT NOT NULL,
    dimensions  INTEGER NOT NULL,
    fingerprint TEXT NOT NULL,
    vector      BLOB NOT NULL,
    embedded_at TIMESTAMP NOT NULL
);
CREATE INDEX memory_vectors_user ON memory_vectors (user_id, model, dimensions);
CREATE INDEX memory_vectors_model ON memory_vectors (model, dimensions);
