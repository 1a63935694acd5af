package accounts

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
)

// AdminUser is everything account administration may see about an
// account: identity, state and roles, never content, secrets, tokens or
// credential hashes. Its JSON field set is pinned by a test; widening it is
// a deliberate decision.
type AdminUser struct {
	StableUserID    string     `json:"stableUserId" jsonschema:"the account's stable user id"`
	Username        string     `json:"username"`
	Email           string     `json:"email"`
	EmailVerified   bool       `json:"emailVerified"`
	EmailVerifiedAt *time.Time `json:"emailVerifiedAt,omitempty" jsonschema:"when the address was verified; absent while it is not"`
	SuspendedAt     *time.Time `json:"suspendedAt,omitempty" jsonschema:"when the account was suspended; absent unless it is"`
	DeletingAt      *time.Time `json:"deletingAt,omitempty" jsonschema:"when the account's deletion began; absent unless it has"`
	CreatedAt       time.Time  `json:"createdAt"`
	UpdatedAt       time.Time  `json:"updatedAt"`
	Roles           []string   `json:"roles"`
}

// State is "active", "suspended" or "deleting".
func (u AdminUser) State() string {
	switch {
	case u.DeletingAt != nil:
		return "deleting"
	case u.SuspendedAt != nil:
		return "suspended"
	}
	return "active"
}

// adminUserRow is the explicit column list the admin queries select from
// users: nothing else of the table is read.
type adminUserRow struct {
	ID              int64      `bun:"id"`
	StableID        string     `bun:"stable_user_id"`
	Username        string     `bun:"username"`
	Email           string     `bun:"email"`
	EmailVerifiedAt *time.Time `bun:"email_verified_at"`
	SuspendedAt     *time.Time `bun:"suspended_at"`
	DeletingAt      *time.Time `bun:"deleting_at"`
	CreatedAt       time.Time  `bun:"created_at"`
	UpdatedAt       time.Time  `bun:"updated_at"`
}

var adminUserColumns = []string{"id", "stable_user_id", "username", "email", "email_verified_at", "suspended_at", "deleting_at", "created_at", "updated_at"}

func (r adminUserRow) admin(roles []string) AdminUser {
	utc := func(t *time.Time) *time.Time {
		if t == nil {
			return nil
		}
		v := t.UTC()
		return &v
	}
	if roles == nil {
		roles = []string{}
	}
	return AdminUser{
		StableUserID: r.StableID, Username: r.Username, Email: r.Email,
		EmailVerified: r.EmailVerifiedAt != nil, EmailVerifiedAt: utc(r.EmailVerifiedAt),
		SuspendedAt: utc(r.SuspendedAt), DeletingAt: utc(r.DeletingAt),
		CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(), Roles: roles,
	}
}

// AdminUserFilter narrows AdminUsers.
type AdminUserFilter struct {
	Search string // substring of the username or email, case-insensitive
	Role   string // only accounts holding this role
}

// likeEscape escapes s for a LIKE pattern with ESCAPE '!'.
func likeEscape(s string) string {
	return strings.NewReplacer("!", "!!", "%", "!%", "_", "!_").Replace(s)
}

// AdminUsers returns one page of accounts matching f, oldest first, with
// their roles.
func (s *Roles) AdminUsers(ctx context.Context, f AdminUserFilter, req storage.PageRequest) (storage.Page[AdminUser], error) {
	db := s.store.Reader
	q := db.NewSelect().Table("users").Column(adminUserColumns...)
	if f.Search != "" {
		pat := "%" + likeEscape(strings.ToLower(f.Search)) + "%"
		q = q.WhereGroup(" AND ", func(q *bun.SelectQuery) *bun.SelectQuery {
			return q.Where("username LIKE ? ESCAPE '!'", pat).WhereOr("email LIKE ? ESCAPE '!'", pat)
		})
	}
	if f.Role != "" {
		q = q.Where("EXISTS (SELECT 1 FROM user_roles WHERE user_roles.user_id = users.id AND user_roles.role_name = ?)", f.Role)
	}
	rows, err := storage.Paginate(ctx, q, storage.Keyset[adminUserRow]{
		Kind: "admin-users", Column: "id", Key: func(u *adminUserRow) any { return u.ID },
	}, req)
	if err != nil {
		return storage.Page[AdminUser]{}, fmt.Errorf("accounts: admin users: %w", err)
	}
	page := storage.Page[AdminUser]{Items: []AdminUser{}, Next: rows.Next}
	if len(rows.Items) == 0 {
		return page, nil
	}
	ids := make([]int64, len(rows.Items))
	for i, u := range rows.Items {
		ids[i] = u.ID
	}
	byUser, err := s.rolesOf(ctx, ids)
	if err != nil {
		return storage.Page[AdminUser]{}, err
	}
	for _, u := range rows.Items {
		page.Items = append(page.Items, u.admin(byUser[u.ID]))
	}
	return page, nil
}

func (s *core) rolesOf(ctx context.Context, ids []int64) (map[int64][]string, error) {
	var grants []struct {
		UserID   int64  `bun:"user_id"`
		RoleName string `bun:"role_name"`
	}
	if err := s.store.Reader.NewSelect().Table("user_roles").Column("user_id", "role_name").
		Where("user_id IN (?)", bun.In(ids)).Order("role_name").Scan(ctx, &grants); err != nil {
		return nil, fmt.Errorf("accounts: admin roles: %w", err)
	}
	byUser := map[int64][]string{}
	for _, g := range grants {
		byUser[g.UserID] = append(byUser[g.UserID], g.RoleName)
	}
	return byUser, nil
}

// AdminUserByStableID returns the administration view of one account, or
// ErrNotFound.
func (s *Roles) AdminUserByStableID(ctx context.Context, sid string) (AdminUser, error) {
	u, _, err := s.adminUser(ctx, sid)
	return u, err
}

func (s *core) adminUser(ctx context.Context, sid string) (AdminUser, int64, error) {
	var row adminUserRow
	err := s.store.Reader.NewSelect().Table("users").Column(adminUserColumns...).Where("stable_user_id = ?", sid).Scan(ctx, &row)
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return AdminUser{}, 0, ErrNotFound
		}
		return AdminUser{}, 0, fmt.Errorf("accounts: admin user: %w", err)
	}
	roles, err := s.rolesOf(ctx, []int64{row.ID})
	if err != nil {
		return AdminUser{}, 0, err
	}
	return row.admin(roles[row.ID]), row.ID, nil
}

// ---- capabilities ----

// AdminUserRef names one account by its stable user id.
type AdminUserRef struct {
	UserID string `json:"userId" jsonschema:"the account's stable user id (stableUserId in adminUserList)"`
}

// AdminRoleInput names an account and a role.
type AdminRoleInput struct {
	UserID string `json:"userId" jsonschema:"the account's stable user id"`
	Role   string `json:"role" jsonschema:"a role name other than admin (admin is granted and revoked only by the operator, from the command line)"`
}

// AdminUserListInput is the input of adminUserList.
type AdminUserListInput struct {
	Query  string `json:"query,omitempty" jsonschema:"only accounts whose username or email contains this text"`
	Role   string `json:"role,omitempty" jsonschema:"only accounts holding this role"`
	Limit  int    `json:"limit,omitempty" jsonschema:"page size, 1 to 1000 (default 50)" schema:"minimum=1,maximum=1000,default=50"`
	Cursor string `json:"cursor,omitempty" jsonschema:"the nextCursor of the previous page"`
}

// AdminUserListOutput is one page of accounts, oldest first.
type AdminUserListOutput struct {
	Users      []AdminUser `json:"users"`
	NextCursor string      `json:"nextCursor,omitempty"`
}

// AdminUserOutput is one account after an admin read or action. Changed
// says whether an action changed anything (false when it was already so).
type AdminUserOutput struct {
	User    AdminUser `json:"user"`
	Changed bool      `json:"changed"`
}

// AdminUserCreateInput is the input of adminUserCreate.
type AdminUserCreateInput struct {
	Email    string `json:"email" jsonschema:"the new account's email address"`
	Username string `json:"username" jsonschema:"3-32 lowercase letters, digits and hyphens"`
	Verified bool   `json:"verified,omitempty" jsonschema:"true when the address is already known to belong to the person"`
}

// AdminUserCreateOutput is the created account. The setup link itself is
// mailed to the account's address, never returned.
type AdminUserCreateOutput struct {
	User          AdminUser `json:"user"`
	SetupLinkSent bool      `json:"setupLinkSent"`
}

// SetupLinkMailer writes the mail carrying a new account's one-time
// password-setup token. It runs inside the transaction that creates the
// account (write the message to the outbox with tx), so the link is sent
// exactly when the account exists.
type SetupLinkMailer func(ctx context.Context, tx bun.IDB, u User, token string) error

// AdminOptions configure AdminCapabilities.
type AdminOptions struct {
	// MailSetupLink sends adminUserCreate's setup link. Without it
	// adminUserCreate is not offered.
	MailSetupLink SetupLinkMailer
}

// capabilityError maps the accounts domain errors to capability codes
// (CapabilityCode). Other errors pass through (internal).
func capabilityError(err error) error {
	if err == nil {
		return nil
	}
	if code, ok := CapabilityCode(CodeOf(err)); ok {
		return &capabilities.Error{Code: code, Message: MessageOf(err), Err: err}
	}
	return err
}

// CapabilityCode returns the capabilities.Code an accounts error code is
// answered with: the one mapping from accounts' codes to capabilities',
// through which every transport reaches capabilities' tables of HTTP
// statuses and JSON-RPC codes (capabilities.HTTPStatus, RPCCode). It
// reports false for CodeNoSession (no one is signed in: a transport asks
// for a sign-in, it does not refuse) and for a code this package does not
// declare.
func CapabilityCode(code Code) (capabilities.Code, bool) {
	c, ok := capabilityCodes[code]
	return c, ok
}

// capabilityCodes is CapabilityCode's table: every Code but CodeNoSession
// has a row (TestEveryCodeHasACapabilityCode).
var capabilityCodes = map[Code]capabilities.Code{
	CodeNotFound:           capabilities.CodeNotFound,
	CodeInvalidEmail:       capabilities.CodeInvalidInput,
	CodeInvalidUsername:    capabilities.CodeInvalidInput,
	CodeUsernameReserved:   capabilities.CodeInvalidInput,
	CodeWeakPassword:       capabilities.CodeInvalidInput,
	CodeUnknownRole:        capabilities.CodeInvalidInput,
	CodeInvalidToken:       capabilities.CodeInvalidInput,
	CodeInviteInvalid:      capabilities.CodeInvalidInput,
	CodeInvalidCredentials: capabilities.CodeInvalidInput,
	CodeEmailTaken:         capabilities.CodeConflict,
	CodeEmailClaimed:       capabilities.CodeConflict,
	CodeUsernameTaken:      capabilities.CodeConflict,
	CodeUsernameCooldown:   capabilities.CodeConflict,
	CodeLastAdmin:          capabilities.CodeConflict,
	CodeAdminRoleReserved:  capabilities.CodeConflict,
	CodeSuspendSelf:        capabilities.CodeConflict,
	// An account being deleted that is not the caller's (the caller's own
	// state is the registry's to refuse, as CodeAccountDeleting).
	CodeDeleting:        capabilities.CodeConflict,
	CodeEmailUnverified: capabilities.CodeConflict,
	CodeSignupClosed:    capabilities.CodeConflict,
	CodeSuspended:       capabilities.CodeAccountSuspended,

	CodeSecondFactorInvalid:       capabilities.CodeInvalidInput,
	CodeFactorConflict:            capabilities.CodeConflict,
	CodeFactorInvalidInput:        capabilities.CodeInvalidInput,
	CodePendingLoginInvalid:       capabilities.CodeInvalidInput,
	CodePasskeyInvalid:            capabilities.CodeInvalidInput,
	CodeAdminSecondFactorRequired: capabilities.CodeSecondFactorRequired,
	CodeFactorProofRequired:       capabilities.CodeInvalidInput,
}

// AdminCapabilities returns the account-administration capabilities, for
// the admin role only: adminUserList, adminUserGet, adminUserSuspend,
// adminUserUnsuspend, adminUserVerify, adminRoleAssign, adminRoleRemove
// and (with opts.MailSetupLink) adminUserCreate. They show only the
// AdminUser fields. Neither role capability accepts the admin role: that
// is the operator's, from the command line.
func (s *Service) AdminCapabilities(opts AdminOptions) []capabilities.Capability {
	admin := capabilities.Requirement{Role: capabilities.RoleAdmin}
	ro := &capabilities.Annotations{ReadOnly: true, Idempotent: true}
	// target resolves the account an action is about.
	target := func(ctx context.Context, sid string) (AdminUser, int64, error) {
		if sid == "" {
			return AdminUser{}, 0, capabilities.Errorf(capabilities.CodeInvalidInput, "userId is required")
		}
		u, id, err := s.adminUser(ctx, sid)
		if errors.Is(err, ErrNotFound) {
			return u, 0, capabilities.Errorf(capabilities.CodeNotFound, "no account has the user id %q", sid)
		}
		return u, id, err
	}
	// act runs one state change on the account and answers with its view
	// afterwards.
	act := func(ctx context.Context, sid string, change func(id int64) (bool, error)) (AdminUserOutput, error) {
		_, id, err := target(ctx, sid)
		if err != nil {
			return AdminUserOutput{}, err
		}
		changed, err := change(id)
		if err != nil {
			return AdminUserOutput{}, capabilityError(err)
		}
		u, _, err := s.adminUser(ctx, sid)
		return AdminUserOutput{User: u, Changed: changed}, capabilityError(err)
	}
	state := func(name, title, desc string, destructive bool, change func(ctx context.Context, call *capabilities.Call, id int64) (bool, error)) capabilities.Capability {
		return capabilities.Define(capabilities.Spec[AdminUserRef, AdminUserOutput]{
			Name: name, Domain: "admin", Title: title, Description: desc,
			Annotations: &capabilities.Annotations{Destructive: destructive, Idempotent: true},
			Requires:    admin,
			Handler: func(ctx context.Context, call *capabilities.Call, in AdminUserRef) (AdminUserOutput, error) {
				return act(ctx, in.UserID, func(id int64) (bool, error) { return change(ctx, call, id) })
			},
		})
	}
	role := func(name, title, desc string, destructive bool, change func(ctx context.Context, id int64, role string) (bool, error)) capabilities.Capability {
		return capabilities.Define(capabilities.Spec[AdminRoleInput, AdminUserOutput]{
			Name: name, Domain: "admin", Title: title, Description: desc,
			Annotations: &capabilities.Annotations{Destructive: destructive, Idempotent: true},
			Requires:    admin,
			Handler: func(ctx context.Context, _ *capabilities.Call, in AdminRoleInput) (AdminUserOutput, error) {
				if in.Role == "" {
					return AdminUserOutput{}, capabilities.Errorf(capabilities.CodeInvalidInput, "role is required")
				}
				return act(ctx, in.UserID, func(id int64) (bool, error) { return change(ctx, id, in.Role) })
			},
		})
	}
	caps := []capabilities.Capability{
		capabilities.Define(capabilities.Spec[AdminUserListInput, AdminUserListOutput]{
			Name: "adminUserList", Domain: "admin", Title: "List accounts",
			Description: "Lists accounts, oldest first, with optional filters: stable user id, username, email, verification, suspension and deletion stamps, creation and update times, and roles. Never passwords, tokens, secrets or content. Admins only.",
			Annotations: ro, Requires: admin,
			Handler: func(ctx context.Context, _ *capabilities.Call, in AdminUserListInput) (AdminUserListOutput, error) {
				in.Query = strings.TrimSpace(in.Query)
				if len(in.Query) > 254 {
					return AdminUserListOutput{}, capabilities.Errorf(capabilities.CodeInvalidInput, "query must be at most 254 characters")
				}
				req, err := storage.PageInput(in.Cursor, in.Limit)
				if err != nil {
					return AdminUserListOutput{}, err
				}
				page, err := s.Roles.AdminUsers(ctx, AdminUserFilter{Search: in.Query, Role: in.Role}, req)
				if err != nil {
					return AdminUserListOutput{}, err
				}
				return AdminUserListOutput{Users: page.Items, NextCursor: page.Next}, nil
			},
		}),
		capabilities.Define(capabilities.Spec[AdminUserRef, AdminUserOutput]{
			Name: "adminUserGet", Domain: "admin", Title: "Show an account",
			Description: "Shows one account by stable user id, with the same fields as adminUserList. Admins only.",
			Annotations: ro, Requires: admin,
			Handler: func(ctx context.Context, _ *capabilities.Call, in AdminUserRef) (AdminUserOutput, error) {
				u, _, err := target(ctx, in.UserID)
				return AdminUserOutput{User: u}, err
			},
		}),
		state("adminUserSuspend", "Suspend an account",
			"Suspends an account: its sessions, tokens and calls are refused until it is unsuspended. Refused for your own account and for the last active admin. Admins only.", true,
			func(ctx context.Context, call *capabilities.Call, id int64) (bool, error) {
				u, err := s.Identity.UserByID(ctx, id)
				if err != nil {
					return false, err
				}
				if u.StableID == call.Caller.UserID {
					return false, ErrSuspendSelf
				}
				return s.Lifecycle.Suspend(ctx, id)
			}),
		state("adminUserUnsuspend", "Unsuspend an account",
			"Lifts an account's suspension. Admins only.", false,
			func(ctx context.Context, _ *capabilities.Call, id int64) (bool, error) {
				return s.Lifecycle.Unsuspend(ctx, id)
			}),
		state("adminUserVerify", "Mark an account's email verified",
			"Records that the account's current email address is verified. Admins only.", false,
			func(ctx context.Context, _ *capabilities.Call, id int64) (bool, error) {
				return s.Identity.MarkEmailVerified(ctx, id)
			}),
		role("adminRoleAssign", "Assign a role",
			"Gives an account a role. The admin role is refused: only the operator grants it, from the command line. Admins only.", false, s.Roles.AssignRole),
		role("adminRoleRemove", "Remove a role",
			"Takes a role from an account. The admin role is refused: only the operator revokes it, from the command line. Admins only.", true, s.Roles.RemoveRole),
	}
	if opts.MailSetupLink != nil {
		caps = append(caps, capabilities.Define(capabilities.Spec[AdminUserCreateInput, AdminUserCreateOutput]{
			Name: "adminUserCreate", Domain: "admin", Title: "Create an account",
			Description: "Creates an account with the role user and no password, and mails a one-time link to its address for the person to choose a password (the link is never returned). Admins only.",
			Annotations: &capabilities.Annotations{}, Requires: admin,
			Handler: func(ctx context.Context, _ *capabilities.Call, in AdminUserCreateInput) (AdminUserCreateOutput, error) {
				u, _, err := s.create(ctx, in.Email, in.Username, "", false, in.Verified, nil,
					func(ctx context.Context, tx bun.IDB, u User, token string) error {
						return opts.MailSetupLink(ctx, tx, u, token)
					})
				if err != nil {
					return AdminUserCreateOutput{}, capabilityError(err)
				}
				s.cfg.Logger.InfoContext(ctx, "accounts: account created by an admin", "user_id", u.ID)
				au, _, err := s.adminUser(ctx, u.StableID)
				return AdminUserCreateOutput{User: au, SetupLinkSent: true}, capabilityError(err)
			},
		}))
	}
	return caps
}
