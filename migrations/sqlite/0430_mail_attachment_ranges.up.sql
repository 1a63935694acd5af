-- Attachments as byte ranges of the raw MIME blob (issue 30): a delivery
-- writes one blob, the raw message, and an attachment row records where
-- its body is in it (raw_offset, raw_length, still transfer-encoded) and
-- how to decode it (transfer_encoding: base64, quoted-printable or '' for
-- as is). Rows from before keep NULL offsets and their own blob.
ALTER TABLE mail_attachments ADD COLUMN raw_offset BIGINT;
ALTER TABLE mail_attachments ADD COLUMN raw_length BIGINT;
ALTER TABLE mail_attachments ADD COLUMN transfer_encoding TEXT;
ALTER TABLE system_mail_attachments ADD COLUMN raw_offset BIGINT;
ALTER TABLE system_mail_attachments ADD COLUMN raw_length BIGINT;
ALTER TABLE system_mail_attachments ADD COLUMN transfer_encoding TEXT;
