-- Community listings: public snapshots of one version of a user's saved
-- package (its name, description, readme, author's username and a blob of
-- its manifest and sources under the author's "community" blob prefix).
-- Owned by the author (user_id): exported and deleted with the account.
-- search_text is the lowercased public fields the catalogue searches.
CREATE TABLE community_listings (
    id              INTEGER PRIMARY KEY,
    public_id       TEXT NOT NULL UNIQUE,
    user_id         INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    package_name    TEXT NOT NULL,
    package_version INTEGER NOT NULL,
    name            TEXT NOT NULL,
    description     TEXT NOT NULL DEFAULT '',
    readme          TEXT NOT NULL DEFAULT '',
    author_username TEXT NOT NULL,
    source_blob     TEXT NOT NULL,
    source_bytes    BIGINT NOT NULL DEFAULT 0,
    status          TEXT NOT NULL DEFAULT 'public',
    featured_at     TIMESTAMP,
    search_text     TEXT NOT NULL DEFAULT '',
    published_at    TIMESTAMP NOT NULL,
    updated_at      TIMESTAMP NOT NULL,
    UNIQUE (user_id, package_name)
);
CREATE INDEX community_listings_status ON community_listings (status, id);

-- Forks: a listing's snapshot copied into a package of the forker
-- (user_id). The listing's public id, name and package name are kept as
-- they were, so the provenance survives the listing's deletion
-- (listing_id becomes NULL).
CREATE TABLE community_forks (
    id                   INTEGER PRIMARY KEY,
    user_id              INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    listing_id           INTEGER REFERENCES community_listings (id) ON DELETE SET NULL,
    listing_public_id    TEXT NOT NULL,
    listing_name         TEXT NOT NULL,
    source_package_name  TEXT NOT NULL,
    source_version       INTEGER NOT NULL,
    forked_package_name  TEXT NOT NULL,
    created_at           TIMESTAMP NOT NULL
);
CREATE INDEX community_forks_user_id ON community_forks (user_id, id);
CREATE INDEX community_forks_listing_id ON community_forks (listing_id);

-- Ratings: one per user (user_id) and listing, 1 to 5, with an optional
-- note only the rater sees. They go with the listing.
CREATE TABLE community_ratings (
    id          INTEGER PRIMARY KEY,
    user_id     INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    listing_id  INTEGER NOT NULL REFERENCES community_listings (id) ON DELETE CASCADE,
    score       INTEGER NOT NULL CHECK (score BETWEEN 1 AND 5),
    note        TEXT NOT NULL DEFAULT '',
    created_at  TIMESTAMP NOT NULL,
    updated_at  TIMESTAMP NOT NULL,
    UNIQUE (user_id, listing_id)
);
CREATE INDEX community_ratings_listing_id ON community_ratings (listing_id);

-- Reports: a user (user_id) flags a listing for the admins. The listing's
-- public id and name are kept, so a report outlives a deleted listing.
-- resolved_by names the admin who resolved it (cleared with their account).
CREATE TABLE community_reports (
    id                INTEGER PRIMARY KEY,
    public_id         TEXT NOT NULL UNIQUE,
    user_id           INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    listing_id        INTEGER REFERENCES community_listings (id) ON DELETE SET NULL,
    listing_public_id TEXT NOT NULL,
    listing_name      TEXT NOT NULL,
    reason            TEXT NOT NULL,
    details           TEXT NOT NULL DEFAULT '',
    status            TEXT NOT NULL DEFAULT 'open',
    resolution        TEXT NOT NULL DEFAULT '',
    resolved_by       INTEGER REFERENCES users (id) ON DELETE SET NULL,
    resolved_at       TIMESTAMP,
    created_at        TIMESTAMP NOT NULL
);
CREATE INDEX community_reports_user_id ON community_reports (user_id, listing_id);
CREATE INDEX community_reports_status ON community_reports (status, id);
CREATE INDEX community_reports_listing_id ON community_reports (listing_id);
CREATE INDEX community_reports_resolved_by ON community_reports (resolved_by);

-- Bans: the user (user_id) may no longer publish, fork, rate or report.
CREATE TABLE community_bans (
    id         INTEGER PRIMARY KEY,
    user_id    INTEGER NOT NULL UNIQUE REFERENCES users (id) ON DELETE CASCADE,
    reason     TEXT NOT NULL DEFAULT '',
    banned_by  INTEGER REFERENCES users (id) ON DELETE SET NULL,
    created_at TIMESTAMP NOT NULL
);
CREATE INDEX community_bans_banned_by ON community_bans (banned_by);
