package accounts

import (
	"log/slog"
	"runtime"
	"time"
)

// Config tunes the account service. Every zero value means the documented
// default.
type Config struct {
	// Signup says who may open an account through Signup: SignupOpen
	// (default), SignupInvite or SignupClosed.
	Signup SignupMode

	// Argon2 sets the password-hashing cost. Zero fields take the defaults
	// of DefaultArgon2.
	Argon2 Argon2Params

	// MaxConcurrentHashes bounds how many password hashes run at once, and so
	// the memory they take (each holds Argon2.MemoryKiB). Further logins
	// wait their turn. Default GOMAXPROCS.
	MaxConcurrentHashes int

	// MinPasswordLength is the shortest new password accepted, in
	// characters. Default 12. New passwords are also limited to
	// MaxPasswordBytes and may not equal the account's email or username.
	// Login never re-checks the policy, so raising it locks nobody out.
	MinPasswordLength int

	// SessionLifetime is how long a session cookie is valid. Default 7 days.
	SessionLifetime time.Duration
	// RememberMeLifetime is the lifetime of a remember-me session. Default
	// 30 days.
	RememberMeLifetime time.Duration

	// SessionKeys, when set, are the session signing keys (each at least 32
	// bytes): the first signs, all verify. Rotate by prepending a new key
	// and dropping a key once RememberMeLifetime has passed since it last
	// signed. When empty, keys are generated, encrypted with the store's
	// secrets keeper and kept in SQL; RotateSessionKey rotates them.
	SessionKeys [][]byte

	// SecureCookies marks session cookies Secure and names them with the
	// __Host- prefix even on requests that did not arrive over TLS (set it
	// when TLS ends at a proxy in front of the server). Requests with TLS
	// always get secure cookies.
	SecureCookies bool

	// ReservedUsernames are added to the built-in reserved list
	// (BuiltinReservedUsernames). Operators can also reserve and release
	// names at run time (ReserveUsername, ReleaseUsername), stored in SQL.
	ReservedUsernames []string
	// BrandNames are names of the service (its site name, its company)
	// that no username may contain, besides "enclave": a claim containing
	// one anywhere, hyphens and underscores aside, is refused, and no
	// release frees it.
	BrandNames []string

	// UsernameChangeCooldown is how long an account holder waits between
	// two changes of their own username (ChangeOwnUsername). Default 7
	// days; negative: no wait. It also bounds how many names one account
	// holds at a time (UsernameHold / UsernameChangeCooldown).
	UsernameChangeCooldown time.Duration
	// UsernameHold is how long a username its holder gave up stays held
	// for them: nobody else can claim it (and pass for them), they may take
	// it back. Default 30 days; negative: freed at once.
	UsernameHold time.Duration

	// PasswordSetupTTL is how long a password-setup link (for an account
	// created without a password) stays valid. Default 72 hours.
	PasswordSetupTTL time.Duration
	// PasswordResetTTL is how long a password-reset link stays valid.
	// Default 1 hour.
	PasswordResetTTL time.Duration

	// RequireAdminSecondFactor makes a second factor (an authenticator app
	// or a passkey) a condition of acting as an admin: admin capabilities
	// refuse an admin without one (capabilities.CodeSecondFactorRequired,
	// naming the enrolment page), and the web shell sends such an admin to
	// enrolment before any admin page answers. Default off.
	RequireAdminSecondFactor bool

	// Passkeys is the WebAuthn relying party. Default: RPID "localhost",
	// origin "http://localhost:8080", name "enclave"; enclave.New derives
	// it from the base URL.
	Passkeys PasskeyConfig

	// Logger receives warnings (for example a failed role lookup). Default
	// slog.Default().
	Logger *slog.Logger

	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// PasskeyConfig names the WebAuthn relying party.
type PasskeyConfig struct {
	// RPID is the relying party id: the host name of the site (no scheme,
	// no port). Passkeys work only on this host and its subdomains.
	RPID string
	// Origins are the exact origins (scheme://host[:port]) pages run on.
	Origins []string
	// RPName is the name authenticators show.
	RPName string
}

// Defaults.
const (
	DefaultMinPasswordLength  = 12
	MaxPasswordBytes          = 1024
	DefaultSessionLifetime    = 7 * 24 * time.Hour
	DefaultRememberMeLifetime = 30 * 24 * time.Hour
	DefaultPasswordSetupTTL   = 72 * time.Hour
	DefaultPasswordResetTTL   = time.Hour

	DefaultUsernameChangeCooldown = 7 * 24 * time.Hour
	DefaultUsernameHold           = 30 * 24 * time.Hour
)

func (c Config) withDefaults() Config {
	c.Argon2 = c.Argon2.withDefaults()
	if c.MaxConcurrentHashes <= 0 {
		c.MaxConcurrentHashes = runtime.GOMAXPROCS(0)
	}
	if c.MinPasswordLength <= 0 {
		c.MinPasswordLength = DefaultMinPasswordLength
	}
	if c.SessionLifetime <= 0 {
		c.SessionLifetime = DefaultSessionLifetime
	}
	if c.RememberMeLifetime <= 0 {
		c.RememberMeLifetime = DefaultRememberMeLifetime
	}
	if c.PasswordSetupTTL <= 0 {
		c.PasswordSetupTTL = DefaultPasswordSetupTTL
	}
	if c.PasswordResetTTL <= 0 {
		c.PasswordResetTTL = DefaultPasswordResetTTL
	}
	if c.UsernameChangeCooldown == 0 {
		c.UsernameChangeCooldown = DefaultUsernameChangeCooldown
	}
	if c.UsernameHold == 0 {
		c.UsernameHold = DefaultUsernameHold
	}
	if c.Passkeys.RPID == "" {
		c.Passkeys.RPID = "localhost"
	}
	if len(c.Passkeys.Origins) == 0 {
		c.Passkeys.Origins = []string{"http://localhost:8080"}
	}
	if c.Passkeys.RPName == "" {
		c.Passkeys.RPName = "enclave"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}
