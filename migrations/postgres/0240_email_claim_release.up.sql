-- A former address is released by its owner proving, again, that they
-- control it: a mail token of purpose release_email, whose email is the
-- former address, mailed to it.
ALTER TABLE mail_tokens DROP CONSTRAINT mail_tokens_purpose_check;
ALTER TABLE mail_tokens ADD CONSTRAINT mail_tokens_purpose_check
    CHECK (purpose IN ('verify_email', 'reset_password', 'change_email', 'release_email'));
