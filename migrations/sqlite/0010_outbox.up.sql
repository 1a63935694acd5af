-- Work to do after a commit (mail, events): written in the same transaction
-- as the change that needs it, then published to the queue and handled with
-- retries. payload is sealed (it may carry a one-time link). A row is
-- deleted once handled; a row past its last attempt stays, with
-- dead_at set, for an operator. Platform-owned.
CREATE TABLE outbox (
    id              INTEGER PRIMARY KEY,
    topic           TEXT NOT NULL,
    key_id          INTEGER NOT NULL REFERENCES data_keys (id),
    payload         TEXT NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMP NOT NULL,
    last_error      TEXT NOT NULL DEFAULT '',
    dead_at         TIMESTAMP,
    created_at      TIMESTAMP NOT NULL
);
CREATE INDEX outbox_due ON outbox (next_attempt_at);
