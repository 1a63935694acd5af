package sandbox

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// bombs are memory bombs, run in turn by the hygiene test and benchmark.
var bombs = []string{
	`const a = []; for (;;) a.push("x".repeat(1000) + a.length)`,
	`const a = []; for (;;) a.push({i: a.length, s: "y" + a.length})`,
	`const a = []; for (;;) a.push(new Uint8Array(1 << 16))`,
	`return "x".repeat(1e9)`,
}

const bombMemory = 1 << 20

func runBomb(t testing.TB, i int) {
	out := runCode(t, bombs[i%len(bombs)], Program{Limits: Limits{Memory: bombMemory, Timeout: time.Minute}})
	if out.Err == nil || out.Err.Limit != LimitMemory {
		t.Fatalf("bomb %d: %+v", i%len(bombs), out.Err)
	}
}

// memory returns the Go heap in use and the resident set size of the
// process (0 where /proc is missing), after a GC.
func memory() (heap, rss uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if b, err := os.ReadFile("/proc/self/statm"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 1 {
			pages, _ := strconv.ParseUint(f[1], 10, 64)
			rss = pages * uint64(os.Getpagesize())
		}
	}
	return ms.HeapInuse, rss
}

// TestMemoryHygiene runs memory bombs one after the other and checks that
// neither the Go heap nor the process grows with them: each VM's memory,
// which the engine allocates outside the Go heap, goes back when it closes.
func TestMemoryHygiene(t *testing.T) {
	runs := 200
	if raceEnabled || testing.Short() {
		runs = 25
	}
	for i := range 20 { // warm up: the allocators reach their working size
		runBomb(t, i)
	}
	heap0, rss0 := memory()
	for i := range runs {
		runBomb(t, i)
	}
	heap1, rss1 := memory()
	t.Logf("after %d bombs of %s: Go heap %s -> %s, RSS %s -> %s", runs, byteSize(bombMemory),
		byteSize(int64(heap0)), byteSize(int64(heap1)), byteSize(int64(rss0)), byteSize(int64(rss1)))
	// A leak of one VM per run would be over 200 MiB of RSS here; the
	// bounds leave room for the noise of allocators and of other tests.
	if grown := int64(heap1) - int64(heap0); grown > 16<<20 {
		t.Errorf("the Go heap grew by %s over %d runs", byteSize(grown), runs)
	}
	if grown := int64(rss1) - int64(rss0); rss0 != 0 && grown > 64<<20 {
		t.Errorf("the RSS grew by %s over %d runs", byteSize(grown), runs)
	}
}
