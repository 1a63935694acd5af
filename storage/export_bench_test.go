package storage_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// BenchmarkExportRows is one export page of a user-owned table: a keyset
// page of rows in key order with credential columns redacted, at the
// default page size and at the largest one (what WriteExport uses).
func BenchmarkExportRows(b *testing.B) {
	for _, d := range storagetest.Dialects() {
		b.Run(string(d), func(b *testing.B) {
			ctx := context.Background()
			st := storagetest.Open(b, d)
			if _, err := st.DB.ExecContext(ctx, `CREATE TABLE bench_export_items (
				id BIGINT PRIMARY KEY, user_id BIGINT NOT NULL, title TEXT NOT NULL, body TEXT NOT NULL, created_at TIMESTAMP NOT NULL)`); err != nil {
				b.Fatal(err)
			}
			if _, err := st.DB.ExecContext(ctx, `CREATE INDEX bench_export_items_user ON bench_export_items (user_id, id)`); err != nil {
				b.Fatal(err)
			}
			body := strings.Repeat("lorem ipsum dolor sit amet ", 8)
			now := time.Now().UTC()
			const rows = 5000
			for first := 0; first < rows; first += 500 {
				var q strings.Builder
				q.WriteString("INSERT INTO bench_export_items (id, user_id, title, body, created_at) VALUES ")
				var args []any
				for i := range 500 {
					if i > 0 {
						q.WriteString(",")
					}
					q.WriteString("(?, ?, ?, ?, ?)")
					id := first + i + 1
					args = append(args, id, 1+id%2, "item "+strconv.Itoa(id), body, now)
				}
				if _, err := st.DB.ExecContext(ctx, q.String(), args...); err != nil {
					b.Fatal(err)
				}
			}
			t := storage.Table{Name: "bench_export_items", OwnerColumn: "user_id", KeyColumn: "id"}
			o := storage.Owner{ID: 1, StableID: "owner"}
			for _, limit := range []int{storage.DefaultPageLimit, storage.MaxPageLimit} {
				b.Run("limit="+strconv.Itoa(limit), func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						p, err := storage.ExportRows(ctx, st.Reader, t, o, storage.PageRequest{Limit: limit})
						if err != nil || len(p.Items) != limit {
							b.Fatal(len(p.Items), err)
						}
					}
				})
			}
		})
	}
}
