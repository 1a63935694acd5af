package web

import (
	"net/http"
	"strings"

	"github.com/enclave-mcp/enclave/accounts"
)

// authForm is the state of a sign-in, sign-up or password form: what to
// show again after an error (never a password) and the error.
type authForm struct {
	Email       string
	Username    string
	Token       string
	RedirectTo  string
	Action      string // where the form posts (path and query)
	ClientName  string // OAuth client asking for sign-in, if any
	MinPassword string
	Invite      bool   // sign-up needs an invite code
	InviteCode  string // as typed, kept on an error
	Error       string
	errStatus   int
	// resumeDeletion lets signIn give an account whose deletion did not
	// finish a session for the deletion page (the /login form only);
	// deletionResumed reports that it did.
	resumeDeletion  bool
	deletionResumed bool
	// secondFactor is set when the password was right and the account
	// has a second factor: the pending sign-in to show next.
	secondFactor *secondFactorForm
	// PasskeyNext, when set, shows the passkey sign-in button, which goes
	// there on success.
	PasskeyNext string
	// External are the "Sign in with ..." buttons of the configured
	// identity providers.
	External []externalButton
}

// status is the HTTP status of a form shown again after an error.
func (f authForm) status() int {
	if f.errStatus == 0 {
		return http.StatusBadRequest
	}
	return f.errStatus
}

func joinComma(s []string) string {
	if len(s) == 0 {
		return "—"
	}
	return strings.Join(s, ", ")
}

// accountView is what the account page shows.
type accountView struct {
	User          accounts.User
	Roles         []string
	FormerEmails  []string
	MinPassword   string
	PasswordError string
	EmailError    string
	// UsernameError and ReleaseError are the refusals of the username
	// and former-address forms.
	UsernameError string
	ReleaseError  string
	// HeldUsernames are former usernames held for the account, with the
	// day each hold ends ("alice (until 2026-05-01)").
	HeldUsernames []string
	// NextUsernameChange, when set, is when the username may change again.
	NextUsernameChange string
	// UsernameRules says how long a previous username is held and how
	// often it may change.
	UsernameRules string
}

// shortHash abbreviates a keyed hash for display.
func shortHash(s string) string {
	if len(s) > 12 {
		return s[:12] + "…"
	}
	return s
}

// passkeyNext is where a passkey sign-in from this form goes.
func (f authForm) passkeyNext(p page) string {
	switch {
	case f.PasskeyNext != "":
		return f.PasskeyNext
	case f.RedirectTo != "":
		return f.RedirectTo
	}
	return p.Prefix + pathAccount
}
