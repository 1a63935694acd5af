package migrations_test

import (
	"context"
	"testing"

	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// Every user_id column references users(id) ON DELETE CASCADE. Writers
// outside a call (lanes, jobs) take no write lease and rely on it: a row
// they insert for an account that is being deleted either fails its
// foreign key or goes with the account (see storage's account write
// leases).
func TestUserColumnsCascade(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			s := storagetest.Open(t, d)
			ctx := context.Background()
			type ref struct {
				Table    string `bun:"tbl"`
				Ref      string `bun:"ref"`
				OnDelete string `bun:"on_delete"`
			}
			var refs []ref
			var q string
			switch d {
			case storage.SQLite:
				q = `SELECT t.name AS tbl, COALESCE(f."table", '') AS ref, COALESCE(f.on_delete, '') AS on_delete
					FROM pragma_table_list AS t
					JOIN pragma_table_info(t.name) AS c ON c.name = 'user_id'
					LEFT JOIN pragma_foreign_key_list(t.name) AS f ON f."from" = 'user_id'
					WHERE t.schema = 'main' AND t.type = 'table' AND t.name NOT LIKE 'sqlite_%'
					ORDER BY t.name`
			case storage.Postgres:
				q = `SELECT c.table_name AS tbl, COALESCE(ccu.table_name, '') AS ref, COALESCE(rc.delete_rule, '') AS on_delete
					FROM information_schema.columns AS c
					LEFT JOIN information_schema.key_column_usage AS k
						ON k.table_schema = c.table_schema AND k.table_name = c.table_name AND k.column_name = c.column_name
					LEFT JOIN information_schema.referential_constraints AS rc
						ON rc.constraint_schema = k.constraint_schema AND rc.constraint_name = k.constraint_name
					LEFT JOIN information_schema.constraint_column_usage AS ccu
						ON ccu.constraint_schema = rc.unique_constraint_schema AND ccu.constraint_name = rc.unique_constraint_name
					WHERE c.table_schema = current_schema() AND c.column_name = 'user_id'
					ORDER BY c.table_name`
			}
			offenders := func() []ref {
				refs = nil
				if err := s.DB.NewRaw(q).Scan(ctx, &refs); err != nil {
					t.Fatal(err)
				}
				if len(refs) < 10 {
					t.Fatalf("found %d tables with a user_id column: the query does not see the schema", len(refs))
				}
				cascading := map[string]bool{}
				for _, r := range refs {
					if r.Ref == "users" && r.OnDelete == "CASCADE" {
						cascading[r.Table] = true
					}
				}
				var bad []ref
				for _, r := range refs {
					if !cascading[r.Table] {
						bad = append(bad, r)
					}
				}
				return bad
			}
			for _, r := range offenders() {
				t.Errorf("%s.user_id does not reference users(id) ON DELETE CASCADE (references %q, on delete %q)", r.Table, r.Ref, r.OnDelete)
			}
			// The check sees a table that would be left behind.
			if _, err := s.DB.ExecContext(ctx, "CREATE TABLE cascade_probe (id INTEGER PRIMARY KEY, user_id BIGINT REFERENCES users (id))"); err != nil {
				t.Fatal(err)
			}
			if bad := offenders(); len(bad) != 1 || bad[0].Table != "cascade_probe" {
				t.Fatalf("a user_id without ON DELETE CASCADE went unnoticed: %v", bad)
			}
		})
	}
}
