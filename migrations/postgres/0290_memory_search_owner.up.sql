-- Memory search that reads only the caller's part of the full-text index.
--
-- The GIN index of 0230 held every user's words together: a search of one
-- word read the rows of every user holding it and dropped the others'
-- (or, planned the other way, computed the text vector of each of the
-- caller's memories), a cost that grew with the whole table. Here every
-- lexeme of a memory is indexed under its owner and status: the vector is
-- the English lexemes of text and tags, each prefixed with the owner's id
-- and a for active or r for archived ('12a coffe' is user 12's active
-- memories holding "coffee"). A word's entry in the index is then one
-- owner's memories of one status, like the rowid ranges of the SQLite
-- index (0250), and its size is the word's document frequency among the
-- caller's memories, the only statistic the ranking uses. The prefix ends
-- in a space, which the text-search parser never puts in a lexeme, and
-- every lexeme of a row carries that row's owner, so no text can make an
-- entry under another owner. Searches also filter by owner in the same
-- query.
--
-- memory_search_query(owner, status, word) is the query of one plain word
-- (every lexeme the English configuration makes of it, each under the
-- owner and the status, or either status for '') built from lexemes, never
-- parsed as tsquery syntax: a word is only ever a word. Both functions are
-- immutable, so the planner folds a query of constants and matches the
-- index expression. memory_search_vector is PARALLEL RESTRICTED so that
-- a search (a few index entries of one owner) is never planned with
-- parallel workers, whose start costs more than the search. fastupdate is
-- off: a pending list would make every search scan it.
CREATE FUNCTION memory_search_vector(owner BIGINT, status TEXT, body TEXT, tags TEXT) RETURNS tsvector
    LANGUAGE sql IMMUTABLE STRICT PARALLEL RESTRICTED
    RETURN array_to_tsvector(ARRAY(
        SELECT owner || CASE WHEN status = 'archived' THEN 'r ' ELSE 'a ' END || l
        FROM unnest(tsvector_to_array(to_tsvector('english'::regconfig, body || ' ' || tags))) AS l));

CREATE FUNCTION memory_search_query(owner BIGINT, status TEXT, word TEXT) RETURNS tsquery
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN (SELECT coalesce(string_agg('(' || (
            SELECT string_agg('''' || owner || s || ' ' || replace(replace(l, '\', '\\'), '''', '''''') || '''', ' | ')
            FROM unnest(CASE status WHEN 'active' THEN ARRAY['a'] WHEN 'archived' THEN ARRAY['r'] ELSE ARRAY['a', 'r'] END) AS s
        ) || ')', ' & '), '')::tsquery
        FROM unnest(tsvector_to_array(to_tsvector('english'::regconfig, word))) AS l);

DROP INDEX memories_fts;
CREATE INDEX memories_search ON memories USING GIN (memory_search_vector(user_id, status, text, tags)) WITH (fastupdate = off);
