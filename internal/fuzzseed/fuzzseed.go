// Package fuzzseed adds a fuzz target's seeds and keeps them committed as
// its seed corpus under testdata/fuzz/<Target>/, the directory go test
// reads and the fuzzer starts from.
//
// A target lists its seeds once, in code; with ENCLAVE_FUZZ_WRITE_SEEDS=1,
// running the target (go test -run '^FuzzX$') also writes each seed as a
// corpus file (seed-NN), in the format go test uses. Crashers the fuzzer
// finds land in the same directory under names of their own.
package fuzzseed

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Add adds each seed (one slice of values per seed, in the order of the
// fuzz function's parameters) to f, and writes it to the corpus directory
// when ENCLAVE_FUZZ_WRITE_SEEDS=1.
func Add(f *testing.F, seeds ...[]any) {
	f.Helper()
	write := os.Getenv("ENCLAVE_FUZZ_WRITE_SEEDS") == "1"
	dir := filepath.Join("testdata", "fuzz", f.Name())
	if write {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			f.Fatal(err)
		}
	}
	for i, s := range seeds {
		f.Add(s...)
		if !write {
			continue
		}
		data, err := Marshal(s...)
		if err != nil {
			f.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), data, 0o644); err != nil {
			f.Fatal(err)
		}
	}
}

// Marshal encodes values as a go test fuzz v1 corpus file.
func Marshal(vals ...any) ([]byte, error) {
	var b strings.Builder
	b.WriteString("go test fuzz v1\n")
	for _, v := range vals {
		switch v := v.(type) {
		case []byte:
			fmt.Fprintf(&b, "[]byte(%q)\n", v)
		case string:
			fmt.Fprintf(&b, "string(%q)\n", v)
		case uint8:
			fmt.Fprintf(&b, "byte(%q)\n", v)
		case int:
			fmt.Fprintf(&b, "int(%d)\n", v)
		case int64:
			fmt.Fprintf(&b, "int64(%d)\n", v)
		case bool:
			fmt.Fprintf(&b, "bool(%v)\n", v)
		default:
			return nil, fmt.Errorf("fuzzseed: unsupported seed type %T", v)
		}
	}
	return []byte(b.String()), nil
}
