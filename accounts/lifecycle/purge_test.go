package lifecycle_test

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

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// purgeWorld is an accounts and lifecycle service whose deletion can fail
// on demand before anything is removed (a hook) or midway (a custom
// surface that removes one item, then fails).
type purgeWorld struct {
	store       *storage.Store
	acc         *accounts.Service
	svc         *lifecycle.Service
	failHook    atomic.Bool
	failMidway  atomic.Bool
	mu          sync.Mutex
	recorded    []string
	recordedOut []lifecycle.PurgeOutcome
}

func newPurgeWorld(t *testing.T, s *storage.Store) *purgeWorld {
	t.Helper()
	w := &purgeWorld{store: s}
	var err error
	w.acc, err = accounts.New(context.Background(), s, accounts.Config{Argon2: accounts.Argon2Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	inv := storage.NewInventory()
	if err := errors.Join(
		lifecycle.RegisterInventory(inv),
		inv.AddTable(storage.Table{Name: "email_claims", KeyColumn: "email"}),
		inv.AddCustom(storage.Custom{
			Name:   "scratch",
			Count:  func(context.Context, storage.Owner) (int64, error) { return 0, nil },
			Export: func(context.Context, storage.Owner, string, int) ([]any, string, error) { return nil, "", nil },
			Delete: func(context.Context, storage.Owner) (int64, error) {
				if w.failMidway.Load() {
					return 1, errors.New("store at db.internal:5432 refused")
				}
				return 0, nil
			},
		}),
	); err != nil {
		t.Fatal(err)
	}
	w.svc = lifecycle.New(s, inv, w.acc, lifecycle.Options{Logger: quiet(), Hooks: []lifecycle.Hook{{Name: "revoke grants", Run: func(context.Context, storage.Owner) error {
		if w.failHook.Load() {
			return errors.New("oauth store down")
		}
		return nil
	}}}})
	return w
}

func (w *purgeWorld) record(_ context.Context, o storage.Owner, out lifecycle.PurgeOutcome) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.recorded = append(w.recorded, o.StableID+" "+out.Outcome)
	w.recordedOut = append(w.recordedOut, out)
}

// signupAged opens an account on the sign-up page and backdates it.
func (w *purgeWorld) signupAged(t *testing.T, name string, age time.Duration) accounts.User {
	t.Helper()
	u, err := w.acc.Identity.Signup(context.Background(), accounts.SignupInput{Email: name + "@example.com", Username: name, Password: "correct horse battery"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.store.DB.NewUpdate().Table("users").Set("created_at = ?", time.Now().UTC().Add(-age)).Where("id = ?", u.ID).Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
	return u
}

// attempted records an earlier failed attempt on u, last made ago, due
// again at retryIn from now.
func (w *purgeWorld) attempted(t *testing.T, u accounts.User, ago, retryIn time.Duration) {
	t.Helper()
	now := time.Now().UTC()
	if _, err := w.store.DB.NewUpdate().Table("users").Set("purge_attempts = 1").Set("purge_attempted_at = ?", now.Add(-ago)).
		Set("purge_retry_at = ?", now.Add(retryIn)).Set("purge_failure = 'hook revoke grants (failed)'").Where("id = ?", u.ID).Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
}

type purgeState struct {
	Deleting *time.Time `bun:"deleting_at"`
	Attempts int        `bun:"purge_attempts"`
	Retry    *time.Time `bun:"purge_retry_at"`
	Failure  *string    `bun:"purge_failure"`
}

func (w *purgeWorld) state(t *testing.T, u accounts.User) (purgeState, bool) {
	t.Helper()
	var st purgeState
	err := w.store.DB.NewSelect().Table("users").Column("deleting_at", "purge_attempts", "purge_retry_at", "purge_failure").Where("id = ?", u.ID).Scan(context.Background(), &st)
	if err != nil {
		return st, false
	}
	return st, true
}

func ids(outs []lifecycle.PurgeOutcome) []string {
	var s []string
	for _, o := range outs {
		s = append(s, o.UserID+" "+o.Outcome)
	}
	return s
}

// The purge takes accounts never attempted first (oldest sign-up first),
// then earlier failures by oldest attempt, and skips those still waiting
// for their retry; a dry run claims nothing. A failure before anything is
// removed lifts the claim and schedules a longer wait; one midway keeps
// the claim for the deletion-resume lane. Either way the row and the
// record carry the failure's class, never its text.
func TestPurgeUnverifiedSchedule(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		w := newPurgeWorld(t, s)
		day := 24 * time.Hour
		retried := w.signupAged(t, "retried", 20*day) // failed before, due again
		waiting := w.signupAged(t, "waiting", 19*day) // failed before, in backoff
		older := w.signupAged(t, "older", 9*day)      // never attempted
		newer := w.signupAged(t, "newer", 8*day)      // never attempted
		fresh := w.signupAged(t, "fresh", day)        // too young
		w.attempted(t, retried, 3*time.Hour, -time.Hour)
		w.attempted(t, waiting, 10*time.Minute, time.Hour)
		if _, _, err := w.acc.Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "made@example.com", Username: "made", Password: "correct horse battery"}); err != nil {
			t.Fatal(err)
		}

		dry, err := w.svc.PurgeUnverified(ctx, lifecycle.PurgeRequest{DryRun: true, Record: w.record})
		if err != nil {
			t.Fatal(err)
		}
		want := []string{older.StableID + " would_purge", newer.StableID + " would_purge", retried.StableID + " would_purge"}
		if !dry.DryRun || !slices.Equal(ids(dry.Accounts), want) || dry.Purged != 0 {
			t.Fatalf("dry run %v\nwant %v", ids(dry.Accounts), want)
		}
		if dry.Accounts[2].Attempts != 1 || dry.Accounts[2].Failure != "hook revoke grants (failed)" {
			t.Fatalf("dry run of the retried account: %+v", dry.Accounts[2])
		}
		for _, u := range []accounts.User{retried, waiting, older, newer, fresh} {
			if st, _ := w.state(t, u); st.Deleting != nil {
				t.Fatalf("a dry run claimed %s", u.Username)
			}
		}
		if len(w.recorded) != 0 {
			t.Fatalf("a dry run recorded %v", w.recorded)
		}

		// A pass of two takes the two never attempted.
		rep, err := w.svc.PurgeUnverified(ctx, lifecycle.PurgeRequest{Limit: 2, Record: w.record})
		if err != nil || rep.Errs != nil {
			t.Fatal(err, rep.Errs)
		}
		if want := []string{older.StableID + " purged", newer.StableID + " purged"}; !slices.Equal(ids(rep.Accounts), want) || rep.Purged != 2 || !slices.Equal(w.recorded, want) {
			t.Fatalf("first pass %v (recorded %v)", ids(rep.Accounts), w.recorded)
		}
		for _, u := range []accounts.User{older, newer} {
			if _, ok := w.state(t, u); ok {
				t.Fatalf("%s is still there", u.Username)
			}
		}

		// A failure before anything is removed: the claim is lifted, the
		// class recorded, the next attempt waits (twice as long now).
		w.failHook.Store(true)
		before := time.Now()
		rep, err = w.svc.PurgeUnverified(ctx, lifecycle.PurgeRequest{Record: w.record})
		if err != nil || rep.Errs == nil || rep.Failed != 1 {
			t.Fatalf("failing pass: %v %v %+v", err, rep.Errs, rep)
		}
		out := rep.Accounts[0]
		if len(rep.Accounts) != 1 || out.UserID != retried.StableID || out.Outcome != lifecycle.PurgeReleased || out.Failure != "hook revoke grants (failed)" || out.Attempts != 2 || out.RetryAt == nil {
			t.Fatalf("failing pass: %+v", rep.Accounts)
		}
		if d := out.RetryAt.Sub(before); d < 2*lifecycle.PurgeRetryBase-time.Minute || d > 2*lifecycle.PurgeRetryBase+time.Minute {
			t.Fatalf("retry in %v, want about %v", d, 2*lifecycle.PurgeRetryBase)
		}
		st, _ := w.state(t, retried)
		if st.Deleting != nil || st.Attempts != 2 || st.Failure == nil || *st.Failure != "hook revoke grants (failed)" || st.Retry == nil {
			t.Fatalf("the released account's row: %+v", st)
		}
		if strings.Contains(fmt.Sprint(w.recordedOut), "oauth store down") {
			t.Fatal("the failure's text reached the record")
		}
		// Released: it may be verified again, and is skipped until then.
		w.failHook.Store(false)
		if rep, err := w.svc.PurgeUnverified(ctx, lifecycle.PurgeRequest{Record: w.record}); err != nil || len(rep.Accounts) != 0 {
			t.Fatalf("a pass during the backoff took %v (%v)", ids(rep.Accounts), err)
		}
		if ok, err := w.acc.Identity.MarkEmailVerified(ctx, retried.ID); err != nil || !ok {
			t.Fatalf("verify a released account: %v %v", ok, err)
		}

		// A failure midway keeps the claim (deletion-resume finishes it),
		// with the class recorded.
		midway := w.signupAged(t, "midway", 8*day)
		w.failMidway.Store(true)
		rep, err = w.svc.PurgeUnverified(ctx, lifecycle.PurgeRequest{Record: w.record})
		if err != nil || len(rep.Accounts) != 1 {
			t.Fatalf("midway pass: %v %v", ids(rep.Accounts), err)
		}
		out = rep.Accounts[0]
		if out.UserID != midway.StableID || out.Outcome != lifecycle.PurgeFailed || out.Failure != "custom scratch (failed)" || out.RetryAt != nil {
			t.Fatalf("midway: %+v", out)
		}
		st, _ = w.state(t, midway)
		if st.Deleting == nil || st.Failure == nil || *st.Failure != "custom scratch (failed)" {
			t.Fatalf("the midway account's row: %+v", st)
		}
		if strings.Contains(fmt.Sprint(w.recordedOut), "db.internal") {
			t.Fatal("the failure's text reached the record")
		}
		w.failMidway.Store(false)
		if n, err := w.svc.ResumeDeletions(ctx, -time.Second); err != nil || n != 1 {
			t.Fatalf("resume the midway deletion: %d %v", n, err)
		}
		if _, ok := w.state(t, midway); ok {
			t.Fatal("the midway account is still there after the resume")
		}
		if _, ok := w.state(t, fresh); !ok {
			t.Fatal("the fresh account was purged")
		}
	})
}

// adminUnverifiedAccountPurgeRun: admins only (hidden from and refused to
// everyone else), a dry run changes nothing, a real pass deletes, and the
// limit is checked.
func TestPurgeCapability(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		w := newPurgeWorld(t, s)
		reg := capabilities.NewRegistry(capabilities.Options{Logger: quiet()})
		if err := reg.Register(w.svc.PurgeCapability(w.record)); err != nil {
			t.Fatal(err)
		}
		stale := w.signupAged(t, "stale", 8*24*time.Hour)
		person, _, err := w.acc.Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "person@example.com", Username: "person", Password: "correct horse battery", Verified: true})
		if err != nil {
			t.Fatal(err)
		}
		admin, _, err := w.acc.Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "boss@example.com", Username: "boss", Password: "correct horse battery", Verified: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.acc.Roles.GrantAdminAsOperator(ctx, admin.ID); err != nil {
			t.Fatal(err)
		}
		caller := func(u accounts.User) capabilities.Caller {
			c, err := w.acc.LoadCaller(ctx, u.StableID)
			if err != nil {
				t.Fatal(err)
			}
			c.AllScopes, c.Interactive = true, true
			return c
		}
		run := func(c capabilities.Caller, in lifecycle.PurgeRunInput) (lifecycle.PurgeReport, error) {
			args, _ := json.Marshal(in)
			res, err := reg.Invoke(ctx, c, "adminUnverifiedAccountPurgeRun", args)
			var rep lifecycle.PurgeReport
			if err == nil {
				b, _ := json.Marshal(res.Structured)
				_ = json.Unmarshal(b, &rep)
			}
			return rep, err
		}
		for _, u := range []accounts.User{person, stale} {
			if _, err := run(caller(u), lifecycle.PurgeRunInput{}); err == nil {
				t.Fatalf("%s ran the purge", u.Username)
			}
			if slices.Contains(reg.VisibleNames(ctx, caller(u)), "adminUnverifiedAccountPurgeRun") {
				t.Fatalf("%s sees the purge", u.Username)
			}
		}
		if _, ok := w.state(t, stale); !ok {
			t.Fatal("a refused call deleted the account")
		}
		if _, err := run(caller(admin), lifecycle.PurgeRunInput{Limit: 51}); capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
			t.Fatalf("limit 51: %v", err)
		}
		rep, err := run(caller(admin), lifecycle.PurgeRunInput{DryRun: true})
		if err != nil || !rep.DryRun || !slices.Equal(ids(rep.Accounts), []string{stale.StableID + " would_purge"}) {
			t.Fatalf("dry run: %+v %v", rep, err)
		}
		if st, ok := w.state(t, stale); !ok || st.Deleting != nil {
			t.Fatal("the dry run touched the account")
		}
		raw, _ := json.Marshal(rep)
		if strings.Contains(string(raw), "stale@example.com") || strings.Contains(string(raw), `"stale"`) {
			t.Fatalf("the answer names the account: %s", raw)
		}
		rep, err = run(caller(admin), lifecycle.PurgeRunInput{Limit: 1})
		if err != nil || rep.Purged != 1 || !slices.Equal(ids(rep.Accounts), []string{stale.StableID + " purged"}) {
			t.Fatalf("pass: %+v %v", rep, err)
		}
		if _, ok := w.state(t, stale); ok {
			t.Fatal("the stale account is still there")
		}
		for _, u := range []accounts.User{person, admin} {
			if _, ok := w.state(t, u); !ok {
				t.Fatalf("%s was purged", u.Username)
			}
		}
	})
}
