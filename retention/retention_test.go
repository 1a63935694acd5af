package retention_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// makeTable creates table (id, at, kind, day, at_ms) and fills it with old
// rows (older than a week) and fresh ones.
func makeTable(t *testing.T, db bun.IDB, table string, old, fresh int) {
	t.Helper()
	ctx := context.Background()
	ts := "TIMESTAMP"
	if db.Dialect().Name().String() == "pg" {
		ts = "TIMESTAMPTZ"
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE ? (id INTEGER PRIMARY KEY, at "+ts+" NOT NULL, kind TEXT NOT NULL, day TEXT NOT NULL, at_ms BIGINT NOT NULL)", bun.Ident(table)); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	id := 0
	add := func(n int, at time.Time) {
		for range n {
			id++
			kind := "a"
			if id%2 == 0 {
				kind = "b"
			}
			if _, err := db.ExecContext(ctx, "INSERT INTO ? (id, at, kind, day, at_ms) VALUES (?, ?, ?, ?, ?)",
				bun.Ident(table), id, at, kind, at.Format(time.DateOnly), at.UnixMilli()); err != nil {
				t.Fatal(err)
			}
		}
	}
	add(old, now.Add(-10*24*time.Hour))
	add(fresh, now.Add(-time.Hour))
}

func count(t *testing.T, db bun.IDB, table, where string) int {
	t.Helper()
	q := db.NewSelect().TableExpr("?", bun.Ident(table))
	if where != "" {
		q = q.Where(where)
	}
	n, err := q.Count(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}

// Every unit, and an extra condition, purge exactly the rows past the
// window, on both dialects.
func TestPurgeAgeUnitsAndConditions(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		week := 7 * 24 * time.Hour
		for _, tc := range []struct {
			p         retention.Policy
			wantLeft  int
			wantGone  int64
			whereLeft string
		}{
			{retention.Age("t_ts", "at", week), 5, 6, ""},
			{retention.Age("t_day", "day", week).In(retention.Day), 5, 6, ""},
			{retention.Age("t_ms", "at_ms", week).In(retention.UnixMillis), 5, 6, ""},
			{retention.Age("t_where", "at", week).If("kind = 'b'"), 8, 3, "kind = 'b'"},
		} {
			makeTable(t, s.DB, tc.p.Table, 6, 5)
			n, err := retention.PurgeAge(ctx, s.DB, tc.p, time.Now(), 100)
			if err != nil {
				t.Fatal(err)
			}
			if n != tc.wantGone || count(t, s.DB, tc.p.Table, "") != tc.wantLeft {
				t.Errorf("%s: removed %d (want %d), left %d (want %d)", tc.p.Table, n, tc.wantGone, count(t, s.DB, tc.p.Table, ""), tc.wantLeft)
			}
		}
		// The kind = 'a' old rows stayed in t_where.
		if n := count(t, s.DB, "t_where", "kind = 'a'"); n != 6 {
			t.Errorf("rows outside the condition: %d left, want 6", n)
		}
		// A batch removes at most limit rows, oldest first.
		makeTable(t, s.DB, "t_batch", 7, 2)
		n, err := retention.PurgeAge(ctx, s.DB, retention.Age("t_batch", "at", week), time.Now(), 3)
		if err != nil || n != 3 {
			t.Fatalf("batch of 3 removed %d, %v", n, err)
		}
	})
}

// Round-robin: with no budget left after the first pass, every table got
// exactly one batch, so a huge table does not starve a small one; with
// budget, every table is drained.
func TestRunnerRoundRobinAndBudget(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		makeTable(t, s.DB, "huge", 45, 1)
		makeTable(t, s.DB, "small", 3, 1)
		set := retention.NewSet()
		week := 7 * 24 * time.Hour
		if err := set.Add(retention.Age("huge", "at", week), retention.Age("small", "at", week)); err != nil {
			t.Fatal(err)
		}
		var purged = map[string]int64{}
		r := &retention.Runner{DB: s.DB, Set: set, Batch: 10, Budget: time.Nanosecond, Logger: nil,
			OnPurge: func(table string, n int64) { purged[table] += n }}
		rep, err := r.Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Rows["huge"] != 10 || rep.Rows["small"] != 3 || rep.Batches["huge"] != 1 || rep.Batches["small"] != 1 {
			t.Fatalf("first pass: rows %v batches %v", rep.Rows, rep.Batches)
		}
		if !rep.BudgetSpent || strings.Join(rep.Pending, ",") != "huge" {
			t.Fatalf("budget spent %v, pending %v", rep.BudgetSpent, rep.Pending)
		}
		if purged["huge"] != 10 || purged["small"] != 3 {
			t.Fatalf("OnPurge told %v", purged)
		}
		r.Budget = time.Minute
		rep, err = r.Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Rows["huge"] != 35 || rep.BudgetSpent || len(rep.Pending) != 0 || rep.Batches["huge"] != 4 {
			t.Fatalf("second run: rows %v batches %v spent %v", rep.Rows, rep.Batches, rep.BudgetSpent)
		}
		if count(t, s.DB, "huge", "") != 1 || count(t, s.DB, "small", "") != 1 {
			t.Fatal("fresh rows were purged")
		}
	})
}

// A failing table does not stop the others.
func TestRunnerFailureIsolated(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		makeTable(t, s.DB, "ok", 2, 0)
		set := retention.NewSet()
		if err := set.Add(retention.Age("ok", "at", time.Hour), retention.Age("gone", "at", time.Hour)); err != nil {
			t.Fatal(err)
		}
		rep, err := (&retention.Runner{DB: s.DB, Set: set}).Run(context.Background())
		if err == nil || !strings.Contains(err.Error(), "gone") {
			t.Fatalf("error %v, want one naming the missing table", err)
		}
		if rep.Rows["ok"] != 2 {
			t.Fatalf("the healthy table lost %d rows, want 2", rep.Rows["ok"])
		}
	}, storagetest.Unmigrated)
}

// Check names a table without a policy, a policy without a table, and an
// age policy on a missing column.
func TestCheckNamesEveryMismatch(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		makeTable(t, s.DB, "covered", 0, 0)
		makeTable(t, s.DB, "forgotten", 0, 0)
		set := retention.NewSet()
		if err := set.Add(
			retention.Age("covered", "nope", time.Hour),
			retention.Kept("phantom", "test"),
		); err != nil {
			t.Fatal(err)
		}
		err := set.Check(context.Background(), s.DB)
		if err == nil {
			t.Fatal("Check passed")
		}
		for _, want := range []string{"table forgotten has no retention policy", "policy for phantom names a table that does not exist", "covered names column nope"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Check error lacks %q:\n%v", want, err)
			}
		}
		if err := set.Add(retention.Kept("forgotten", "test")); err != nil {
			t.Fatal(err)
		}
		if err := set.Check(context.Background(), s.DB); strings.Contains(err.Error(), "forgotten") {
			t.Errorf("a declared table is still reported: %v", err)
		}
	}, storagetest.Unmigrated)
}

func TestAddRefusesBadPolicies(t *testing.T) {
	set := retention.NewSet()
	for _, p := range []retention.Policy{
		retention.Kept("x", ""),
		retention.Age("Bad Name", "at", time.Hour),
		retention.Age("x", "at", time.Hour).If("at < ?"),
		retention.Custom("x", "", nil),
	} {
		if err := set.Add(p); err == nil {
			t.Errorf("Add(%+v) accepted", p)
		}
	}
	if err := set.Add(retention.Kept("x", "why")); err != nil {
		t.Fatal(err)
	}
	if err := set.Add(retention.UntilAccountDeleted("x")); err == nil {
		t.Error("a second policy for one table was accepted")
	}
}
