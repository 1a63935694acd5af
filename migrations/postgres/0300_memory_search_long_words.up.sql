-- A lexeme of memory_search_vector (0290) is the owner's prefix and a
-- lexeme of the text: a word the parser keeps (up to 2047 bytes) can be
-- longer than a lexeme may be once prefixed, and array_to_tsvector does
-- not refuse such a lexeme but truncates its length (to 11 bits), which
-- leaves the vector out of order: the memory's other words then fail to
-- match it wherever the vector is checked (a sequential scan, a recheck).
-- No query word is that long (a search reads words of at most 64 bytes),
-- so lexemes beyond 1024 bytes are left out of the vector, and the index
-- is rebuilt with the new function.
CREATE OR REPLACE FUNCTION memory_search_vector(owner BIGINT, status TEXT, body TEXT, tags TEXT) RETURNS tsvector
    LANGUAGE sql IMMUTABLE STRICT PARALLEL RESTRICTED
    RETURN array_to_tsvector(ARRAY(
        SELECT owner || CASE WHEN status = 'archived' THEN 'r ' ELSE 'a ' END || l
        FROM unnest(tsvector_to_array(to_tsvector('english'::regconfig, body || ' ' || tags))) AS l
        WHERE octet_length(l) <= 1024));

REINDEX INDEX memories_search;
