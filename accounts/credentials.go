package accounts

// Credentials owns how an account proves who it is with a password or a
// browser session: login, password changes and checks, password setup and
// reset tokens and links, the rule that credentials issued before a
// password change (or before the account existed) are refused, and the
// signed session cookies and their keys.
//
// Get it as Service.Credentials; it is safe for concurrent use.
type Credentials struct{ *core }
