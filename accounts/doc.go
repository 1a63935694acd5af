// Package accounts manages the people who use an enclave server: accounts
// with stable ids and email claims, usernames and the reserved-name list,
// argon2id passwords, signed-cookie browser sessions, role assignment, and
// the account states (suspended, deleting) that every entry point honours.
//
// Services. New returns a Service whose fields are the services a caller
// uses: Identity (who an account is), Credentials (passwords and
// sessions), SecondFactors (TOTP, recovery codes, passkeys, factor
// proofs), Roles (what an account may do, admin and operator views) and
// Lifecycle (suspension, deletion, the unverified-signup queue). Service
// itself keeps the change hooks, LoadCaller and the capability
// constructors.
//
// Identity. An account has an internal id (users.id, referenced by every
// row the account owns) and a stable id: the hex SHA-256 of the email it
// signed up with (a random one when an earlier account already had that),
// shown to agents and in logs and exports, and never changed. Identities
// are never reused: when an account is deleted both ids are retired
// (table retired_user_ids) and never given to another account, and every
// credential (session cookie, password-setup or reset link) issued before
// the account it names was created is refused. Emails are claims: a former
// verified address stays claimed by its account until its holder releases
// it by opening a link mailed to it (Identity.RequestEmailRelease,
// Identity.ReleaseEmailWithToken), so it cannot open a second account
// meanwhile.
//
// Usernames. A holder changes their own username with
// Identity.ChangeOwnUsername under the sign-up rules (the effective
// reserved set, case-insensitive uniqueness); the name given up stays held
// for them for Config.UsernameHold so nobody else can pass for them, and
// changes wait Config.UsernameChangeCooldown. An operator's
// Identity.ChangeUsername holds nothing and does not wait.
//
// Authorization. Roles and their permissions are loaded fresh for every
// request with Roles.RolesAndPermissions (never stored in cookies or
// tokens); on error callers treat the account as holding no roles. New
// accounts get the role user; nothing at run time grants admin except an
// operator (the CLI) or an existing admin, and the last admin cannot lose
// the role.
//
// Errors. Domain errors are the exported Err… values (and
// *PasswordPolicyError, which matches ErrWeakPassword); their messages are
// fit to show to the person who made the request. Transports map them to
// status codes with errors.Is.
package accounts
