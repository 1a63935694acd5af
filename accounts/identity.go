package accounts

// Identity owns who an account is: creating accounts (sign-up, operator
// creation, external identities, invites and the sign-up mode), looking
// them up by id, stable id, email or username, usernames and the reserved
// list, email changes, email claims and their release, email verification,
// and the single-use mail tokens and links those flows send.
//
// Get it as Service.Identity; it is safe for concurrent use.
type Identity struct{ *core }
