package markdown

import (
	"bytes"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	extast "github.com/yuin/goldmark/extension/ast"
	"github.com/yuin/goldmark/parser"
	"github.com/yuin/goldmark/renderer"
	"github.com/yuin/goldmark/text"
	"github.com/yuin/goldmark/util"
)

// MaxTableCells bounds the table cells of one document. A GFM table pads
// every row to its header's width, so a 64 KiB readme with a header of a
// thousand columns and thirty thousand one-character rows made thirty
// million cells (over 300 MB of HTML, minutes of CPU per render of a
// public listing page). Past the bound a table's lines stay a paragraph
// of text.
const MaxTableCells = 10000

// boundedTable is goldmark's GFM table extension with its paragraph
// transformer held to MaxTableCells per document.
type boundedTable struct{}

func (boundedTable) Extend(m goldmark.Markdown) {
	m.Parser().AddOptions(
		parser.WithParagraphTransformers(util.Prioritized(boundedTableParagraphs{extension.NewTableParagraphTransformer()}, 200)),
		parser.WithASTTransformers(util.Prioritized(extension.NewTableASTTransformer(), 0)),
	)
	m.Renderer().AddOptions(renderer.WithNodeRenderers(util.Prioritized(extension.NewTableHTMLRenderer(), 500)))
}

// tableCellsKey holds the cells the document's tables have used.
var tableCellsKey = parser.NewContextKey()

type boundedTableParagraphs struct{ inner parser.ParagraphTransformer }

func (b boundedTableParagraphs) Transform(node *ast.Paragraph, reader text.Reader, pc parser.Context) {
	lines := node.Lines()
	if lines.Len() < 2 {
		return
	}
	// An upper bound of the cells a table made of this paragraph has:
	// every row as wide as the widest line's pipes allow (the delimiter
	// row's width is the table's).
	src, widest := reader.Source(), 0
	for i := range lines.Len() {
		seg := lines.At(i)
		widest = max(widest, bytes.Count(seg.Value(src), []byte{'|'}))
	}
	bound := (widest + 1) * lines.Len()
	used, _ := pc.Get(tableCellsKey).(int)
	if used+bound > MaxTableCells {
		return
	}
	parent, prev := node.Parent(), node.PreviousSibling()
	b.inner.Transform(node, reader, pc)
	first := parent.FirstChild()
	if prev != nil {
		first = prev.NextSibling()
	}
	for n := first; n != nil; n = n.NextSibling() {
		if _, ok := n.(*extast.Table); ok {
			pc.Set(tableCellsKey, used+bound)
			return
		}
		if n != node {
			break
		}
	}
}
