package cli

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// The command line reaches accounts only through the operator's
// capabilities (Registry.Invoke with capabilities.OperatorCaller, audited
// by the choke point): no production file of this package takes a domain
// service from the server or writes audit rows of its own.
func TestAccountActionsGoThroughTheRegistry(t *testing.T) {
	forbidden := map[string]bool{"Accounts": true, "Lifecycle": true, "Secrets": true, "OAuth": true, "Audit": true}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked, invokes := 0, 0
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if forbidden[sel.Sel.Name] && len(call.Args) == 0 {
				t.Errorf("%s: calls %s(): account actions go through the operator's capabilities", fset.Position(sel.Pos()), sel.Sel.Name)
			}
			if sel.Sel.Name == "OperatorCaller" {
				invokes++
			}
			return true
		})
	}
	if checked < 5 || invokes == 0 {
		t.Fatalf("checked %d files, %d uses of the operator's caller: is the walk in internal/cli?", checked, invokes)
	}
}
