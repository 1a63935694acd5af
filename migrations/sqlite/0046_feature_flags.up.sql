-- Feature flags managed by admins (adminFeatureList, adminFeatureSet),
-- read fresh on every request. A flag is on for everyone, or only for
-- holders of one role. Platform-owned.
CREATE TABLE feature_flags (
    name        TEXT PRIMARY KEY,
    enabled     BOOLEAN NOT NULL,
    role_name   TEXT NOT NULL DEFAULT '',
    description TEXT NOT NULL DEFAULT '',
    updated_at  TIMESTAMP NOT NULL
);
