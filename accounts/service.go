package accounts

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/storage"
)

// Service assembles the account services on one migrated store. Each
// exported field is a service owning one concern; they share one core
// (store, configuration, clock, password hasher, session keys, hooks) by
// pointer, so nothing is duplicated:
//
//   - Identity: who an account is (users, usernames, emails and email
//     claims, mail tokens and links, lookup, invites, external sign-up).
//   - Credentials: how it proves so (passwords, setup and reset tokens,
//     browser sessions).
//   - SecondFactors: what else it may have to show (TOTP, recovery codes,
//     passkeys, the pending second step of a login, factor proofs, the
//     admin second-factor rule).
//   - Roles: what it may do (roles and permissions, the vocabulary, admin
//     views, operator actions).
//   - Lifecycle: the states it passes through (suspension, the deletion
//     mark, the unverified-signup purge queue) that package lifecycle
//     drives.
//
// Service itself keeps what belongs to the whole: the change hooks, the
// caller loader every transport uses, and the capabilities the domain
// registers. It is safe for concurrent use.
type Service struct {
	*core

	Identity      *Identity
	Credentials   *Credentials
	SecondFactors *SecondFactors
	Roles         *Roles
	Lifecycle     *Lifecycle
}

// core is the state every account service shares by pointer, and the
// unexported helpers more than one of them uses. Its service pointers let
// one service call another (s.identity.UserByID) without an import cycle
// through Service.
type core struct {
	store  *storage.Store
	cfg    Config
	hasher *hasher
	// dummyHash is verified against when no account (or no password) matches
	// a login, so that unknown emails cost the same as wrong passwords.
	dummyHash string

	keys *keyRing

	factors  factorState
	passkeys passkeyState

	mu                sync.Mutex
	onPasswordChanged []PasswordChangeHook
	onChange          []ChangeHook
	onCallerChanged   []func(ctx context.Context, userID int64)

	identity      *Identity
	credentials   *Credentials
	secondFactors *SecondFactors
	roles         *Roles
	lifecycle     *Lifecycle
}

// The kinds of Change, named like the admin events that report them.
const (
	ChangeUserCreated     = "user.created"
	ChangeUserSuspended   = "user.suspended"
	ChangeUserUnsuspended = "user.unsuspended"
	ChangeRoleAssigned    = "role.assigned"
	ChangeRoleRemoved     = "role.removed"
)

// Change is one account change reported to the change hooks: identifiers
// and the changed field, nothing else.
type Change struct {
	Kind     string // one of the Change* constants
	UserID   int64  // users.id of the account
	StableID string // its stable user id
	Role     string // the role, for role changes
}

// ChangeHook runs inside the transaction of an account change that
// happened (account created, suspended or unsuspended, role assigned or
// removed), after the change is written: other domains record work that
// must exist exactly when the change does (an event in the outbox).
// Returning an error rolls the change back.
type ChangeHook func(ctx context.Context, tx bun.IDB, c Change) error

// OnChange registers hook to run in every account change (see
// ChangeHook). Register hooks before serving requests.
func (s *Service) OnChange(hook ChangeHook) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onChange = append(s.onChange, hook)
}

// changed runs the change hooks inside tx.
func (s *core) changed(ctx context.Context, tx bun.IDB, c Change) error {
	s.mu.Lock()
	hooks := append([]ChangeHook(nil), s.onChange...)
	s.mu.Unlock()
	for _, h := range hooks {
		if err := h(ctx, tx, c); err != nil {
			return err
		}
	}
	return nil
}

// PasswordChangeHook runs inside the transaction that changes a user's
// password, after password_changed_at is stamped. Other domains use it to
// revoke what must not outlive the old password (OAuth grants, for
// example). Returning an error rolls the change back.
type PasswordChangeHook func(ctx context.Context, tx bun.Tx, userID int64) error

// New returns a Service on store, whose schema must be migrated. Without
// Config.SessionKeys it loads the session signing keys from SQL (decrypting
// them with store.Keeper), generating the first one if there is none.
func New(ctx context.Context, store *storage.Store, cfg Config) (*Service, error) {
	// An unknown sign-up mode ("Closed", "invite-only") is refused rather
	// than read as open: a typo must not open sign-up to everyone.
	mode, err := ParseSignupMode(string(cfg.Signup))
	if err != nil {
		return nil, fmt.Errorf("accounts: new: %w", err)
	}
	cfg.Signup = mode
	cfg = cfg.withDefaults()
	c := &core{store: store, cfg: cfg, hasher: newHasher(cfg.Argon2, cfg.MaxConcurrentHashes)}
	c.identity = &Identity{c}
	c.credentials = &Credentials{c}
	c.secondFactors = &SecondFactors{c}
	c.roles = &Roles{c}
	c.lifecycle = &Lifecycle{c}
	s := &Service{core: c, Identity: c.identity, Credentials: c.credentials,
		SecondFactors: c.secondFactors, Roles: c.roles, Lifecycle: c.lifecycle}
	dummy, err := s.hasher.hash(ctx, rand.Text())
	if err != nil {
		return nil, fmt.Errorf("accounts: new: %w", err)
	}
	s.dummyHash = dummy
	if s.keys, err = newKeyRing(ctx, store, cfg); err != nil {
		return nil, err
	}
	return s, nil
}

// OnPasswordChange registers hook to run in every password change (see
// PasswordChangeHook). Register hooks before serving requests.
func (s *Service) OnPasswordChange(hook PasswordChangeHook) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onPasswordChanged = append(s.onPasswordChanged, hook)
}

// OnCallerChange registers f to run after every committed change to what a
// transport loads as an account's caller: its state (suspension, deletion
// mark, email verification), roles, password, email or username; userID 0
// means every account (a role's permissions changed). Caches of callers
// (see internal/callercache) drop their entries there. f runs after the
// transaction, also when the change failed (dropping a cache entry is
// always safe). Register hooks before serving requests.
func (s *Service) OnCallerChange(f func(ctx context.Context, userID int64)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onCallerChanged = append(s.onCallerChanged, f)
}

// callerChanged runs the OnCallerChange hooks; call it (deferred) after
// the writing transaction.
func (s *core) callerChanged(ctx context.Context, userID int64) {
	s.mu.Lock()
	hooks := s.onCallerChanged
	s.mu.Unlock()
	for _, f := range hooks {
		f(ctx, userID)
	}
}

func (s *core) passwordHooks() []PasswordChangeHook {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]PasswordChangeHook(nil), s.onPasswordChanged...)
}

// now returns the current time in UTC at the microsecond precision both SQL
// dialects keep, so a value read back compares equal to the one written.
func (s *core) now() time.Time {
	return s.cfg.Now().UTC().Truncate(time.Microsecond)
}
