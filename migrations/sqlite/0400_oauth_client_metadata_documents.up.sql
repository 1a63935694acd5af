-- Client ID metadata documents (package oauth): a client whose id is an
-- https URL is described by the JSON document at that URL. Its row in
-- oauth_clients is the cached document: metadata_host is the URL's host
-- (shown on the consent page, and what a host block matches),
-- metadata_expires_at is when the document must be fetched again. Both are
-- NULL for clients from dynamic registration.
ALTER TABLE oauth_clients ADD COLUMN metadata_host TEXT;
ALTER TABLE oauth_clients ADD COLUMN metadata_expires_at TIMESTAMP;
CREATE INDEX oauth_clients_metadata_host ON oauth_clients (metadata_host);

-- Admins' blocks of client metadata URLs and hosts. A block outlives the
-- cached client row (which is reaped when unused), so a blocked URL or host
-- is refused before anything is fetched from it. Platform-owned.
CREATE TABLE oauth_client_blocks (
    kind       TEXT NOT NULL,
    value      TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL,
    PRIMARY KEY (kind, value)
);
