package accounts

import (
	"time"

	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/storage"
)

// RetentionPolicies declares how long the accounts service's own tables
// keep their rows (the users table itself is declared by
// lifecycle.Service.RetentionPolicies, whose purge deletes accounts).
func RetentionPolicies() []retention.Policy {
	day := 24 * time.Hour
	return []retention.Policy{
		retention.UntilAccountDeleted("user_roles"),
		retention.UntilAccountDeleted("email_claims").Because("a former address stays claimed until its owner releases it (a link mailed to it)"),
		retention.Age("username_holds", "held_until", 0).Because("a username given up is held for its former holder until then"),
		retention.Age("password_setup_tokens", "expires_at", day).Because("expired setup links"),
		retention.Age("mail_tokens", "expires_at", day).Because("expired verification, reset and email-change links"),
		retention.UntilAccountDeleted("user_totp").Because("or until the authenticator app is turned off"),
		retention.UntilAccountDeleted("user_recovery_codes").Because("replaced when new codes are made"),
		retention.UntilAccountDeleted("user_passkeys").Because("or until the passkey is removed"),
		retention.Age("login_challenges", "expires_at", 0).Because("pending sign-ins and passkey challenges (5 minutes)"),
		retention.Kept("roles", "reference data"),
		retention.Kept("permissions", "the permission vocabulary"),
		retention.Kept("role_permissions", "reference data"),
		retention.Kept("reserved_usernames", "operator reservations"),
		retention.Kept("session_keys", "browser session keys, rotated by enclave keys rotate"),
		retention.Kept("retired_user_ids", "identities are never reused"),
		retention.Kept("invite_codes", "admins create and revoke them"),
	}
}

// RegisterInventory records the accounts service's user-owned tables (the
// users and user_roles tables are lifecycle.RegisterInventory's): email
// claims, username holds, the tokens of mailed links (credentials, never
// exported) and the second factors (FactorTables).
func RegisterInventory(inv *storage.Inventory) error {
	return inv.AddTables(append([]storage.Table{
		{Name: "email_claims", KeyColumn: "email"},
		UsernameHoldsTable,
		{Name: "password_setup_tokens", KeyColumn: "token_hash", SkipExport: true},
		{Name: "mail_tokens", KeyColumn: "token_hash", SkipExport: true},
	}, FactorTables()...)...)
}
