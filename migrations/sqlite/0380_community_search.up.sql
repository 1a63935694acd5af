-- The catalogue's full-text index: the public fields of public listings
-- only (name, description, readme, the author's username), one entry per
-- listing under its row id. Triggers keep it in the transaction of every
-- change: publishing adds an entry, a new snapshot or a delisting
-- replaces or removes it, unpublishing, an admin's deletion and the
-- author's account deletion (ON DELETE CASCADE fires the delete trigger)
-- remove it. It replaces the every-word LIKE over search_text, which the
-- search no longer reads. Contentless: the text is read from the listing.
CREATE VIRTUAL TABLE community_listings_fts USING fts5 (
    name, description, readme, author,
    content = '', contentless_delete = 1,
    tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER community_listings_fts_insert AFTER INSERT ON community_listings WHEN new.status = 'public' BEGIN
    INSERT INTO community_listings_fts (rowid, name, description, readme, author)
        VALUES (new.id, new.name, new.description, new.readme, new.author_username);
END;
CREATE TRIGGER community_listings_fts_delete AFTER DELETE ON community_listings WHEN old.status = 'public' BEGIN
    DELETE FROM community_listings_fts WHERE rowid = old.id;
END;
CREATE TRIGGER community_listings_fts_update AFTER UPDATE OF name, description, readme, author_username, status ON community_listings BEGIN
    DELETE FROM community_listings_fts WHERE rowid = old.id AND old.status = 'public';
    INSERT INTO community_listings_fts (rowid, name, description, readme, author)
        SELECT new.id, new.name, new.description, new.readme, new.author_username WHERE new.status = 'public';
END;
INSERT INTO community_listings_fts (rowid, name, description, readme, author)
    SELECT id, name, description, readme, author_username FROM community_listings WHERE status = 'public';
