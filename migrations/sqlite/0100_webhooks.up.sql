-- Webhook subscriptions to admin events. Each belongs to the admin who made
-- it (user_id): it is removed with that account and receives nothing once
-- its owner is no longer an active admin (checked at dispatch and at each
-- attempt). The signing secret is sealed with the envelope ring, bound to
-- the subscription and its owner; it is shown once, at creation.
CREATE TABLE webhook_subscriptions (
    id                   INTEGER PRIMARY KEY,
    public_id            TEXT NOT NULL UNIQUE,
    user_id              INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    url                  TEXT NOT NULL,
    event_types          TEXT NOT NULL DEFAULT '',
    description          TEXT NOT NULL DEFAULT '',
    key_id               INTEGER NOT NULL REFERENCES data_keys (id),
    secret_sealed        TEXT NOT NULL,
    consecutive_failures INTEGER NOT NULL DEFAULT 0,
    last_error           TEXT NOT NULL DEFAULT '',
    last_attempt_at      TIMESTAMP,
    last_success_at      TIMESTAMP,
    disabled_at          TIMESTAMP,
    disabled_reason      TEXT NOT NULL DEFAULT '',
    created_at           TIMESTAMP NOT NULL
);
CREATE INDEX webhook_subscriptions_user_id ON webhook_subscriptions (user_id);
