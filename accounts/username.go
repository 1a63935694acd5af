package accounts

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/uptrace/bun"
)

var usernamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{1,30}[a-z0-9]$`)

// NormalizeUsername trims and lowercases a username and checks its shape:
// 3–32 lowercase letters, digits and hyphens, a letter or digit at both
// ends. It does not check the reserved list.
func NormalizeUsername(s string) (string, error) {
	u := strings.ToLower(strings.TrimSpace(s))
	if !usernamePattern.MatchString(u) {
		return "", ErrInvalidUsername
	}
	return u, nil
}

// BuiltinReservedUsernames is the built-in reserved list: names that could
// impersonate the service, its operators or its infrastructure, or that
// collide with well-known mailbox and host labels. Config.ReservedUsernames
// and run-time reservations add to it; run-time releases remove from it,
// except for the permanent ones (PermanentReservedUsernames).
func BuiltinReservedUsernames() []string {
	return []string{
		"abuse", "account", "accounts", "admin", "administrator", "api", "app", "apps",
		"auth", "autoconfig", "autodiscover", "billing", "blog", "cdn", "dashboard", "dev",
		"docs", "download", "email", "enclave", "faq", "ftp", "help", "hostmaster", "imap",
		"info", "isatap", "legal", "localhost", "login", "logout", "mail", "mailer-daemon",
		"mcp", "me", "moderator", "mta-sts", "news", "noc", "no-reply", "noreply", "null",
		"oauth", "operator", "owner", "password", "pop", "pop3", "postmaster", "privacy",
		"register", "root", "security", "settings", "signin", "signout", "signup", "smtp",
		"staff", "static", "status", "support", "sysadmin", "system", "team", "terms",
		"test", "undefined", "user", "users", "webmaster", "well-known", "wpad", "www",
	}
}

// PermanentReservedUsernames are the names no run-time release frees:
// the mailbox names mail standards give a role (RFC 2142 and its kin),
// the ones that speak for the operator, and the service's own name. A
// claim is refused when it equals one of them (compared compact, see
// compact, digits aside too: "noreply2"), when one of its words (runs of
// letters, or several of them joined: "admin-team", "admin1",
// "ad-min-team") is one of PermanentReservedWords, or when it contains a
// brand root anywhere (BrandRoots: "myenclave").
func PermanentReservedUsernames() []string {
	return []string{
		"abuse", "admin", "administrator", "enclave", "hostmaster", "mailer-daemon", "moderator",
		"no-reply", "noc", "noreply", "official", "operator", "postmaster", "root", "security",
		"staff", "support", "sysadmin", "system", "webmaster",
	}
}

// PermanentReservedWords are the words no username may have as one of its
// hyphen-separated parts: a name built of them ("support-team",
// "security-desk") reads as the operator's.
func PermanentReservedWords() []string {
	return []string{"abuse", "admin", "administrator", "hostmaster", "moderator", "official", "postmaster", "security", "staff", "support", "sysadmin", "webmaster"}
}

// BrandRoots are the names of the service that no username may contain at
// all: "enclave" and Config.BrandNames.
func (s *Identity) BrandRoots() []string {
	roots := []string{"enclave"}
	for _, b := range s.cfg.BrandNames {
		// Only letters and digits: "Acme Brand" is the root "acmebrand".
		c := strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
				return r
			}
			return -1
		}, strings.ToLower(b))
		if len(c) >= 3 && !slices.Contains(roots, c) {
			roots = append(roots, c)
		}
	}
	return roots
}

// permanent reports whether username is reserved whatever the run-time
// list says (see PermanentReservedUsernames).
func (s *core) permanent(username string) bool {
	c := compact(username)
	// Digits aside too: "noreply2", "root-1" and "sys1tem" read as the
	// names they contain.
	l := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return -1
		}
		return r
	}, c)
	for _, n := range PermanentReservedUsernames() {
		if c == compact(n) || l == compact(n) {
			return true
		}
	}
	// The words of a name are its runs of letters (hyphens and digits
	// separate them: "admin1-desk" has "admin"), and a word split by
	// hyphens or digits is still that word: every run of consecutive
	// pieces is compared ("ad-min-team", "team-sup-port").
	pieces := strings.FieldsFunc(strings.ToLower(username), func(r rune) bool { return r < 'a' || r > 'z' })
	words := PermanentReservedWords()
	for i := range pieces {
		w := ""
		for _, p := range pieces[i:] {
			if w += p; len(w) > len("administrator") {
				break
			}
			if slices.Contains(words, w) {
				return true
			}
		}
	}
	for _, root := range s.identity.BrandRoots() {
		if strings.Contains(c, root) || strings.Contains(l, root) {
			return true
		}
	}
	return false
}

// compact is the matching form of a name: lowercase, without hyphens and
// underscores, so "ad-min" and "ad_min" match "admin".
func compact(s string) string {
	return strings.NewReplacer("-", "", "_", "").Replace(strings.ToLower(strings.TrimSpace(s)))
}

// reservedUsername is one operator change to the reserved list.
type reservedUsername struct {
	bun.BaseModel `bun:"table:reserved_usernames"`
	Name          string    `bun:"name,pk"`
	Action        string    `bun:"action,notnull"` // "reserve" or "release"
	CreatedAt     time.Time `bun:"created_at,notnull"`
}

// ReservedUsernames returns the effective reserved list, sorted: the
// built-in names and Config.ReservedUsernames, plus names reserved at run
// time, minus names released at run time.
func (s *Identity) ReservedUsernames(ctx context.Context) ([]string, error) {
	return s.reservedUsernames(ctx, s.store.Reader)
}

func (s *core) reservedUsernames(ctx context.Context, db bun.IDB) ([]string, error) {
	var changes []reservedUsername
	if err := db.NewSelect().Model(&changes).Scan(ctx); err != nil {
		return nil, fmt.Errorf("accounts: read reserved usernames: %w", err)
	}
	set := make(map[string]bool)
	for _, n := range BuiltinReservedUsernames() {
		set[n] = true
	}
	for _, n := range s.cfg.ReservedUsernames {
		set[strings.ToLower(strings.TrimSpace(n))] = true
	}
	for _, c := range changes {
		set[c.Name] = c.Action == "reserve"
	}
	var out []string
	for n, reserved := range set {
		if reserved && n != "" {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// isReserved reports whether username is permanently reserved (see
// PermanentReservedUsernames) or matches a token of the effective reserved
// list: equal to it, or equal once hyphens and underscores are removed
// from both. It fails closed: a read error refuses the claim.
func (s *core) isReserved(ctx context.Context, db bun.IDB, username string) (bool, error) {
	if s.permanent(username) {
		return true, nil
	}
	tokens, err := s.reservedUsernames(ctx, db)
	if err != nil {
		return true, err
	}
	c := compact(username)
	for _, t := range tokens {
		if username == t || c == compact(t) {
			return true, nil
		}
	}
	return false, nil
}

// ReserveUsername adds name to the reserved list at run time. Existing
// accounts keep the name if they already hold it.
func (s *Identity) ReserveUsername(ctx context.Context, name string) error {
	return s.changeReserved(ctx, name, "reserve")
}

// ReleaseUsername removes name from the reserved list at run time (also a
// built-in name), so accounts can claim it. A permanently reserved name
// (PermanentReservedUsernames, PermanentReservedWords, BrandRoots) is not
// released: ErrUsernamePermanent.
func (s *Identity) ReleaseUsername(ctx context.Context, name string) error {
	if s.permanent(strings.TrimSpace(name)) {
		return ErrUsernamePermanent
	}
	return s.changeReserved(ctx, name, "release")
}

func (s *Identity) changeReserved(ctx context.Context, name, action string) error {
	n := strings.ToLower(strings.TrimSpace(name))
	if n == "" || len(n) > 64 {
		return fmt.Errorf("accounts: %s username: %w", action, ErrInvalidUsername)
	}
	row := &reservedUsername{Name: n, Action: action, CreatedAt: s.now()}
	if _, err := s.store.DB.NewInsert().Model(row).
		On("CONFLICT (name) DO UPDATE").Set("action = EXCLUDED.action, created_at = EXCLUDED.created_at").
		Returning("NULL").Exec(ctx); err != nil {
		return fmt.Errorf("accounts: %s username: %w", action, err)
	}
	return nil
}
