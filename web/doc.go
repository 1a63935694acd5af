// Package web is enclave's browser shell: a public start page and a
// "Connect an agent" page (the MCP URL and ready-made setups for common
// hosts), server-rendered account pages (sign-up, sign-in, email
// verification, password reset, password and email change, connected
// apps, export, deletion), admin pages (users, roles, suspension,
// verification, audit log), and the OAuth sign-in and consent pages
// (Handler implements oauth.LoginConsent).
//
// The shell carries the operator's branding (Options.SiteName,
// SiteDescription, LogoURL, AccentColor), and embedders add pages of
// their own with Handler.Mount: they render in the same layout, pass the
// same guards and cross-origin protection, and act through
// Registry.Invoke as the signed-in person (see Page and PageContext).
//
// Every page is a templ component rendered through one function that sets
// the first-party security headers (a strict Content-Security-Policy with
// no inline scripts, frame-ancestors 'none', nosniff, a referrer policy,
// HSTS on https). Non-safe requests pass cross-origin protection first.
// Credential endpoints share one per-client rate-limit bucket counted in
// SQL, so replicas share it. web does not own mail: the pages send the
// platform's mail through a MailSender (package mail's Transactional,
// Options.Mail) and compose it with mail.AccountMail; in development a
// mail.DevMailer keeps it and /dev/mail lists it.
//
// New refuses, in production, settings that are unsafe on a public server.
// See docs/web.md for the pages, mounting and the security model.
package web
