package architecture

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// mcpgoTransport is mcp-go's own streamable HTTP transport. Package mcp
// owns the transport end to end (issue #27): only the benchmarks build
// mcp-go's, as the baseline they measure against.
const mcpgoTransport = "NewStreamableHTTPServer"

// serveHTTPBudget bounds mcp.Server.ServeHTTP: read the body,
// authenticate, bind the session, route; each route lives in a function
// of its own.
const serveHTTPBudget = 60

// No production package but bench builds mcp-go's transport, and the
// MCP endpoint's ServeHTTP stays a short pipeline.
func TestMCPOwnsItsTransport(t *testing.T) {
	fset := token.NewFileSet()
	serveHTTP := 0
	for _, p := range packages(t) {
		if under(rel(p.ImportPath), "bench") {
			continue
		}
		for _, f := range p.GoFiles {
			path := filepath.Join(p.Dir, f)
			file, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(file, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.SelectorExpr:
					if n.Sel.Name == mcpgoTransport {
						t.Errorf("%s: %s builds mcp-go's transport: package mcp serves streamable HTTP itself", fset.Position(n.Pos()), rel(p.ImportPath))
					}
				case *ast.FuncDecl:
					if rel(p.ImportPath) == "mcp" && n.Recv != nil && n.Name.Name == "ServeHTTP" && strings.HasSuffix(path, "server.go") {
						lines := fset.Position(n.End()).Line - fset.Position(n.Pos()).Line + 1
						serveHTTP = lines
						if lines > serveHTTPBudget {
							t.Errorf("%s: mcp's ServeHTTP is %d lines (budget %d): give the new step a function of its own", fset.Position(n.Pos()), lines, serveHTTPBudget)
						}
					}
				}
				return true
			})
		}
	}
	if serveHTTP == 0 {
		t.Fatal("mcp's ServeHTTP was not found in mcp/server.go")
	}
}
