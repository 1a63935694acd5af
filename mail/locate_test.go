package mail

import (
	"bytes"
	"strings"
	"sync"
	"testing"
)

// rkPrime is the multiplier of the Rabin-Karp hash bytes.Index uses for
// patterns longer than its SIMD search (internal/bytealg.PrimeRK).
const rkPrime = 16777619

func rkHash(s []byte) uint32 {
	var h uint32
	for _, c := range s {
		h = h*rkPrime + uint32(c)
	}
	return h
}

// rkCollision finds six alphanumeric bytes with the Rabin-Karp hash of
// "\r\n\r\n\r\n" (meet in the middle over two halves of three bytes), what
// a sender can compute offline in a second.
func rkCollision(t testing.TB) string {
	t.Helper()
	collisionOnce.Do(func() { collision = findCollision() })
	if collision == "" {
		t.Fatal("no collision found")
	}
	return collision
}

var (
	collisionOnce sync.Once
	collision     string
)

func findCollision() string {
	const al = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	target := rkHash([]byte("\r\n\r\n\r\n"))
	var p3 uint32 = rkPrime
	p3 = p3 * p3 * p3
	second := make(map[uint32]string, len(al)*len(al)*len(al))
	for _, a := range []byte(al) {
		for _, b := range []byte(al) {
			for _, c := range []byte(al) {
				second[rkHash([]byte{a, b, c})] = string([]byte{a, b, c})
			}
		}
	}
	for _, a := range []byte(al) {
		for _, b := range []byte(al) {
			for _, c := range []byte(al) {
				if s, ok := second[target-rkHash([]byte{a, b, c})*p3]; ok {
					return string([]byte{a, b, c}) + s
				}
			}
		}
	}
	return ""
}

// collidingMessage is a multipart whose preamble is 2n blank lines and
// whose attachment is n-3 blank lines and a tail with the same
// Rabin-Karp hash as three more blank lines: every even position of the
// preamble is a hash match that is not the body.
func collidingMessage(t testing.TB, n int) (raw, body []byte) {
	body = []byte(strings.Repeat("\r\n", n-3) + rkCollision(t))
	raw = []byte("From: a@b.test\r\nTo: c@d.test\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"O\"\r\n\r\n" +
		strings.Repeat("\r\n", 2*n) + "--O\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=\"x.bin\"\r\n\r\n" +
		string(body) + "\r\n--O--\r\n")
	return raw, body
}

// TestLocateBounded: locate finds a body where it stands, and gives up
// (-1) once its budget is spent instead of comparing the whole body at
// every position where its start repeats.
func TestLocateBounded(t *testing.T) {
	raw, body := collidingMessage(t, 64<<10)
	budget := locateBudget(len(raw))
	if got := locate(raw, 0, body, &budget); got != -1 {
		t.Errorf("locate in a repetitive message = %d, want -1 (budget spent)", got)
	}
	// Once spent, nothing more is looked for, not even a body that is
	// right there.
	if got := locate(raw, 0, []byte("From"), &budget); got != -1 {
		t.Errorf("locate after the budget ran out = %d, want -1", got)
	}
	// With room for every candidate it finds the body itself.
	raw, body = collidingMessage(t, 1<<10)
	budget = len(raw) * len(raw)
	if got, want := locate(raw, 0, body, &budget), bytes.LastIndex(raw, body); got != want {
		t.Errorf("locate with an unbounded budget = %d, want %d", got, want)
	}
	// An ordinary message: each body found once, at its place.
	msg := []byte("header\r\n\r\nfirst body, then\r\n--b\r\nsecond body\r\n--b\r\nfirst body, then\r\n")
	budget = locateBudget(len(msg))
	first := locate(msg, 0, []byte("first body, then"), &budget)
	second := locate(msg, first+1, []byte("first body, then"), &budget)
	if first != 10 || second != bytes.LastIndex(msg, []byte("first body, then")) {
		t.Errorf("first %d, second %d", first, second)
	}
	if budget != locateBudget(len(msg))-2*len("first body, then") {
		t.Errorf("budget %d after two exact finds, want only their two compares spent", budget)
	}
	for _, c := range []struct {
		from int
		enc  string
		want int
	}{
		{0, "", 0}, {len(msg), "", len(msg)}, {len(msg) + 1, "", -1}, {-1, "x", -1},
		{0, "--b\r\n", bytes.Index(msg, []byte("--b"))}, {len(msg) - 2, "\r\n", len(msg) - 2}, {len(msg) - 1, "\r\n", -1},
		{0, string(msg) + "x", -1}, {0, string(msg), 0},
	} {
		b := locateBudget(len(msg))
		if got := locate(msg, c.from, []byte(c.enc), &b); got != c.want {
			t.Errorf("locate(from %d, %q) = %d, want %d", c.from, c.enc, got, c.want)
		}
	}
}

// BenchmarkParseRepeatedBodyPrefix parses a 384 KB message built to make
// an unbounded bytes.Index compare the 128 KB body at 64K positions (with
// the unbounded search: about 350 ms a parse, growing with the square of
// the size; 25 MB would take tens of minutes of CPU).
func BenchmarkParseRepeatedBodyPrefix(b *testing.B) {
	raw, body := collidingMessage(b, 64<<10)
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		p, err := Parse(raw)
		if err != nil || len(p.Parts) != 1 || !bytes.Equal(p.Parts[0].Data, body) {
			b.Fatal(err, len(p.Parts))
		}
	}
}

// CollidingMessage is collidingMessage for the external tests.
var CollidingMessage = collidingMessage

// TestBase64Layout: only base64 in regular lines gets a layout a page can
// be found by.
func TestBase64Layout(t *testing.T) {
	lines := func(s, eol string, n int) string {
		var b strings.Builder
		for len(s) > n {
			b.WriteString(s[:n] + eol)
			s = s[n:]
		}
		b.WriteString(s)
		return b.String()
	}
	enc := "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWZnaGlqa2xtbm9wcXJzdHV2d3h5ejAxMjM0NTY3ODk="
	for _, c := range []struct {
		name      string
		enc       string
		chars, eo int
		ok        bool
	}{
		{"crlf 76", lines(enc, "\r\n", 76), 76, 2, true},
		{"lf 8", lines(enc, "\n", 8), 8, 1, true},
		{"crlf 8, a trailing break", lines(enc, "\r\n", 8) + "\r\n", 8, 2, true},
		{"one line", enc, 0, 0, false},
		{"lines of 6", lines(enc, "\r\n", 6), 0, 0, false},
		{"mixed breaks", strings.Replace(lines(enc, "\r\n", 8), "\r\n", "\n", 1), 0, 0, false},
		{"a short line inside", strings.Replace(lines(enc, "\r\n", 8), "\r\n", "\r\n\r\n", 3), 0, 0, false},
		{"a stray space", strings.Replace(lines(enc, "\r\n", 8), "Q", " ", 1), 0, 0, false},
		{"padding inside", "QQ==QUJD\r\nQUJD", 0, 0, false},
		{"a last line of a partial quantum", lines(enc[:len(enc)-2], "\r\n", 8), 0, 0, false},
		{"a last line longer than the others", lines(enc, "\r\n", 8) + "QUJDQUJDQUJD", 0, 0, false},
	} {
		chars, eol, ok := base64Layout([]byte(c.enc))
		if ok != c.ok || ok && (chars != c.chars || eol != c.eo) {
			t.Errorf("%s: %d, %d, %v; want %d, %d, %v", c.name, chars, eol, ok, c.chars, c.eo, c.ok)
		}
	}
}
