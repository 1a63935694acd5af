-- A secret's use policy: the hosts its owner approved it for (a JSON array
-- of exact hosts and "*.domain" forms; empty means it is never sent
-- anywhere) and when it stops being usable (NULL: never).
ALTER TABLE user_secrets ADD COLUMN allowed_hosts TEXT NOT NULL DEFAULT '[]';
ALTER TABLE user_secrets ADD COLUMN expires_at TIMESTAMPTZ;
