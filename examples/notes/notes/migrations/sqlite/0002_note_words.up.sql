-- Words counted in a note's attachment by the note.wordcount job (NULL
-- until the job ran), and per-user statistics refreshed by the
-- notes.stats schedule. note_stats is owned by users.id through user_id.
ALTER TABLE notes ADD COLUMN attachment_words INTEGER;
CREATE TABLE note_stats (
    user_id    INTEGER PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    notes      BIGINT NOT NULL,
    words      BIGINT NOT NULL,
    updated_at TIMESTAMP NOT NULL
);
