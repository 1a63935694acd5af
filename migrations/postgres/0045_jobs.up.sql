-- Embedder jobs ride the outbox: a job that concerns a user carries its
-- owner, so the account's deletion removes it and its export lists it.
-- Rows without an owner (mail, platform work) keep user_id NULL.
ALTER TABLE outbox ADD COLUMN user_id BIGINT REFERENCES users (id) ON DELETE CASCADE;
CREATE INDEX outbox_user_id ON outbox (user_id);
CREATE INDEX outbox_dead_at ON outbox (dead_at);
