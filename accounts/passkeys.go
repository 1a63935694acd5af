package accounts

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/go-webauthn/webauthn/protocol"
	"github.com/go-webauthn/webauthn/webauthn"
	"github.com/uptrace/bun"
)

// Passkey is what an account holder sees of one of their passkeys: never
// the stored credential.
type Passkey struct {
	ID         int64      `json:"id"`
	Name       string     `json:"name"`
	CreatedAt  time.Time  `json:"createdAt"`
	LastUsedAt *time.Time `json:"lastUsedAt,omitempty"`
}

// MaxPasskeyNameLength bounds a passkey's name, in characters.
const MaxPasskeyNameLength = 64

type passkeyRow struct {
	bun.BaseModel `bun:"table:user_passkeys"`
	ID            int64      `bun:"id,pk,autoincrement"`
	UserID        int64      `bun:"user_id,notnull"`
	CredentialID  string     `bun:"credential_id,notnull"`
	Name          string     `bun:"name,notnull"`
	Credential    string     `bun:"credential,notnull"`
	CreatedAt     time.Time  `bun:"created_at,notnull"`
	LastUsedAt    *time.Time `bun:"last_used_at"`
}

func (r passkeyRow) passkey() Passkey {
	p := Passkey{ID: r.ID, Name: r.Name, CreatedAt: r.CreatedAt.UTC()}
	if r.LastUsedAt != nil {
		t := r.LastUsedAt.UTC()
		p.LastUsedAt = &t
	}
	return p
}

type passkeyState struct {
	once sync.Once
	wa   *webauthn.WebAuthn
	err  error
}

// relyingParty returns the WebAuthn relying party of Config.Passkeys.
func (s *SecondFactors) relyingParty() (*webauthn.WebAuthn, error) {
	s.passkeys.once.Do(func() {
		c := s.cfg.Passkeys
		s.passkeys.wa, s.passkeys.err = webauthn.New(&webauthn.Config{
			RPID: c.RPID, RPDisplayName: c.RPName, RPOrigins: c.Origins,
		})
	})
	if s.passkeys.err != nil {
		return nil, fmt.Errorf("accounts: passkeys: %w", s.passkeys.err)
	}
	return s.passkeys.wa, nil
}

// waUser is an account as the WebAuthn library sees it. Its user handle
// is the stable user id's 32 bytes: never reused, so a passkey made for a
// deleted account never signs in to a later one.
type waUser struct {
	u     User
	creds []webauthn.Credential
}

func (w waUser) WebAuthnID() []byte {
	b, err := hex.DecodeString(w.u.StableID)
	if err != nil {
		return []byte(w.u.StableID)
	}
	return b
}
func (w waUser) WebAuthnName() string                       { return w.u.Email }
func (w waUser) WebAuthnDisplayName() string                { return w.u.Username }
func (w waUser) WebAuthnCredentials() []webauthn.Credential { return w.creds }

func stableIDOfHandle(handle []byte) string { return hex.EncodeToString(handle) }

func (s *SecondFactors) passkeyRows(ctx context.Context, db bun.IDB, userID int64) ([]passkeyRow, error) {
	var rows []passkeyRow
	err := db.NewSelect().Model(&rows).Where("user_id = ?", userID).Order("created_at", "id").Scan(ctx)
	return rows, err
}

func (s *SecondFactors) waUserOf(ctx context.Context, u User) (waUser, error) {
	rows, err := s.passkeyRows(ctx, s.store.Reader, u.ID)
	if err != nil {
		return waUser{}, err
	}
	w := waUser{u: u}
	for _, r := range rows {
		var c webauthn.Credential
		if err := json.Unmarshal([]byte(r.Credential), &c); err != nil {
			return waUser{}, fmt.Errorf("accounts: passkey %d: %w", r.ID, err)
		}
		w.creds = append(w.creds, c)
	}
	return w, nil
}

// Passkeys lists userID's passkeys, oldest first.
func (s *SecondFactors) Passkeys(ctx context.Context, userID int64) ([]Passkey, error) {
	rows, err := s.passkeyRows(ctx, s.store.Reader, userID)
	if err != nil {
		return nil, fmt.Errorf("accounts: passkeys: %w", err)
	}
	out := make([]Passkey, len(rows))
	for i, r := range rows {
		out[i] = r.passkey()
	}
	return out, nil
}

// PasskeyCeremony is the start of a passkey ceremony: the options for the
// browser's navigator.credentials call and the token that names the
// server-side challenge (single use, expiring).
type PasskeyCeremony struct {
	Token   string          `json:"token"`
	Options json.RawMessage `json:"options"`
}

// BeginPasskeyRegistration starts registering a new passkey for u: a
// discoverable credential with user verification, excluding the passkeys
// u already has.
func (s *SecondFactors) BeginPasskeyRegistration(ctx context.Context, u User) (PasskeyCeremony, error) {
	if err := u.CheckActive(); err != nil {
		return PasskeyCeremony{}, err
	}
	wa, err := s.relyingParty()
	if err != nil {
		return PasskeyCeremony{}, err
	}
	w, err := s.waUserOf(ctx, u)
	if err != nil {
		return PasskeyCeremony{}, err
	}
	var exclude []protocol.CredentialDescriptor
	for i := range w.creds {
		exclude = append(exclude, w.creds[i].Descriptor())
	}
	creation, session, err := wa.BeginRegistration(w,
		webauthn.WithExclusions(exclude),
		webauthn.WithAuthenticatorSelection(protocol.AuthenticatorSelection{
			ResidentKey:      protocol.ResidentKeyRequirementRequired,
			UserVerification: protocol.VerificationRequired,
		}),
		webauthn.WithResidentKeyRequirement(protocol.ResidentKeyRequirementRequired))
	if err != nil {
		return PasskeyCeremony{}, fmt.Errorf("accounts: begin passkey registration: %w", err)
	}
	return s.storeCeremony(ctx, &u.ID, purposePasskeyRegister, creation, session)
}

func (s *SecondFactors) storeCeremony(ctx context.Context, userID *int64, purpose string, options any, session *webauthn.SessionData) (PasskeyCeremony, error) {
	opts, err := json.Marshal(options)
	if err != nil {
		return PasskeyCeremony{}, err
	}
	data, err := json.Marshal(session)
	if err != nil {
		return PasskeyCeremony{}, err
	}
	token, err := s.insertChallenge(ctx, userID, purpose, string(data), challengeTTLPasskey)
	if err != nil {
		return PasskeyCeremony{}, fmt.Errorf("accounts: passkey challenge: %w", err)
	}
	return PasskeyCeremony{Token: token, Options: opts}, nil
}

// takeCeremony uses up the challenge of token (of purpose, belonging to
// userID when that is not 0) and returns its session data.
func (s *SecondFactors) takeCeremony(ctx context.Context, token, purpose string, userID int64) (webauthn.SessionData, error) {
	var session webauthn.SessionData
	if token == "" || len(token) > 128 || !textOK(token) {
		return session, ErrPasskeyInvalid
	}
	q := s.store.DB.NewDelete().Model((*challengeRow)(nil)).Where("id = ? AND purpose = ?", hashToken(token), purpose)
	if userID != 0 {
		q = q.Where("user_id = ?", userID)
	}
	var rows []challengeRow
	if _, err := q.Returning("*").Exec(ctx, &rows); err != nil {
		return session, err
	}
	if len(rows) != 1 || !s.now().Before(rows[0].ExpiresAt) {
		return session, ErrPasskeyInvalid
	}
	if err := json.Unmarshal([]byte(rows[0].Data), &session); err != nil {
		return session, ErrPasskeyInvalid
	}
	return session, nil
}

// cleanPasskeyName trims a passkey's name and checks it.
func cleanPasskeyName(name string) (string, error) {
	name = strings.TrimSpace(name)
	if name == "" {
		name = "Passkey"
	}
	if !utf8.ValidString(name) || utf8.RuneCountInString(name) > MaxPasskeyNameLength || strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return "", ErrPasskeyName
	}
	return name, nil
}

// FinishPasskeyRegistration checks the browser's response to the
// registration started with token and stores the new passkey under name.
func (s *SecondFactors) FinishPasskeyRegistration(ctx context.Context, u User, token, name string, response []byte) (Passkey, error) {
	name, err := cleanPasskeyName(name)
	if err != nil {
		return Passkey{}, err
	}
	if len(response) > maxCredentialJSONLength {
		return Passkey{}, ErrPasskeyInvalid
	}
	wa, err := s.relyingParty()
	if err != nil {
		return Passkey{}, err
	}
	session, err := s.takeCeremony(ctx, token, purposePasskeyRegister, u.ID)
	if err != nil {
		return Passkey{}, fmt.Errorf("accounts: register passkey: %w", err)
	}
	parsed, err := protocol.ParseCredentialCreationResponseBytes(response)
	if err != nil {
		return Passkey{}, fmt.Errorf("accounts: register passkey: %w", ErrPasskeyInvalid)
	}
	w, err := s.waUserOf(ctx, u)
	if err != nil {
		return Passkey{}, err
	}
	cred, err := wa.CreateCredential(w, session, parsed)
	if err != nil {
		s.cfg.Logger.InfoContext(ctx, "accounts: passkey registration refused", "user_id", u.ID, "error", err)
		return Passkey{}, fmt.Errorf("accounts: register passkey: %w", ErrPasskeyInvalid)
	}
	raw, err := json.Marshal(cred)
	if err != nil {
		return Passkey{}, err
	}
	row := &passkeyRow{UserID: u.ID, CredentialID: base64.RawURLEncoding.EncodeToString(cred.ID), Name: name, Credential: string(raw), CreatedAt: s.now()}
	err = s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if _, err := writableUser(ctx, tx, u.ID); err != nil {
			return err
		}
		res, err := tx.NewInsert().Model(row).On("CONFLICT DO NOTHING").Returning("id").Exec(ctx)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return ErrPasskeyInvalid // the credential is registered already
		}
		return nil
	})
	if err != nil {
		return Passkey{}, fmt.Errorf("accounts: register passkey: %w", err)
	}
	return row.passkey(), nil
}

// RenamePasskey renames userID's passkey id. ErrNotFound when userID has
// no such passkey (also when it is another account's).
func (s *SecondFactors) RenamePasskey(ctx context.Context, userID, id int64, name string) error {
	name, err := cleanPasskeyName(name)
	if err != nil {
		return err
	}
	res, err := s.store.DB.NewUpdate().Model((*passkeyRow)(nil)).Set("name = ?", name).
		Where("id = ? AND user_id = ?", id, userID).Exec(ctx)
	if err != nil {
		return fmt.Errorf("accounts: rename passkey: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return ErrNotFound
	}
	return nil
}

// RemovePasskey deletes userID's passkey id. ErrNotFound when userID has
// no such passkey (also when it is another account's). Like every removal
// of a factor, it ends every browser session and OAuth grant issued before
// it; recovery codes go when no second factor remains.
func (s *SecondFactors) RemovePasskey(ctx context.Context, userID, id int64) error {
	defer s.callerChanged(ctx, userID) // cached callers of revoked tokens
	err := s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		res, err := tx.NewDelete().Model((*passkeyRow)(nil)).Where("id = ? AND user_id = ?", id, userID).Exec(ctx)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return ErrNotFound
		}
		var left int
		if err := tx.NewRaw(`SELECT (SELECT COUNT(*) FROM user_totp WHERE user_id = ? AND confirmed_at IS NOT NULL)
			+ (SELECT COUNT(*) FROM user_passkeys WHERE user_id = ?)`, userID, userID).Scan(ctx, &left); err != nil {
			return err
		}
		if left == 0 {
			if _, err := tx.NewDelete().Model((*recoveryCodeRow)(nil)).Where("user_id = ?", userID).Exec(ctx); err != nil {
				return err
			}
		}
		return s.revokeCredentialsInTx(ctx, tx, userID)
	})
	if err != nil {
		return fmt.Errorf("accounts: remove passkey: %w", err)
	}
	return nil
}

// BeginPasskeyLogin starts a sign-in with a passkey instead of a password:
// the browser offers the person the discoverable passkeys it holds for
// this site, and user verification is required.
func (s *SecondFactors) BeginPasskeyLogin(ctx context.Context) (PasskeyCeremony, error) {
	wa, err := s.relyingParty()
	if err != nil {
		return PasskeyCeremony{}, err
	}
	assertion, session, err := wa.BeginDiscoverableLogin(webauthn.WithUserVerification(protocol.VerificationRequired))
	if err != nil {
		return PasskeyCeremony{}, fmt.Errorf("accounts: begin passkey login: %w", err)
	}
	return s.storeCeremony(ctx, nil, purposePasskeyLogin, assertion, session)
}

// FinishPasskeyLogin checks the browser's answer to the sign-in started
// with token and returns the account whose passkey signed it. It returns
// ErrPasskeyInvalid when anything does not verify, and the account-state
// errors of Login (ErrSuspended; ErrDeleting: a passkey does not resume a
// deletion, the password does).
func (s *SecondFactors) FinishPasskeyLogin(ctx context.Context, token string, response []byte) (User, error) {
	if len(response) > maxCredentialJSONLength {
		return User{}, ErrPasskeyInvalid
	}
	wa, err := s.relyingParty()
	if err != nil {
		return User{}, err
	}
	session, err := s.takeCeremony(ctx, token, purposePasskeyLogin, 0)
	if err != nil {
		return User{}, fmt.Errorf("accounts: passkey login: %w", err)
	}
	parsed, err := protocol.ParseCredentialRequestResponseBytes(response)
	if err != nil {
		return User{}, fmt.Errorf("accounts: passkey login: %w", ErrPasskeyInvalid)
	}
	var found waUser
	cred, err := wa.ValidateDiscoverableLogin(func(rawID, handle []byte) (webauthn.User, error) {
		u, err := s.identity.UserByStableID(ctx, stableIDOfHandle(handle))
		if err != nil {
			return nil, err
		}
		if found, err = s.waUserOf(ctx, u); err != nil {
			return nil, err
		}
		return found, nil
	}, session, parsed)
	if err != nil || found.u.ID == 0 {
		s.cfg.Logger.InfoContext(ctx, "accounts: passkey login refused", "error", err)
		return User{}, fmt.Errorf("accounts: passkey login: %w", ErrPasskeyInvalid)
	}
	return s.passkeyUsed(ctx, found.u, cred)
}

// passkeyUsed records a successful assertion (sign count, last use) and
// checks the account may sign in.
func (s *SecondFactors) passkeyUsed(ctx context.Context, u User, cred *webauthn.Credential) (User, error) {
	if cred.Authenticator.CloneWarning {
		s.cfg.Logger.WarnContext(ctx, "accounts: passkey sign count went backwards (cloned authenticator?)", "user_id", u.ID)
		return User{}, ErrPasskeyInvalid
	}
	raw, err := json.Marshal(cred)
	if err != nil {
		return User{}, err
	}
	res, err := s.store.DB.NewUpdate().Model((*passkeyRow)(nil)).Set("credential = ?", string(raw)).Set("last_used_at = ?", s.now()).
		Where("user_id = ? AND credential_id = ?", u.ID, base64.RawURLEncoding.EncodeToString(cred.ID)).Exec(ctx)
	if err != nil {
		return User{}, err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return User{}, ErrPasskeyInvalid
	}
	fresh, err := s.identity.UserByID(ctx, u.ID)
	if err != nil {
		return User{}, ErrPasskeyInvalid
	}
	if fresh.SuspendedAt != nil {
		return User{}, ErrSuspended
	}
	if fresh.DeletingAt != nil {
		return User{}, ErrDeleting
	}
	return fresh, nil
}

// BeginPendingPasskey starts the passkey step of the pending sign-in
// token: an assertion limited to that account's passkeys.
func (s *SecondFactors) BeginPendingPasskey(ctx context.Context, token string) (PasskeyCeremony, error) {
	p, err := s.PeekPendingLogin(ctx, token)
	if err != nil {
		return PasskeyCeremony{}, err
	}
	wa, err := s.relyingParty()
	if err != nil {
		return PasskeyCeremony{}, err
	}
	w, err := s.waUserOf(ctx, p.User)
	if err != nil {
		return PasskeyCeremony{}, err
	}
	if len(w.creds) == 0 {
		return PasskeyCeremony{}, ErrPasskeyInvalid
	}
	assertion, session, err := wa.BeginLogin(w, webauthn.WithUserVerification(protocol.VerificationPreferred))
	if err != nil {
		return PasskeyCeremony{}, fmt.Errorf("accounts: begin passkey step: %w", err)
	}
	return s.storeCeremony(ctx, &p.User.ID, purposePasskeyLogin, assertion, session)
}

// CompletePendingLoginPasskey finishes the pending sign-in token with the
// passkey assertion of the ceremony ceremonyToken (BeginPendingPasskey).
func (s *SecondFactors) CompletePendingLoginPasskey(ctx context.Context, token, ceremonyToken string, response []byte) (PendingLogin, error) {
	p, row, err := s.attemptPending(ctx, token)
	if err != nil {
		return PendingLogin{}, err
	}
	if len(response) > maxCredentialJSONLength {
		return PendingLogin{}, ErrPasskeyInvalid
	}
	wa, err := s.relyingParty()
	if err != nil {
		return PendingLogin{}, err
	}
	session, err := s.takeCeremony(ctx, ceremonyToken, purposePasskeyLogin, p.User.ID)
	if err != nil {
		return PendingLogin{}, fmt.Errorf("accounts: passkey step: %w", err)
	}
	parsed, err := protocol.ParseCredentialRequestResponseBytes(response)
	if err != nil {
		return PendingLogin{}, fmt.Errorf("accounts: passkey step: %w", ErrPasskeyInvalid)
	}
	w, err := s.waUserOf(ctx, p.User)
	if err != nil {
		return PendingLogin{}, err
	}
	cred, err := wa.ValidateLogin(w, session, parsed)
	if err != nil {
		return PendingLogin{}, fmt.Errorf("accounts: passkey step: %w", ErrPasskeyInvalid)
	}
	if _, err := s.passkeyUsed(ctx, p.User, cred); err != nil {
		return PendingLogin{}, err
	}
	return s.finishPending(ctx, row, p)
}
