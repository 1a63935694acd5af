package accounts

// Lifecycle owns the states an account passes through after creation:
// suspension and unsuspension, the deletion mark and the queue of accounts
// being deleted, and the queue of unverified sign-ups to purge (claims,
// retries, failures). Package accounts/lifecycle drives it.
//
// Get it as Service.Lifecycle; it is safe for concurrent use.
type Lifecycle struct{ *core }
