-- Accounts: seeded roles and permissions, email claims, operator changes to
-- the reserved-username list, password-setup tokens and session signing keys.

-- The built-in vocabulary (capabilities.AllPermissions) and the two built-in
-- roles: user holds every :own permission, admin holds every permission.
-- A test in package accounts compares these rows with the Go vocabulary.
INSERT INTO roles (name, description, created_at) VALUES
    ('user', 'Default role of every account.', CURRENT_TIMESTAMP),
    ('admin', 'Operators: account and role administration.', CURRENT_TIMESTAMP);

INSERT INTO permissions (name, action, entity, access) VALUES
    ('create:user:own', 'create', 'user', 'own'),
    ('read:user:own', 'read', 'user', 'own'),
    ('update:user:own', 'update', 'user', 'own'),
    ('delete:user:own', 'delete', 'user', 'own'),
    ('create:user:any', 'create', 'user', 'any'),
    ('read:user:any', 'read', 'user', 'any'),
    ('update:user:any', 'update', 'user', 'any'),
    ('delete:user:any', 'delete', 'user', 'any'),
    ('create:role:own', 'create', 'role', 'own'),
    ('read:role:own', 'read', 'role', 'own'),
    ('update:role:own', 'update', 'role', 'own'),
    ('delete:role:own', 'delete', 'role', 'own'),
    ('create:role:any', 'create', 'role', 'any'),
    ('read:role:any', 'read', 'role', 'any'),
    ('update:role:any', 'update', 'role', 'any'),
    ('delete:role:any', 'delete', 'role', 'any');

INSERT INTO role_permissions (role_name, permission_name)
SELECT 'user', name FROM permissions WHERE access = 'own';
INSERT INTO role_permissions (role_name, permission_name)
SELECT 'admin', name FROM permissions;

-- Every address an account holds: its current email, and former verified
-- addresses it has not released. A claimed address cannot open another
-- account. Owned by users.id through user_id.
CREATE TABLE email_claims (
    email      TEXT PRIMARY KEY CHECK (email = lower(email)),
    user_id    BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX email_claims_user_id ON email_claims (user_id);

-- Operator changes to the built-in reserved-username list: 'reserve' adds a
-- name, 'release' removes a built-in one. Platform-owned, not user data.
CREATE TABLE reserved_usernames (
    name       TEXT PRIMARY KEY CHECK (name = lower(name)),
    action     TEXT NOT NULL CHECK (action IN ('reserve', 'release')),
    created_at TIMESTAMPTZ NOT NULL
);

-- One-time password-setup tokens for accounts created by an operator
-- without a password. Only the SHA-256 of a token is stored. Owned by
-- users.id through user_id.
CREATE TABLE password_setup_tokens (
    token_hash TEXT PRIMARY KEY CHECK (length(token_hash) = 64),
    user_id    BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at TIMESTAMPTZ NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX password_setup_tokens_user_id ON password_setup_tokens (user_id);

-- Session-cookie signing keys, encrypted by the secrets keeper. The newest
-- unretired key signs; retired keys verify until every cookie they signed
-- has expired. Platform-owned.
CREATE TABLE session_keys (
    id         TEXT PRIMARY KEY,
    ciphertext TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    retired_at TIMESTAMPTZ
);
