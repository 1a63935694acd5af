-- Users and role-based access control.
--
-- users.id is the internal key every owned row references; stable_user_id
-- (hex SHA-256 of the normalized signup email) is the identity shown to
-- agents, logs and exports, and never changes.
CREATE TABLE users (
    id                  INTEGER PRIMARY KEY,
    stable_user_id      TEXT NOT NULL UNIQUE CHECK (length(stable_user_id) = 64),
    email               TEXT NOT NULL UNIQUE CHECK (email = lower(email)),
    username            TEXT NOT NULL UNIQUE CHECK (username = lower(username)),
    password_hash       TEXT,
    email_verified_at   TIMESTAMP,
    password_changed_at TIMESTAMP,
    suspended_at        TIMESTAMP,
    deleting_at         TIMESTAMP,
    created_at          TIMESTAMP NOT NULL,
    updated_at          TIMESTAMP NOT NULL
);

-- Roles and permissions are keyed by name: names are stable across
-- installations, and one join answers "what may this user do".
CREATE TABLE roles (
    name        TEXT PRIMARY KEY,
    description TEXT NOT NULL DEFAULT '',
    created_at  TIMESTAMP NOT NULL
);

-- A permission is action:entity:access (for example read:user:own).
CREATE TABLE permissions (
    name        TEXT PRIMARY KEY,
    action      TEXT NOT NULL,
    entity      TEXT NOT NULL,
    access      TEXT NOT NULL CHECK (access IN ('own', 'any')),
    description TEXT NOT NULL DEFAULT '',
    CHECK (name = action || ':' || entity || ':' || access)
);

CREATE TABLE role_permissions (
    role_name       TEXT NOT NULL REFERENCES roles (name) ON DELETE CASCADE,
    permission_name TEXT NOT NULL REFERENCES permissions (name) ON DELETE CASCADE,
    PRIMARY KEY (role_name, permission_name)
);
CREATE INDEX role_permissions_permission_name ON role_permissions (permission_name);

-- Owned by users.id through user_id.
CREATE TABLE user_roles (
    user_id    INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    role_name  TEXT NOT NULL REFERENCES roles (name) ON DELETE RESTRICT,
    granted_at TIMESTAMP NOT NULL,
    PRIMARY KEY (user_id, role_name)
);
CREATE INDEX user_roles_role_name ON user_roles (role_name);
