package e2e

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pquerna/otp/totp"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/storage"
)

// probeCapability needs the role user; it answers with nothing.
func probeCapability() capabilities.Capability {
	return capabilities.Define(capabilities.Spec[struct{}, struct{}]{
		Name: "probe", Domain: "probe", Description: "needs the user role",
		Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
		Requires:    capabilities.Requirement{Role: capabilities.RoleUser},
		Handler:     func(context.Context, *capabilities.Call, struct{}) (struct{}, error) { return struct{}{}, nil },
	})
}

func startCached(t *testing.T, d storage.Dialect, cfg enclave.Config) *enclavetest.Server {
	t.Helper()
	return enclavetest.Start(t, enclavetest.Options{Dialect: d, Config: cfg, Setup: func(srv *enclave.Server) error {
		return srv.Registry().Register(probeCapability())
	}})
}

// callOK reports whether tools/call probe succeeded; a refusal is false
// and a nil error, a transport failure an error.
func callOK(c *enclavetest.Client) (bool, error) {
	res, err := c.Call("probe", nil)
	if rpcErr := (*enclavetest.RPCError)(nil); errors.As(err, &rpcErr) {
		return false, nil // refused (a hidden tool is an unknown one)
	}
	if err != nil {
		return false, err
	}
	return !res.IsError, nil
}

// A verified token's caller is served from the cache (no bearer check on
// the next call), and every change it depends on drops it on this replica
// before the change returns: the next call runs the bearer check again and
// sees the change.
func TestCallerCacheDroppedByEveryChange(t *testing.T) {
	ctx := context.Background()
	for _, d := range enclavetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			s := startCached(t, d, enclave.Config{})
			for _, tc := range []struct {
				name   string
				change func(u *enclavetest.User) error
			}{
				{"role removed", func(u *enclavetest.User) error {
					_, err := s.Accounts().Roles.RemoveRole(ctx, u.ID, capabilities.RoleUser)
					return err
				}},
				{"role assigned", func(u *enclavetest.User) error {
					_, err := s.Accounts().Roles.GrantAdminAsOperator(ctx, u.ID)
					return err
				}},
				{"suspended", func(u *enclavetest.User) error { _, err := s.Accounts().Lifecycle.Suspend(ctx, u.ID); return err }},
				{"marked deleting", func(u *enclavetest.User) error { _, err := s.Accounts().Lifecycle.MarkDeleting(ctx, u.ID); return err }},
				{"password changed", func(u *enclavetest.User) error {
					_, err := s.Accounts().Credentials.ChangePassword(ctx, u.ID, u.Password, "another long password 123")
					return err
				}},
				{"email changed", func(u *enclavetest.User) error {
					_, err := s.Accounts().Identity.ChangeEmail(ctx, u.ID, "new-"+u.Email)
					return err
				}},
				{"username changed", func(u *enclavetest.User) error {
					_, err := s.Accounts().Identity.ChangeUsername(ctx, u.ID, u.Username+"x")
					return err
				}},
				{"every grant revoked", func(u *enclavetest.User) error { return s.OAuth().RevokeAll(ctx, u.ID) }},
				{"one grant revoked", func(u *enclavetest.User) error {
					gs, err := s.OAuth().Grants(ctx, u.ID)
					if err != nil || len(gs) != 1 {
						return errors.Join(err, errors.New("want one grant"))
					}
					return s.OAuth().RevokeGrant(ctx, u.ID, gs[0].ID)
				}},
				{"client blocked", func(u *enclavetest.User) error {
					gs, err := s.OAuth().Grants(ctx, u.ID)
					if err != nil || len(gs) != 1 {
						return errors.Join(err, errors.New("want one grant"))
					}
					_, err = s.OAuth().SetClientBlocked(ctx, gs[0].ClientID, true)
					return err
				}},
			} {
				t.Run(tc.name, func(t *testing.T) { assertChangeDropsCache(t, s, tc.name, tc.change) })
			}
		})
	}
}

// assertChangeDropsCache caches a new user's verified token, makes change,
// and fails when the next call is still served from the cache.
func assertChangeDropsCache(t *testing.T, s *enclavetest.Server, label string, change func(u *enclavetest.User) error) {
	t.Helper()
	checks := s.OAuth().BearerChecks
	name := strings.ReplaceAll(label, " ", "")
	if len(name) > 12 {
		name = name[:12]
	}
	u := s.CreateUser(t, name)
	c := u.MCP(t)
	if ok, err := callOK(c); !ok || err != nil {
		t.Fatalf("first call: %v %v", ok, err)
	}
	before := checks()
	for range 3 {
		if ok, err := callOK(c); !ok || err != nil {
			t.Fatalf("cached call: %v %v", ok, err)
		}
	}
	if n := checks() - before; n != 0 {
		t.Fatalf("%d bearer checks for three calls of a verified token: not cached", n)
	}
	if err := change(u); err != nil {
		t.Fatal(err)
	}
	_, _ = callOK(c)
	if checks() == before {
		t.Fatal("the call after the change was served from the cache")
	}
}

// Turning a second factor off or making new recovery codes ends every
// grant, as a password change does: the cache must not keep serving them.
// (A server of its own: each user's sign-in counts in the credential limit.)
func TestCallerCacheDroppedByFactorChanges(t *testing.T) {
	ctx := context.Background()
	for _, d := range enclavetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			s := startCached(t, d, enclave.Config{})
			t.Run("totp turned off", func(t *testing.T) {
				assertChangeDropsCache(t, s, "totpoff", func(u *enclavetest.User) error {
					acct, codes, err := enrolTOTP(ctx, s, u)
					if err != nil {
						return err
					}
					return s.Accounts().SecondFactors.DisableTOTP(ctx, acct, u.Password, codes[0])
				})
			})
			t.Run("recovery codes reset", func(t *testing.T) {
				assertChangeDropsCache(t, s, "recovery", func(u *enclavetest.User) error {
					acct, codes, err := enrolTOTP(ctx, s, u)
					if err != nil {
						return err
					}
					_, err = s.Accounts().SecondFactors.RegenerateRecoveryCodes(ctx, acct, u.Password, accounts.FactorProof{Code: codes[0]})
					return err
				})
			})
		})
	}
}

// The role a capability needs is revoked: the very next call is refused,
// and a role granted is usable at the next call.
func TestCallerCacheRoleRevokedRefusedAtNextCall(t *testing.T) {
	ctx := context.Background()
	for _, d := range enclavetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			s := startCached(t, d, enclave.Config{})
			// Her agent's token carries the admin scope (granted while she
			// was an admin), so the admin role alone decides below.
			s.CreateUser(t, "oscar", capabilities.RoleAdmin)
			u := s.CreateUser(t, "rita", capabilities.RoleAdmin)
			c := u.MCP(t)
			if _, err := s.Accounts().Roles.RevokeAdminAsOperator(ctx, u.ID); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if ok, err := callOK(c); !ok || err != nil {
					t.Fatalf("call with the role: %v %v", ok, err)
				}
			}
			if _, err := s.Accounts().Roles.RemoveRole(ctx, u.ID, capabilities.RoleUser); err != nil {
				t.Fatal(err)
			}
			if ok, _ := callOK(c); ok {
				t.Fatal("the call right after the role was revoked succeeded")
			}
			tools, err := c.Tools()
			if err != nil || slices.Contains(tools, "adminFeatureSet") {
				t.Fatalf("tools before admin: %v %v", tools, err)
			}
			if _, err := s.Accounts().Roles.GrantAdminAsOperator(ctx, u.ID); err != nil {
				t.Fatal(err)
			}
			if tools, err := c.Tools(); err != nil || !slices.Contains(tools, "adminFeatureSet") {
				t.Fatalf("the role granted is not seen at the next call: %v %v", tools, err)
			}
		})
	}
}

// With the cache off every call runs the bearer check.
func TestCallerCacheOff(t *testing.T) {
	s := startCached(t, "", enclave.Config{CallerCacheTTL: -1})
	c := s.CreateUser(t, "otto").MCP(t)
	before := s.OAuth().BearerChecks()
	for range 3 {
		if ok, err := callOK(c); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	if n := s.OAuth().BearerChecks() - before; n != 3 {
		t.Fatalf("%d bearer checks for three calls with the cache off", n)
	}
}

// The cache's counters reach /metrics.
func TestCallerCacheMetrics(t *testing.T) {
	s := startCached(t, storage.SQLite, enclave.Config{})
	c := s.CreateUser(t, "mona").MCP(t)
	for range 3 {
		if ok, err := callOK(c); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	rec := httptest.NewRecorder()
	s.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	for _, m := range []string{"enclave_caller_cache_hits_total", "enclave_caller_cache_misses_total", "enclave_caller_cache_invalidations_total", "enclave_caller_cache_entries"} {
		if !strings.Contains(body, m+" ") {
			t.Errorf("%s missing from /metrics", m)
		}
	}
	if strings.Contains(body, "enclave_caller_cache_hits_total 0\n") {
		t.Error("no cache hits counted after repeated calls")
	}
}

// enrolTOTP turns on an authenticator app for u (no tokens are revoked by
// enrolment) and returns the account and its recovery codes.
func enrolTOTP(ctx context.Context, s *enclavetest.Server, u *enclavetest.User) (accounts.User, []string, error) {
	acct, err := s.Accounts().Identity.UserByID(ctx, u.ID)
	if err != nil {
		return acct, nil, err
	}
	e, err := s.Accounts().SecondFactors.BeginTOTP(ctx, acct, "enclave")
	if err != nil {
		return acct, nil, err
	}
	code, err := totp.GenerateCode(e.Secret, time.Now())
	if err != nil {
		return acct, nil, err
	}
	codes, err := s.Accounts().SecondFactors.ConfirmTOTP(ctx, acct, code)
	return acct, codes, err
}
