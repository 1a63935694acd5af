-- Email changes are confirmed by a link mailed to the new address: a
-- mail token of purpose change_email, whose email is the new address.
ALTER TABLE mail_tokens DROP CONSTRAINT mail_tokens_purpose_check;
ALTER TABLE mail_tokens ADD CONSTRAINT mail_tokens_purpose_check
    CHECK (purpose IN ('verify_email', 'reset_password', 'change_email'));
