package markdown

import (
	"strings"
	"testing"
)

// wideTable is a readme of a few KiB whose table pads every one-character
// row to a header of 200 columns: a million cells unbounded.
func wideTable() string {
	return "|" + strings.Repeat("a|", 200) + "\n|" + strings.Repeat("-|", 200) + "\n" + strings.Repeat("|\n", 5000)
}

// TestReviewTableCellsAreBounded: a hostile readme cannot make a table
// (and so a public listing page) grow far beyond its own size: past
// MaxTableCells a table's lines stay text. Ordinary tables still render.
func TestReviewTableCellsAreBounded(t *testing.T) {
	src := wideTable()
	out := string(Render(src))
	if n := strings.Count(out, "<td"); n > MaxTableCells {
		t.Fatalf("%d bytes of readme made %d cells (%d bytes of HTML)", len(src), n, len(out))
	}
	if len(out) > 4*len(src) {
		t.Fatalf("%d bytes of readme made %d bytes of HTML", len(src), len(out))
	}
	// Many tables each under the bound share one budget per document.
	one := "|" + strings.Repeat("a|", 50) + "\n|" + strings.Repeat("-|", 50) + "\n" + strings.Repeat("|\n", 150) + "\n"
	many := strings.Repeat(one, 40)
	if n := strings.Count(string(Render(many)), "<td"); n > MaxTableCells {
		t.Fatalf("%d tables made %d cells", 40, n)
	}
	ok := Render("| name | value |\n|---|:-:|\n| a | 1 |\n| b | 2 |\n\n" + "| x |\n|---|\n| y |\n")
	if c := strings.Count(string(ok), "<table>"); c != 2 || !strings.Contains(string(ok), "<td>a</td>") {
		t.Fatalf("ordinary tables: %s", ok)
	}
}

func BenchmarkRenderWideTable(b *testing.B) {
	src := wideTable()
	for b.Loop() {
		Render(src)
	}
}
