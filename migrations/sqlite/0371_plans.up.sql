-- Plans: the daily and weekly limits of an account's meters (NULL: no
-- limit) and its storage bytes. Platform data, no owner. The plan named
-- 'default' always exists: accounts without a user_plans row are on it.
CREATE TABLE plans (
    id                  INTEGER PRIMARY KEY,
    name                TEXT NOT NULL UNIQUE,
    execute_daily       BIGINT,
    execute_weekly      BIGINT,
    outbound_daily      BIGINT,
    outbound_weekly     BIGINT,
    mail_send_daily     BIGINT,
    mail_send_weekly    BIGINT,
    mail_receive_daily  BIGINT,
    mail_receive_weekly BIGINT,
    storage_bytes       BIGINT,
    created_at          TIMESTAMP NOT NULL,
    updated_at          TIMESTAMP NOT NULL
);
INSERT INTO plans (name, created_at, updated_at) VALUES ('default', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP);

-- The plan an admin set for an account (user_id); set_by is that admin
-- (cleared with their account).
CREATE TABLE user_plans (
    user_id INTEGER PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    plan_id INTEGER NOT NULL REFERENCES plans (id),
    set_by  INTEGER REFERENCES users (id) ON DELETE SET NULL,
    set_at  TIMESTAMP NOT NULL
);
CREATE INDEX user_plans_plan_id ON user_plans (plan_id);
CREATE INDEX user_plans_set_by ON user_plans (set_by);

-- One admin alert per account, meter, span (day or week), period (its
-- first UTC day) and threshold (80 or 100 percent).
CREATE TABLE quota_alerts (
    id         INTEGER PRIMARY KEY,
    user_id    INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    meter      TEXT NOT NULL,
    span       TEXT NOT NULL,
    period     TEXT NOT NULL,
    threshold  INTEGER NOT NULL,
    created_at TIMESTAMP NOT NULL,
    UNIQUE (user_id, meter, span, period, threshold)
);
CREATE INDEX quota_alerts_period ON quota_alerts (period);
