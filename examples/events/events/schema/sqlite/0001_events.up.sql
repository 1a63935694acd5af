-- The events example's workspace tables. Every table has workspace_id
-- first in its key: on SQLite each workspace's file holds only its own
-- rows; on PostgreSQL the rows of every workspace share these tables.
CREATE TABLE event_speakers (
    workspace_id TEXT NOT NULL,
    id           TEXT NOT NULL,
    name         TEXT NOT NULL,
    bio          TEXT NOT NULL,
    PRIMARY KEY (workspace_id, id)
);

CREATE TABLE event_sessions (
    workspace_id TEXT NOT NULL,
    id           TEXT NOT NULL,
    title        TEXT NOT NULL,
    abstract     TEXT NOT NULL,
    speaker_id   TEXT NOT NULL,
    PRIMARY KEY (workspace_id, id)
);

CREATE TABLE event_slots (
    workspace_id TEXT NOT NULL,
    session_id   TEXT NOT NULL,
    room         TEXT NOT NULL,
    starts_at    TIMESTAMP NOT NULL,
    ends_at      TIMESTAMP NOT NULL,
    PRIMARY KEY (workspace_id, session_id)
);
CREATE INDEX event_slots_room ON event_slots (workspace_id, room, starts_at);
