package accounts

// SecondFactors owns what an account may have to show beyond its password:
// TOTP enrolment and codes, recovery codes, passkeys (which also sign in on
// their own), the pending second step of a login, fresh factor proofs for
// sensitive actions, and the rule that admins hold a second factor.
//
// Get it as Service.SecondFactors; it is safe for concurrent use.
type SecondFactors struct{ *core }
