package memory

import (
	"errors"

	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/storage"
)

// Tables are the user-owned tables of memories: memories, exported with
// the account, memory_vectors, derived from them and never exported
// (rebuilt by the reindex lane), and memory_counts, the per-user counts
// the database's triggers keep. Both are deleted with the account; the
// full-text index follows memories through its triggers (SQLite) or is an
// index of the table itself (PostgreSQL).
var Tables = []storage.Table{
	{Name: "memories"},
	{Name: "memory_vectors", KeyColumn: "memory_id", SkipExport: true},
	// The per-user counts of memories, kept by triggers: derived, never
	// exported.
	{Name: "memory_counts", KeyColumn: "user_id", SkipExport: true},
}

// RegisterInventory records the tables of memories. They exist whether or
// not memories are on, so this is always called.
func RegisterInventory(inv *storage.Inventory) error {
	var errs []error
	for _, t := range Tables {
		errs = append(errs, inv.AddTable(t))
	}
	return errors.Join(errs...)
}

// RetentionPolicies declares how long memories live: until their owner
// deletes them or the account, never by age (they are the user's own
// curated content).
func RetentionPolicies() []retention.Policy {
	return []retention.Policy{
		retention.UntilAccountDeleted("memories").Because("or until the user deletes the memory"),
		retention.UntilAccountDeleted("memory_vectors").Because("derived from a memory; deleted with it, rebuilt by reindexing"),
		retention.UntilAccountDeleted("memory_counts").Because("how many memories the user keeps, kept by the database with every write"),
	}
}
