package verifiers_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/cluster"
	"github.com/enclave-mcp/enclave/mcp"
	"github.com/enclave-mcp/enclave/mcp/verifiers"
	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/storage"
)

// The cache of verified bearer tokens' callers is wired to every write
// that changes what it holds: an entry a verifier stored is gone once the
// account is suspended. With a process-local bus the invalidation is also
// written as an SQL notice, for other processes on the same database.
func ExampleNewCallerCache() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "callercache-example")
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
	authz, err := oauth.New(ctx, oauth.Options{Store: store, BaseURL: "http://localhost:8080", Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	ada, _, err := acc.Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "ada@example.com", Username: "ada", Password: "a long password for ada", Verified: true})
	if err != nil {
		log.Fatal(err)
	}

	bus := cluster.NewLocal()
	defer bus.Close()
	cache, stop, err := verifiers.NewCallerCache(verifiers.CacheConfig{TTL: time.Minute, Bus: bus,
		DB: store.DB, Reader: store.DB, Accounts: acc, OAuth: authz, Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	defer stop()

	// What a verifier does after checking a token in SQL.
	t := cache.Begin()
	cache.Put(t, "token-of-ada", ada.ID, "grant-1", time.Time{}, mcp.TokenInfo{UserID: ada.StableID, Grant: "grant-1"})
	_, hit := cache.Get("token-of-ada")
	fmt.Println("cached:", hit)

	if _, err := acc.Lifecycle.Suspend(ctx, ada.ID); err != nil {
		log.Fatal(err)
	}
	_, hit = cache.Get("token-of-ada")
	fmt.Println("after the suspension:", hit)

	// A negative TTL caches nothing (invalidations are still written).
	off, stopOff, err := verifiers.NewCallerCache(verifiers.CacheConfig{TTL: -1, Bus: bus, DB: store.DB, Accounts: acc, OAuth: authz, Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	defer stopOff()
	fmt.Println("off:", off == nil)
	// Output:
	// cached: true
	// after the suspension: false
	// off: true
}
