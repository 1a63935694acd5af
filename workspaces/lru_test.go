package workspaces_test

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
	"github.com/enclave-mcp/enclave/workspaces"
)

// TestSQLiteOpenFilesBounded touches 1,000 workspaces in turn, then in
// parallel, with at most 16 files open: the bound holds and every
// workspace keeps its own state.
func TestSQLiteOpenFilesBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("touches 1,000 workspace files")
	}
	const n, bound = 1000, 16
	st := storagetest.Open(t, storage.SQLite)
	e := newEnv(t, st, bound)
	fs, ok := e.svc.WorkspaceStore().(*workspaces.SQLiteStore)
	if !ok {
		t.Fatalf("store is %T", e.svc.WorkspaceStore())
	}
	ann := e.user("ann")
	ids := make([]string, n)
	for i := range ids {
		ids[i] = e.create(ann, fmt.Sprintf("ws %d", i))
	}
	for i, id := range ids {
		e.must(ann, "counterAdd", map[string]any{"workspaceId": id, "counter": "n", "by": i}, nil)
		if open := fs.OpenFiles(); open > bound {
			t.Fatalf("after %d workspaces: %d files open (bound %d)", i+1, open, bound)
		}
	}
	// In parallel, each workspace a second time.
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				errs <- e.call(ann, "counterAdd", map[string]any{"workspaceId": ids[i], "counter": "n", "by": 1}, nil)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if peak := fs.PeakOpen(); peak > bound {
		t.Fatalf("peak open files %d > bound %d", peak, bound)
	}
	for _, i := range []int{0, 1, n / 2, n - 1} {
		var got addResult
		e.must(ann, "counterGet", map[string]any{"workspaceId": ids[i], "counter": "n"}, &got)
		if got.Result.Value != int64(i+1) || got.Revision != 2 {
			t.Fatalf("workspace %d: %+v", i, got)
		}
	}
	files, err := filepath.Glob(filepath.Join(e.dataDir, "workspaces", "w_*.db"))
	if err != nil || len(files) != n {
		t.Fatalf("%d workspace files, %v", len(files), err)
	}
}
