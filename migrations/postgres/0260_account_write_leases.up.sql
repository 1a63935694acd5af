-- Account write leases: one row per call that may write an account's data,
-- while it runs (storage.Store.WriteLease). A lease is taken only while the
-- account is not marked deleting, and is renewed until expires_at while it
-- is not; account deletion waits until none is live before it cleans
-- anything, so that nothing is written after the clean-up. token names the
-- lease for its renewal and release; holder is the capability it was taken
-- for. Rows of calls that ended without releasing (a crash) expire, and
-- retention removes them.
CREATE TABLE account_write_leases (
    token       TEXT PRIMARY KEY,
    user_id     BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    holder      TEXT NOT NULL,
    acquired_at TIMESTAMPTZ NOT NULL,
    expires_at  TIMESTAMPTZ NOT NULL
);
CREATE INDEX account_write_leases_user ON account_write_leases (user_id, expires_at);
