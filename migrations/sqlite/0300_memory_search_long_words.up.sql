-- PostgreSQL's memory_search_vector leaves out lexemes too long to be
-- prefixed with their owner (see postgres/0300); the SQLite index has no
-- such prefix. Nothing to change here.
SELECT 1;
