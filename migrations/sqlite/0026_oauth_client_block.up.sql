-- An admin can block a registered OAuth client: its tokens are refused by
-- the bearer check at once, and it can neither authorize nor refresh.
ALTER TABLE oauth_clients ADD COLUMN blocked_at TIMESTAMP;
