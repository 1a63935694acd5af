// Package web is enclave's browser shell: server-rendered account pages
// (sign-up, sign-in, email verification, password reset, password and
// email change, connected apps, export, deletion), admin pages (users,
// roles, suspension, verification, audit log), and the OAuth sign-in and
// consent pages (Handler implements oauth.LoginConsent).
//
// Every page is a templ component rendered through one function that sets
// the first-party security headers (a strict Content-Security-Policy with
// no inline scripts, frame-ancestors 'none', nosniff, a referrer policy,
// HSTS on https). Non-safe requests pass cross-origin protection first.
// Credential endpoints share one per-client rate-limit bucket counted in
// SQL, so replicas share it. Mail goes through a Mailer: SMTPMailer, or a
// DevMailer whose messages appear at /dev/mail in development.
//
// New refuses, in production, settings that are unsafe on a public server.
// See docs/web.md for the pages, mounting and the security model.
package web
