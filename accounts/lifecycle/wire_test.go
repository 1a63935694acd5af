package lifecycle_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// ran records, in order, the hooks a deletion ran.
type ran []string

func (r *ran) grants() *grantRevoker { return &grantRevoker{r} }

type grantRevoker struct{ r *ran }

func (g *grantRevoker) RevokeAll(_ context.Context, userID int64) error {
	*g.r = append(*g.r, "grants")
	return nil
}

type revoker struct {
	r    *ran
	name string
}

func (v revoker) RevokeAll(context.Context, storage.Owner) error {
	*v.r = append(*v.r, v.name)
	return nil
}

// Wire declares the users' retention first, and its deletions run the
// OAuth revocation, then the connections', then the hooks added later,
// and in the deleting transaction the transaction hooks added later, in
// the order they were added, their updated rows counted under their
// surface. The deletion-resume lane finishes an interrupted deletion and
// audits it with the reason "resumed".
func TestWireHooksAndLanes(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		acc, err := accounts.New(ctx, s, accounts.Config{Argon2: accounts.Argon2Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1}, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		inv := storage.NewInventory()
		if err := lifecycle.RegisterInventory(inv); err != nil {
			t.Fatal(err)
		}
		log := audit.New(s, []byte("0123456789abcdef0123456789abcdef"), quiet())
		var order ran
		policies := retention.NewSet()
		if err := policies.Add(retention.Kept("someone_elses", "declared before")); err != nil {
			t.Fatal(err)
		}
		svc, err := lifecycle.Wire(lifecycle.Config{Store: s, Inventory: inv, Accounts: acc, Logger: quiet(), Audit: log,
			Grants: order.grants(), Connections: revoker{&order, "connections"}}, policies)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range policies.Policies() {
			names = append(names, p.Table)
		}
		if want := []string{"someone_elses", "users", "account_write_leases"}; !slices.Equal(names, want) {
			t.Fatalf("policies %v, want %v", names, want)
		}
		svc.AddHooks(lifecycle.Hook{Name: "remote", Run: revoker{&order, "remote"}.RevokeAll})
		for _, name := range []string{"event", "reviewer"} {
			svc.AddTxHooks(lifecycle.TxHook{Name: name, Updated: "sql:" + name, Run: func(context.Context, bun.Tx, storage.Owner) (int64, error) {
				order = append(order, name)
				return int64(len(name)), nil
			}})
		}

		var users []storage.Owner
		for _, name := range []string{"ada", "bea"} {
			u, err := acc.Identity.Signup(ctx, accounts.SignupInput{Email: name + "@example.com", Username: name, Password: "a long password for " + name})
			if err != nil {
				t.Fatal(err)
			}
			users = append(users, storage.Owner{ID: u.ID, StableID: u.StableID})
		}
		res, err := svc.Delete(ctx, users[0])
		if err != nil || !res.Completed {
			t.Fatalf("delete: %+v, %v", res, err)
		}
		if want := (ran{"grants", "connections", "remote", "event", "reviewer"}); !slices.Equal(order, want) {
			t.Fatalf("hooks ran %v, want %v", order, want)
		}
		if res.Updated["sql:event"] != 5 || res.Updated["sql:reviewer"] != 8 {
			t.Fatalf("updated %v", res.Updated)
		}

		lanes := svc.Lanes()
		if len(lanes) != 1 || lanes[0].Name != "deletion-resume" || lanes[0].Every != 10*time.Minute {
			t.Fatalf("lanes %+v", lanes)
		}
		if _, err := acc.Lifecycle.MarkDeleting(ctx, users[1].ID); err != nil {
			t.Fatal(err)
		}
		// Marked a minute ago: within the grace period, left alone.
		if _, err := s.DB.NewRaw("UPDATE users SET deleting_at = ? WHERE id = ?", time.Now().Add(-time.Minute).UTC(), users[1].ID).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if err := lanes[0].Run(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := acc.Identity.UserByID(ctx, users[1].ID); err != nil {
			t.Fatalf("a deletion within its grace period was resumed: %v", err)
		}
		// Interrupted an hour ago: finished, and audited.
		if _, err := s.DB.NewRaw("UPDATE users SET deleting_at = ? WHERE id = ?", time.Now().Add(-time.Hour).UTC(), users[1].ID).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if err := lanes[0].Run(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := acc.Identity.UserByID(ctx, users[1].ID); !errors.Is(err, accounts.ErrNotFound) {
			t.Fatalf("the interrupted deletion was not finished: %v", err)
		}
		for i, want := range []int{0, 1} {
			rows, err := log.Query(ctx, audit.Filter{Category: audit.CategoryAccount, Action: "delete_account", UserHash: log.HashUser(users[i].StableID)}, storage.PageRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if len(rows.Items) != want || (want == 1 && (rows.Items[0].Result != audit.ResultSuccess || rows.Items[0].Reason != "resumed")) {
				t.Fatalf("audit of user %d: %+v, want %d row(s)", i, rows.Items, want)
			}
		}
	})
}

// Hooks added while deletions run (a domain wired late) race nothing: each
// deletion runs the hooks it started with, all of them, in order, and the
// added ones from the next deletion on (run it with -race).
func TestAddHooksWhileDeleting(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	ctx := context.Background()
	acc, err := accounts.New(ctx, s, accounts.Config{Argon2: accounts.Argon2Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	inv := storage.NewInventory()
	if err := lifecycle.RegisterInventory(inv); err != nil {
		t.Fatal(err)
	}
	var order ran
	svc, err := lifecycle.Wire(lifecycle.Config{Store: s, Inventory: inv, Accounts: acc, Logger: quiet(),
		Audit:  audit.New(s, []byte("0123456789abcdef0123456789abcdef"), quiet()),
		Grants: order.grants(), Connections: revoker{&order, "connections"}}, retention.NewSet())
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	var users []storage.Owner
	for i := range n {
		name := "user" + string(rune('a'+i))
		u, err := acc.Identity.Signup(ctx, accounts.SignupInput{Email: name + "@example.com", Username: name, Password: "a long password for " + name})
		if err != nil {
			t.Fatal(err)
		}
		users = append(users, storage.Owner{ID: u.ID, StableID: u.StableID})
	}
	// Each deletion records the hooks it ran (the hooks run one deletion
	// at a time here: order is only appended to by the deleting goroutine).
	added := make(chan struct{})
	go func() {
		defer close(added)
		for range n {
			svc.AddHooks(lifecycle.Hook{Name: "late", Run: func(context.Context, storage.Owner) error {
				order = append(order, "late")
				return nil
			}})
			svc.AddTxHooks(lifecycle.TxHook{Name: "late tx", Run: func(context.Context, bun.Tx, storage.Owner) (int64, error) {
				order = append(order, "late tx")
				return 0, nil
			}})
		}
	}()
	lates := 0
	for _, u := range users {
		order = nil
		if res, err := svc.Delete(ctx, u); err != nil || !res.Completed {
			t.Fatalf("delete: %+v, %v", res, err)
		}
		if len(order) < 2 || order[0] != "grants" || order[1] != "connections" {
			t.Fatalf("hooks ran %v: the wired ones first", order)
		}
		late, lateTx := 0, 0
		for _, h := range order[2:] {
			switch {
			case h == "late" && lateTx == 0:
				late++
			case h == "late tx":
				lateTx++
			default:
				t.Fatalf("hooks ran %v", order)
			}
		}
		// A deletion sees a whole snapshot: no fewer hooks than the one before.
		if late < lates || lateTx > late {
			t.Fatalf("hooks ran %v after a deletion that ran %d late ones", order, lates)
		}
		lates = late
	}
	<-added
	order = nil
	u, err := acc.Identity.Signup(ctx, accounts.SignupInput{Email: "last@example.com", Username: "last", Password: "a long password for last"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Delete(ctx, storage.Owner{ID: u.ID, StableID: u.StableID}); err != nil {
		t.Fatal(err)
	}
	if want := 2 + 2*n; len(order) != want {
		t.Fatalf("after every hook was added, a deletion ran %d hooks (%v), want %d", len(order), order, want)
	}
}
