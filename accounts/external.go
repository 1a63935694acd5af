package accounts

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"

	"github.com/uptrace/bun"
)

// ExternalSignupInput opens an account for a person who signed in with an
// external identity provider (package federation) whose verified email no
// account holds.
type ExternalSignupInput struct {
	// Email is the provider's verified address: the account starts with it
	// verified.
	Email string
	// InviteCode is spent when Config.Signup is SignupInvite.
	InviteCode string
	// OnCreated runs inside the creating transaction with the new
	// account's id (link the identity there, so the account never exists
	// without its way to sign in: federation.Service.LinkOnCreate). Its
	// error rolls the account back.
	OnCreated func(ctx context.Context, tx bun.IDB, userID int64) error
}

// SignupExternal opens an account without a password for an external
// identity, as Signup does for a password: ErrSignupClosed when sign-up is
// closed, ErrInviteInvalid without a valid invite when it is by
// invitation. The username is made from the address (with a suffix when
// taken); the person can change it later.
func (s *Identity) SignupExternal(ctx context.Context, in ExternalSignupInput) (User, error) {
	var invite *string
	switch s.cfg.Signup {
	case SignupClosed:
		return User{}, ErrSignupClosed
	case SignupInvite:
		invite = &in.InviteCode
	}
	base := usernameFromEmail(in.Email)
	for attempt := 0; ; attempt++ {
		name := base
		if attempt > 0 {
			name = strings.TrimRight(base[:min(len(base), 24)], "-") + "-" + randomSuffix()
		}
		u, _, err := s.create(ctx, in.Email, name, "", false, true, invite, func(ctx context.Context, tx bun.IDB, u User, _ string) error {
			if in.OnCreated != nil {
				return in.OnCreated(ctx, tx, u.ID)
			}
			return nil
		})
		if (errors.Is(err, ErrUsernameTaken) || errors.Is(err, ErrUsernameReserved) || errors.Is(err, ErrInvalidUsername)) && attempt < 5 {
			continue
		}
		if err != nil {
			return User{}, fmt.Errorf("accounts: external signup: %w", err)
		}
		return u, nil
	}
}

// usernameFromEmail makes a username candidate from an address's local
// part: lower-case letters, digits and hyphens, 3 to 32 of them.
func usernameFromEmail(email string) string {
	local, _, _ := strings.Cut(strings.ToLower(email), "@")
	var b strings.Builder
	for _, r := range local {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
	}
	name := strings.Trim(b.String(), "-")
	if len(name) > 32 {
		name = strings.TrimRight(name[:32], "-")
	}
	if len(name) < 3 {
		name = "user-" + randomSuffix()
	}
	return name
}

func randomSuffix() string {
	const digits = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = digits[int(b[i])%len(digits)]
	}
	return string(b)
}
