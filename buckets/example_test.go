package buckets_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/enclave-mcp/enclave/buckets"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/storage"
)

// A bucket is addressed by its owner, who comes from the caller, and a
// storage id. Writes can be conditional on the revision a read returned.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "buckets-example")
	defer os.RemoveAll(dir)
	store, err := storage.Open(ctx, storage.Config{DataDir: dir, Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	if _, err := migrations.Apply(ctx, store.DB); err != nil {
		panic(err)
	}
	now := time.Now().UTC()
	alice := storage.Owner{ID: 1, StableID: strings.Repeat("a", 64)}
	if _, err := store.DB.ExecContext(ctx, "INSERT INTO users (id, stable_user_id, email, username, created_at, updated_at) VALUES (?, ?, 'alice@example.com', 'alice', ?, ?)",
		alice.ID, alice.StableID, now, now); err != nil {
		panic(err)
	}

	vocab, _ := capabilities.NewVocabulary()
	reg := capabilities.NewRegistry(capabilities.Options{Vocabulary: vocab, Logger: quiet})
	svc, err := buckets.New(buckets.Config{
		Options: buckets.Options{MaxBytes: 10 << 20}, Store: store, Registry: reg, Logger: quiet,
		// The server's OwnerOf resolves the caller's account; here there
		// is one user.
		Owners: func(context.Context, capabilities.Caller) (capabilities.Owner, error) { return alice, nil },
	})
	if err != nil {
		panic(err)
	}
	if err := reg.Register(svc.Capabilities()...); err != nil {
		panic(err)
	}
	caller := capabilities.Caller{UserID: alice.StableID, Roles: []string{capabilities.RoleUser},
		Permissions: vocab.RolePermissions(capabilities.RoleUser), State: capabilities.AccountActive, AllScopes: true}

	call := func(name, args string) string {
		res, err := reg.Invoke(ctx, caller, name, json.RawMessage(args))
		if err != nil {
			return "error: " + string(capabilities.CodeOf(err))
		}
		out, _ := json.Marshal(res.Structured)
		return string(out)
	}
	fmt.Println(call("storageSet", `{"storageId":"notes","key":"todo","value":["milk"],"ifRevision":0}`))
	fmt.Println(call("storageSet", `{"storageId":"notes","key":"todo","value":["eggs"],"ifRevision":0}`))
	fmt.Println(call("storageSet", `{"storageId":"notes","key":"todo","value":["milk","eggs"],"ifRevision":1}`))
	fmt.Println(call("storageList", `{"storageId":"notes"}`))

	u, _ := svc.Usage(ctx, alice)
	fmt.Printf("%d of %d bytes, %d key\n", u.Bytes, u.MaxBytes, u.Keys)
	// Output:
	// {"revision":1}
	// error: conflict
	// {"revision":2}
	// {"keys":[{"key":"todo","revision":2,"bytes":19}]}
	// 19 of 10485760 bytes, 1 key
}
