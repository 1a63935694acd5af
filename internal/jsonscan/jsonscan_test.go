package jsonscan

import (
	"encoding/json"
	"testing"
)

// TestStringAgreesWithEncodingJSON: String accepts a quoted string
// exactly when encoding/json does, ends where it ends, and calls it plain
// only when its bytes are its value.
func TestStringAgreesWithEncodingJSON(t *testing.T) {
	for _, s := range []string{`""`, `"a"`, `"a b"`, `"\""`, `"\\"`, `"\/"`, `"\n\t\r\b\f"`, `"\u00e9"`, `"\uD83D\uDE00"`,
		`"\ud800"`, `"é"`, "\"\xff\"", `"\x"`, `"\u12"`, `"\u12g4"`, `"a`, `"\`, "\"a\x01\"", "\"\x7f\"", `"\u0000"`} {
		var v string
		want := json.Unmarshal([]byte(s), &v) == nil
		end, plain := String([]byte(s+" tail"), 0)
		if got := end == len(s); got != want {
			t.Errorf("%q: String end %d, encoding/json valid %v", s, end, want)
		}
		if plain && (!want || `"`+v+`"` != s) {
			t.Errorf("%q: plain, but its value is %q", s, v)
		}
	}
}

func FuzzString(f *testing.F) {
	for _, s := range []string{`"a"`, `"\u00e9x"`, `"\q"`, "\"\x00\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 || b[0] != '"' {
			return
		}
		end, plain := String(b, 0)
		if end < 0 {
			return
		}
		var v string
		if err := json.Unmarshal(b[:end], &v); err != nil {
			t.Fatalf("%q: String accepted %q, encoding/json: %v", b, b[:end], err)
		}
		if plain && `"`+v+`"` != string(b[:end]) {
			t.Fatalf("%q: plain, but its value is %q", b[:end], v)
		}
	})
}

func TestSpace(t *testing.T) {
	if got := Space([]byte(" \t\r\n x"), 0); got != 5 {
		t.Fatalf("Space = %d", got)
	}
	if got := Space([]byte("  "), 1); got != 2 {
		t.Fatalf("Space at the end = %d", got)
	}
}
