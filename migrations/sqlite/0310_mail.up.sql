-- Mail (#30): each user's mailbox (<username>@<mail domain>) and the
-- platform's system mailboxes for the reserved local parts (postmaster,
-- abuse, ...). Raw MIME and attachment bytes live in blobs; these rows
-- hold what is read, listed and searched. delivery_key is the digest that
-- names a message's blobs (derived from its delivery id), so the blob keys
-- of a row are computed, never trusted from a stored string.
CREATE TABLE mail_threads (
    id              INTEGER PRIMARY KEY,
    public_id       TEXT NOT NULL UNIQUE,
    user_id         INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    subject         TEXT NOT NULL DEFAULT '',
    message_count   BIGINT NOT NULL DEFAULT 0,
    last_message_at TIMESTAMP NOT NULL,
    created_at      TIMESTAMP NOT NULL
);
CREATE INDEX mail_threads_user ON mail_threads (user_id, last_message_at);

CREATE TABLE mail_messages (
    id           INTEGER PRIMARY KEY,
    public_id    TEXT NOT NULL UNIQUE,
    user_id      INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    thread_id    BIGINT NOT NULL REFERENCES mail_threads (id) ON DELETE CASCADE,
    folder       TEXT NOT NULL CHECK (folder IN ('inbox', 'quarantine', 'sent')),
    delivery_key TEXT NOT NULL,
    message_id   TEXT NOT NULL DEFAULT '',
    in_reply_to  TEXT NOT NULL DEFAULT '',
    refs         TEXT NOT NULL DEFAULT '',
    from_addr    TEXT NOT NULL DEFAULT '',
    to_addrs     TEXT NOT NULL DEFAULT '',
    cc_addrs     TEXT NOT NULL DEFAULT '',
    rcpt         TEXT NOT NULL DEFAULT '',
    subject      TEXT NOT NULL DEFAULT '',
    text_body    TEXT NOT NULL DEFAULT '',
    html_body    TEXT NOT NULL DEFAULT '',
    headers      TEXT NOT NULL DEFAULT '[]',
    auth_results TEXT NOT NULL DEFAULT '',
    size_bytes   BIGINT NOT NULL DEFAULT 0,
    sent_at      TIMESTAMP,
    received_at  TIMESTAMP NOT NULL,
    retry_at     TIMESTAMP
);
CREATE INDEX mail_messages_user ON mail_messages (user_id, folder, id);
CREATE INDEX mail_messages_thread ON mail_messages (thread_id, id);
CREATE INDEX mail_messages_msgid ON mail_messages (user_id, message_id);
CREATE INDEX mail_messages_received ON mail_messages (received_at);

CREATE TABLE mail_attachments (
    id           INTEGER PRIMARY KEY,
    public_id    TEXT NOT NULL UNIQUE,
    user_id      INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    message_id   BIGINT NOT NULL REFERENCES mail_messages (id) ON DELETE CASCADE,
    position     INTEGER NOT NULL,
    filename     TEXT NOT NULL DEFAULT '',
    content_type TEXT NOT NULL DEFAULT '',
    size_bytes   BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX mail_attachments_message ON mail_attachments (message_id, position);
CREATE INDEX mail_attachments_user ON mail_attachments (user_id);

-- The delivery ledger: one row per delivery id (the provider's id, or a
-- digest of Message-ID and recipient) a mailbox accepted, written in the
-- transaction that stores the message, so a retried delivery is stored
-- once. Kept 90 days.
CREATE TABLE mail_deliveries (
    id          INTEGER PRIMARY KEY,
    user_id     INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    delivery_id TEXT NOT NULL,
    message_id  BIGINT REFERENCES mail_messages (id) ON DELETE SET NULL,
    event       TEXT NOT NULL,
    created_at  TIMESTAMP NOT NULL,
    UNIQUE (user_id, delivery_id)
);
CREATE INDEX mail_deliveries_created ON mail_deliveries (created_at);

-- System mailboxes: the same graph for the reserved local parts, owned by
-- the platform (mailbox names the local part; no user owns these rows).
CREATE TABLE system_mail_threads (
    id              INTEGER PRIMARY KEY,
    public_id       TEXT NOT NULL UNIQUE,
    mailbox         TEXT NOT NULL,
    subject         TEXT NOT NULL DEFAULT '',
    message_count   BIGINT NOT NULL DEFAULT 0,
    last_message_at TIMESTAMP NOT NULL,
    created_at      TIMESTAMP NOT NULL
);
CREATE INDEX system_mail_threads_box ON system_mail_threads (mailbox, last_message_at);

CREATE TABLE system_mail_messages (
    id           INTEGER PRIMARY KEY,
    public_id    TEXT NOT NULL UNIQUE,
    mailbox      TEXT NOT NULL,
    thread_id    BIGINT NOT NULL REFERENCES system_mail_threads (id) ON DELETE CASCADE,
    folder       TEXT NOT NULL CHECK (folder IN ('inbox', 'quarantine', 'sent')),
    delivery_key TEXT NOT NULL,
    message_id   TEXT NOT NULL DEFAULT '',
    in_reply_to  TEXT NOT NULL DEFAULT '',
    refs         TEXT NOT NULL DEFAULT '',
    from_addr    TEXT NOT NULL DEFAULT '',
    to_addrs     TEXT NOT NULL DEFAULT '',
    cc_addrs     TEXT NOT NULL DEFAULT '',
    rcpt         TEXT NOT NULL DEFAULT '',
    subject      TEXT NOT NULL DEFAULT '',
    text_body    TEXT NOT NULL DEFAULT '',
    html_body    TEXT NOT NULL DEFAULT '',
    headers      TEXT NOT NULL DEFAULT '[]',
    auth_results TEXT NOT NULL DEFAULT '',
    size_bytes   BIGINT NOT NULL DEFAULT 0,
    sent_at      TIMESTAMP,
    received_at  TIMESTAMP NOT NULL,
    retry_at     TIMESTAMP
);
CREATE INDEX system_mail_messages_box ON system_mail_messages (mailbox, folder, id);
CREATE INDEX system_mail_messages_thread ON system_mail_messages (thread_id, id);
CREATE INDEX system_mail_messages_msgid ON system_mail_messages (mailbox, message_id);
CREATE INDEX system_mail_messages_received ON system_mail_messages (received_at);

CREATE TABLE system_mail_attachments (
    id           INTEGER PRIMARY KEY,
    public_id    TEXT NOT NULL UNIQUE,
    mailbox      TEXT NOT NULL,
    message_id   BIGINT NOT NULL REFERENCES system_mail_messages (id) ON DELETE CASCADE,
    position     INTEGER NOT NULL,
    filename     TEXT NOT NULL DEFAULT '',
    content_type TEXT NOT NULL DEFAULT '',
    size_bytes   BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX system_mail_attachments_message ON system_mail_attachments (message_id, position);

CREATE TABLE system_mail_deliveries (
    id          INTEGER PRIMARY KEY,
    mailbox     TEXT NOT NULL,
    delivery_id TEXT NOT NULL,
    message_id  BIGINT REFERENCES system_mail_messages (id) ON DELETE SET NULL,
    event       TEXT NOT NULL,
    created_at  TIMESTAMP NOT NULL,
    UNIQUE (mailbox, delivery_id)
);
CREATE INDEX system_mail_deliveries_created ON system_mail_deliveries (created_at);

-- The full-text index of user mail: contentless FTS5 kept by triggers;
-- scope holds "u<user_id>" so a search reads only its owner's postings,
-- and searches also join mail_messages and filter by owner.
CREATE VIRTUAL TABLE mail_fts USING fts5 (
    scope, subject, sender, body,
    content = '', contentless_delete = 1, tokenize = 'unicode61'
);
CREATE TRIGGER mail_messages_fts_insert AFTER INSERT ON mail_messages BEGIN
    INSERT INTO mail_fts (rowid, scope, subject, sender, body) VALUES (new.id, 'u' || new.user_id, new.subject, new.from_addr, new.text_body);
END;
CREATE TRIGGER mail_messages_fts_delete AFTER DELETE ON mail_messages BEGIN
    DELETE FROM mail_fts WHERE rowid = old.id;
END;
