package markdown_test

import (
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/community/markdown"
)

// pathological are readmes whose parse cost grows with the square of a
// line's nesting or length: 64 KiB of them took seconds of CPU per render.
var pathological = map[string]string{
	"nested lists":        strings.Repeat("- ", 32<<10-1) + "x",
	"nested quotes":       strings.Repeat(">", 64<<10),
	"quoted lists":        strings.Repeat("> - ", 16<<10) + "x",
	"ordered lists":       strings.Repeat("1. ", 21<<10) + "x",
	"unclosed link heads": strings.Repeat("[a](", 16<<10),
}

// A readme cannot nest containers without bound: the markers beyond
// MaxNesting are text, so the page's depth (and the parser's work) stays
// bounded, while ordinary nesting renders as before.
func TestReviewNestingIsBounded(t *testing.T) {
	for name, src := range pathological {
		out := string(markdown.Render(src))
		for _, tag := range []string{"<blockquote>", "<ul>", "<ol>"} {
			if n := strings.Count(out, tag); n > markdown.MaxNesting*(len(src)/markdown.MaxLineBytes+1) {
				t.Errorf("%s: %d %s in %d bytes of output", name, n, tag, len(out))
			}
		}
		if strings.Contains(out, "<script") || strings.Contains(out, "javascript:") {
			t.Errorf("%s: %s", name, out)
		}
	}
	deep := strings.Repeat(">", 100) + " x"
	if n := strings.Count(string(markdown.Render(deep)), "<blockquote>"); n != markdown.MaxNesting {
		t.Errorf("100 nested quotes render %d blockquotes, want %d", n, markdown.MaxNesting)
	}
	ok := "> quoted\n> > twice\n\n- a\n  - b\n    - c\n\n1. one\n2. two\n"
	out := string(markdown.Render(ok))
	if strings.Count(out, "<blockquote>") != 2 || strings.Count(out, "<ul>") != 3 || strings.Count(out, "<ol>") != 1 || strings.Contains(out, `\`) {
		t.Errorf("ordinary nesting renders %s", out)
	}
	long := strings.Repeat("word ", 2000)
	if out := string(markdown.Render(long)); strings.Count(out, "word") != 2000 || strings.Contains(out, "wor\n") {
		t.Errorf("a long line loses words: %d", strings.Count(out, "word"))
	}
}

func BenchmarkRenderPathological(b *testing.B) {
	for name, src := range pathological {
		b.Run(strings.ReplaceAll(name, " ", "_"), func(b *testing.B) {
			for b.Loop() {
				markdown.Render(src)
			}
		})
	}
}
