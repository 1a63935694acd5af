package memory_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"slices"
	"strings"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/memory"
	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/schedules"
	"github.com/enclave-mcp/enclave/storage"
)

// Wire is how a server plugs memories in: the retention of their tables
// is declared whether or not they are on; turned on, the service's
// capabilities, resources and prompt go on the registry and its lanes (on
// SQLite, the full-text index's merge) on the server's schedule set.
func ExampleWire() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "memory-wire-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := storage.Open(ctx, storage.Config{DataDir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	owners := func(_ context.Context, c capabilities.Caller) (capabilities.Owner, error) {
		return capabilities.Owner{ID: c.OwnerID, StableID: c.UserID}, nil
	}

	// Turned off: only the retention of the tables is declared.
	reg, lanes, policies := capabilities.NewRegistry(capabilities.Options{}), schedules.New(nil), retention.NewSet()
	svc, err := memory.Wire(memory.Config{Store: store, Registry: reg, Owners: owners, Options: memory.Options{Disabled: true}}, lanes, policies)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("off:", svc == nil, len(policies.Policies()), "tables", reg.Has("memorySave"), len(lanes.Lanes()), "lanes")

	// Turned on.
	reg, lanes, policies = capabilities.NewRegistry(capabilities.Options{}), schedules.New(nil), retention.NewSet()
	svc, err = memory.Wire(memory.Config{Store: store, Registry: reg, Owners: owners}, lanes, policies)
	if err != nil {
		log.Fatal(err)
	}
	var names []string
	for _, c := range reg.All() {
		if strings.HasPrefix(c.Name, "memory") { // not the registry's own
			names = append(names, c.Name)
		}
	}
	slices.Sort(names)
	fmt.Println("on:", svc != nil, len(policies.Policies()), "tables")
	fmt.Println(names)
	for _, l := range lanes.Lanes() {
		fmt.Println("lane", l.Name)
	}
	// Output:
	// off: true 3 tables false 0 lanes
	// on: true 3 tables
	// [memoryDelete memoryGet memoryList memorySave memorySearch memoryUpdate]
	// lane schedule:memory-index
}
