package markdown_test

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"

	"github.com/enclave-mcp/enclave/community/markdown"
)

// hostile is a corpus of readmes that try to get markup, script, styles,
// remote loads or unsafe links onto a first-party page.
var hostile = []string{
	`<script>alert(1)</script>`,
	"<img src=x onerror=alert(1)>",
	`<a href="javascript:alert(1)">click</a>`,
	`[click](javascript:alert(1))`,
	`[click](JaVaScRiPt:alert(1))`,
	"[click](java\tscript:alert(1))",
	`[click](&#106;avascript:alert(1))`,
	`[click](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)`,
	`[click](vbscript:msgbox(1))`,
	`[rel](/account/delete)`,
	`[proto-relative](//evil.example/x)`,
	`<javascript:alert(1)>`,
	`![x](https://evil.example/pixel.png)`,
	`![x](javascript:alert(1))`,
	"<iframe src=\"https://evil.example\"></iframe>",
	"<svg><script>alert(1)</script></svg>",
	"<style>body{display:none}</style>",
	`<div style="position:fixed;inset:0">overlay</div>`,
	"<form action=https://evil.example><input name=p></form>",
	"<object data=x></object><embed src=x>",
	`<a href="https://ok.example" onclick="alert(1)">x</a>`,
	"<details open ontoggle=alert(1)>",
	"```html\n<script>alert(1)</script>\n```",
	"<!-- <script>alert(1)</script> -->",
	"<scr<script>ipt>alert(1)</script>",
	"[a](https://ok.example \"title\" onmouseover=alert(1))",
	"<meta http-equiv=refresh content=\"0;url=https://evil.example\">",
	"<base href=https://evil.example/>",
	"<link rel=stylesheet href=https://evil.example/x.css>",
	"| a | b |\n|---|---|\n| <script>alert(1)</script> | x |",
	"*<img src=x onerror=alert(1)>*",
	"[x](https://ok.example/\"onmouseover=\"alert(1))",
	"<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>",
	"<noscript><p title=\"</noscript><img src=x onerror=alert(1)>\">",
}

var allowedElements = []string{"p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "strong", "em", "del", "code", "pre",
	"blockquote", "ul", "ol", "li", "table", "thead", "tbody", "tr", "th", "td", "a"}

// checkInert parses rendered HTML as a browser would and fails on any
// element, attribute or link target outside the allowlist.
func checkInert(t *testing.T, src, out string) {
	t.Helper()
	nodes, err := html.ParseFragment(strings.NewReader(out), &html.Node{Type: html.ElementNode, Data: "div", DataAtom: atom.Div})
	if err != nil {
		t.Fatalf("%q: unparseable output %q: %v", src, out, err)
	}
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			if !slices.Contains(allowedElements, n.Data) {
				t.Errorf("%q rendered a <%s>: %s", src, n.Data, out)
			}
			for _, a := range n.Attr {
				switch {
				case n.Data == "a" && a.Key == "href":
					u, err := url.Parse(a.Val)
					if err != nil || !slices.Contains([]string{"http", "https", "mailto"}, u.Scheme) || (u.Scheme != "mailto" && u.Host == "") {
						t.Errorf("%q rendered a link to %q: %s", src, a.Val, out)
					}
				case n.Data == "a" && (a.Key == "rel" || a.Key == "target"):
				default:
					t.Errorf("%q rendered the attribute %s=%q on <%s>: %s", src, a.Key, a.Val, n.Data, out)
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	for _, n := range nodes {
		walk(n)
	}
}

func TestRenderHostileCorpus(t *testing.T) {
	for _, src := range hostile {
		out := string(markdown.Render(src))
		checkInert(t, src, out)
		for _, bad := range []string{"<script", "<img", "<iframe", "<style", "<svg"} {
			if strings.Contains(strings.ToLower(out), bad) {
				t.Errorf("%q rendered %q: %s", src, bad, out)
			}
		}
	}
}

func TestRenderKeepsFormatting(t *testing.T) {
	for src, want := range map[string]string{
		"**bold** and *em*":                  "<strong>bold</strong> and <em>em</em>",
		"# Title":                            "<h1>Title</h1>",
		"[site](https://ok.example/a?b=1)":   `<a href="https://ok.example/a?b=1" rel="nofollow noreferrer noopener" target="_blank">site</a>`,
		"[mail](mailto:ann@example.com)":     `<a href="mailto:ann@example.com" rel="nofollow noreferrer">mail</a>`,
		"[bad](javascript:alert(1)) text":    "<p>bad text</p>",
		"<b>raw</b>":                         "&lt;b&gt;raw&lt;/b&gt;",
		"![logo](https://ok.example/l.png)":  `<a href="https://ok.example/l.png" rel="nofollow noreferrer noopener" target="_blank">logo</a>`,
		"`<script>`":                         "<code>&lt;script&gt;</code>",
		"see https://ok.example/docs please": `<a href="https://ok.example/docs" rel="nofollow noreferrer noopener" target="_blank">https://ok.example/docs</a>`,
	} {
		out := string(markdown.Render(src))
		if !strings.Contains(out, want) {
			t.Errorf("%q rendered %q, want it to hold %q", src, out, want)
		}
		checkInert(t, src, out)
	}
}

func ExampleRender() {
	fmt.Print(markdown.Render("Hello <b>there</b>, see [the docs](https://example.com) [not this](javascript:alert(1))."))
	// Output:
	// <p>Hello &lt;b&gt;there&lt;/b&gt;, see <a href="https://example.com" rel="nofollow noreferrer noopener" target="_blank">the docs</a> not this.</p>
}
