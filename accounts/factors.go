package accounts

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"database/sql"
	"encoding/base32"
	"errors"
	"fmt"
	"image/png"
	"strings"
	"sync"
	"time"

	"github.com/pquerna/otp"
	"github.com/pquerna/otp/totp"
	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/internal/envelope"
	"github.com/enclave-mcp/enclave/storage"
)

// Second factors: an authenticator app (TOTP) with single-use recovery
// codes, and passkeys (see passkeys.go). The tables (user_totp,
// user_recovery_codes, user_passkeys, login_challenges) belong to this
// package; FactorTables registers them in the ownership inventory.

// TOTP parameters: what every authenticator app understands.
const (
	totpPeriod = 30
	totpDigits = otp.DigitsSix
	totpAlgo   = otp.AlgorithmSHA1
	// totpSkew accepts the step before and after the current one (clock
	// drift and typing time).
	totpSkew = 1

	// RecoveryCodeCount is how many recovery codes a set holds.
	RecoveryCodeCount = 10

	// TOTPEnrolmentTTL is how long an authenticator-app set-up waits for
	// its first code. Its secret is shown to the signed-in session while it
	// waits: an unfinished set-up must not linger for whoever borrows the
	// session later (they could read the secret, or finish the set-up and
	// take the recovery codes).
	TOTPEnrolmentTTL = 15 * time.Minute

	// PendingLoginTTL is how long a sign-in waits for its second factor.
	PendingLoginTTL = 5 * time.Minute
	// pendingLoginAttempts bounds the wrong codes one pending sign-in takes
	// (the credential rate limit bounds them per client as well).
	pendingLoginAttempts = 5
)

// Challenge purposes (login_challenges.purpose).
const (
	purposeSecondFactor     = "second_factor"
	purposePasskeyRegister  = "passkey_register"
	purposePasskeyLogin     = "passkey_login"
	challengeTTLPasskey     = 5 * time.Minute
	maxChallengeDataBytes   = 16 << 10
	maxCredentialJSONLength = 64 << 10
)

// FactorTables are the ownership-inventory registrations of the second
// factor tables: exported without secret material (the TOTP secret, the
// recovery-code hashes and the stored credential are redacted; pending
// ceremonies are left out).
func FactorTables() []storage.Table {
	return []storage.Table{
		{Name: "user_totp", KeyColumn: "user_id", Redact: []string{"secret", "key_id", "last_step"}},
		{Name: "user_recovery_codes", Redact: []string{"code_hash"}},
		{Name: "user_passkeys", Redact: []string{"credential"}},
		{Name: "login_challenges", SkipExport: true},
	}
}

type totpRow struct {
	bun.BaseModel `bun:"table:user_totp"`
	UserID        int64      `bun:"user_id,pk"`
	KeyID         int64      `bun:"key_id,notnull"`
	Secret        string     `bun:"secret,notnull"`
	ConfirmedAt   *time.Time `bun:"confirmed_at"`
	LastStep      int64      `bun:"last_step,notnull"`
	CreatedAt     time.Time  `bun:"created_at,notnull"`
}

type recoveryCodeRow struct {
	bun.BaseModel `bun:"table:user_recovery_codes"`
	ID            int64      `bun:"id,pk,autoincrement"`
	UserID        int64      `bun:"user_id,notnull"`
	CodeHash      string     `bun:"code_hash,notnull"`
	UsedAt        *time.Time `bun:"used_at"`
	CreatedAt     time.Time  `bun:"created_at,notnull"`
}

type challengeRow struct {
	bun.BaseModel `bun:"table:login_challenges"`
	ID            string    `bun:"id,pk"`
	UserID        *int64    `bun:"user_id"`
	Purpose       string    `bun:"purpose,notnull"`
	Data          string    `bun:"data,notnull"`
	Attempts      int       `bun:"attempts,notnull"`
	CreatedAt     time.Time `bun:"created_at,notnull"`
	ExpiresAt     time.Time `bun:"expires_at,notnull"`
}

// factorState holds the lazily opened envelope ring that seals TOTP
// secrets.
type factorState struct {
	once sync.Mutex
	ring *envelope.Ring
}

func (s *SecondFactors) factorRing(ctx context.Context) (*envelope.Ring, error) {
	s.factors.once.Lock()
	defer s.factors.once.Unlock()
	if s.factors.ring != nil {
		return s.factors.ring, nil
	}
	r, err := envelope.Open(ctx, s.store.DB, s.store.Keeper)
	if err != nil {
		return nil, err
	}
	s.factors.ring = r
	return r, nil
}

func totpAD(u User) string { return "totp:user:" + u.StableID }

// Factors says which second factors an account has.
type Factors struct {
	// TOTP is true when an authenticator app is confirmed.
	TOTP bool `json:"totp"`
	// TOTPPending is true while an enrolment waits for its first code.
	TOTPPending bool `json:"totpPending"`
	// RecoveryCodesLeft counts unused recovery codes.
	RecoveryCodesLeft int `json:"recoveryCodesLeft"`
	// Passkeys lists the account's passkeys.
	Passkeys []Passkey `json:"passkeys"`
}

// Any reports whether the account has a second factor: a confirmed
// authenticator app or a passkey.
func (f Factors) Any() bool { return f.TOTP || len(f.Passkeys) > 0 }

// FactorsOf returns userID's second factors.
func (s *SecondFactors) FactorsOf(ctx context.Context, userID int64) (Factors, error) {
	var f Factors
	var row totpRow
	err := s.store.Reader.NewSelect().Model(&row).Where("user_id = ?", userID).Scan(ctx)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return f, fmt.Errorf("accounts: factors: %w", err)
	default:
		f.TOTP, f.TOTPPending = row.ConfirmedAt != nil, row.ConfirmedAt == nil && s.enrolmentLive(row)
	}
	n, err := s.store.Reader.NewSelect().Model((*recoveryCodeRow)(nil)).Where("user_id = ? AND used_at IS NULL", userID).Count(ctx)
	if err != nil {
		return f, fmt.Errorf("accounts: factors: %w", err)
	}
	f.RecoveryCodesLeft = int(n)
	if f.Passkeys, err = s.Passkeys(ctx, userID); err != nil {
		return f, err
	}
	return f, nil
}

// HasSecondFactor reports whether userID has a confirmed authenticator app
// or a passkey. It fails closed: on a store error it returns the error.
func (s *SecondFactors) HasSecondFactor(ctx context.Context, userID int64) (bool, error) {
	var n int
	err := s.store.Reader.NewRaw(`SELECT (SELECT COUNT(*) FROM user_totp WHERE user_id = ? AND confirmed_at IS NOT NULL)
		+ (SELECT COUNT(*) FROM user_passkeys WHERE user_id = ?)`, userID, userID).Scan(ctx, &n)
	if err != nil {
		return false, fmt.Errorf("accounts: has second factor: %w", err)
	}
	return n > 0, nil
}

// TOTPEnrolment is an authenticator-app set-up waiting for its first code.
type TOTPEnrolment struct {
	// Secret is the base32 key to type into an app that cannot scan.
	Secret string `json:"secret"`
	// URL is the otpauth:// URL the QR code carries.
	URL string `json:"url"`
}

// QRCodePNG renders the enrolment's QR code as a PNG image.
func (e TOTPEnrolment) QRCodePNG(size int) ([]byte, error) {
	key, err := otp.NewKeyFromURL(e.URL)
	if err != nil {
		return nil, err
	}
	img, err := key.Image(size, size)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// BeginTOTP starts (or restarts) setting up an authenticator app for u: a
// new secret, kept sealed until ConfirmTOTP. It returns ErrTOTPEnabled when
// one is already confirmed.
func (s *SecondFactors) BeginTOTP(ctx context.Context, u User, issuer string) (TOTPEnrolment, error) {
	if err := u.CheckActive(); err != nil {
		return TOTPEnrolment{}, err
	}
	ring, err := s.factorRing(ctx)
	if err != nil {
		return TOTPEnrolment{}, fmt.Errorf("accounts: begin totp: %w", err)
	}
	key, err := totp.Generate(totp.GenerateOpts{Issuer: issuer, AccountName: u.Email, Period: totpPeriod, Digits: totpDigits, Algorithm: totpAlgo})
	if err != nil {
		return TOTPEnrolment{}, fmt.Errorf("accounts: begin totp: %w", err)
	}
	keyID, sealed, err := ring.Seal(totpAD(u), []byte(key.String()))
	if err != nil {
		return TOTPEnrolment{}, fmt.Errorf("accounts: begin totp: %w", err)
	}
	err = s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if _, err := writableUser(ctx, tx, u.ID); err != nil {
			return err
		}
		var cur totpRow
		err := tx.NewSelect().Model(&cur).Where("user_id = ?", u.ID).Scan(ctx)
		switch {
		case err == nil && cur.ConfirmedAt != nil:
			return ErrTOTPEnabled
		case err == nil:
			_, err = tx.NewDelete().Model((*totpRow)(nil)).Where("user_id = ? AND confirmed_at IS NULL", u.ID).Exec(ctx)
			if err != nil {
				return err
			}
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		row := &totpRow{UserID: u.ID, KeyID: keyID, Secret: sealed, CreatedAt: s.now()}
		_, err = tx.NewInsert().Model(row).Returning("NULL").Exec(ctx)
		return err
	})
	if err != nil {
		return TOTPEnrolment{}, fmt.Errorf("accounts: begin totp: %w", err)
	}
	return TOTPEnrolment{Secret: key.Secret(), URL: key.String()}, nil
}

// PendingTOTP returns u's enrolment that waits for its first code, or
// ErrNotFound.
func (s *SecondFactors) PendingTOTP(ctx context.Context, u User) (TOTPEnrolment, error) {
	row, key, err := s.loadTOTP(ctx, s.store.Reader, u)
	if err != nil {
		return TOTPEnrolment{}, err
	}
	if row.ConfirmedAt != nil || !s.enrolmentLive(row) {
		return TOTPEnrolment{}, ErrNotFound
	}
	return TOTPEnrolment{Secret: key.Secret(), URL: key.String()}, nil
}

// enrolmentLive reports whether an unconfirmed set-up is still within
// TOTPEnrolmentTTL.
func (s *SecondFactors) enrolmentLive(row totpRow) bool {
	return s.now().Before(row.CreatedAt.Add(TOTPEnrolmentTTL))
}

// loadTOTP reads and opens u's TOTP row; ErrNotFound when there is none.
func (s *SecondFactors) loadTOTP(ctx context.Context, db bun.IDB, u User) (totpRow, *otp.Key, error) {
	var row totpRow
	err := db.NewSelect().Model(&row).Where("user_id = ?", u.ID).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return row, nil, ErrNotFound
	}
	if err != nil {
		return row, nil, err
	}
	ring, err := s.factorRing(ctx)
	if err != nil {
		return row, nil, err
	}
	raw, err := ring.Open(ctx, row.KeyID, row.Secret, totpAD(u))
	if err != nil {
		return row, nil, fmt.Errorf("accounts: open totp secret: %w", err)
	}
	key, err := otp.NewKeyFromURL(string(raw))
	if err != nil {
		return row, nil, fmt.Errorf("accounts: totp secret: %w", err)
	}
	return row, key, nil
}

// matchStep returns the time step among now's neighbours whose code is
// code, or 0.
func matchStep(secret, code string, now time.Time) int64 {
	code = strings.TrimSpace(code)
	if len(code) != 6 {
		return 0
	}
	step := now.Unix() / totpPeriod
	for d := int64(-totpSkew); d <= totpSkew; d++ {
		t := time.Unix((step+d)*totpPeriod, 0)
		want, err := totp.GenerateCodeCustom(secret, t, totp.ValidateOpts{Period: totpPeriod, Digits: totpDigits, Algorithm: totpAlgo})
		if err == nil && subtle.ConstantTimeCompare([]byte(want), []byte(code)) == 1 {
			return step + d
		}
	}
	return 0
}

// useTOTPCode accepts code for row when it matches a step later than the
// last accepted one, recording that step in the same statement: of two
// uses of one code (or of an earlier one), only the first succeeds.
func (s *SecondFactors) useTOTPCode(ctx context.Context, db bun.IDB, row totpRow, key *otp.Key, code string) (bool, error) {
	step := matchStep(key.Secret(), code, s.cfg.Now())
	if step == 0 || step <= row.LastStep {
		return false, nil
	}
	q := db.NewUpdate().Model((*totpRow)(nil)).Set("last_step = ?", step).
		Where("user_id = ? AND last_step < ?", row.UserID, step)
	if row.ConfirmedAt != nil {
		q = q.Where("confirmed_at IS NOT NULL")
	}
	res, err := q.Exec(ctx)
	if err != nil {
		return false, err
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// ConfirmTOTP finishes setting up u's authenticator app with its first
// code and returns a new set of recovery codes (shown once; only their
// hashes are kept). ErrSecondFactorInvalid for a wrong code, ErrNotFound
// when no set-up is pending, ErrTOTPEnabled when one is already on.
func (s *SecondFactors) ConfirmTOTP(ctx context.Context, u User, code string) ([]string, error) {
	codes := newRecoveryCodes()
	err := s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if _, err := writableUser(ctx, tx, u.ID); err != nil {
			return err
		}
		row, key, err := s.loadTOTP(ctx, tx, u)
		if err != nil {
			return err
		}
		if row.ConfirmedAt != nil {
			return ErrTOTPEnabled
		}
		if !s.enrolmentLive(row) {
			return ErrNotFound // start the set-up again
		}
		ok, err := s.useTOTPCode(ctx, tx, row, key, code)
		if err != nil {
			return err
		}
		if !ok {
			return ErrSecondFactorInvalid
		}
		now := s.now()
		if _, err := tx.NewUpdate().Model((*totpRow)(nil)).Set("confirmed_at = ?", now).Where("user_id = ?", u.ID).Exec(ctx); err != nil {
			return err
		}
		return s.replaceRecoveryCodes(ctx, tx, u.ID, codes, now)
	})
	if err != nil {
		return nil, fmt.Errorf("accounts: confirm totp: %w", err)
	}
	return codes, nil
}

// recoveryAlphabet avoids look-alike characters.
var recoveryEncoding = base32.NewEncoding("abcdefghijkmnpqrstuvwxyz23456789").WithPadding(base32.NoPadding)

// newRecoveryCodes returns RecoveryCodeCount codes of 80 random bits each,
// written as four groups of four characters.
func newRecoveryCodes() []string {
	codes := make([]string, RecoveryCodeCount)
	for i := range codes {
		b := make([]byte, 10)
		_, _ = rand.Read(b)
		s := recoveryEncoding.EncodeToString(b) // 16 characters
		codes[i] = s[0:4] + "-" + s[4:8] + "-" + s[8:12] + "-" + s[12:16]
	}
	return codes
}

// normalizeRecoveryCode folds what a person types into the stored form.
func normalizeRecoveryCode(code string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(code) {
		if r == '-' || r == ' ' {
			continue
		}
		b.WriteRune(r)
	}
	s := b.String()
	if len(s) != 16 {
		return ""
	}
	return s[0:4] + "-" + s[4:8] + "-" + s[8:12] + "-" + s[12:16]
}

func (s *SecondFactors) replaceRecoveryCodes(ctx context.Context, tx bun.IDB, userID int64, codes []string, now time.Time) error {
	if _, err := tx.NewDelete().Model((*recoveryCodeRow)(nil)).Where("user_id = ?", userID).Exec(ctx); err != nil {
		return err
	}
	rows := make([]recoveryCodeRow, len(codes))
	for i, c := range codes {
		rows[i] = recoveryCodeRow{UserID: userID, CodeHash: hashToken(c), CreatedAt: now}
	}
	_, err := tx.NewInsert().Model(&rows).Returning("NULL").Exec(ctx)
	return err
}

// useRecoveryCode spends one of userID's recovery codes: of two uses of a
// code only the first succeeds.
func (s *SecondFactors) useRecoveryCode(ctx context.Context, db bun.IDB, userID int64, code string) (bool, error) {
	c := normalizeRecoveryCode(code)
	if c == "" {
		return false, nil
	}
	res, err := db.NewUpdate().Model((*recoveryCodeRow)(nil)).Set("used_at = ?", s.now()).
		Where("user_id = ? AND code_hash = ? AND used_at IS NULL", userID, hashToken(c)).Exec(ctx)
	if err != nil {
		return false, err
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// VerifySecondFactorCode checks a code from u's authenticator app (not one
// used before: the step is recorded) or one of u's unused recovery codes
// (spent). ErrSecondFactorInvalid otherwise. It reports whether a
// recovery code was spent.
func (s *SecondFactors) VerifySecondFactorCode(ctx context.Context, u User, code string) (recovery bool, err error) {
	code = strings.TrimSpace(code)
	if len(code) > 64 {
		return false, ErrSecondFactorInvalid
	}
	row, key, err := s.loadTOTP(ctx, s.store.DB, u)
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return false, err
	case row.ConfirmedAt != nil:
		ok, err := s.useTOTPCode(ctx, s.store.DB, row, key, code)
		if err != nil || ok {
			return false, err
		}
	}
	ok, err := s.useRecoveryCode(ctx, s.store.DB, u.ID, code)
	if err != nil {
		return false, err
	}
	if !ok {
		return false, ErrSecondFactorInvalid
	}
	return true, nil
}

// revokeCredentialsInTx ends every browser session and OAuth grant of
// userID issued before now, exactly as a password change does: it stamps
// password_changed_at (strictly later than before) and runs the
// password-change hooks, inside tx.
func (s *SecondFactors) revokeCredentialsInTx(ctx context.Context, tx bun.Tx, userID int64) error {
	row, err := writableUser(ctx, tx, userID)
	if err != nil {
		return err
	}
	now := s.now()
	if row.PasswordChangedAt != nil && !now.After(*row.PasswordChangedAt) {
		now = row.PasswordChangedAt.Add(time.Microsecond)
	}
	if _, err := tx.NewUpdate().Model((*userRow)(nil)).Set("password_changed_at = ?", now).Set("updated_at = ?", now).
		Where("id = ?", userID).Exec(ctx); err != nil {
		return err
	}
	for _, hook := range s.passwordHooks() {
		if err := hook(ctx, tx, userID); err != nil {
			return fmt.Errorf("password-change hook: %w", err)
		}
	}
	return nil
}

// DisableTOTP turns off u's authenticator app after checking the password
// and a code (from the app, or a recovery code). Recovery codes go with it
// unless a passkey remains. Every browser session and OAuth grant issued
// before it ends, as with a password change: start a new session for the
// person who made the change.
func (s *SecondFactors) DisableTOTP(ctx context.Context, u User, password, code string) error {
	defer s.callerChanged(ctx, u.ID) // cached callers of revoked tokens
	if _, err := s.credentials.VerifyPassword(ctx, u.ID, password); err != nil {
		return fmt.Errorf("accounts: disable totp: %w", err)
	}
	f, err := s.FactorsOf(ctx, u.ID)
	if err != nil {
		return err
	}
	if !f.TOTP {
		return fmt.Errorf("accounts: disable totp: %w", ErrTOTPNotEnabled)
	}
	if _, err := s.VerifySecondFactorCode(ctx, u, code); err != nil {
		return fmt.Errorf("accounts: disable totp: %w", err)
	}
	err = s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewDelete().Model((*totpRow)(nil)).Where("user_id = ?", u.ID).Exec(ctx); err != nil {
			return err
		}
		if len(f.Passkeys) == 0 {
			if _, err := tx.NewDelete().Model((*recoveryCodeRow)(nil)).Where("user_id = ?", u.ID).Exec(ctx); err != nil {
				return err
			}
		}
		return s.revokeCredentialsInTx(ctx, tx, u.ID)
	})
	if err != nil {
		return fmt.Errorf("accounts: disable totp: %w", err)
	}
	return nil
}

// RegenerateRecoveryCodes replaces u's recovery codes after checking the
// password and a fresh proof of a second factor (ProveFactor: a code from
// the app, a recovery code, or a passkey assertion), and returns the new
// set (shown once): new codes are a factor, and the password alone must
// not mint one. It needs a second factor (ErrNoSecondFactor). Like
// removing a factor, it ends every other session and OAuth grant.
func (s *SecondFactors) RegenerateRecoveryCodes(ctx context.Context, u User, password string, proof FactorProof) ([]string, error) {
	defer s.callerChanged(ctx, u.ID) // cached callers of revoked tokens
	if _, err := s.credentials.VerifyPassword(ctx, u.ID, password); err != nil {
		return nil, fmt.Errorf("accounts: recovery codes: %w", err)
	}
	has, err := s.HasSecondFactor(ctx, u.ID)
	if err != nil {
		return nil, err
	}
	if !has {
		return nil, fmt.Errorf("accounts: recovery codes: %w", ErrNoSecondFactor)
	}
	if err := s.ProveFactor(ctx, u, proof); err != nil {
		return nil, fmt.Errorf("accounts: recovery codes: %w", err)
	}
	codes := newRecoveryCodes()
	err = s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if err := s.replaceRecoveryCodes(ctx, tx, u.ID, codes, s.now()); err != nil {
			return err
		}
		return s.revokeCredentialsInTx(ctx, tx, u.ID)
	})
	if err != nil {
		return nil, fmt.Errorf("accounts: recovery codes: %w", err)
	}
	return codes, nil
}

// clearFactorsInTx removes every second factor of userID (password reset:
// whoever reset the password by mail proved control of the address only).
// It reports whether there was any.
func clearFactorsInTx(ctx context.Context, tx bun.IDB, userID int64) (bool, error) {
	var removed int64
	for _, m := range []any{(*totpRow)(nil), (*recoveryCodeRow)(nil), (*passkeyRow)(nil), (*challengeRow)(nil)} {
		res, err := tx.NewDelete().Model(m).Where("user_id = ?", userID).Exec(ctx)
		if err != nil {
			return false, err
		}
		if _, ok := m.(*challengeRow); !ok {
			n, _ := res.RowsAffected()
			removed += n
		}
	}
	return removed > 0, nil
}

// ---- pending sign-ins ----

// PendingLogin is a sign-in whose password was checked and that waits for
// its second factor.
type PendingLogin struct {
	User       User
	RememberMe bool
}

// BeginPendingLogin records that u's password was just checked and returns
// the token of the step that asks for the second factor: unguessable,
// single-use, valid for PendingLoginTTL. Only this server-side record says
// the password was checked; the token merely names it.
func (s *SecondFactors) BeginPendingLogin(ctx context.Context, u User, rememberMe bool) (string, error) {
	data := "0"
	if rememberMe {
		data = "1"
	}
	token, err := s.insertChallenge(ctx, &u.ID, purposeSecondFactor, data, PendingLoginTTL)
	if err != nil {
		return "", fmt.Errorf("accounts: begin pending login: %w", err)
	}
	return token, nil
}

func (s *SecondFactors) insertChallenge(ctx context.Context, userID *int64, purpose, data string, ttl time.Duration) (string, error) {
	token := rand.Text() + rand.Text()
	now := s.now()
	row := &challengeRow{ID: hashToken(token), UserID: userID, Purpose: purpose, Data: data, CreatedAt: now, ExpiresAt: now.Add(ttl)}
	err := s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		// Expired ceremonies are swept as new ones start.
		if _, err := tx.NewDelete().Model((*challengeRow)(nil)).Where("expires_at < ?", now).Exec(ctx); err != nil {
			return err
		}
		_, err := tx.NewInsert().Model(row).Returning("NULL").Exec(ctx)
		return err
	})
	return token, err
}

// PeekPendingLogin returns the pending sign-in of token without using it,
// or ErrPendingLoginInvalid.
func (s *SecondFactors) PeekPendingLogin(ctx context.Context, token string) (PendingLogin, error) {
	row, err := s.liveChallenge(ctx, s.store.Reader, token, purposeSecondFactor)
	if err != nil {
		return PendingLogin{}, err
	}
	u, err := s.identity.UserByID(ctx, *row.UserID)
	if err != nil {
		return PendingLogin{}, ErrPendingLoginInvalid
	}
	return PendingLogin{User: u, RememberMe: row.Data == "1"}, nil
}

func (s *SecondFactors) liveChallenge(ctx context.Context, db bun.IDB, token, purpose string) (challengeRow, error) {
	var row challengeRow
	if token == "" || len(token) > 128 || !textOK(token) {
		return row, ErrPendingLoginInvalid
	}
	err := db.NewSelect().Model(&row).Where("id = ? AND purpose = ?", hashToken(token), purpose).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && (!s.now().Before(row.ExpiresAt) || row.UserID == nil && purpose == purposeSecondFactor)) {
		return row, ErrPendingLoginInvalid
	}
	return row, err
}

func textOK(s string) bool {
	for _, r := range s {
		if r < 0x21 || r > 0x7e {
			return false
		}
	}
	return true
}

// CompletePendingLogin finishes the sign-in of token with a second-factor
// code (authenticator app or recovery code). The pending sign-in is used
// up on success and after too many wrong codes; ErrPendingLoginInvalid
// when it is unknown, used or expired, ErrSecondFactorInvalid for a wrong
// code. The caller starts the session.
func (s *SecondFactors) CompletePendingLogin(ctx context.Context, token, code string) (PendingLogin, error) {
	p, row, err := s.attemptPending(ctx, token)
	if err != nil {
		return PendingLogin{}, err
	}
	if _, err := s.VerifySecondFactorCode(ctx, p.User, code); err != nil {
		return PendingLogin{}, fmt.Errorf("accounts: second factor: %w", err)
	}
	return s.finishPending(ctx, row, p)
}

// attemptPending counts one attempt on token's pending sign-in, atomically
// (an exhausted one is refused), and loads its account.
func (s *SecondFactors) attemptPending(ctx context.Context, token string) (PendingLogin, challengeRow, error) {
	row, err := s.liveChallenge(ctx, s.store.DB, token, purposeSecondFactor)
	if err != nil {
		return PendingLogin{}, row, err
	}
	res, err := s.store.DB.NewUpdate().Model((*challengeRow)(nil)).Set("attempts = attempts + 1").
		Where("id = ? AND attempts < ? AND expires_at > ?", row.ID, pendingLoginAttempts, s.now()).Exec(ctx)
	if err != nil {
		return PendingLogin{}, row, err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		_, _ = s.store.DB.NewDelete().Model((*challengeRow)(nil)).Where("id = ?", row.ID).Exec(ctx)
		return PendingLogin{}, row, ErrPendingLoginInvalid
	}
	u, err := s.identity.UserByID(ctx, *row.UserID)
	if err != nil {
		return PendingLogin{}, row, ErrPendingLoginInvalid
	}
	return PendingLogin{User: u, RememberMe: row.Data == "1"}, row, nil
}

// finishPending uses up the pending sign-in: of two concurrent successes
// only one gets the account.
func (s *SecondFactors) finishPending(ctx context.Context, row challengeRow, p PendingLogin) (PendingLogin, error) {
	res, err := s.store.DB.NewDelete().Model((*challengeRow)(nil)).Where("id = ?", row.ID).Exec(ctx)
	if err != nil {
		return PendingLogin{}, err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return PendingLogin{}, ErrPendingLoginInvalid
	}
	// The password may have changed, or the account been suspended, while
	// the sign-in waited.
	u, err := s.identity.UserByID(ctx, p.User.ID)
	if err != nil {
		return PendingLogin{}, ErrPendingLoginInvalid
	}
	if pc := u.PasswordChangedAt; pc != nil && !row.CreatedAt.After(*pc) {
		return PendingLogin{}, ErrPendingLoginInvalid
	}
	if err := u.CheckActive(); err != nil {
		return PendingLogin{}, err
	}
	p.User = u
	return p, nil
}

// FactorsOfPending reports whether the account of the pending sign-in
// token has passkeys (to offer them on the second step).
func (s *SecondFactors) FactorsOfPending(ctx context.Context, token string) (bool, error) {
	p, err := s.PeekPendingLogin(ctx, token)
	if err != nil {
		return false, err
	}
	n, err := s.store.Reader.NewSelect().Model((*passkeyRow)(nil)).Where("user_id = ?", p.User.ID).Count(ctx)
	return n > 0, err
}
