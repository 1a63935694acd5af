package capabilities

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

// declaredCodes returns every constant of type Code this package's
// non-test files declare, read from the source so that a new Code is
// seen without anyone listing it here.
func declaredCodes(t *testing.T) map[Code]string {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	codes := map[Code]string{}
	for _, f := range pkgs["capabilities"].Files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			isCode := false // a spec without a type or values repeats the previous one
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				if vs.Type != nil || len(vs.Values) > 0 {
					id, ok := vs.Type.(*ast.Ident)
					isCode = ok && id.Name == "Code"
				}
				if !isCode {
					continue
				}
				for i, name := range vs.Names {
					if i >= len(vs.Values) {
						t.Fatalf("%s: a Code without its own value", name.Name)
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok {
						t.Fatalf("%s: a Code that is not a string literal", name.Name)
					}
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					codes[Code(v)] = name.Name
				}
			}
		}
	}
	if len(codes) < 2 {
		t.Fatalf("found only %d declared codes: the parser no longer sees them", len(codes))
	}
	return codes
}

// Every declared Code has an HTTP status and a JSON-RPC code in the one
// table, and the table has rows for declared codes only: adding a Code
// without its row fails here.
func TestEveryCodeHasTransportCodes(t *testing.T) {
	declared := declaredCodes(t)
	if _, ok := declared[CodeQuotaExceeded]; !ok {
		t.Fatalf("the source scan misses %s: %v", CodeQuotaExceeded, declared)
	}
	for code, name := range declared {
		row, ok := transportCodes[code]
		if !ok {
			t.Errorf("%s (%q) has no row in transportCodes", name, code)
			continue
		}
		if row.http < 400 || row.http > 599 {
			t.Errorf("%s: HTTP status %d is not a refusal", name, row.http)
		}
		if (row.http >= 500) != (code == CodeInternal) {
			t.Errorf("%s: HTTP status %d: only internal errors are the server's fault", name, row.http)
		}
		if (row.rpc > RPCInvalidRequest || row.rpc < RPCInternalError) && (row.rpc > -32000 || row.rpc < -32099) {
			t.Errorf("%s: JSON-RPC code %d is neither a JSON-RPC error nor a server error code", name, row.rpc)
		}
		if HTTPStatus(code) != row.http || RPCCode(code) != row.rpc {
			t.Errorf("%s: HTTPStatus/RPCCode = %d/%d, the table says %d/%d", name, HTTPStatus(code), RPCCode(code), row.http, row.rpc)
		}
	}
	for code := range transportCodes {
		if _, ok := declared[code]; !ok {
			t.Errorf("transportCodes has a row for %q, which no constant declares", code)
		}
	}
}

// An undeclared code is answered as an internal error, never as a
// client's mistake.
func TestUndeclaredCodeIsInternal(t *testing.T) {
	if got := HTTPStatus("no_such_code"); got != HTTPStatus(CodeInternal) {
		t.Errorf("HTTPStatus = %d", got)
	}
	if got := RPCCode("no_such_code"); got != RPCCode(CodeInternal) {
		t.Errorf("RPCCode = %d", got)
	}
}
