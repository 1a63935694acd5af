package accounts_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// identityMail records the mail of username changes and release links.
type identityMail struct {
	mu       sync.Mutex
	renames  []accounts.UsernameChange
	releases map[string]string // former address → token
	fail     error
}

func (m *identityMail) MailUsernameChanged(_ context.Context, tx bun.IDB, c accounts.UsernameChange) error {
	if tx == nil {
		return errors.New("no transaction")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	m.renames = append(m.renames, c)
	return nil
}

func (m *identityMail) MailEmailReleaseLink(_ context.Context, tx bun.IDB, _ accounts.User, email, token string) error {
	if tx == nil {
		return errors.New("no transaction")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.releases[email] = token
	return nil
}

// auditRec records AccountAudit calls.
type auditRec struct {
	mu   sync.Mutex
	rows []string
}

func (a *auditRec) record(_ context.Context, u accounts.User, action string, ok bool, reason string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.rows = append(a.rows, fmt.Sprintf("%s %s %v %s", u.Username, action, ok, reason))
}

// verifiedUser signs name up and marks the address verified.
func verifiedUser(t *testing.T, svc *accounts.Service, name string) accounts.User {
	t.Helper()
	u := signup(t, svc, name)
	if _, err := svc.Identity.MarkEmailVerified(context.Background(), u.ID); err != nil {
		t.Fatal(err)
	}
	u, _ = svc.Identity.UserByID(context.Background(), u.ID)
	return u
}

// A former address is released by its holder through a link mailed to
// it, and only then: the link is single-use, dies with a password change,
// is for a former address of the caller's own account only; once released
// the address opens a new account (new stable id, unverified) and the same
// account moving back to it verifies it again.
func TestFormerEmailRelease(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, clk := newService(t, s, accounts.Config{})
		mail := &identityMail{releases: map[string]string{}}
		rec := &auditRec{}
		reg := capabilities.NewRegistry(capabilities.Options{})
		if err := reg.Register(svc.AccountCapabilities(accounts.AccountOptions{EmailRelease: mail, Audit: rec.record})...); err != nil {
			t.Fatal(err)
		}
		caller := func(u accounts.User, session bool) capabilities.Caller {
			c, err := svc.LoadCaller(ctx, u.StableID)
			if err != nil {
				t.Fatal(err)
			}
			c.AllScopes, c.Interactive, c.Session = true, true, session
			return c
		}
		release := func(c capabilities.Caller, email string) error {
			args, _ := json.Marshal(accounts.EmailClaimReleaseInput{Email: email})
			_, err := reg.Invoke(ctx, c, "accountEmailClaimRelease", args)
			return err
		}
		ann, bob := verifiedUser(t, svc, "ann"), verifiedUser(t, svc, "bob")
		for _, u := range []accounts.User{ann, bob} {
			if _, err := svc.Identity.ChangeEmail(ctx, u.ID, u.Username+".new@example.com"); err != nil {
				t.Fatal(err)
			}
			if _, err := svc.Identity.MarkEmailVerified(ctx, u.ID); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := svc.Identity.Signup(ctx, accounts.SignupInput{Email: "ann@example.com", Username: "ann-two", Password: goodPassword}); !errors.Is(err, accounts.ErrEmailClaimed) {
			t.Fatalf("signup with a held former address = %v", err)
		}

		// An agent cannot ask; nobody can for their current address, for
		// an address they never had, or for another account's former one.
		if err := release(caller(ann, false), "ann@example.com"); capabilities.CodeOf(err) != capabilities.CodeNotFound {
			t.Fatalf("an agent asks for a release: %v", err)
		}
		for _, e := range []string{"ann.new@example.com", "nobody@example.com", "bob@example.com", "BOB@example.com"} {
			if err := release(caller(ann, true), e); capabilities.CodeOf(err) != capabilities.CodeNotFound {
				t.Fatalf("ann releases %s: %v", e, err)
			}
		}
		if err := release(caller(ann, true), "not an address"); capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
			t.Fatalf("a malformed address: %v", err)
		}
		if len(mail.releases) != 0 {
			t.Fatalf("refused requests mailed links: %v", mail.releases)
		}
		if claims, _ := svc.Identity.EmailClaims(ctx, bob.ID); !slices.Contains(claims, "bob@example.com") {
			t.Fatalf("bob's former address is gone: %v", claims)
		}

		// The first link dies with a password change.
		if err := release(caller(ann, true), "Ann@Example.com"); err != nil {
			t.Fatal(err)
		}
		stale := mail.releases["ann@example.com"]
		if stale == "" {
			t.Fatalf("no link mailed to the former address: %v", mail.releases)
		}
		clk.Advance(time.Second)
		if _, err := svc.Credentials.ChangePassword(ctx, ann.ID, goodPassword, "a different long passphrase"); err != nil {
			t.Fatal(err)
		}
		if _, _, err := svc.Identity.ReleaseEmailWithToken(ctx, stale); !errors.Is(err, accounts.ErrInvalidToken) {
			t.Fatalf("a link from before the password change = %v", err)
		}
		if _, _, err := svc.Identity.ReleaseEmailWithToken(ctx, "made-up"); !errors.Is(err, accounts.ErrInvalidToken) {
			t.Fatalf("an unknown link = %v", err)
		}
		// Nothing is released until the link is opened.
		if _, err := svc.Identity.Signup(ctx, accounts.SignupInput{Email: "ann@example.com", Username: "ann-two", Password: goodPassword}); !errors.Is(err, accounts.ErrEmailClaimed) {
			t.Fatalf("signup before the link is opened = %v", err)
		}

		if err := release(caller(ann, true), "ann@example.com"); err != nil {
			t.Fatal(err)
		}
		token := mail.releases["ann@example.com"]
		u, email, err := svc.Identity.ReleaseEmailWithToken(ctx, token)
		if err != nil || u.ID != ann.ID || email != "ann@example.com" {
			t.Fatalf("release: %+v %q %v", u, email, err)
		}
		if _, _, err := svc.Identity.ReleaseEmailWithToken(ctx, token); !errors.Is(err, accounts.ErrInvalidToken) {
			t.Fatalf("the link used twice = %v", err)
		}
		if claims, _ := svc.Identity.EmailClaims(ctx, ann.ID); slices.Contains(claims, "ann@example.com") {
			t.Fatalf("still claimed after release: %v", claims)
		}
		if claims, _ := svc.Identity.EmailClaims(ctx, bob.ID); !slices.Contains(claims, "bob@example.com") {
			t.Fatalf("bob's former address went with ann's: %v", claims)
		}

		// The same account moving back to a released address verifies it
		// again: it changes, unverified, like any new address.
		back, err := svc.Identity.ChangeEmail(ctx, ann.ID, "ann@example.com")
		if err != nil || back.EmailVerified() {
			t.Fatalf("moving back to a released address: %+v, %v", back, err)
		}

		// Anyone else: a new account verifies it like any sign-up and gets
		// a stable id of its own.
		if err := release(caller(bob, true), "bob@example.com"); err != nil {
			t.Fatal(err)
		}
		if _, _, err := svc.Identity.ReleaseEmailWithToken(ctx, mail.releases["bob@example.com"]); err != nil {
			t.Fatal(err)
		}
		again, err := svc.Identity.Signup(ctx, accounts.SignupInput{Email: "bob@example.com", Username: "bob-two", Password: goodPassword})
		if err != nil {
			t.Fatalf("signup after release: %v", err)
		}
		if again.EmailVerified() || again.StableID == bob.StableID {
			t.Fatalf("the new account: verified %v, stable id reused %v", again.EmailVerified(), again.StableID == bob.StableID)
		}

		rec.mu.Lock()
		defer rec.mu.Unlock()
		if !slices.Contains(rec.rows, "ann email_claim_release_request true ") || !slices.Contains(rec.rows, "ann email_claim_release_request false not_found") {
			t.Fatalf("audit rows %q", rec.rows)
		}
	})
}

// A person changes their own username under the rules of sign-up (the
// effective reserved set, case-insensitive uniqueness), waits the
// cooldown between changes, and the name given up stays held for them:
// nobody else takes it (sign-up or change), they may take it back, and
// once the hold ends it is free.
func TestChangeOwnUsername(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, clk := newService(t, s, accounts.Config{BrandNames: []string{"Acme"}, ReservedUsernames: []string{"reserved-by-config"}})
		ann, bob := signup(t, svc, "ann"), signup(t, svc, "bob")
		if err := svc.Identity.ReserveUsername(ctx, "Runtime-Held"); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name string
			want error
		}{
			{"BOB", accounts.ErrUsernameTaken},
			{"x", accounts.ErrInvalidUsername},
			{"ann_x", accounts.ErrInvalidUsername},
			{"Post-Master", accounts.ErrUsernameReserved},
			{"support-team", accounts.ErrUsernameReserved},
			{"my-acme-shop", accounts.ErrUsernameReserved},
			{"enclave-help", accounts.ErrUsernameReserved},
			{"reserved-by-config", accounts.ErrUsernameReserved},
			{"runtimeheld", accounts.ErrUsernameReserved},
		} {
			if _, err := svc.Identity.ChangeOwnUsername(ctx, ann.ID, tc.name, nil); !errors.Is(err, tc.want) {
				t.Fatalf("change to %q = %v, want %v", tc.name, err, tc.want)
			}
		}
		// A released built-in name is free; a permanent one never is.
		if err := svc.Identity.ReleaseUsername(ctx, "blog"); err != nil {
			t.Fatal(err)
		}
		var told []accounts.UsernameChange
		c, err := svc.Identity.ChangeOwnUsername(ctx, ann.ID, "Blog", func(_ context.Context, tx bun.IDB, c accounts.UsernameChange) error {
			told = append(told, c)
			return nil
		})
		if err != nil || c.User.Username != "blog" || c.Previous != "ann" || !c.Changed() || c.HeldUntil == nil || c.NextChangeAt == nil {
			t.Fatalf("change = %+v, %v", c, err)
		}
		if len(told) != 1 || told[0].User.Username != "blog" {
			t.Fatalf("told %+v", told)
		}
		if !c.HeldUntil.Equal(clk.Now().Add(accounts.DefaultUsernameHold)) || !c.NextChangeAt.Equal(clk.Now().Add(accounts.DefaultUsernameChangeCooldown)) {
			t.Fatalf("held until %v, next change %v", c.HeldUntil, c.NextChangeAt)
		}
		if u, err := svc.Identity.UserByUsername(ctx, "blog"); err != nil || u.ID != ann.ID {
			t.Fatalf("lookup of the new name: %+v %v", u, err)
		}

		// The old name is held for ann: bob cannot change to it, nobody
		// signs up with it, in any case.
		if _, err := svc.Identity.ChangeOwnUsername(ctx, bob.ID, "Ann", nil); !errors.Is(err, accounts.ErrUsernameTaken) {
			t.Fatalf("bob takes ann's held name: %v", err)
		}
		if _, err := svc.Identity.ChangeUsername(ctx, bob.ID, "ann"); !errors.Is(err, accounts.ErrUsernameTaken) {
			t.Fatalf("an operator gives bob ann's held name: %v", err)
		}
		if _, err := svc.Identity.Signup(ctx, accounts.SignupInput{Email: "carl@example.com", Username: "ANN", Password: goodPassword}); !errors.Is(err, accounts.ErrUsernameTaken) {
			t.Fatalf("signup with a held name: %v", err)
		}
		if holds, _ := svc.Identity.UsernameHolds(ctx, ann.ID); len(holds) != 1 || holds["ann"].IsZero() {
			t.Fatalf("ann's holds %v", holds)
		}
		if holds, _ := svc.Identity.UsernameHolds(ctx, bob.ID); len(holds) != 0 {
			t.Fatalf("bob's holds %v", holds)
		}

		// The cooldown: a second change waits, and says until when.
		clk.Advance(time.Hour)
		c, err = svc.Identity.ChangeOwnUsername(ctx, ann.ID, "ann-again", nil)
		if !errors.Is(err, accounts.ErrUsernameCooldown) || c.NextChangeAt == nil || c.User.Username != "blog" {
			t.Fatalf("change within the cooldown = %+v, %v", c, err)
		}
		if next, err := svc.Identity.NextUsernameChange(ctx, ann.ID); err != nil || !next.Equal(*c.NextChangeAt) {
			t.Fatalf("next change %v, %v", next, err)
		}
		// Asking for the current name is no change (and no wait).
		if c, err := svc.Identity.ChangeOwnUsername(ctx, ann.ID, "BLOG", nil); err != nil || c.Changed() {
			t.Fatalf("unchanged = %+v, %v", c, err)
		}
		// An operator's change does not wait, and holds nothing.
		if _, err := svc.Identity.ChangeUsername(ctx, bob.ID, "bob-renamed"); err != nil {
			t.Fatal(err)
		}
		if holds, _ := svc.Identity.UsernameHolds(ctx, bob.ID); len(holds) != 0 {
			t.Fatalf("an operator's change held %v", holds)
		}

		// After the cooldown ann takes her old name back: its hold goes.
		clk.Advance(accounts.DefaultUsernameChangeCooldown)
		if c, err := svc.Identity.ChangeOwnUsername(ctx, ann.ID, "ann", nil); err != nil || c.User.Username != "ann" {
			t.Fatalf("take back = %+v, %v", c, err)
		}
		holds, _ := svc.Identity.UsernameHolds(ctx, ann.ID)
		if _, ok := holds["ann"]; ok || len(holds) != 1 {
			t.Fatalf("holds after taking the name back: %v", holds)
		}
		// "blog" is held now; when the hold ends it is free for others.
		if _, err := svc.Identity.ChangeOwnUsername(ctx, bob.ID, "blog", nil); !errors.Is(err, accounts.ErrUsernameTaken) {
			t.Fatalf("bob takes the held blog: %v", err)
		}
		clk.Advance(accounts.DefaultUsernameHold)
		if c, err := svc.Identity.ChangeOwnUsername(ctx, bob.ID, "blog", nil); err != nil || c.User.Username != "blog" {
			t.Fatalf("bob takes blog after its hold: %+v, %v", c, err)
		}
		// A suspended or deleting account cannot change its name.
		if _, err := svc.Lifecycle.Suspend(ctx, ann.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Identity.ChangeOwnUsername(ctx, ann.ID, "ann-suspended", nil); !errors.Is(err, accounts.ErrSuspended) {
			t.Fatalf("suspended change = %v", err)
		}
		// The mail's error rolls the change back.
		carl := signup(t, svc, "carl")
		boom := errors.New("outbox down")
		if _, err := svc.Identity.ChangeOwnUsername(ctx, carl.ID, "carl-two", func(context.Context, bun.IDB, accounts.UsernameChange) error { return boom }); !errors.Is(err, boom) {
			t.Fatalf("failing mail = %v", err)
		}
		if u, _ := svc.Identity.UserByID(ctx, carl.ID); u.Username != "carl" {
			t.Fatalf("the change stayed without its mail: %s", u.Username)
		}
		if holds, _ := svc.Identity.UsernameHolds(ctx, carl.ID); len(holds) != 0 {
			t.Fatalf("a hold stayed without its change: %v", holds)
		}
		if next, _ := svc.Identity.NextUsernameChange(ctx, carl.ID); !next.IsZero() {
			t.Fatalf("a cooldown stayed without its change: %v", next)
		}
	})
}

// Two accounts claiming one free name at once: exactly one gets it. An
// account claiming a name while its holder gives it up never gets it (it
// is either still the holder's or held for them).
func TestUsernameClaimRaces(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, _ := newService(t, s, accounts.Config{UsernameChangeCooldown: -1})
		const n = 6
		var users []accounts.User
		for i := range n {
			users = append(users, signup(t, svc, fmt.Sprintf("racer-%d", i)))
		}
		for round := range 3 {
			name := fmt.Sprintf("Prize-%d", round)
			var wins, taken atomic.Int32
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i, u := range users {
				wg.Go(func() {
					<-start
					// Half claim it by change, half... by change in its
					// other case: the claim is case-insensitive.
					want := name
					if i%2 == 1 {
						want = strings.ToUpper(name)
					}
					_, err := svc.Identity.ChangeOwnUsername(ctx, u.ID, want, nil)
					switch {
					case err == nil:
						wins.Add(1)
					case errors.Is(err, accounts.ErrUsernameTaken):
						taken.Add(1)
					default:
						t.Errorf("claim: %v", err)
					}
				})
			}
			close(start)
			wg.Wait()
			if wins.Load() != 1 || taken.Load() != n-1 {
				t.Fatalf("round %d: %d won, %d taken", round, wins.Load(), taken.Load())
			}
			var holders int
			if err := s.DB.NewSelect().Table("users").ColumnExpr("COUNT(*)").Where("username = ?", strings.ToLower(name)).Scan(ctx, &holders); err != nil || holders != 1 {
				t.Fatalf("round %d: %d holders (%v)", round, holders, err)
			}
		}

		// Giving a name up while another account claims it.
		for round := range 8 {
			owner := signup(t, svc, fmt.Sprintf("owner-%d", round))
			var wg sync.WaitGroup
			start := make(chan struct{})
			var claimed atomic.Bool
			wg.Go(func() {
				<-start
				if _, err := svc.Identity.ChangeOwnUsername(ctx, owner.ID, fmt.Sprintf("owner-%d-new", round), nil); err != nil {
					t.Errorf("give up: %v", err)
				}
			})
			for _, u := range users[:3] {
				wg.Go(func() {
					<-start
					for range 5 {
						if _, err := svc.Identity.ChangeOwnUsername(ctx, u.ID, owner.Username, nil); err == nil {
							claimed.Store(true)
						}
					}
				})
			}
			close(start)
			wg.Wait()
			if claimed.Load() {
				t.Fatalf("round %d: another account took %s as it was given up", round, owner.Username)
			}
		}
	})
}

// accountUsernameChange: the caller's own account only, from the person's
// session (never an agent's token, nor a job), audited, mailed in the
// change's transaction; refusals carry the domain's code.
func TestAccountUsernameChangeCapability(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, _ := newService(t, s, accounts.Config{})
		mail := &identityMail{releases: map[string]string{}}
		rec := &auditRec{}
		reg := capabilities.NewRegistry(capabilities.Options{})
		if err := reg.Register(svc.AccountCapabilities(accounts.AccountOptions{UsernameChange: mail, Audit: rec.record})...); err != nil {
			t.Fatal(err)
		}
		ann, bob := signup(t, svc, "ann"), signup(t, svc, "bob")
		caller := func(u accounts.User, interactive bool) capabilities.Caller {
			c, err := svc.LoadCaller(ctx, u.StableID)
			if err != nil {
				t.Fatal(err)
			}
			c.AllScopes, c.Interactive, c.Session = true, interactive, interactive
			return c
		}
		call := func(c capabilities.Caller, name string) (accounts.UsernameChangeOutput, error) {
			args, _ := json.Marshal(accounts.UsernameChangeInput{Username: name})
			res, err := reg.Invoke(ctx, c, "accountUsernameChange", args)
			var out accounts.UsernameChangeOutput
			if err == nil {
				b, _ := json.Marshal(res.Structured)
				_ = json.Unmarshal(b, &out)
			}
			return out, err
		}
		// A background caller (a job) cannot, nor an agent, even in an
		// interactive call with every scope: the person can, for their own
		// account.
		if _, err := call(caller(ann, false), "ann-job"); err == nil {
			t.Fatal("a background call renamed the account")
		}
		agent := caller(ann, true)
		agent.Session = false
		if _, err := call(agent, "ann-agent"); err == nil {
			t.Fatal("an agent renamed the account")
		}
		if slices.Contains(reg.VisibleNames(ctx, agent), "accountUsernameChange") {
			t.Fatal("accountUsernameChange is offered to an agent")
		}
		if !slices.Contains(reg.VisibleNames(ctx, caller(ann, true)), "accountUsernameChange") {
			t.Fatal("accountUsernameChange is not offered")
		}
		out, err := call(caller(ann, true), "Ann-Renamed")
		if err != nil || out.Username != "ann-renamed" || out.Previous != "ann" || !out.Changed || out.HeldUntil == nil || out.NextChangeAt == nil {
			t.Fatalf("change = %+v, %v", out, err)
		}
		if u, _ := svc.Identity.UserByID(ctx, bob.ID); u.Username != "bob" {
			t.Fatalf("bob's name changed: %s", u.Username)
		}
		// Bob cannot take ann's former or current name, whatever its case.
		for _, n := range []string{"ann", "ANN-RENAMED"} {
			if _, err := call(caller(bob, true), n); !errors.Is(err, accounts.ErrUsernameTaken) || capabilities.CodeOf(err) != capabilities.CodeConflict {
				t.Fatalf("bob takes %s: %v", n, err)
			}
		}
		if _, err := call(caller(bob, true), "postmaster"); capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
			t.Fatalf("reserved: %v", err)
		}
		_, err = call(caller(ann, true), "ann-third")
		var ce *capabilities.Error
		if !errors.As(err, &ce) || ce.Code != capabilities.CodeConflict || !errors.Is(err, accounts.ErrUsernameCooldown) || !strings.Contains(ce.Message, "after ") {
			t.Fatalf("cooldown: %v", err)
		}
		mail.mu.Lock()
		if len(mail.renames) != 1 || mail.renames[0].User.Email != "ann@example.com" || mail.renames[0].Previous != "ann" {
			t.Fatalf("mail %+v", mail.renames)
		}
		mail.mu.Unlock()
		rec.mu.Lock()
		want := []string{"ann username_change true ", "bob username_change false username_taken", "bob username_change false username_taken",
			"bob username_change false username_reserved", "ann-renamed username_change false username_cooldown"}
		if !slices.Equal(rec.rows, want) {
			t.Fatalf("audit %q\nwant %q", rec.rows, want)
		}
		rec.mu.Unlock()
	})
}
