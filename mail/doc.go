// Package mail gives every user a mailbox: mail to <username>@D (and
// <username>+<tag>@D, RFC 5233) for the configured mail domain D arrives
// through an SMTP listener (github.com/emersion/go-smtp), is parsed with
// the standard library's MIME readers (net/mail, mime/multipart), and is read by
// the user's agents through capabilities: mailList, mailThread, mailRead,
// mailSearch, mailDelete and mailAttachmentGet, each on the caller's own
// mailbox only. Mail to the platform's reserved local parts (postmaster,
// abuse, security, ...) lands in system mailboxes that no user owns;
// admins read them with adminSystemMailList and adminSystemMailGet, and
// every such read is audited.
//
// Delivery is durable and idempotent (Service.Deliver): the raw MIME is
// written to a blob first, under a key derived from the owner's stable id
// and the delivery id (an attachment is a byte range of that blob, decoded
// when read), then the delivery ledger row, the
// thread (found from In-Reply-To and References), the message and its
// attachments are written in one transaction (on SQLite shared by
// concurrent deliveries, each in a savepoint of its own: a group commit;
// each is acknowledged after that commit). A retried delivery (the
// same Message-ID to the same recipient, or the same provider delivery
// id) finds its ledger row and is stored, and counted against the
// receive quota (quota class mail_receive, which a plan limits too), once.
//
// Outbound mail (mailSend) goes from the caller's own address and only
// after the person confirmed the exact message (Call.Elicit; a client that
// cannot ask is refused). Recipients are single plain addresses and the
// subject one line, so no header can be injected; the server writes the
// message, keeps a copy in the sent folder, and queues it through the
// outbox (OutboundTopic) for a RawSender, with a per-message VERP envelope
// sender bounces+<token>@D. Delivery reports (RFC 3464 DSN, RFC 5965 ARF)
// arriving at that address are matched by the token, update the
// message's delivery state (a report without the token counts only when
// the recipient domain's mail system sent it: HandleUntokenedReport),
// and one complaint or five bounces in a UTC
// day pause the account's outbound mail (event user.email_outbound.paused)
// until adminMailOutboundResume. adminSystemMailSend sends from a reserved
// address. Sends count against quota class mail_send.
//
// Everything a sender wrote reaches agents as data: fields carry
// Untrusted names and a content warning, HTML is sanitised with
// github.com/microcosm-cc/bluemonday (no script, style, form, frame,
// handler or image survives), header values are single-line valid UTF-8.
//
// Transactional mail, the platform's own (verification, reset and setup
// links, security notices, invitations), is sent here too: Transactional
// writes a message in its caller's transaction through the outbox (topic
// TransactionalTopic), or queues it in memory, or keeps it in a DevMailer
// in development; Mailer is the transport (SMTPMailer, DevMailer), which
// also carries mailSend's raw messages; AccountMail writes the messages
// and implements the mailer interfaces of packages accounts and
// workspaces, so the server wires them directly. The web shell only
// calls the sender it is given. Bounce handling and the outbound pause
// apply to mailSend only (docs/mail.md says why).
//
// Lifecycle: the mail_* tables have owner columns and are in the
// ownership inventory with the "mail" blob domain (exported in blob
// chunks, deleted with the account); the system_mail_* tables are
// declared platform-owned. Messages are kept 365 days, ledger rows 90
// days; retention deletes a message's blobs before its row and retries a
// message whose blobs fail an hour later.
package mail
