package web

import "fmt"

// SignupMode says who may create an account on the web shell.
type SignupMode string

// The sign-up modes.
const (
	// SignupOpen lets anyone create an account (the default).
	SignupOpen SignupMode = "open"
	// SignupInvite needs an invite code made by an admin.
	SignupInvite SignupMode = "invite"
	// SignupClosed creates accounts only through the CLI
	// ("enclave user create").
	SignupClosed SignupMode = "closed"
)

// ParseSignupMode parses "open", "invite" or "closed"; "" is SignupOpen.
func ParseSignupMode(s string) (SignupMode, error) {
	switch m := SignupMode(s); m {
	case "":
		return SignupOpen, nil
	case SignupOpen, SignupInvite, SignupClosed:
		return m, nil
	}
	return "", fmt.Errorf("signup mode %q: want open, invite or closed", s)
}
