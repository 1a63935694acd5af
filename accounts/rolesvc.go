package accounts

// Roles owns what an account may do: role assignment and removal (with
// the last-admin rule), roles and permissions loaded fresh per request,
// the permission vocabulary, the admin views of accounts and counts, and
// the operator's account actions.
//
// Get it as Service.Roles; it is safe for concurrent use.
type Roles struct{ *core }
