-- Used private_key_jwt client assertions (package oauth): each jti is
-- accepted once until its assertion expires (RFC 7523 §3). Platform-owned;
-- rows past expires_at are purged.
CREATE TABLE oauth_client_assertions (
    jti        TEXT PRIMARY KEY,
    expires_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX oauth_client_assertions_expires_at ON oauth_client_assertions (expires_at);
