// Package markdown renders untrusted Markdown (community readmes and
// descriptions, or any text another user wrote) to HTML that is safe in a
// first-party page: goldmark with raw HTML escaped and links kept to
// absolute http, https and mailto URLs, then bluemonday with an allowlist
// of plain formatting elements.
//
// It is a package of its own so that only what renders pages depends on
// goldmark and bluemonday.
package markdown

import (
	"bytes"
	"html/template"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/microcosm-cc/bluemonday"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/parser"
	"github.com/yuin/goldmark/renderer"
	"github.com/yuin/goldmark/text"
	"github.com/yuin/goldmark/util"
)

// Render renders untrusted Markdown (a listing's readme or
// description) to HTML safe to put in a first-party page:
//
//   - raw HTML in the Markdown is shown as text, never as markup;
//   - links keep their destination only when it is an absolute http,
//     https or mailto URL (other links become their text), and open with
//     rel="nofollow noopener noreferrer";
//   - images become links to the image (a page never loads an author's
//     remote image);
//   - container markers (block quotes, list items) beyond MaxNesting on
//     one line are text, and lines longer than MaxLineBytes are broken,
//     so that a readme's parse costs no more than its size warrants;
//   - the result then passes bluemonday with an allowlist of plain
//     formatting elements, no attributes but a link's href and no styles,
//     so that a mistake in the first step still cannot produce script.
func Render(src string) template.HTML {
	var buf bytes.Buffer
	if err := markdown.Convert(bound(src), &buf); err != nil {
		return template.HTML(template.HTMLEscapeString(src))
	}
	return template.HTML(sanitizer.SanitizeBytes(buf.Bytes())) //nolint:gosec // sanitized above
}

var markdown = goldmark.New(
	goldmark.WithExtensions(extension.Strikethrough, boundedTable{}, extension.Linkify),
	goldmark.WithParserOptions(parser.WithASTTransformers(util.Prioritized(linkFilter{}, 100))),
	goldmark.WithRendererOptions(renderer.WithNodeRenderers(util.Prioritized(escapedHTML{}, 100))),
)

var sanitizer = func() *bluemonday.Policy {
	p := bluemonday.NewPolicy()
	p.AllowElements("p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "strong", "em", "del", "code", "pre",
		"blockquote", "ul", "ol", "li", "table", "thead", "tbody", "tr", "th", "td")
	p.AllowAttrs("href").OnElements("a")
	p.AllowURLSchemes("http", "https", "mailto")
	p.RequireParseableURLs(true)
	p.AllowRelativeURLs(false)
	p.RequireNoFollowOnLinks(true)
	p.RequireNoReferrerOnLinks(true)
	p.AddTargetBlankToFullyQualifiedLinks(true)
	return p
}()

// safeLink reports whether a link destination may stay a link.
func safeLink(dest []byte) bool {
	u, err := url.Parse(strings.TrimSpace(string(dest)))
	if err != nil {
		return false
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
		return u.Host != ""
	case "mailto":
		return u.Opaque != ""
	}
	return false
}

// linkFilter turns links to anything but absolute http, https and mailto
// URLs into their text, and images into links to the image (or into
// their alt text).
type linkFilter struct{}

func (linkFilter) Transform(doc *ast.Document, reader text.Reader, _ parser.Context) {
	type swap struct{ old, new ast.Node }
	var swaps []swap
	_ = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch l := n.(type) {
		case *ast.Link:
			if !safeLink(l.Destination) {
				swaps = append(swaps, swap{l, nil})
			}
		case *ast.AutoLink:
			if !safeLink(l.URL(reader.Source())) {
				swaps = append(swaps, swap{l, ast.NewString(l.Label(reader.Source()))})
			}
		case *ast.Image:
			if safeLink(l.Destination) {
				link := ast.NewLink()
				link.Destination = l.Destination
				swaps = append(swaps, swap{l, link})
			} else {
				swaps = append(swaps, swap{l, nil})
			}
		}
		return ast.WalkContinue, nil
	})
	for _, s := range swaps {
		parent := s.old.Parent()
		if parent == nil {
			continue
		}
		if s.new == nil {
			// Keep the children (the link's text) in the link's place.
			for c := s.old.FirstChild(); c != nil; {
				next := c.NextSibling()
				parent.InsertBefore(parent, s.old, c)
				c = next
			}
			parent.RemoveChild(parent, s.old)
			continue
		}
		if link, ok := s.new.(*ast.Link); ok {
			for c := s.old.FirstChild(); c != nil; {
				next := c.NextSibling()
				link.AppendChild(link, c)
				c = next
			}
			if !link.HasChildren() {
				link.AppendChild(link, ast.NewString(link.Destination))
			}
		}
		parent.ReplaceChild(parent, s.old, s.new)
	}
}

// escapedHTML renders raw HTML (inline and blocks) as escaped text.
type escapedHTML struct{}

func (escapedHTML) RegisterFuncs(r renderer.NodeRendererFuncRegisterer) {
	r.Register(ast.KindRawHTML, func(w util.BufWriter, source []byte, n ast.Node, entering bool) (ast.WalkStatus, error) {
		if entering {
			segs := n.(*ast.RawHTML).Segments
			for i := range segs.Len() {
				seg := segs.At(i)
				_, _ = w.Write(util.EscapeHTML(seg.Value(source)))
			}
		}
		return ast.WalkSkipChildren, nil
	})
	r.Register(ast.KindHTMLBlock, func(w util.BufWriter, source []byte, n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		b := n.(*ast.HTMLBlock)
		_, _ = w.WriteString("<pre><code>")
		lines := b.Lines()
		for i := range lines.Len() {
			line := lines.At(i)
			_, _ = w.Write(util.EscapeHTML(line.Value(source)))
		}
		if b.HasClosure() {
			_, _ = w.Write(util.EscapeHTML(b.ClosureLine.Value(source)))
		}
		_, _ = w.WriteString("</code></pre>\n")
		return ast.WalkSkipChildren, nil
	})
}

// Bounds of what the parser is given: its cost grows with the square of
// a line's container nesting ("- - - - x", "> > > x") and of a line's
// length (unclosed "[a](" repeated), so that 64 KiB of such text would
// take seconds of CPU on every view of a public page.
const (
	// MaxNesting is how many container markers (block quotes, list items)
	// one line may open; the ones beyond it are literal text.
	MaxNesting = 16
	// MaxLineBytes is the longest line parsed as one: a longer line is
	// broken (at its last blank before the bound, if any).
	MaxLineBytes = 2048
)

// bound escapes container markers beyond MaxNesting at the start of a
// line and breaks lines longer than MaxLineBytes.
func bound(src string) []byte {
	out := make([]byte, 0, len(src)+len(src)/64)
	for line := range strings.Lines(src) {
		for len(line) > MaxLineBytes {
			cut := strings.LastIndexAny(line[:MaxLineBytes], " \t")
			if cut <= 0 {
				cut = MaxLineBytes
				for cut > 0 && !utf8.RuneStart(line[cut]) {
					cut--
				}
			}
			out = appendBounded(out, line[:cut])
			out = append(out, '\n')
			line = strings.TrimLeft(line[cut:], " \t")
		}
		out = appendBounded(out, line)
	}
	return out
}

// appendBounded appends line with the container markers beyond
// MaxNesting at its start escaped.
func appendBounded(out []byte, line string) []byte {
	depth, i := 0, 0
	for i < len(line) {
		c := line[i]
		switch {
		case c == ' ' || c == '\t':
			i++
			continue
		case c == '>':
			if depth >= MaxNesting {
				return append(append(append(out, line[:i]...), '\\'), line[i:]...)
			}
			depth++
			i++
			continue
		case (c == '-' || c == '*' || c == '+') && i+1 < len(line) && (line[i+1] == ' ' || line[i+1] == '\t'):
			if depth >= MaxNesting {
				return append(append(append(out, line[:i]...), '\\'), line[i:]...)
			}
			depth++
			i++
			continue
		case c >= '0' && c <= '9':
			j := i
			for j < len(line) && j-i < 9 && line[j] >= '0' && line[j] <= '9' {
				j++
			}
			if j < len(line) && (line[j] == '.' || line[j] == ')') && (j+1 == len(line) || line[j+1] == ' ' || line[j+1] == '\t') {
				if depth >= MaxNesting {
					return append(append(append(out, line[:j]...), '\\'), line[j:]...)
				}
				depth++
				i = j + 1
				continue
			}
		}
		break
	}
	return append(out, line...)
}
