-- Outbound mail (#30): each message a user's agent sent (after the person
-- confirmed it), its delivery state, and the bounces and complaints that
-- came back for it. verp_token is the random token of the message's
-- envelope sender (bounces+<token>@<mail domain>): a delivery report is
-- matched to a message only through it (or the message's Message-ID, for
-- the same owner), so a forged report cannot touch another user's message.
CREATE TABLE mail_outbound (
    id                INTEGER PRIMARY KEY,
    public_id         TEXT NOT NULL UNIQUE,
    user_id           INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    message_id        BIGINT REFERENCES mail_messages (id) ON DELETE SET NULL,
    header_message_id TEXT NOT NULL,
    verp_token        TEXT NOT NULL UNIQUE,
    rcpts             TEXT NOT NULL DEFAULT '',
    subject           TEXT NOT NULL DEFAULT '',
    state             TEXT NOT NULL CHECK (state IN ('queued', 'sent', 'bounced', 'complained')),
    detail            TEXT NOT NULL DEFAULT '',
    created_at        TIMESTAMP NOT NULL,
    updated_at        TIMESTAMP NOT NULL
);
CREATE INDEX mail_outbound_user ON mail_outbound (user_id, id);
CREATE INDEX mail_outbound_msgid ON mail_outbound (user_id, header_message_id);
CREATE INDEX mail_outbound_created ON mail_outbound (created_at);

-- Bounces and complaints, one per message and kind: five bounced messages
-- or one complaint in a UTC day pause the user's outbound mail.
CREATE TABLE mail_outbound_events (
    id          INTEGER PRIMARY KEY,
    user_id     INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    outbound_id BIGINT NOT NULL REFERENCES mail_outbound (id) ON DELETE CASCADE,
    kind        TEXT NOT NULL CHECK (kind IN ('bounce', 'complaint')),
    detail      TEXT NOT NULL DEFAULT '',
    created_at  TIMESTAMP NOT NULL,
    UNIQUE (outbound_id, kind)
);
CREATE INDEX mail_outbound_events_user ON mail_outbound_events (user_id, kind, created_at);
CREATE INDEX mail_outbound_events_created ON mail_outbound_events (created_at);

-- A user's outbound pause: paused while lifted_at is NULL; an admin lifts
-- it (lifted_at), and only reports after the lift count toward a new one.
CREATE TABLE mail_outbound_pauses (
    id        INTEGER PRIMARY KEY,
    user_id   INTEGER NOT NULL UNIQUE REFERENCES users (id) ON DELETE CASCADE,
    reason    TEXT NOT NULL CHECK (reason IN ('complaint', 'bounces')),
    paused_at TIMESTAMP NOT NULL,
    lifted_at TIMESTAMP
);
