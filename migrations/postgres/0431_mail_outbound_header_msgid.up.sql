-- A delivery report without a VERP token finds the outbound message it is
-- about by the message's own Message-ID, whoever sent it (issue 30).
CREATE INDEX mail_outbound_header_msgid ON mail_outbound (header_message_id);
