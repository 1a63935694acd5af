-- Enterprise identities (package oauth): a subject of a trusted enterprise
-- IdP linked to an account, so its ID-JAGs redeem as that account. id is
-- the hex SHA-256 of issuer NUL subject. One subject per IdP per account.
-- Owned by users.id through user_id.
CREATE TABLE oauth_enterprise_identities (
    id           TEXT PRIMARY KEY,
    user_id      INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    issuer       TEXT NOT NULL,
    subject      TEXT NOT NULL,
    created_at   TIMESTAMP NOT NULL,
    last_used_at TIMESTAMP NOT NULL
);
CREATE UNIQUE INDEX oauth_enterprise_identities_user_issuer ON oauth_enterprise_identities (user_id, issuer);
