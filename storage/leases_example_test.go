package storage_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/storage"
)

// A call that may write an account's data holds a write lease while it
// runs (enclave's Registry.Invoke takes it); the account's deletion marks
// the account, then fences its writers before it removes anything.
func ExampleStore_WriteLease() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "leases")
	defer os.RemoveAll(dir)
	s, err := storage.Open(ctx, storage.Config{DataDir: dir, DatabaseURL: "sqlite://" + filepath.Join(dir, "enclave.db")})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	if _, err := migrations.Apply(ctx, s.DB); err != nil {
		panic(err)
	}
	now := time.Now().UTC()
	o := storage.Owner{StableID: strings.Repeat("ab", 32)}
	if err := s.DB.NewRaw("INSERT INTO users (stable_user_id, email, username, created_at, updated_at) VALUES (?, 'ann@example.com', 'ann', ?, ?) RETURNING id",
		o.StableID, now, now).Scan(ctx, &o.ID); err != nil {
		panic(err)
	}

	// The call: it writes under its lease, with the lease's context.
	call, release, err := s.WriteLease(ctx, o, "noteCreate")
	if err != nil {
		panic(err)
	}
	fmt.Println("before the deletion:", storage.CheckWrite(call))

	// The deletion: mark the account, then fence its writers.
	if _, err := s.DB.NewUpdate().Table("users").Set("deleting_at = ?", now).Where("id = ?", o.ID).Exec(ctx); err != nil {
		panic(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.FenceWriters(ctx, o, time.Minute) }()
	<-call.Done()
	fmt.Println("fenced:", errors.Is(storage.CheckWrite(call), storage.ErrWriteFenced))
	release() // the call returns
	fmt.Println("writers done:", <-done)
	_, _, err = s.WriteLease(ctx, o, "noteCreate")
	fmt.Println("a new call:", errors.Is(err, storage.ErrWriteFenced))
	// Output:
	// before the deletion: <nil>
	// fenced: true
	// writers done: <nil>
	// a new call: true
}
