-- Denial-burst counters shared by every replica (events.DenialBursts on a
-- store): one row per subject and fixed window, counting the denials at the
-- choke point and the refused /mcp tokens of that subject in that window.
-- subject is the audit log's keyed hash of the user or client network
-- (never an id or address in clear); scope is 'user' or 'network'.
-- window_start is the window's start in Unix milliseconds; fired_at (Unix
-- milliseconds, 0 when not) marks the row whose replica published the
-- alert, which starts the subject's cooldown. Retention removes windows
-- older than the window and cooldown.
CREATE TABLE denial_burst_counts (
    scope        TEXT NOT NULL,
    subject      TEXT NOT NULL,
    window_start BIGINT NOT NULL,
    count        BIGINT NOT NULL,
    fired_at     BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (scope, subject, window_start)
);
CREATE INDEX denial_burst_counts_window ON denial_burst_counts (window_start);
