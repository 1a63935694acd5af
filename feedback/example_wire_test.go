package feedback_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/events"
	"github.com/enclave-mcp/enclave/feedback"
	"github.com/enclave-mcp/enclave/internal/envelope"
	"github.com/enclave-mcp/enclave/internal/outbox"
	"github.com/enclave-mcp/enclave/jobs"
	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/storage"
)

// nothingToRevoke stands for the OAuth grants and connected accounts an
// account's deletion revokes.
type nothingToRevoke struct{}

func (nothingToRevoke) RevokeAll(context.Context, int64) error { return nil }

// Wire plugs feedback into account deletion: deleting the admin who
// reviewed someone's feedback keeps the feedback and clears their name
// from it, and the deletion's result counts the cleared rows.
func ExampleWire() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "feedback-example")
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
	ring, err := envelope.Open(ctx, store.DB, store.Keeper)
	if err != nil {
		log.Fatal(err)
	}
	queue := jobs.New(outbox.New(ring), nil)
	bus, err := events.New(events.Options{Store: store, Jobs: queue, Ring: ring, Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	inv := storage.NewInventory()
	if err := lifecycle.RegisterInventory(inv); err != nil {
		log.Fatal(err)
	}
	deletions, err := lifecycle.Wire(lifecycle.Config{Store: store, Inventory: inv, Accounts: acc, Logger: quiet,
		Audit: audit.New(store, []byte("an audit key of thirty-two bytes"), quiet), Grants: nothingToRevoke{},
		Connections: (*noConnections)(nil)}, retention.NewSet())
	if err != nil {
		log.Fatal(err)
	}

	fb, err := feedback.Wire(feedback.Config{Options: feedback.Options{Store: store, Events: bus, Jobs: queue, Logger: quiet},
		Deletions: deletions})
	if err != nil {
		log.Fatal(err)
	}

	var ids []int64
	for _, name := range []string{"ann", "ada"} {
		u, _, err := acc.Identity.CreateUser(ctx, accounts.CreateUserInput{Email: name + "@example.com", Username: name,
			Password: "a long password for " + name, Verified: true})
		if err != nil {
			log.Fatal(err)
		}
		ids = append(ids, u.ID)
	}
	sub, err := fb.Submit(ctx, ids[0], feedback.Submission{Category: "bug", Summary: "the export button does nothing"})
	if err != nil {
		log.Fatal(err)
	}
	if _, _, err := fb.Update(ctx, ids[1], sub.ID, "triaged", nil); err != nil {
		log.Fatal(err)
	}
	ada, err := acc.Identity.UserByID(ctx, ids[1])
	if err != nil {
		log.Fatal(err)
	}
	before, _ := fb.AdminGet(ctx, sub.ID)
	fmt.Println("reviewed by ada:", before.ReviewedBy == ada.StableID)

	res, err := deletions.Delete(ctx, storage.Owner{ID: ada.ID, StableID: ada.StableID})
	if err != nil {
		log.Fatal(err)
	}
	after, _ := fb.AdminGet(ctx, sub.ID)
	fmt.Println("cleared:", res.Updated["sql:platform_feedback.reviewed_by"])
	fmt.Printf("kept: %s, reviewer %q\n", after.Status, after.ReviewedBy)
	// Output:
	// reviewed by ada: true
	// cleared: 1
	// kept: triaged, reviewer ""
}

// noConnections stands for connected accounts turned off.
type noConnections struct{}

func (*noConnections) RevokeAll(context.Context, storage.Owner) error { return nil }
