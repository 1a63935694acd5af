package lifecycle_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/storage"
)

// printGrants stands for the authorization server.
type printGrants struct{}

func (printGrants) RevokeAll(context.Context, int64) error {
	fmt.Println("hook: OAuth grants revoked")
	return nil
}

// printConnections stands for connected accounts.
type printConnections struct{}

func (printConnections) RevokeAll(context.Context, storage.Owner) error {
	fmt.Println("hook: connected accounts revoked")
	return nil
}

// Wire declares the users' retention first, and its deletions revoke the
// account's OAuth grants, then its connected accounts; a domain wired
// later adds its own hooks, which run after them, and its transaction
// hooks, which run in the transaction that deletes the rows.
func ExampleWire() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "lifecycle-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := storage.Open(ctx, storage.Config{DataDir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if _, err := migrations.Apply(ctx, store.DB); err != nil {
		log.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	acc, err := accounts.New(ctx, store, accounts.Config{Logger: quiet,
		Argon2: accounts.Argon2Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1}})
	if err != nil {
		log.Fatal(err)
	}
	inv := storage.NewInventory()
	if err := lifecycle.RegisterInventory(inv); err != nil {
		log.Fatal(err)
	}
	policies := retention.NewSet()
	svc, err := lifecycle.Wire(lifecycle.Config{Store: store, Inventory: inv, Accounts: acc, Logger: quiet,
		Audit:  audit.New(store, []byte("an audit key of thirty-two bytes"), quiet),
		Grants: printGrants{}, Connections: printConnections{}}, policies)
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range policies.Policies() {
		fmt.Println("retention:", p.Table)
	}
	for _, l := range svc.Lanes() {
		fmt.Println("lane:", l.Name, l.Every)
	}

	// What a domain wired later adds.
	svc.AddHooks(lifecycle.Hook{Name: "revoke remote tokens", Run: func(context.Context, storage.Owner) error {
		fmt.Println("hook: remote tokens revoked")
		return nil
	}})
	svc.AddTxHooks(lifecycle.TxHook{Name: "publish", Run: func(context.Context, bun.Tx, storage.Owner) (int64, error) {
		fmt.Println("in the deleting transaction: event published")
		return 0, nil
	}})

	u, _, err := acc.Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "ada@example.com", Username: "ada",
		Password: "a long password for ada", Verified: true})
	if err != nil {
		log.Fatal(err)
	}
	res, err := svc.Delete(ctx, storage.Owner{ID: u.ID, StableID: u.StableID})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("completed:", res.Completed)
	// Output:
	// retention: users
	// retention: account_write_leases
	// lane: deletion-resume 10m0s
	// hook: OAuth grants revoked
	// hook: connected accounts revoked
	// hook: remote tokens revoked
	// in the deleting transaction: event published
	// completed: true
}
