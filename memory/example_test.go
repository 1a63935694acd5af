package memory_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/memory"
	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/storage"
)

// An agent saves two memories and recalls one by search, through the
// registry as its user.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "memory-example")
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
	// The server's accounts service makes users; here, one row.
	var userID int64
	now := time.Now().UTC()
	if err := store.DB.NewRaw("INSERT INTO users (stable_user_id, email, username, created_at, updated_at) VALUES (?, ?, ?, ?, ?) RETURNING id",
		strings.Repeat("a", 64), "ada@example.com", "ada", now, now).Scan(ctx, &userID); err != nil {
		log.Fatal(err)
	}

	reg := capabilities.NewRegistry(capabilities.Options{})
	svc, err := memory.New(memory.Config{Store: store, Registry: reg,
		Owners: func(_ context.Context, c capabilities.Caller) (capabilities.Owner, error) {
			return capabilities.Owner{ID: c.OwnerID, StableID: c.UserID}, nil
		}})
	if err != nil {
		log.Fatal(err)
	}
	if err := reg.Register(svc.Capabilities()...); err != nil {
		log.Fatal(err)
	}
	ada := capabilities.Caller{UserID: strings.Repeat("a", 64), OwnerID: userID, State: capabilities.AccountActive, AllScopes: true, Interactive: true,
		Permissions: []capabilities.Permission{capabilities.ReadUserOwn, capabilities.UpdateUserOwn}}

	for _, text := range []string{"Ada takes her coffee black", "Ada's standup is at 9:30 on weekdays"} {
		if _, err := reg.Invoke(ctx, ada, "memorySave", json.RawMessage(fmt.Sprintf(`{"text": %q, "tags": ["work"]}`, text))); err != nil {
			log.Fatal(err)
		}
	}
	res, err := reg.Invoke(ctx, ada, "memorySearch", json.RawMessage(`{"query": "when is the standup?"}`))
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range res.Structured.(memory.SearchOutput).Memories {
		fmt.Println(m.Text, m.Tags, m.Writer)
	}
	// Output: Ada's standup is at 9:30 on weekdays [work] agent
}
