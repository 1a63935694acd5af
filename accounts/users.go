package accounts

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/mail"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
)

// User is an account. It never carries the password hash.
type User struct {
	// ID is the internal key that every user-owned row references.
	ID int64
	// StableID is the identity shown to agents, logs and exports: the hex
	// SHA-256 of the normalized email the account signed up with, or a
	// random one when an earlier account already had that (see
	// StableIDForEmail). It never changes, also when the email does, and is
	// never given to another account, also after deletion.
	StableID string
	Email    string
	Username string
	// HasPassword is false for accounts created without a password that
	// have not used their password-setup link yet.
	HasPassword       bool
	EmailVerifiedAt   *time.Time
	PasswordChangedAt *time.Time
	SuspendedAt       *time.Time
	DeletingAt        *time.Time
	CreatedAt         time.Time
	UpdatedAt         time.Time
}

// State is an account's lifecycle state.
type State string

// Account states. Suspended accounts are refused everywhere; deleting
// accounts may read but every mutation is refused.
const (
	StateActive    State = "active"
	StateSuspended State = "suspended"
	StateDeleting  State = "deleting"
)

// State returns u's lifecycle state. Deleting wins over suspended.
func (u User) State() State {
	switch {
	case u.DeletingAt != nil:
		return StateDeleting
	case u.SuspendedAt != nil:
		return StateSuspended
	}
	return StateActive
}

// CheckActive returns ErrDeleting or ErrSuspended unless u is active. Call
// it at every mutation boundary.
func (u User) CheckActive() error {
	switch u.State() {
	case StateDeleting:
		return ErrDeleting
	case StateSuspended:
		return ErrSuspended
	}
	return nil
}

// EmailVerified reports whether the current email has been verified.
func (u User) EmailVerified() bool { return u.EmailVerifiedAt != nil }

// userRow is the users table.
type userRow struct {
	bun.BaseModel     `bun:"table:users,alias:u"`
	ID                int64      `bun:"id,pk,autoincrement"`
	StableID          string     `bun:"stable_user_id,notnull"`
	Email             string     `bun:"email,notnull"`
	Username          string     `bun:"username,notnull"`
	PasswordHash      *string    `bun:"password_hash"`
	EmailVerifiedAt   *time.Time `bun:"email_verified_at"`
	FirstVerifiedAt   *time.Time `bun:"first_verified_at"`
	PasswordChangedAt *time.Time `bun:"password_changed_at"`
	SuspendedAt       *time.Time `bun:"suspended_at"`
	DeletingAt        *time.Time `bun:"deleting_at"`
	UsernameChangedAt *time.Time `bun:"username_changed_at"`
	CreatedAt         time.Time  `bun:"created_at,notnull"`
	UpdatedAt         time.Time  `bun:"updated_at,notnull"`
}

func (r *userRow) user() User {
	utc := func(t *time.Time) *time.Time {
		if t == nil {
			return nil
		}
		v := t.UTC()
		return &v
	}
	return User{
		ID: r.ID, StableID: r.StableID, Email: r.Email, Username: r.Username,
		HasPassword:     r.PasswordHash != nil,
		EmailVerifiedAt: utc(r.EmailVerifiedAt), PasswordChangedAt: utc(r.PasswordChangedAt),
		SuspendedAt: utc(r.SuspendedAt), DeletingAt: utc(r.DeletingAt),
		CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(),
	}
}

type emailClaim struct {
	bun.BaseModel `bun:"table:email_claims"`
	Email         string    `bun:"email,pk"`
	UserID        int64     `bun:"user_id,notnull"`
	CreatedAt     time.Time `bun:"created_at,notnull"`
}

// NormalizeEmail trims and lowercases an address and checks that it is a
// plain address (local@domain, no display name, at most 254 bytes).
func NormalizeEmail(s string) (string, error) {
	e := strings.ToLower(strings.TrimSpace(s))
	if len(e) > 254 || strings.Count(e, "@") != 1 || strings.ContainsAny(e, " \t\r\n<>") {
		return "", ErrInvalidEmail
	}
	a, err := mail.ParseAddress(e)
	if err != nil || a.Address != e || a.Name != "" {
		return "", ErrInvalidEmail
	}
	local, domain, _ := strings.Cut(e, "@")
	if local == "" || !strings.Contains(domain, ".") || strings.HasPrefix(domain, ".") || strings.HasSuffix(domain, ".") {
		return "", ErrInvalidEmail
	}
	return e, nil
}

// StableIDForEmail returns the stable user id the first account signing up
// with email gets: the lowercase hex SHA-256 of the trimmed, lowercased
// address. Identities are never reused: when that id is taken or retired
// (an earlier account with the address released it or was deleted), the
// new account gets a fresh random id instead, so no id is ever minted
// twice and nothing issued to the earlier account works for the new one.
func StableIDForEmail(email string) string {
	sum := sha256.Sum256([]byte(strings.ToLower(strings.TrimSpace(email))))
	return hex.EncodeToString(sum[:])
}

// SignupInput is what a person gives to open an account.
type SignupInput struct {
	Email    string
	Username string
	Password string
	// InviteCode is spent by the signup when Config.Signup is SignupInvite.
	InviteCode string
}

// Signup opens an account with a password and the role user, in one
// transaction: if the role cannot be assigned (for example a missing seed),
// nothing is created and the error is an internal one the caller may retry.
//
// Domain errors: ErrInvalidEmail, ErrInvalidUsername, ErrUsernameReserved,
// ErrWeakPassword, ErrEmailTaken, ErrEmailClaimed, ErrUsernameTaken.
// ErrUsernameTaken is decided before the email, and the password is hashed
// before either: transports answer ErrEmailTaken and ErrEmailClaimed exactly
// like a successful signup (same page, comparable time, no session) and
// tell the owner of the address by mail, so signup does not reveal which
// emails are registered.
func (s *Identity) Signup(ctx context.Context, in SignupInput) (User, error) {
	var invite *string
	switch s.cfg.Signup {
	case SignupClosed:
		return User{}, ErrSignupClosed
	case SignupInvite:
		invite = &in.InviteCode
	}
	// Marked self-signed-up in the creating transaction: only such an
	// account is purged if it never verifies its address (see
	// ClaimUnverified).
	u, _, err := s.create(ctx, in.Email, in.Username, in.Password, true, false, invite, func(ctx context.Context, tx bun.IDB, u User, _ string) error {
		_, err := tx.NewUpdate().Table("users").Set("self_signup = TRUE").Where("id = ?", u.ID).Exec(ctx)
		return err
	})
	if err != nil {
		return User{}, fmt.Errorf("accounts: signup: %w", err)
	}
	return u, nil
}

// CreateUserInput is an operator's request to create an account.
type CreateUserInput struct {
	Email    string
	Username string
	// Password, when empty, leaves the account without one: CreateUser then
	// returns a one-time password-setup token (see PasswordSetupURL).
	Password string
	// Verified marks the email verified.
	Verified bool
}

// CreateUser creates an account for an operator (CLI or admin page), with
// the role user only. Without a password it returns a one-time
// password-setup token valid for Config.PasswordSetupTTL. It never grants
// admin. Errors are those of Signup.
func (s *Identity) CreateUser(ctx context.Context, in CreateUserInput) (User, string, error) {
	u, token, err := s.create(ctx, in.Email, in.Username, in.Password, in.Password != "", in.Verified, nil, nil)
	if err != nil {
		return User{}, "", fmt.Errorf("accounts: create user: %w", err)
	}
	return u, token, nil
}

// create makes the account. onCreated, when set, runs last inside the
// creating transaction with the new account and its password-setup token
// (empty with a password): work that must happen exactly when the account
// exists, such as writing the setup mail to the outbox. Its error rolls the
// account back.
func (s *core) create(ctx context.Context, rawEmail, rawUsername, password string, withPassword, verified bool, invite *string, onCreated func(ctx context.Context, tx bun.IDB, u User, token string) error) (User, string, error) {
	email, err := NormalizeEmail(rawEmail)
	if err != nil {
		return User{}, "", err
	}
	username, err := NormalizeUsername(rawUsername)
	if err != nil {
		return User{}, "", err
	}
	if reserved, err := s.isReserved(ctx, s.store.Reader, username); err != nil {
		return User{}, "", err
	} else if reserved {
		return User{}, "", ErrUsernameReserved
	}
	var hash *string
	if withPassword {
		if err := checkPasswordPolicy(password, email, username, s.cfg.MinPasswordLength); err != nil {
			return User{}, "", err
		}
		h, err := s.hasher.hash(ctx, password)
		if err != nil {
			return User{}, "", err
		}
		hash = &h
	}
	var (
		row   userRow
		token string
	)
	err = s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		now := s.now()
		if invite != nil {
			// Spent with the account: a failed signup leaves it unused. It
			// is checked first, so that without a valid code nobody learns
			// anything about usernames or addresses.
			if err := spendInvite(ctx, tx, *invite, now); err != nil {
				return err
			}
		}
		// The username first: usernames are public, email addresses are
		// not, so a request that collides on both learns only the former.
		if taken, err := tx.NewSelect().Model((*userRow)(nil)).Where("username = ?", username).Exists(ctx); err != nil {
			return err
		} else if taken {
			return ErrUsernameTaken
		}
		// Then a name another account gave up and still holds (see
		// ChangeOwnUsername for why in this order).
		if held, err := heldForOther(ctx, tx, username, 0, now); err != nil {
			return err
		} else if held {
			return ErrUsernameTaken
		}
		if err := checkEmailFree(ctx, tx, email, 0); err != nil {
			return err
		}
		row = userRow{
			StableID: StableIDForEmail(email), Email: email, Username: username, PasswordHash: hash,
			CreatedAt: now, UpdatedAt: now,
		}
		if verified {
			row.EmailVerifiedAt, row.FirstVerifiedAt = &now, &now
		}
		// Identities are never reused: the hash of the email is taken when
		// an earlier account signed up with the address and has since
		// released it or been deleted (retired). Mint a fresh id then.
		for {
			taken, err := stableIDTaken(ctx, tx, row.StableID)
			if err != nil {
				return err
			}
			if !taken {
				break
			}
			row.StableID = randomStableID()
		}
		if s.store.Dialect() == storage.SQLite {
			// SQLite gives a new row the highest rowid plus one, which is a
			// deleted account's id when that account was the newest one.
			if row.ID, err = nextSQLiteUserID(ctx, tx); err != nil {
				return err
			}
		}
		// ON CONFLICT DO NOTHING keeps a PostgreSQL transaction usable when a
		// concurrent signup won the race; the checks above then explain it.
		res, err := tx.NewInsert().Model(&row).On("CONFLICT DO NOTHING").Returning("id").Exec(ctx)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			if taken, err := tx.NewSelect().Model((*userRow)(nil)).Where("username = ?", username).Exists(ctx); err != nil || taken {
				return cmp.Or(err, ErrUsernameTaken)
			}
			if err := checkEmailFree(ctx, tx, email, 0); err != nil {
				return err
			}
			return errors.New("stable id minted concurrently; retry")
		}
		res, err = tx.NewInsert().Model(&emailClaim{Email: email, UserID: row.ID, CreatedAt: now}).
			On("CONFLICT DO NOTHING").Returning("NULL").Exec(ctx)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ErrEmailClaimed
		}
		if err := assignDefaultRole(ctx, tx, row.ID, now); err != nil {
			return err
		}
		if !withPassword {
			if token, err = s.insertSetupToken(ctx, tx, row.ID, now); err != nil {
				return err
			}
		}
		if err := s.changed(ctx, tx, Change{Kind: ChangeUserCreated, UserID: row.ID, StableID: row.StableID}); err != nil {
			return err
		}
		if onCreated != nil {
			return onCreated(ctx, tx, row.user(), token)
		}
		return nil
	})
	if err != nil {
		return User{}, "", err
	}
	return row.user(), token, nil
}

// checkEmailFree returns ErrEmailTaken when email is an account's current
// address and ErrEmailClaimed when it is an account's former address,
// ignoring the account self (0 for none).
func checkEmailFree(ctx context.Context, db bun.IDB, email string, self int64) error {
	var owner struct {
		UserID       int64  `bun:"user_id"`
		CurrentEmail string `bun:"current_email"`
	}
	err := db.NewSelect().TableExpr("email_claims AS c").
		ColumnExpr("c.user_id, u.email AS current_email").
		Join("JOIN users AS u ON u.id = c.user_id").
		Where("c.email = ?", email).Limit(1).Scan(ctx, &owner)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return err
	case owner.UserID == self:
		return nil
	case owner.CurrentEmail == email:
		return ErrEmailTaken
	default:
		return ErrEmailClaimed
	}
}

// assignDefaultRole gives a new account the role user; it fails if the
// role is missing, so the account is rolled back rather than left roleless.
func assignDefaultRole(ctx context.Context, tx bun.Tx, userID int64, now time.Time) error {
	res, err := tx.NewRaw("INSERT INTO user_roles (user_id, role_name, granted_at) SELECT ?, name, ? FROM roles WHERE name = ?",
		userID, now, capabilities.RoleUser).Exec(ctx)
	if err != nil {
		return fmt.Errorf("assign role %s: %w", capabilities.RoleUser, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("assign role %s: the role does not exist (are the migrations applied?)", capabilities.RoleUser)
	}
	return nil
}

// isUniqueViolation reports whether err is PostgreSQL's unique_violation.
// (SQLite writers are serialized, so checks made in the transaction hold.)
func isUniqueViolation(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "23505"
}

// stableIDTaken reports whether sid is a live account's or a retired
// (deleted) account's stable id.
func stableIDTaken(ctx context.Context, tx bun.IDB, sid string) (bool, error) {
	var n int
	err := tx.NewRaw("SELECT (SELECT COUNT(*) FROM users WHERE stable_user_id = ?) + (SELECT COUNT(*) FROM retired_user_ids WHERE stable_id = ?)",
		sid, sid).Scan(ctx, &n)
	return n > 0, err
}

// nextSQLiteUserID returns an internal id above every live and retired
// one. SQLite's writer lock, held by the caller's transaction, makes it
// race-free.
func nextSQLiteUserID(ctx context.Context, tx bun.IDB) (int64, error) {
	var top int64
	err := tx.NewRaw("SELECT MAX(m) FROM (SELECT COALESCE(MAX(id), 0) AS m FROM users UNION ALL SELECT COALESCE(MAX(internal_id), 0) FROM retired_user_ids) AS ids").Scan(ctx, &top)
	return top + 1, err
}

func randomStableID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (s *core) userWhere(ctx context.Context, db bun.IDB, where string, args ...any) (userRow, error) {
	var row userRow
	for _, a := range args {
		if v, ok := a.(string); ok && (!utf8.ValidString(v) || strings.ContainsRune(v, 0)) {
			// No account has such an email, username or id, and SQL
			// cannot look it up (PostgreSQL refuses it; SQLite cuts the
			// statement at the NUL): unknown, not a store failure.
			return row, ErrNotFound
		}
	}
	err := db.NewSelect().Model(&row).Where(where, args...).Limit(1).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return row, ErrNotFound
	}
	return row, err
}

func (s *Identity) lookup(ctx context.Context, what, where string, arg any) (User, error) {
	row, err := s.userWhere(ctx, s.store.Reader, where, arg)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return User{}, err
		}
		return User{}, fmt.Errorf("accounts: user by %s: %w", what, err)
	}
	return row.user(), nil
}

// UserByID returns the account with internal id id, or ErrNotFound.
func (s *Identity) UserByID(ctx context.Context, id int64) (User, error) {
	return s.lookup(ctx, "id", "id = ?", id)
}

// UserByStableID returns the account with stable id sid, or ErrNotFound.
func (s *Identity) UserByStableID(ctx context.Context, sid string) (User, error) {
	return s.lookup(ctx, "stable id", "stable_user_id = ?", sid)
}

// UserByEmail returns the account whose current email is email (compared
// normalized), or ErrNotFound.
func (s *Identity) UserByEmail(ctx context.Context, email string) (User, error) {
	return s.lookup(ctx, "email", "email = ?", strings.ToLower(strings.TrimSpace(email)))
}

// UserByUsername returns the account holding username, or ErrNotFound.
func (s *Identity) UserByUsername(ctx context.Context, username string) (User, error) {
	return s.lookup(ctx, "username", "username = ?", strings.ToLower(strings.TrimSpace(username)))
}

// setStamp sets column to now where it is NULL (or clears it where it is
// set) and reports whether the row changed; ErrNotFound when there is no
// such user.
func (s *Identity) setStamp(ctx context.Context, userID int64, column string, set, refuseDeleting bool) (bool, error) {
	defer s.callerChanged(ctx, userID)
	q := s.store.DB.NewUpdate().Model((*userRow)(nil)).Where("id = ?", userID)
	if refuseDeleting {
		q = q.Where("deleting_at IS NULL")
	}
	now := s.now()
	if set {
		q = q.Set("? = ?", bun.Ident(column), now).Where("? IS NULL", bun.Ident(column))
		if column == "email_verified_at" {
			// The account has proved an address: it is never purged as
			// an unverified sign-up, even after a later email change.
			q = q.Set("first_verified_at = COALESCE(first_verified_at, ?)", now)
		}
	} else {
		q = q.Set("? = NULL", bun.Ident(column)).Where("? IS NOT NULL", bun.Ident(column))
	}
	res, err := q.Set("updated_at = ?", now).Exec(ctx)
	if err != nil {
		return false, err
	}
	if n, _ := res.RowsAffected(); n > 0 {
		return true, nil
	}
	row, err := s.userWhere(ctx, s.store.DB, "id = ?", userID)
	if err != nil {
		return false, err
	}
	if refuseDeleting && row.DeletingAt != nil {
		return false, ErrDeleting
	}
	return false, nil
}

// MarkEmailVerified records that the account's current email is verified.
// It reports whether the state changed; ErrDeleting for an account being
// deleted.
func (s *Identity) MarkEmailVerified(ctx context.Context, userID int64) (bool, error) {
	changed, err := s.setStamp(ctx, userID, "email_verified_at", true, true)
	if err != nil {
		return false, fmt.Errorf("accounts: mark email verified: %w", err)
	}
	return changed, nil
}

// writableUser locks nothing but reads userID inside tx and refuses
// accounts that are being deleted.
func writableUser(ctx context.Context, tx bun.IDB, userID int64) (userRow, error) {
	var row userRow
	err := tx.NewSelect().Model(&row).Where("id = ?", userID).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return row, ErrNotFound
	}
	if err != nil {
		return row, err
	}
	if row.DeletingAt != nil {
		return row, ErrDeleting
	}
	return row, nil
}

// CheckEmailFree reports whether rawEmail could become the address of
// userID: ErrInvalidEmail, ErrEmailTaken (another account's current
// address) or ErrEmailClaimed (another account's former address), nil when
// it is free or already userID's. The answer is for the account's owner
// only when it cannot reveal someone else's address (see ChangeEmail).
func (s *Identity) CheckEmailFree(ctx context.Context, userID int64, rawEmail string) (string, error) {
	email, err := NormalizeEmail(rawEmail)
	if err != nil {
		return "", err
	}
	if err := checkEmailFree(ctx, s.store.Reader, email, userID); err != nil {
		return email, fmt.Errorf("accounts: check email: %w", err)
	}
	return email, nil
}

// ChangeEmail moves userID to a new address, which starts unverified. The
// current address must be verified (ErrEmailUnverified otherwise) and stays
// claimed by the account, so it cannot open another account until released
// with ReleaseEmailClaim. Errors: ErrInvalidEmail, ErrEmailTaken,
// ErrEmailClaimed, ErrDeleting, ErrNotFound.
func (s *Identity) ChangeEmail(ctx context.Context, userID int64, newEmail string) (User, error) {
	defer s.callerChanged(ctx, userID)
	email, err := NormalizeEmail(newEmail)
	if err != nil {
		return User{}, fmt.Errorf("accounts: change email: %w", err)
	}
	var row userRow
	err = s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if row, err = writableUser(ctx, tx, userID); err != nil {
			return err
		}
		if row.EmailVerifiedAt == nil {
			return ErrEmailUnverified
		}
		if row.Email == email {
			return nil
		}
		if err := checkEmailFree(ctx, tx, email, userID); err != nil {
			return err
		}
		now := s.now()
		res, err := tx.NewInsert().Model(&emailClaim{Email: email, UserID: userID, CreatedAt: now}).
			On("CONFLICT DO NOTHING").Returning("NULL").Exec(ctx)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			if err := checkEmailFree(ctx, tx, email, userID); err != nil {
				return err
			}
		}
		row.Email, row.EmailVerifiedAt, row.UpdatedAt = email, nil, now
		_, err = tx.NewUpdate().Model(&row).Column("email", "email_verified_at", "updated_at").WherePK().Exec(ctx)
		return err
	})
	if err != nil {
		return User{}, fmt.Errorf("accounts: change email: %w", err)
	}
	return row.user(), nil
}

// EmailClaims lists the addresses userID holds: its current email and the
// former addresses it has not released.
func (s *Identity) EmailClaims(ctx context.Context, userID int64) ([]string, error) {
	var emails []string
	if err := s.store.Reader.NewSelect().Model((*emailClaim)(nil)).Column("email").
		Where("user_id = ?", userID).Order("email").Scan(ctx, &emails); err != nil {
		return nil, fmt.Errorf("accounts: email claims: %w", err)
	}
	return emails, nil
}

// ReleaseEmailClaim drops a former address of userID, so it can open a new
// account (which gets a fresh stable id). The caller must first have proven
// that the person controls that address (for example by a verification
// link). The current email cannot be released. ErrNotFound when userID
// holds no such former claim.
func (s *Identity) ReleaseEmailClaim(ctx context.Context, userID int64, email string) error {
	e := strings.ToLower(strings.TrimSpace(email))
	err := s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		row, err := writableUser(ctx, tx, userID)
		if err != nil {
			return err
		}
		if row.Email == e {
			return ErrNotFound
		}
		res, err := tx.NewDelete().Model((*emailClaim)(nil)).Where("user_id = ? AND email = ?", userID, e).Exec(ctx)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ErrNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("accounts: release email: %w", err)
	}
	return nil
}
