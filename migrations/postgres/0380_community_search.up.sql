-- The catalogue's full-text index: the public fields of public listings
-- only, as one tsvector (English configuration; the name weighs most,
-- then the description and the author's username, then the readme) in a
-- partial GIN index over the public rows. An expression index is updated
-- with the row it indexes, so publishing, a new snapshot, delisting,
-- unpublishing, an admin's deletion and the author's account deletion keep
-- it in step in their own transactions. The search uses the expression
-- verbatim (and status = 'public') so that the index serves it, with a
-- query built by plainto_tsquery from words only (never tsquery syntax).
CREATE FUNCTION community_search_vector(name TEXT, description TEXT, readme TEXT, author TEXT) RETURNS tsvector
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN setweight(to_tsvector('english'::regconfig, name), 'A')
        || setweight(to_tsvector('english'::regconfig, description), 'B')
        || setweight(to_tsvector('english'::regconfig, author), 'B')
        || setweight(to_tsvector('english'::regconfig, readme), 'D');

CREATE INDEX community_listings_search ON community_listings
    USING GIN (community_search_vector(name, description, readme, author_username))
    WHERE status = 'public';
