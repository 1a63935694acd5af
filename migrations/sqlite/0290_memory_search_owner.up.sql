-- PostgreSQL's full-text index of memories is rebuilt under owner and
-- status (see postgres/0290); the SQLite index has kept each owner's
-- entries apart since 0250. Nothing to change here.
SELECT 1;
