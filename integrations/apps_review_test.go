package integrations_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sync"

	"github.com/enclave-mcp/enclave/capabilities"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/integrations"
	"github.com/enclave-mcp/enclave/internal/envelope"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// Review (#31): a person's own app is a provider its owner chose, so it
// may be hostile. An app whose token endpoint hangs must not hold the
// refresh lane (every person's renewals): one tick waits for at most one
// of its owner's failing renewals, and a failed renewal waits before it
// is tried again instead of staying first in line at every tick.
func TestReviewAppHangingRefreshDoesNotStarveLane(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	hostile, honest := newFakeProvider(t), newFakeProvider(t)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })               // before the servers close
	hostile.ttl, honest.ttl = time.Minute, time.Minute // inside RefreshBefore: due at once
	ring, err := envelope.Open(t.Context(), s.DB, s.Keeper)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := integrations.New(integrations.Config{Options: integrations.Options{Providers: []integrations.Provider{provider(honest, false)}, AllowLoopbackHTTP: true},
		Store: s, Ring: ring, Owners: owners, BaseURL: "https://enclave.example", Logger: quiet(), Timeout: 150 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	mallory, bob := addUser(t, s, "mallory"), addUser(t, s, "bob")
	if _, err := svc.AddApp(t.Context(), ownerOf(mallory), appInput(hostile, "slow", false)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"s1", "s2", "s3", "s4"} {
		u, err := svc.StartApp(t.Context(), ownerOf(mallory), "slow", name, binding)
		if err != nil {
			t.Fatal(err)
		}
		q := authorizeApp(t, u, "slow")
		if _, err := svc.Finish(t.Context(), ownerOf(mallory), binding, integrations.Callback{App: "slow", State: q.Get("state"), Code: q.Get("code")}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(10 * time.Millisecond) // bob's renewal is due after mallory's
	u, err := svc.Start(t.Context(), ownerOf(bob), "acme", "", binding)
	if err != nil {
		t.Fatal(err)
	}
	q := honest.authorize(t, u)
	if _, err := svc.Finish(t.Context(), ownerOf(bob), binding, integrations.Callback{Provider: "acme", State: q.Get("state"), Code: q.Get("code")}); err != nil {
		t.Fatal(err)
	}
	first := honest.lastAccessToken()
	var hangs atomic.Int32
	hostile.tokenHook = func(http.ResponseWriter) bool {
		hangs.Add(1)
		select {
		case <-release:
		case <-time.After(3 * time.Second):
		}
		return true
	}
	integrations.SetRefreshDueBudget(t, 500*time.Millisecond)
	_, _ = svc.RefreshDue(t.Context(), 10)
	if honest.lastAccessToken() == first {
		t.Fatalf("bob's connection was not renewed: mallory's hanging app held the tick (%d calls to it)", hangs.Load())
	}
	if n := hangs.Load(); n != 1 {
		t.Fatalf("one tick called the hanging app %d times", n)
	}
	_, _ = svc.RefreshDue(t.Context(), 10)
	if n := hangs.Load(); n > 2 {
		t.Fatalf("the failed renewals were tried again at once: %d calls", n)
	}
}

// Review (#31): IPv4 addresses in the forms inet_aton (and so some
// resolvers and proxies) reads, octal, hexadecimal or with fewer than four
// parts, are not host names: an own app's endpoints and API hosts refuse
// them as they refuse 127.0.0.1.
func TestReviewAppNumericHosts(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	svc := newAppService(t, s, false, nil)
	alice := addUser(t, s, "alice")
	for _, h := range []string{"0177.0.0.1", "127.1", "0x7f.0.0.1", "0x7f000001.", "10.1", "169.254.43518", "0251.0376.0251.0376", "127.0.0.1.", "1.2.3.4.5"} {
		for field, in := range map[string]integrations.AppInput{
			"token URL": {Name: "mine", AuthURL: "https://auth.example.com/a", TokenURL: "https://" + h + "/token", ClientID: "c", APIHosts: []string{"api.example.com"}},
			"API host":  {Name: "mine", AuthURL: "https://auth.example.com/a", TokenURL: "https://auth.example.com/t", ClientID: "c", APIHosts: []string{h}},
		} {
			_, err := svc.AddApp(t.Context(), ownerOf(alice), in)
			var ce *capabilities.Error
			if !errors.As(err, &ce) || ce.Code != capabilities.CodeInvalidInput {
				t.Errorf("%s %q: %v", field, h, err)
			}
			if err == nil {
				_, _ = svc.RemoveApp(t.Context(), ownerOf(alice), "mine")
			}
		}
	}
	for _, h := range []string{"api.example.com", "1password.example.com", "api.0x7f.example.com"} {
		in := integrations.AppInput{Name: "ok", AuthURL: "https://auth.example.com/a", TokenURL: "https://" + h + "/t", ClientID: "c", APIHosts: []string{h}}
		if _, err := svc.AddApp(t.Context(), ownerOf(alice), in); err != nil {
			t.Errorf("%q: %v", h, err)
		}
		if _, err := svc.RemoveApp(t.Context(), ownerOf(alice), "ok"); err != nil {
			t.Fatal(err)
		}
	}
}

// Review (#31): an own app may issue tokens that expire at once
// (expires_in 1) so that its connections are always due first: renewed
// by the lane, such a connection is due again no sooner than
// MinRefreshInterval later, behind the renewals already due, and does not
// take every tick's places.
func TestReviewAppShortTokensDoNotStarveLane(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	hostile, honest := newFakeProvider(t), newFakeProvider(t)
	hostile.ttl, honest.ttl = time.Second, time.Minute // both inside RefreshBefore: due at once
	svc := newAppService(t, s, true, nil, provider(honest, false))
	mallory, bob := addUser(t, s, "mallory"), addUser(t, s, "bob")
	if _, err := svc.AddApp(t.Context(), ownerOf(mallory), appInput(hostile, "fast", false)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"f1", "f2", "f3"} {
		u, err := svc.StartApp(t.Context(), ownerOf(mallory), "fast", name, binding)
		if err != nil {
			t.Fatal(err)
		}
		q := authorizeApp(t, u, "fast")
		if _, err := svc.Finish(t.Context(), ownerOf(mallory), binding, integrations.Callback{App: "fast", State: q.Get("state"), Code: q.Get("code")}); err != nil {
			t.Fatal(err)
		}
	}
	u, err := svc.Start(t.Context(), ownerOf(bob), "acme", "", binding)
	if err != nil {
		t.Fatal(err)
	}
	q := honest.authorize(t, u)
	if _, err := svc.Finish(t.Context(), ownerOf(bob), binding, integrations.Callback{Provider: "acme", State: q.Get("state"), Code: q.Get("code")}); err != nil {
		t.Fatal(err)
	}
	first := honest.lastAccessToken()
	for tick := range 3 { // a lane with 3 places per tick
		if _, err := svc.RefreshDue(t.Context(), 3); err != nil {
			t.Fatalf("tick %d: %v", tick, err)
		}
	}
	if honest.lastAccessToken() == first {
		t.Fatal("bob's connection was never renewed: mallory's instantly expiring tokens took every tick's places")
	}
}

// Review (#31): concurrent additions hold the bound on a person's apps
// and answer a conflict (not an internal error) for a name taken
// meanwhile, on PostgreSQL too (whose transactions do not see each
// other's rows as SQLite's serial writes do).
func TestReviewAppConcurrentAdds(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		svc := newAppService(t, s, false, nil)
		alice := addUser(t, s, "alice")
		in := func(name string) integrations.AppInput {
			return integrations.AppInput{Name: name, AuthURL: "https://auth.example.com/a", TokenURL: "https://auth.example.com/t",
				ClientID: "c", ClientSecret: "s", APIHosts: []string{"api.example.com"}}
		}
		for i := range integrations.MaxApps - 2 {
			if _, err := svc.AddApp(t.Context(), ownerOf(alice), in(fmt.Sprint("a", i))); err != nil {
				t.Fatal(err)
			}
		}
		const n = 8
		var wg sync.WaitGroup
		errs := make([]error, 2*n)
		for i := range n {
			wg.Add(2)
			go func() { defer wg.Done(); _, errs[i] = svc.AddApp(t.Context(), ownerOf(alice), in("dup")) }()
			go func() {
				defer wg.Done()
				_, errs[n+i] = svc.AddApp(t.Context(), ownerOf(alice), in(fmt.Sprint("b", i)))
			}()
		}
		wg.Wait()
		ok := 0
		for i, err := range errs {
			var ce *capabilities.Error
			switch {
			case err == nil:
				ok++
			case !errors.As(err, &ce) || (ce.Code != capabilities.CodeConflict && ce.Code != capabilities.CodeInvalidInput):
				t.Errorf("add %d: %v", i, err)
			}
		}
		apps, err := svc.ListApps(t.Context(), ownerOf(alice))
		if err != nil {
			t.Fatal(err)
		}
		var total int
		if err := s.DB.NewSelect().Table("integration_apps").ColumnExpr("count(*)").Where("user_id = ?", alice.OwnerID).Scan(t.Context(), &total); err != nil {
			t.Fatal(err)
		}
		if ok != 2 || total != integrations.MaxApps || len(apps) != integrations.MaxApps {
			t.Fatalf("%d additions succeeded; %d apps kept (at most %d)", ok, total, integrations.MaxApps)
		}
	})
}

// Review (#31): local names written with several trailing dots, with
// percent-escapes, or outside ASCII (which the HTTP client maps with IDNA
// only when it sends: "a.ｉｎｔｅｒｎａｌ" is a.internal) are refused as own
// apps' endpoints; API hosts are normalized to ASCII first, then checked.
func TestReviewAppHostForms(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	svc := newAppService(t, s, false, nil)
	alice := addUser(t, s, "alice")
	add := func(in integrations.AppInput) error {
		_, err := svc.AddApp(t.Context(), ownerOf(alice), in)
		if err == nil {
			_, _ = svc.RemoveApp(t.Context(), ownerOf(alice), "mine")
		}
		return err
	}
	var ce *capabilities.Error
	for _, h := range []string{"metadata.google.internal..", "localhost..", "%6c%6fcalhost", "metadata.google.internal%2e", "a.ｉｎｔｅｒｎａｌ", "api.exämple.com"} {
		err := add(integrations.AppInput{Name: "mine", AuthURL: "https://auth.example.com/a", TokenURL: "https://" + h + "/token", ClientID: "c", APIHosts: []string{"api.example.com"}})
		if !errors.As(err, &ce) || ce.Code != capabilities.CodeInvalidInput {
			t.Errorf("token URL host %q: %v", h, err)
		}
	}
	for _, h := range []string{"metadata.google.internal..", "a.ｉｎｔｅｒｎａｌ", "ｌｏｃａｌｈｏｓｔ.", "x.ｌｏｃａｌｈｏｓｔ"} {
		err := add(integrations.AppInput{Name: "mine", AuthURL: "https://auth.example.com/a", TokenURL: "https://auth.example.com/t", ClientID: "c", APIHosts: []string{h}})
		if !errors.As(err, &ce) || ce.Code != capabilities.CodeInvalidInput {
			t.Errorf("API host %q: %v", h, err)
		}
	}
	if err := add(integrations.AppInput{Name: "mine", AuthURL: "https://auth.xn--exmple-cua.com/a", TokenURL: "https://auth.example.com/t", ClientID: "c", APIHosts: []string{"api.exämple.com"}}); err != nil {
		t.Errorf("an internationalized name in ASCII: %v", err)
	}
}

// Review (#31): an app removed while its connect flow's code is being
// exchanged leaves nothing behind: the tokens the provider just issued
// are revoked (no connection may hold them any more), and the person is
// told why, not shown an internal error.
func TestReviewAppRemovedDuringExchange(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		f := newFakeProvider(t)
		svc := newAppService(t, s, true, nil)
		alice := addUser(t, s, "alice")
		if _, err := svc.AddApp(t.Context(), ownerOf(alice), appInput(f, "mine", false)); err != nil {
			t.Fatal(err)
		}
		u, err := svc.StartApp(t.Context(), ownerOf(alice), "mine", "", binding)
		if err != nil {
			t.Fatal(err)
		}
		q := authorizeApp(t, u, "mine")
		var once sync.Once
		f.tokenHook = func(http.ResponseWriter) bool {
			once.Do(func() {
				if _, err := svc.RemoveApp(context.Background(), ownerOf(alice), "mine"); err != nil {
					t.Error(err)
				}
			})
			return false
		}
		_, err = svc.Finish(t.Context(), ownerOf(alice), binding, integrations.Callback{App: "mine", State: q.Get("state"), Code: q.Get("code")})
		var ce *capabilities.Error
		if !errors.As(err, &ce) || ce.Code == capabilities.CodeInternal {
			t.Fatalf("finish at a removed app: %v", err)
		}
		if rev := f.revocations(); len(rev) != 2 || !slices.Contains(rev, f.lastAccessToken()) {
			t.Fatalf("the tokens issued to a removed app were not revoked: %v", rev)
		}
		if list, err := svc.List(t.Context(), ownerOf(alice)); err != nil || len(list) != 0 {
			t.Fatalf("connections: %+v %v", list, err)
		}
	})
}

// Review (#31): concurrent connect flows finishing at once hold
// MaxConnections on PostgreSQL too; the tokens of the ones refused are
// revoked.
func TestReviewConcurrentFinishHoldsBound(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		f := newFakeProvider(t)
		svc := newService(t, s, provider(f, false))
		alice := addUser(t, s, "alice")
		for i := range integrations.MaxConnections - 2 {
			connect(t, svc, f, alice, fmt.Sprint("c", i))
		}
		const n = 8
		qs := make([]url.Values, n)
		for i := range n {
			u, err := svc.Start(t.Context(), ownerOf(alice), "acme", fmt.Sprint("new", i), binding)
			if err != nil {
				t.Fatal(err)
			}
			qs[i] = f.authorize(t, u)
		}
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				_, errs[i] = svc.Finish(t.Context(), ownerOf(alice), binding, integrations.Callback{Provider: "acme", State: qs[i].Get("state"), Code: qs[i].Get("code")})
			})
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			if err == nil {
				ok++
			}
		}
		list, err := svc.List(t.Context(), ownerOf(alice))
		if err != nil {
			t.Fatal(err)
		}
		var total int
		if err := s.DB.NewSelect().Table("integration_connections").ColumnExpr("count(*)").Where("user_id = ?", alice.OwnerID).Scan(t.Context(), &total); err != nil {
			t.Fatal(err)
		}
		if ok != 2 || total != integrations.MaxConnections || len(list) != integrations.MaxConnections {
			t.Fatalf("%d flows finished; %d connections kept (at most %d): %v", ok, total, integrations.MaxConnections, errs)
		}
		if rev := f.revocations(); len(rev) != 2*(n-2) {
			t.Fatalf("%d revocations for %d refused flows", len(rev), n-2)
		}
	})
}
