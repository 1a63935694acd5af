package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/internal/outbox"
	"github.com/enclave-mcp/enclave/jobs"
	"github.com/enclave-mcp/enclave/quota"
	"github.com/enclave-mcp/enclave/schedules"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// extServer starts a server on a fresh store of dialect d with cfg (its
// storage fields and logger filled in).
func extServer(t *testing.T, d storage.Dialect, cfg enclave.Config) *enclave.Server {
	t.Helper()
	return newServer(t, d, func(c *enclave.Config) {
		cfg.DataDir, cfg.DatabaseURL, cfg.Logger, cfg.Accounts = c.DataDir, c.DatabaseURL, c.Logger, c.Accounts
		*c = cfg
	})
}

// background runs srv's background work until the test ends.
func background(t *testing.T, srv *enclave.Server) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.RunBackground(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// user creates a verified account and returns its interactive caller.
func user(t *testing.T, srv *enclave.Server, name string, roles ...string) (capabilities.Caller, storage.Owner) {
	t.Helper()
	ctx := context.Background()
	u, _, err := srv.Accounts().Identity.CreateUser(ctx, accounts.CreateUserInput{Email: name + "@example.com", Username: name, Password: "a long enough password", Verified: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range roles {
		if _, err := assignOrGrant(srv.Accounts(), ctx, u.ID, r); err != nil {
			t.Fatal(err)
		}
	}
	c, err := srv.Accounts().LoadCaller(ctx, u.StableID)
	if err != nil {
		t.Fatal(err)
	}
	c.Interactive, c.AllScopes = true, true
	return c, storage.Owner{ID: u.ID, StableID: u.StableID}
}

type userOut struct {
	UserID      string `json:"userId"`
	Interactive bool   `json:"interactive"`
}

// probes are two capabilities reporting who called: one for everyone, one
// InteractiveOnly.
func probes() []capabilities.Capability {
	h := func(_ context.Context, call *capabilities.Call, _ struct{}) (userOut, error) {
		return userOut{UserID: call.Caller.UserID, Interactive: call.Caller.Interactive}, nil
	}
	return []capabilities.Capability{
		capabilities.Define(capabilities.Spec[struct{}, userOut]{Name: "probeWho", Domain: "test", Description: "who calls",
			Annotations: &capabilities.Annotations{ReadOnly: true}, Handler: h}),
		capabilities.Define(capabilities.Spec[struct{}, userOut]{Name: "probeInteractive", Domain: "test", Description: "who calls, people only",
			Annotations: &capabilities.Annotations{ReadOnly: true}, Requires: capabilities.Requirement{InteractiveOnly: true}, Handler: h}),
	}
}

func sortedPerms(ps []capabilities.Permission) []capabilities.Permission {
	out := slices.Clone(ps)
	slices.Sort(out)
	return out
}

// An embedder's entities reach SQL and the built-in roles at start, and
// capabilities may require them; without Config.Vocabulary they may not.
func TestConfigVocabulary(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			vocab, err := capabilities.NewVocabulary("note")
			if err != nil {
				t.Fatal(err)
			}
			srv := extServer(t, d, enclave.Config{Vocabulary: vocab})
			var inSQL []capabilities.Permission
			if err := srv.Store().DB.NewSelect().Table("permissions").Column("name").Scan(ctx, &inSQL); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(sortedPerms(inSQL), sortedPerms(vocab.All())) {
				t.Fatalf("permissions in SQL %v\nwant the vocabulary %v", sortedPerms(inSQL), sortedPerms(vocab.All()))
			}
			ann, _ := user(t, srv, "ann")
			if !slices.Equal(sortedPerms(ann.Permissions), sortedPerms(vocab.RolePermissions(capabilities.RoleUser))) {
				t.Fatalf("user permissions %v", ann.Permissions)
			}
			readNote := capabilities.NewPermission(capabilities.ActionRead, "note", capabilities.Own)
			if !ann.HasPermission(readNote) {
				t.Fatal("role user lacks read:note:own")
			}
			c := capabilities.Define(capabilities.Spec[struct{}, userOut]{Name: "noteRead", Domain: "notes", Description: "read",
				Annotations: &capabilities.Annotations{ReadOnly: true}, Requires: capabilities.Requirement{Permissions: []capabilities.Permission{readNote}},
				Handler: func(context.Context, *capabilities.Call, struct{}) (userOut, error) { return userOut{}, nil }})
			if err := srv.Registry().Register(c); err != nil {
				t.Fatalf("register with the embedder's permission: %v", err)
			}
			if _, err := srv.Registry().Invoke(ctx, ann, "noteRead", nil); err != nil {
				t.Fatal(err)
			}
			// Restarting with the same vocabulary is idempotent.
			plain := extServer(t, d, enclave.Config{})
			if err := plain.Registry().Register(c); err == nil {
				t.Fatal("a server without the entity accepted read:note:own")
			}
		})
	}
}

// Callers from jobs and schedules are non-interactive: InteractiveOnly
// capabilities refuse them (answering like unknown ones), while the same
// account's interactive caller runs them.
func TestBackgroundCallersAreNotInteractive(t *testing.T) {
	ctx := context.Background()
	srv := extServer(t, storage.SQLite, enclave.Config{})
	if err := srv.Registry().Register(probes()...); err != nil {
		t.Fatal(err)
	}
	ann, _ := user(t, srv, "ann")
	if _, err := srv.Registry().Invoke(ctx, ann, "probeInteractive", nil); err != nil {
		t.Fatalf("interactive caller refused: %v", err)
	}
	_, err := srv.InvokeBackground(ctx, ann.UserID, "probeInteractive", nil)
	if capabilities.CodeOf(err) != capabilities.CodeNotFound {
		t.Fatalf("background caller ran an interactive-only capability: %v", err)
	}
	res, err := srv.InvokeBackground(ctx, ann.UserID, "probeWho", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Structured.(userOut); got.UserID != ann.UserID || got.Interactive {
		t.Fatalf("background caller: %+v", got)
	}
	if _, err := srv.InvokeBackground(ctx, "no-such-user", "probeWho", nil); capabilities.CodeOf(err) != capabilities.CodeNotFound {
		t.Fatalf("unknown user: %v", err)
	}
}

type jobSeen struct {
	mu   sync.Mutex
	runs []string
}

func (s *jobSeen) add(v string) { s.mu.Lock(); s.runs = append(s.runs, v); s.mu.Unlock() }
func (s *jobSeen) all() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.runs)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func outboxRows(t *testing.T, db bun.IDB, where string, args ...any) int {
	t.Helper()
	n, err := db.NewSelect().Table("outbox").Where(where, args...).Count(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}

// A job enqueued in a transaction runs after it commits and never if it
// rolls back; it acts as its user, non-interactively; a failure is retried.
func TestJobsRunAfterCommit(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			srv := extServer(t, d, enclave.Config{})
			if err := srv.Registry().Register(probes()...); err != nil {
				t.Fatal(err)
			}
			ann, _ := user(t, srv, "ann")
			var seen jobSeen
			failOnce := true
			err := srv.Jobs().Register("greet", func(ctx context.Context, j jobs.Job) error {
				var p struct{ Word string }
				if err := j.Decode(&p); err != nil {
					return err
				}
				if p.Word == "flaky" && failOnce {
					failOnce = false
					return errors.New("first attempt fails")
				}
				res, err := j.Invoke(ctx, "probeWho", nil)
				if err != nil {
					return err
				}
				who := res.Structured.(userOut)
				_, ierr := j.Invoke(ctx, "probeInteractive", nil)
				seen.add(p.Word + ":" + who.UserID + ":" + string(capabilities.CodeOf(ierr)))
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := srv.Jobs().Enqueue(ctx, srv.Store().DB, "nope", "", nil); !errors.Is(err, jobs.ErrUnknownKind) {
				t.Fatalf("unknown kind: %v", err)
			}
			if err := srv.Jobs().Enqueue(ctx, srv.Store().DB, "greet", "no-such-user", nil); !errors.Is(err, jobs.ErrUnknownUser) {
				t.Fatalf("unknown user: %v", err)
			}
			rollback := errors.New("roll back")
			err = srv.Store().RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
				if err := srv.Jobs().Enqueue(ctx, tx, "greet", ann.UserID, map[string]string{"Word": "never"}); err != nil {
					return err
				}
				return rollback
			})
			if !errors.Is(err, rollback) {
				t.Fatal(err)
			}
			err = srv.Store().RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
				if err := srv.Jobs().Enqueue(ctx, tx, "greet", ann.UserID, map[string]string{"Word": "hello"}); err != nil {
					return err
				}
				return srv.Jobs().Enqueue(ctx, tx, "greet", ann.UserID, map[string]string{"Word": "flaky"})
			})
			if err != nil {
				t.Fatal(err)
			}
			background(t, srv)
			waitFor(t, "the first job", func() bool { return len(seen.all()) >= 1 })
			// The flaky job failed once and waits for its backoff: bring it forward.
			waitFor(t, "the failed attempt", func() bool { return outboxRows(t, srv.Store().DB, "attempts = 1") == 1 })
			if _, err := srv.Store().DB.NewUpdate().Table("outbox").Set("next_attempt_at = ?", time.Now().UTC().Add(-time.Second)).Where("attempts = 1").Exec(ctx); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the retried job", func() bool { return len(seen.all()) == 2 })
			got := seen.all()
			sort.Strings(got)
			want := []string{"flaky:" + ann.UserID + ":not_found", "hello:" + ann.UserID + ":not_found"}
			if !slices.Equal(got, want) {
				t.Fatalf("jobs ran %v, want %v", got, want)
			}
			waitFor(t, "the rows to go", func() bool { return outboxRows(t, srv.Store().DB, "1 = 1") == 0 })
		})
	}
}

// Job rows carry their owner: one account's export lists its jobs and not
// another's, and deleting it removes its jobs and leaves the other's; dead
// jobs are purged after the retention.
func TestJobRowsAreOwned(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			srv := extServer(t, d, enclave.Config{})
			if err := srv.Jobs().Register("work", func(context.Context, jobs.Job) error { return nil }); err != nil {
				t.Fatal(err)
			}
			ann, annO := user(t, srv, "ann")
			bob, bobO := user(t, srv, "bob")
			for _, c := range []capabilities.Caller{ann, bob, bob} {
				if err := srv.Jobs().Enqueue(ctx, srv.Store().DB, "work", c.UserID, map[string]string{"secret": "s3cret"}); err != nil {
					t.Fatal(err)
				}
			}
			if err := srv.Jobs().Enqueue(ctx, srv.Store().DB, "work", "", nil); err != nil {
				t.Fatal(err)
			}
			m, err := srv.Lifecycle().Manifest(ctx, annO)
			if err != nil {
				t.Fatal(err)
			}
			var count int64 = -1
			for _, s := range m.Sections {
				if s.Name == "sql:outbox" {
					count = s.Count
				}
			}
			if count != 1 {
				t.Fatalf("ann's export lists %d jobs, want 1 (sections %+v)", count, m.Sections)
			}
			page, err := srv.Lifecycle().Section(ctx, annO, "sql:outbox", "", 0)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := json.Marshal(page)
			if containsString(raw, "s3cret") || !containsString(raw, storage.RedactedValue) {
				t.Fatalf("export page shows the payload: %s", raw)
			}
			if _, err := srv.Lifecycle().Delete(ctx, annO); err != nil {
				t.Fatal(err)
			}
			if n := outboxRows(t, srv.Store().DB, "user_id = ?", annO.ID); n != 0 {
				t.Fatalf("%d of ann's jobs survived her deletion", n)
			}
			if n := outboxRows(t, srv.Store().DB, "user_id = ?", bobO.ID); n != 2 {
				t.Fatalf("bob has %d jobs after ann's deletion, want 2", n)
			}
			// (Ownerless too: the admin events of the accounts' creation and
			// deletion, on their own topic.)
			if n := outboxRows(t, srv.Store().DB, "user_id IS NULL AND topic <> ?", "job:enclave.event"); n != 1 {
				t.Fatalf("ownerless jobs: %d, want 1", n)
			}
			// Dead letters: one old, one recent.
			old, recent := time.Now().UTC().Add(-40*24*time.Hour), time.Now().UTC().Add(-time.Hour)
			var ids []int64
			if err := srv.Store().DB.NewSelect().Table("outbox").Column("id").Where("user_id = ?", bobO.ID).Order("id").Scan(ctx, &ids); err != nil {
				t.Fatal(err)
			}
			for i, at := range []time.Time{old, recent} {
				if _, err := srv.Store().DB.NewUpdate().Table("outbox").Set("dead_at = ?", at).Where("id = ?", ids[i]).Exec(ctx); err != nil {
					t.Fatal(err)
				}
			}
			n, err := outbox.PurgeDead(ctx, srv.Store().DB, 30*24*time.Hour)
			if err != nil || n != 1 {
				t.Fatalf("purged %d, %v; want 1", n, err)
			}
			if outboxRows(t, srv.Store().DB, "id = ?", ids[1]) != 1 {
				t.Fatal("a recent dead letter was purged")
			}
			_ = bob
		})
	}
}

func containsString(b []byte, s string) bool { return strings.Contains(string(b), s) }

// A schedule runs under its own lease, and its ticks invoke capabilities
// as non-interactive callers.
func TestSchedules(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			srv := extServer(t, d, enclave.Config{})
			if err := srv.Registry().Register(probes()...); err != nil {
				t.Fatal(err)
			}
			ann, _ := user(t, srv, "ann")
			var seen jobSeen
			err := srv.Schedules().Add(schedules.Schedule{Name: "sweep", Every: time.Second, Run: func(ctx context.Context, tk schedules.Tick) error {
				res, err := tk.Invoke(ctx, ann.UserID, "probeWho", nil)
				if err != nil {
					return err
				}
				_, ierr := tk.Invoke(ctx, ann.UserID, "probeInteractive", nil)
				seen.add(tk.Name + ":" + res.Structured.(userOut).UserID + ":" + string(capabilities.CodeOf(ierr)))
				return nil
			}})
			if err != nil {
				t.Fatal(err)
			}
			for _, bad := range []schedules.Schedule{
				{Name: "sweep", Every: time.Second, Run: func(context.Context, schedules.Tick) error { return nil }},
				{Name: "Bad Name", Every: time.Second, Run: func(context.Context, schedules.Tick) error { return nil }},
				{Name: "fast", Every: time.Millisecond, Run: func(context.Context, schedules.Tick) error { return nil }},
				{Name: "norun", Every: time.Second},
			} {
				if err := srv.Schedules().Add(bad); err == nil {
					t.Errorf("Add(%+v) accepted", bad.Name)
				}
			}
			background(t, srv)
			waitFor(t, "a tick", func() bool { return len(seen.all()) >= 1 })
			if got := seen.all()[0]; got != "sweep:"+ann.UserID+":not_found" {
				t.Fatalf("tick saw %q", got)
			}
			n, err := srv.Store().DB.NewSelect().Table("lane_leases").Where("name = ?", schedules.LanePrefix+"sweep").Count(ctx)
			if err != nil || n != 1 {
				t.Fatalf("lease rows: %d, %v", n, err)
			}
		})
	}
}

// Feature flags are SQL rows that admins manage through capabilities; a
// capability requiring a flag is hidden until it is on for the caller,
// from the next call on.
func TestFeatureFlags(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			srv := extServer(t, d, enclave.Config{})
			beta := capabilities.Define(capabilities.Spec[struct{}, userOut]{Name: "betaThing", Domain: "test", Description: "beta",
				Annotations: &capabilities.Annotations{ReadOnly: true}, Requires: capabilities.Requirement{Feature: "beta"},
				Handler: func(context.Context, *capabilities.Call, struct{}) (userOut, error) { return userOut{}, nil }})
			if err := srv.Registry().Register(beta); err != nil {
				t.Fatal(err)
			}
			admin, _ := user(t, srv, "ada", capabilities.RoleAdmin)
			ann, _ := user(t, srv, "ann")
			reg := srv.Registry()
			if reg.IsVisible(ctx, ann, "betaThing") {
				t.Fatal("flagged capability visible before the flag exists")
			}
			// Not an admin: the admin capabilities do not exist for ann.
			if _, err := reg.Invoke(ctx, ann, "adminFeatureSet", json.RawMessage(`{"name":"beta","enabled":true}`)); capabilities.CodeOf(err) != capabilities.CodeNotFound {
				t.Fatalf("non-admin set a flag: %v", err)
			}
			if _, err := reg.Invoke(ctx, admin, "adminFeatureSet", json.RawMessage(`{"name":"Bad Name","enabled":true}`)); capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
				t.Fatalf("bad flag name: %v", err)
			}
			if _, err := reg.Invoke(ctx, admin, "adminFeatureSet", json.RawMessage(`{"name":"beta","enabled":true,"role":"nosuchrole"}`)); capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
				t.Fatalf("unknown role: %v", err)
			}
			if _, err := reg.Invoke(ctx, admin, "adminFeatureSet", json.RawMessage(`{"name":"beta","enabled":true,"role":"admin"}`)); err != nil {
				t.Fatal(err)
			}
			if reg.IsVisible(ctx, ann, "betaThing") || !reg.IsVisible(ctx, admin, "betaThing") {
				t.Fatal("an admin-only flag: wrong visibility")
			}
			if _, err := reg.Invoke(ctx, admin, "adminFeatureSet", json.RawMessage(`{"name":"beta","enabled":true}`)); err != nil {
				t.Fatal(err)
			}
			if _, err := reg.Invoke(ctx, ann, "betaThing", nil); err != nil {
				t.Fatalf("flag on for everyone, ann refused: %v", err)
			}
			res, err := reg.Invoke(ctx, admin, "adminFeatureList", nil)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := json.Marshal(res.Structured)
			var list struct {
				Flags []struct {
					Name    string `json:"name"`
					Enabled bool   `json:"enabled"`
					Role    string `json:"role"`
				} `json:"flags"`
			}
			if err := json.Unmarshal(raw, &list); err != nil || len(list.Flags) != 1 || list.Flags[0].Name != "beta" || !list.Flags[0].Enabled || list.Flags[0].Role != "" {
				t.Fatalf("list: %s, %v", raw, err)
			}
			if _, err := reg.Invoke(ctx, admin, "adminFeatureSet", json.RawMessage(`{"name":"beta","enabled":false}`)); err != nil {
				t.Fatal(err)
			}
			if _, err := reg.Invoke(ctx, ann, "betaThing", nil); capabilities.CodeOf(err) != capabilities.CodeNotFound {
				t.Fatalf("flag off, ann still calls it: %v", err)
			}
			// Every change is audited with the admin's hash and the flag; a
			// change the domain refuses as a failure. A name outside the
			// schema's pattern never reaches the domain (refused at the
			// choke point as invalid input), so it has no row here.
			events, err := srv.Audit().Query(ctx, audit.Filter{Action: "admin_feature_set"}, storage.PageRequest{Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range events.Items {
				if e.UserHash != srv.Audit().HashUser(admin.UserID) || e.Category != audit.CategoryAccount {
					t.Fatalf("audit row %+v: want the admin's hash", e)
				}
				got = append(got, e.Result+": "+e.Reason)
			}
			want := []string{"success: beta off", "success: beta on", "success: beta on for role admin",
				"failure: beta on for role nosuchrole"}
			if !slices.Equal(got, want) {
				t.Fatalf("audit of flag changes:\n got %q\nwant %q", got, want)
			}
		})
	}
}

func userID(t *testing.T, srv *enclave.Server, stable string) int64 {
	t.Helper()
	u, err := srv.Accounts().Identity.UserByStableID(context.Background(), stable)
	if err != nil {
		t.Fatal(err)
	}
	return u.ID
}

// The default quota refuses past the daily limit with the reset time,
// shares its counts across replicas through SQL, and its counters belong
// to the account.
func TestDailyQuota(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			sc := storagetest.Config(t, d)
			limits := quota.Limits{Daily: map[string]int64{quota.DefaultClass: 3, "cheap": 100}, Classes: map[string]string{"probeInteractive": "cheap"}, Flush: time.Hour}
			open := func() *enclave.Server {
				srv := openServer(t, enclave.Config{DataDir: sc.DataDir, DatabaseURL: sc.DatabaseURL, Logger: quiet(), Accounts: fastArgon, QuotaLimits: limits})
				if err := srv.Registry().Register(probes()...); err != nil {
					t.Fatal(err)
				}
				return srv
			}
			a := open()
			ann, annO := user(t, a, "ann")
			bob, _ := user(t, a, "bob")
			for i := range 3 {
				if _, err := a.Registry().Invoke(ctx, ann, "probeWho", nil); err != nil {
					t.Fatalf("call %d: %v", i+1, err)
				}
			}
			_, err := a.Registry().Invoke(ctx, ann, "probeWho", nil)
			if capabilities.CodeOf(err) != capabilities.CodeQuotaExceeded {
				t.Fatalf("fourth call: %v", err)
			}
			at, ok := capabilities.RetryAfterOf(err)
			now := time.Now().UTC()
			if !ok || !at.After(now) || at.Sub(now) > 24*time.Hour || at.Hour() != 0 || at.Minute() != 0 {
				t.Fatalf("retry after %v, %v", at, ok)
			}
			// Another class and another user are counted apart.
			if _, err := a.Registry().Invoke(ctx, ann, "probeInteractive", nil); err != nil {
				t.Fatalf("other class: %v", err)
			}
			if _, err := a.Registry().Invoke(ctx, bob, "probeWho", nil); err != nil {
				t.Fatalf("other user: %v", err)
			}
			if err := a.Quota().Flush(ctx); err != nil {
				t.Fatal(err)
			}
			usage, err := quota.UsageOf(ctx, a.Store().DB, annO.ID)
			if err != nil || len(usage) != 2 {
				t.Fatalf("usage %+v, %v", usage, err)
			}
			// A second replica sees the total through SQL.
			b := open()
			if _, err := b.Registry().Invoke(ctx, ann, "probeWho", nil); capabilities.CodeOf(err) != capabilities.CodeQuotaExceeded {
				t.Fatalf("second replica allowed a call past the limit: %v", err)
			}
			if _, err := b.Registry().Invoke(ctx, bob, "probeWho", nil); err != nil {
				t.Fatalf("second replica, bob: %v", err)
			}
			// Counters belong to the account: its export lists its own
			// (two classes), its deletion removes them and leaves bob's.
			if err := a.Quota().Flush(ctx); err != nil {
				t.Fatal(err)
			}
			m, err := a.Lifecycle().Manifest(ctx, annO)
			if err != nil {
				t.Fatal(err)
			}
			listed := int64(-1)
			for _, s := range m.Sections {
				if s.Name == "sql:quota_usage" {
					listed = s.Count
				}
			}
			if listed != 2 {
				t.Fatalf("ann's export lists %d counters, want 2", listed)
			}
			if _, err := a.Lifecycle().Delete(ctx, annO); err != nil {
				t.Fatal(err)
			}
			if n, _ := a.Store().DB.NewSelect().Table("quota_usage").Where("user_id = ?", annO.ID).Count(ctx); n != 0 {
				t.Fatalf("%d counters survived the deletion", n)
			}
			if n, _ := a.Store().DB.NewSelect().Table("quota_usage").Where("user_id = ?", userID(t, a, bob.UserID)).Count(ctx); n != 1 {
				t.Fatalf("bob has %d counters after ann's deletion, want 1", n)
			}
			// Retention keeps seven days, today included.
			bobID := userID(t, a, bob.UserID)
			for _, back := range []int{6, 7} {
				day := now.AddDate(0, 0, -back).Format(time.DateOnly)
				if _, err := a.Store().DB.ExecContext(ctx, "INSERT INTO quota_usage (user_id, class, day, calls) VALUES (?, 'default', ?, 1)", bobID, day); err != nil {
					t.Fatal(err)
				}
			}
			if n, err := quota.Purge(ctx, a.Store().DB, now); err != nil || n != 1 {
				t.Fatalf("purged %d, %v; want the 7-day-old counter only", n, err)
			}
		})
	}
}

// Two replicas sharing a database run a schedule once per period between
// them, not once each.
func TestScheduleRunsOnOneReplicaPerPeriod(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			sc := storagetest.Config(t, d)
			var runs atomic.Int32
			const every = 2 * time.Second
			start := time.Now()
			for range 2 {
				srv := openServer(t, enclave.Config{DataDir: sc.DataDir, DatabaseURL: sc.DatabaseURL, Logger: quiet(), Accounts: fastArgon})
				if err := srv.Schedules().Add(schedules.Schedule{Name: "tick", Every: every, Run: func(context.Context, schedules.Tick) error {
					runs.Add(1)
					return nil
				}}); err != nil {
					t.Fatal(err)
				}
				background(t, srv)
			}
			time.Sleep(3 * time.Second)
			// The first replica ran from start (starting the second can take
			// seconds on a loaded machine): the time since then spans at most
			// elapsed/every + 1 periods, one run each, where two replicas
			// without the lease would run about twice as often.
			n := runs.Load()
			elapsed := time.Since(start)
			most := int32(elapsed/every) + 1
			if n < 1 || n > most {
				t.Fatalf("%d runs in %v of a %v schedule on two replicas, want 1 to %d", n, elapsed.Round(time.Millisecond), every, most)
			}
		})
	}
}

// assignOrGrant gives role to userID: the admin role through the
// operator's path, any other through AssignRole.
func assignOrGrant(svc *accounts.Service, ctx context.Context, userID int64, role string) (bool, error) {
	if role == capabilities.RoleAdmin {
		return svc.Roles.GrantAdminAsOperator(ctx, userID)
	}
	return svc.Roles.AssignRole(ctx, userID, role)
}
