package accounts

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
)

// SignupMode says who may create an account through Signup.
type SignupMode string

// The sign-up modes.
const (
	// SignupOpen lets anyone create an account (the default).
	SignupOpen SignupMode = "open"
	// SignupInvite needs an unused, unexpired invite code made by an admin;
	// the code is spent in the transaction that creates the account.
	SignupInvite SignupMode = "invite"
	// SignupClosed refuses Signup: accounts come from operators only
	// (CreateUser: the CLI and the admin pages).
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

// Errors of sign-up modes.
var (
	ErrSignupClosed  = newError(CodeSignupClosed, "accounts: sign-up is closed")
	ErrInviteInvalid = newError(CodeInviteInvalid, "accounts: the invite code is unknown, used or expired")
)

// SignupMode returns the configured sign-up mode.
func (s *Identity) SignupMode() SignupMode {
	if s.cfg.Signup == "" {
		return SignupOpen
	}
	return s.cfg.Signup
}

// DefaultInviteTTL is how long an invite code stays valid by default.
const DefaultInviteTTL = 14 * 24 * time.Hour

// Invite is an invite code as admins see it (never the code itself, which
// is shown once, when made).
type Invite struct {
	ID        int64      `json:"id" bun:"id,pk,autoincrement"`
	Note      string     `json:"note" bun:"note"`
	CreatedAt time.Time  `json:"createdAt" bun:"created_at"`
	ExpiresAt time.Time  `json:"expiresAt" bun:"expires_at"`
	UsedAt    *time.Time `json:"usedAt,omitempty" bun:"used_at"`
}

type inviteRow struct {
	bun.BaseModel `bun:"table:invite_codes"`
	Invite
	CodeHash string `bun:"code_hash"`
}

func hashInvite(code string) string {
	sum := sha256.Sum256([]byte(strings.ToUpper(strings.TrimSpace(code))))
	return hex.EncodeToString(sum[:])
}

// CreateInvite makes an invite code valid for ttl (DefaultInviteTTL when
// zero). The code is returned once; only its hash is kept.
func (s *Identity) CreateInvite(ctx context.Context, note string, ttl time.Duration) (string, Invite, error) {
	if ttl <= 0 {
		ttl = DefaultInviteTTL
	}
	code := rand.Text()
	now := s.now()
	row := inviteRow{Invite: Invite{Note: strings.TrimSpace(note), CreatedAt: now, ExpiresAt: now.Add(ttl)}, CodeHash: hashInvite(code)}
	if _, err := s.store.DB.NewInsert().Model(&row).Returning("id").Exec(ctx); err != nil {
		return "", Invite{}, fmt.Errorf("accounts: create invite: %w", err)
	}
	return code, row.Invite, nil
}

// Invites lists the invite codes, newest first (at most 500).
func (s *Identity) Invites(ctx context.Context) ([]Invite, error) {
	var rows []inviteRow
	if err := s.store.Reader.NewSelect().Model(&rows).Order("id DESC").Limit(500).Scan(ctx); err != nil {
		return nil, fmt.Errorf("accounts: list invites: %w", err)
	}
	out := make([]Invite, len(rows))
	for i, r := range rows {
		out[i] = r.Invite
	}
	return out, nil
}

// RevokeInvite deletes an unused invite code; it reports whether one was.
func (s *Identity) RevokeInvite(ctx context.Context, id int64) (bool, error) {
	res, err := s.store.DB.NewDelete().Model((*inviteRow)(nil)).Where("id = ? AND used_at IS NULL", id).Exec(ctx)
	if err != nil {
		return false, fmt.Errorf("accounts: revoke invite: %w", err)
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

// spendInvite marks code used inside tx, or fails with ErrInviteInvalid.
func spendInvite(ctx context.Context, tx bun.Tx, code string, now time.Time) error {
	if strings.TrimSpace(code) == "" {
		return ErrInviteInvalid
	}
	res, err := tx.NewUpdate().Model((*inviteRow)(nil)).Set("used_at = ?", now).
		Where("code_hash = ? AND used_at IS NULL AND expires_at > ?", hashInvite(code), now).Exec(ctx)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrInviteInvalid
	}
	return nil
}

// InviteCreateInput is the input of adminInviteCreate.
type InviteCreateInput struct {
	Note          string `json:"note,omitempty" jsonschema:"who the invite is for (shown to admins only)"`
	ExpiresInDays int    `json:"expiresInDays,omitempty" jsonschema:"days until the code expires, 1 to 90 (default 14)" schema:"minimum=1,maximum=90,default=14"`
}

// InviteCreateOutput carries the new code, shown this once.
type InviteCreateOutput struct {
	Code   string `json:"code"`
	Invite Invite `json:"invite"`
}

// InviteListOutput is the output of adminInviteList.
type InviteListOutput struct {
	Invites []Invite `json:"invites"`
}

// InviteRevokeInput is the input of adminInviteRevoke.
type InviteRevokeInput struct {
	ID int64 `json:"id" jsonschema:"the id of an unused invite, from adminInviteList"`
}

// InviteRevokeOutput says whether an invite was revoked.
type InviteRevokeOutput struct {
	Revoked bool `json:"revoked"`
}

// InviteCapabilities returns adminInviteCreate, adminInviteList and
// adminInviteRevoke, for admins only.
func (s *Service) InviteCapabilities() []capabilities.Capability {
	admin := capabilities.Requirement{Role: capabilities.RoleAdmin}
	return []capabilities.Capability{
		capabilities.Define(capabilities.Spec[InviteCreateInput, InviteCreateOutput]{
			Name: "adminInviteCreate", Domain: "admin", Title: "Create an invite code",
			Description: "Makes an invite code that opens one account when sign-up is by invite. The code is shown only in this answer. Admins only.",
			Annotations: &capabilities.Annotations{},
			Requires:    admin,
			Handler: func(ctx context.Context, _ *capabilities.Call, in InviteCreateInput) (InviteCreateOutput, error) {
				if in.ExpiresInDays < 0 || in.ExpiresInDays > 90 {
					return InviteCreateOutput{}, capabilities.Errorf(capabilities.CodeInvalidInput, "expiresInDays must be between 1 and 90")
				}
				if len(in.Note) > 200 {
					return InviteCreateOutput{}, capabilities.Errorf(capabilities.CodeInvalidInput, "note must be at most 200 characters")
				}
				code, inv, err := s.Identity.CreateInvite(ctx, in.Note, time.Duration(in.ExpiresInDays)*24*time.Hour)
				return InviteCreateOutput{Code: code, Invite: inv}, err
			},
		}),
		capabilities.Define(capabilities.Spec[struct{}, InviteListOutput]{
			Name: "adminInviteList", Domain: "admin", Title: "List invite codes",
			Description: "Lists invite codes (never the codes themselves): note, when made, when they expire, whether used. Admins only.",
			Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
			Requires:    admin,
			Handler: func(ctx context.Context, _ *capabilities.Call, _ struct{}) (InviteListOutput, error) {
				inv, err := s.Identity.Invites(ctx)
				return InviteListOutput{Invites: inv}, err
			},
		}),
		capabilities.Define(capabilities.Spec[InviteRevokeInput, InviteRevokeOutput]{
			Name: "adminInviteRevoke", Domain: "admin", Title: "Revoke an invite code",
			Description: "Deletes an unused invite code so it can no longer open an account. Admins only.",
			Annotations: &capabilities.Annotations{Destructive: true, Idempotent: true},
			Requires:    admin,
			Handler: func(ctx context.Context, _ *capabilities.Call, in InviteRevokeInput) (InviteRevokeOutput, error) {
				ok, err := s.Identity.RevokeInvite(ctx, in.ID)
				return InviteRevokeOutput{Revoked: ok}, err
			},
		}),
	}
}

// UserCounts are the account totals of the admin overview.
type UserCounts struct {
	Total      int `json:"total"`
	New        int `json:"new" jsonschema:"accounts created in the last 30 days"`
	Unverified int `json:"unverified"`
	Suspended  int `json:"suspended"`
}

// CountUsers returns the account totals, "new" meaning created since since.
func (s *Roles) CountUsers(ctx context.Context, since time.Time) (UserCounts, error) {
	var c UserCounts
	err := s.store.Reader.NewSelect().Table("users").
		ColumnExpr("count(*)").
		ColumnExpr("COALESCE(SUM(CASE WHEN created_at >= ? THEN 1 ELSE 0 END), 0)", since).
		ColumnExpr("COALESCE(SUM(CASE WHEN email_verified_at IS NULL THEN 1 ELSE 0 END), 0)").
		ColumnExpr("COALESCE(SUM(CASE WHEN suspended_at IS NOT NULL THEN 1 ELSE 0 END), 0)").
		Scan(ctx, &c.Total, &c.New, &c.Unverified, &c.Suspended)
	if err != nil {
		return c, fmt.Errorf("accounts: count users: %w", err)
	}
	return c, nil
}
