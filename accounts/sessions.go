package accounts

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/storage"
)

// Session cookie names: the __Host- form on secure connections (Secure,
// Path=/, no Domain, so no sibling host can set or shadow it), the plain
// form on plain-HTTP development servers.
const (
	SessionCookieName       = "enclave_session"
	SecureSessionCookieName = "__Host-enclave_session"
)

// Session is a verified session cookie.
type Session struct {
	User       User
	IssuedAt   time.Time
	ExpiresAt  time.Time
	RememberMe bool
}

// sessionVersion prefixes every cookie value; the MAC also covers a
// purpose label, so no other HMAC made with these keys verifies as a
// session.
const (
	sessionVersion = "s1"
	sessionPurpose = "enclave/session/v1\x00"
)

// secure reports whether cookies for r must be secure.
func (s *Credentials) secure(r *http.Request) bool {
	return s.cfg.SecureCookies || (r != nil && r.TLS != nil)
}

func (s *Credentials) cookieName(r *http.Request) string {
	if s.secure(r) {
		return SecureSessionCookieName
	}
	return SessionCookieName
}

// StartSession sets a session cookie for u on w: lifetime
// Config.SessionLifetime, or Config.RememberMeLifetime with rememberMe. The
// cookie is HttpOnly and SameSite=Lax; on secure requests it is Secure and
// __Host- prefixed. It refuses suspended and deleting accounts.
func (s *Credentials) StartSession(w http.ResponseWriter, r *http.Request, u User, rememberMe bool) (Session, error) {
	if err := u.CheckActive(); err != nil {
		return Session{}, fmt.Errorf("accounts: start session: %w", err)
	}
	return s.setSessionCookie(w, r, u, rememberMe)
}

// StartDeletingSession sets a session cookie for u, an account being
// deleted whose password was just checked (Login returns it with
// ErrDeleting). Authenticate answers such a session with ErrDeleting, which
// every path treats as signed out except the deletion page: the person can
// see that the deletion did not finish and retry it, and nothing else.
func (s *Credentials) StartDeletingSession(w http.ResponseWriter, r *http.Request, u User) (Session, error) {
	if u.State() != StateDeleting {
		return Session{}, fmt.Errorf("accounts: start deleting session: the account is %s", u.State())
	}
	if u.SuspendedAt != nil {
		return Session{}, fmt.Errorf("accounts: start deleting session: %w", ErrSuspended)
	}
	return s.setSessionCookie(w, r, u, false)
}

func (s *Credentials) setSessionCookie(w http.ResponseWriter, r *http.Request, u User, rememberMe bool) (Session, error) {
	sess, value, err := s.signSession(u, rememberMe)
	if err != nil {
		return Session{}, err
	}
	http.SetCookie(w, &http.Cookie{
		Name: s.cookieName(r), Value: value, Path: "/",
		Expires: sess.ExpiresAt, MaxAge: int(sess.ExpiresAt.Sub(s.now()).Seconds()),
		HttpOnly: true, Secure: s.secure(r), SameSite: http.SameSiteLaxMode,
	})
	return sess, nil
}

// EndSession clears the session cookie.
func (s *Credentials) EndSession(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{
		Name: s.cookieName(r), Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: s.secure(r), SameSite: http.SameSiteLaxMode,
	})
}

// signSession returns the session and the cookie value for u.
func (s *Credentials) signSession(u User, rememberMe bool) (Session, string, error) {
	issued := s.now()
	// A session must be issued strictly after the last password change to
	// be accepted; the clock may not have moved since that change.
	if u.PasswordChangedAt != nil && !issued.After(*u.PasswordChangedAt) {
		issued = u.PasswordChangedAt.Add(time.Microsecond)
	}
	kid, key := s.keys.signer()
	flag := "0"
	life := s.cfg.SessionLifetime
	if rememberMe {
		flag, life = "1", s.cfg.RememberMeLifetime
	}
	payload := strings.Join([]string{sessionVersion, kid, u.StableID, strconv.FormatInt(issued.UnixMicro(), 10), flag}, ".")
	value := payload + "." + base64.RawURLEncoding.EncodeToString(sessionMAC(key, payload))
	return Session{User: u, IssuedAt: issued, ExpiresAt: issued.Add(life), RememberMe: rememberMe}, value, nil
}

func sessionMAC(key []byte, payload string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(sessionPurpose))
	m.Write([]byte(payload))
	return m.Sum(nil)
}

// Authenticate returns the session of r's cookie. A cookie names the
// account by its stable id, which is never given to another account (also
// after deletion). It returns ErrNoSession when there is no cookie or it is
// forged, expired, issued before the account was created, or issued at or
// before the account's last password change; ErrSuspended, with the
// Session filled in, for a suspended account (also one being deleted:
// suspension wins), so that a caller can have the refusal decided and
// audited by Registry.Invoke for that account; and ErrDeleting, with
// the Session filled in, for an account being deleted (so the deletion flow can retry). Every path
// must treat either as signed out. Any other error is internal: fail closed.
func (s *Credentials) Authenticate(ctx context.Context, r *http.Request) (Session, error) {
	c, err := r.Cookie(s.cookieName(r))
	if err != nil {
		return Session{}, ErrNoSession
	}
	return s.VerifySession(ctx, c.Value)
}

// VerifySession checks a session cookie value; see Authenticate.
func (s *Credentials) VerifySession(ctx context.Context, value string) (Session, error) {
	parts := strings.Split(value, ".")
	if len(parts) != 6 || parts[0] != sessionVersion || len(value) > 512 {
		return Session{}, ErrNoSession
	}
	payload := strings.Join(parts[:5], ".")
	mac, err := base64.RawURLEncoding.DecodeString(parts[5])
	if err != nil {
		return Session{}, ErrNoSession
	}
	key, err := s.keys.verifier(ctx, parts[1])
	if err != nil {
		return Session{}, err
	}
	if key == nil || !hmac.Equal(mac, sessionMAC(key, payload)) {
		return Session{}, ErrNoSession
	}
	micros, err := strconv.ParseInt(parts[3], 10, 64)
	if err != nil || (parts[4] != "0" && parts[4] != "1") {
		return Session{}, ErrNoSession
	}
	sess := Session{IssuedAt: time.UnixMicro(micros).UTC(), RememberMe: parts[4] == "1"}
	life := s.cfg.SessionLifetime
	if sess.RememberMe {
		life = s.cfg.RememberMeLifetime
	}
	sess.ExpiresAt = sess.IssuedAt.Add(life)
	now := s.now()
	if !now.Before(sess.ExpiresAt) || sess.IssuedAt.After(now.Add(time.Minute)) {
		return Session{}, ErrNoSession
	}
	sess.User, err = s.identity.UserByStableID(ctx, parts[2])
	if errors.Is(err, ErrNotFound) {
		return Session{}, ErrNoSession
	}
	if err != nil {
		return Session{}, fmt.Errorf("accounts: verify session: %w", err)
	}
	if pc := sess.User.PasswordChangedAt; pc != nil && !sess.IssuedAt.After(*pc) {
		return Session{}, ErrNoSession
	}
	// Identities are never reused, so a cookie naming this account's id was
	// issued to it; one issued before the account existed was forged or
	// minted for an id this account must not inherit.
	if sess.IssuedAt.Before(sess.User.CreatedAt) {
		return Session{}, ErrNoSession
	}
	// Suspension wins over deletion: a suspended account's session works
	// nowhere, the page that finishes a deletion included.
	if sess.User.SuspendedAt != nil {
		return sess, ErrSuspended
	}
	if sess.User.State() == StateDeleting {
		return sess, ErrDeleting
	}
	return sess, nil
}

// sessionKey is a stored signing key, encrypted by the keeper.
type sessionKey struct {
	bun.BaseModel `bun:"table:session_keys"`
	ID            string     `bun:"id,pk"`
	Ciphertext    string     `bun:"ciphertext,notnull"`
	CreatedAt     time.Time  `bun:"created_at,notnull"`
	RetiredAt     *time.Time `bun:"retired_at"`
}

// keyRing holds the session signing keys.
type keyRing struct {
	store      *storage.Store
	cfg        Config
	fromConfig bool

	mu         sync.RWMutex
	keys       map[string][]byte
	signerID   string
	lastReload time.Time
}

// reloadEvery bounds how often an unknown key id (a key just made by
// another replica, or a forgery) triggers a reload from SQL: often enough
// that a fresh key is picked up within a second, rarely enough that forged
// key ids cannot load the database.
const reloadEvery = time.Second

// storedKeyID is the shape of generated key ids.
var storedKeyID = regexp.MustCompile(`^k[0-9a-f]{16}$`)

func newKeyRing(ctx context.Context, store *storage.Store, cfg Config) (*keyRing, error) {
	kr := &keyRing{store: store, cfg: cfg, keys: map[string][]byte{}}
	if len(cfg.SessionKeys) > 0 {
		kr.fromConfig = true
		for i, k := range cfg.SessionKeys {
			if len(k) < 32 {
				return nil, fmt.Errorf("accounts: session key %d: want at least 32 bytes, have %d", i, len(k))
			}
			sum := sha256.Sum256(k)
			id := "c" + hex.EncodeToString(sum[:6])
			kr.keys[id] = slices.Clone(k)
			if i == 0 {
				kr.signerID = id
			}
		}
		return kr, nil
	}
	if err := kr.load(ctx); err != nil {
		return nil, err
	}
	if kr.signerID == "" {
		if err := kr.rotate(ctx, false); err != nil {
			return nil, err
		}
	}
	return kr, nil
}

// load reads and decrypts every stored key.
func (kr *keyRing) load(ctx context.Context) error {
	var rows []sessionKey
	if err := kr.store.Reader.NewSelect().Model(&rows).Order("created_at DESC", "id").Scan(ctx); err != nil {
		return fmt.Errorf("accounts: load session keys: %w", err)
	}
	keys := make(map[string][]byte, len(rows))
	signer := ""
	for _, r := range rows {
		ct, err := base64.StdEncoding.DecodeString(r.Ciphertext)
		if err != nil {
			return fmt.Errorf("accounts: session key %s: %w", r.ID, err)
		}
		k, err := kr.store.Keeper.Decrypt(ctx, ct)
		if err != nil {
			return fmt.Errorf("accounts: decrypt session key %s (was the keeper key changed?): %w", r.ID, err)
		}
		keys[r.ID] = k
		if signer == "" && r.RetiredAt == nil {
			signer = r.ID
		}
	}
	kr.mu.Lock()
	kr.keys, kr.signerID, kr.lastReload = keys, signer, kr.cfg.Now()
	kr.mu.Unlock()
	return nil
}

func (kr *keyRing) signer() (string, []byte) {
	kr.mu.RLock()
	defer kr.mu.RUnlock()
	return kr.signerID, kr.keys[kr.signerID]
}

// verifier returns the key with id, reloading from SQL (rate-limited) when
// it is unknown; nil when there is none.
func (kr *keyRing) verifier(ctx context.Context, id string) ([]byte, error) {
	kr.mu.RLock()
	k, ok := kr.keys[id]
	stale := kr.cfg.Now().Sub(kr.lastReload) > reloadEvery
	kr.mu.RUnlock()
	if ok || kr.fromConfig || !stale || !storedKeyID.MatchString(id) {
		return k, nil
	}
	if err := kr.load(ctx); err != nil {
		return nil, err
	}
	kr.mu.RLock()
	defer kr.mu.RUnlock()
	return kr.keys[id], nil
}

// rotate makes a new signing key. With retire, the current signer is
// retired (kept for verification) and keys retired longer ago than the
// longest session lifetime are deleted.
func (kr *keyRing) rotate(ctx context.Context, retire bool) error {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	ct, err := kr.store.Keeper.Encrypt(ctx, key)
	if err != nil {
		return fmt.Errorf("accounts: encrypt session key: %w", err)
	}
	idBytes := make([]byte, 8)
	_, _ = rand.Read(idBytes)
	now := kr.cfg.Now().UTC().Truncate(time.Microsecond)
	row := &sessionKey{ID: "k" + hex.EncodeToString(idBytes), Ciphertext: base64.StdEncoding.EncodeToString(ct), CreatedAt: now}
	err = kr.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if !retire {
			// Another replica may have created the first key meanwhile.
			if n, err := tx.NewSelect().Model((*sessionKey)(nil)).Where("retired_at IS NULL").Count(ctx); err != nil || n > 0 {
				return err
			}
		} else {
			if _, err := tx.NewUpdate().Model((*sessionKey)(nil)).Set("retired_at = ?", now).Where("retired_at IS NULL").Exec(ctx); err != nil {
				return err
			}
			var old []sessionKey
			if err := tx.NewSelect().Model(&old).Where("retired_at IS NOT NULL").Scan(ctx); err != nil {
				return err
			}
			maxLife := max(kr.cfg.SessionLifetime, kr.cfg.RememberMeLifetime)
			for _, o := range old {
				if now.Sub(*o.RetiredAt) > maxLife {
					if _, err := tx.NewDelete().Model(&o).WherePK().Exec(ctx); err != nil {
						return err
					}
				}
			}
		}
		_, err := tx.NewInsert().Model(row).Returning("NULL").Exec(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("accounts: rotate session key: %w", err)
	}
	return kr.load(ctx)
}

// RotateSessionKey makes a new session signing key. Cookies signed with
// earlier keys stay valid until they expire; keys older than every cookie
// they could have signed are deleted. Other replicas pick the new key up
// when they first see a cookie signed with it. It fails when the keys come
// from Config.SessionKeys (rotate them there).
func (s *Credentials) RotateSessionKey(ctx context.Context) error {
	if s.keys.fromConfig {
		return errors.New("accounts: rotate session key: keys come from Config.SessionKeys; rotate them there")
	}
	return s.keys.rotate(ctx, true)
}
