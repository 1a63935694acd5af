package architecture

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// codeOwner is the package that owns the domain error codes and their one
// table of HTTP statuses and JSON-RPC codes (capabilities.HTTPStatus,
// capabilities.RPCCode).
const codeOwner = "capabilities"

// codeStatusRefinements are the functions outside capabilities allowed to
// pick a status by a capabilities code: web's formStatus, the one rule of
// the shell's forms (a form shown again for a mistake in its fields is a
// 422, where the table says 400). Keyed by file, relative to the module;
// an entry that no longer maps fails the test.
var codeStatusRefinements = map[string]string{"web/capability_errors.go": "formStatus"}

// Only capabilities maps its codes to HTTP statuses: no other package's
// production code declares a map keyed by capabilities.Code whose values
// are statuses or numbers, a switch whose case on a capabilities code
// picks an http.Status, or an if that tests for a capabilities code and
// answers an http.Status of its own. The test may sit in the if's
// condition or its init statement, directly or through a code predicate:
// a function of the package that returns a bool and mentions a code
// (`if msg, ok := invalidInput(err); ok { render(http.StatusBadRequest,
// …) }` is the same mapping as a test of the code in place; missing that
// is how pages picked their own statuses unseen). A page that shows a
// form again with a refusal asks the table (web's capabilityStatus,
// formStatus, formRefusal) for its status. The examples are an
// embedder's code and are not scanned.
func TestOnlyCapabilitiesMapsCodesToStatuses(t *testing.T) {
	scanned, refinements := 0, 0
	for _, p := range packages(t) {
		if r := rel(p.ImportPath); r == codeOwner || under(r, "examples") {
			continue
		}
		fset := token.NewFileSet()
		files := map[string]*ast.File{}
		for _, f := range p.GoFiles {
			file, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			files[f] = file
		}
		predicates := codePredicates(files)
		for f, file := range files {
			// A file that does not import capabilities may still test a
			// code through a predicate of its package.
			capName, httpName := importName(file, module+"/"+codeOwner), importName(file, "net/http")
			if httpName == "" || capName == "" && len(predicates) == 0 {
				continue
			}
			scanned++
			name := rel(p.ImportPath) + "/" + f
			for _, d := range file.Decls {
				found := codeStatusMappings(d, capName, httpName, predicates)
				if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && codeStatusRefinements[name] == fd.Name.Name {
					if len(found) == 0 {
						t.Errorf("%s: %s no longer maps a code to a status: drop it from codeStatusRefinements", name, fd.Name.Name)
					}
					refinements++
					continue
				}
				for _, v := range found {
					t.Errorf("%s:%d: %s: take the status from capabilities.HTTPStatus, the one table", name, fset.Position(v.pos).Line, v.what)
				}
			}
		}
	}
	if scanned < 5 {
		t.Fatalf("only %d files import net/http and capabilities (or a code predicate's package): the scan no longer sees them", scanned)
	}
	if refinements != len(codeStatusRefinements) {
		t.Errorf("found %d of the %d functions of codeStatusRefinements", refinements, len(codeStatusRefinements))
	}
}

// TestCodeStatusRuleSeesPredicates: the rule finds a status picked after
// a code predicate, in an if's init statement as in its condition, and
// lets an if that takes its status from the table pass.
func TestCodeStatusRuleSeesPredicates(t *testing.T) {
	const src = `package web

import (
	"errors"
	"net/http"

	"github.com/enclave-mcp/enclave/capabilities"
)

func invalidInput(err error) (string, bool) {
	if e, ok := errors.AsType[*capabilities.Error](err); ok && e.Code == capabilities.CodeInvalidInput {
		return e.Message, true
	}
	return "", false
}

func isNotFound(err error) bool { return capabilities.CodeOf(err) == capabilities.CodeNotFound }

func status(err error) int { return capabilities.HTTPStatus(capabilities.CodeOf(err)) }

func picksInInit(w http.ResponseWriter, err error) {
	if msg, ok := invalidInput(err); ok {
		http.Error(w, msg, http.StatusBadRequest)
	}
}

func picksInCond(w http.ResponseWriter, err error) {
	if isNotFound(err) {
		w.WriteHeader(http.StatusGone)
	}
}

func asksTheTable(w http.ResponseWriter, err error) {
	if msg, ok := invalidInput(err); ok {
		http.Error(w, msg, status(err))
	}
}
`
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "web.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	predicates := codePredicates(map[string]*ast.File{"web.go": file})
	if !predicates["invalidInput"] || !predicates["isNotFound"] || predicates["status"] || len(predicates) != 2 {
		t.Fatalf("predicates %v, want invalidInput and isNotFound", predicates)
	}
	got := map[string]int{}
	for _, d := range file.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok {
			got[fd.Name.Name] = len(codeStatusMappings(fd, "capabilities", "http", predicates))
		}
	}
	if want := map[string]int{"invalidInput": 0, "isNotFound": 0, "status": 0, "picksInInit": 1, "picksInCond": 1, "asksTheTable": 0}; !maps.Equal(got, want) {
		t.Fatalf("mappings found %v, want %v", got, want)
	}
}

// codePredicates are the functions of a package (by name; methods
// included) that test for a capabilities code: a bool among their
// results, and a code constant in their body or a call of another
// predicate.
func codePredicates(files map[string]*ast.File) map[string]bool {
	type fn struct {
		decl    *ast.FuncDecl
		capName string
	}
	var candidates []fn
	for _, file := range files {
		capName := importName(file, module+"/"+codeOwner)
		for _, d := range file.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil || fd.Type.Results == nil {
				continue
			}
			for _, r := range fd.Type.Results.List {
				if id, ok := r.Type.(*ast.Ident); ok && id.Name == "bool" {
					candidates = append(candidates, fn{fd, capName})
					break
				}
			}
		}
	}
	predicates := map[string]bool{}
	for changed := true; changed; {
		changed = false
		for _, c := range candidates {
			if predicates[c.decl.Name.Name] {
				continue
			}
			if c.capName != "" && mentions(c.decl.Body, isCodeOf(c.capName)) || mentions(c.decl.Body, callsOneOf(predicates)) {
				predicates[c.decl.Name.Name] = true
				changed = true
			}
		}
	}
	return predicates
}

type mapping struct {
	pos  token.Pos
	what string
}

// importName is the name file refers to the package path by, or "".
func importName(file *ast.File, path string) string {
	for _, imp := range file.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == path {
			if imp.Name != nil {
				return imp.Name.Name
			}
			return path[strings.LastIndex(path, "/")+1:]
		}
	}
	return ""
}

// isCodeOf matches a reference to a capabilities code constant (CodeX,
// not CodeOf) or to the Code type, the package being imported as capName.
func isCodeOf(capName string) func(ast.Node) bool {
	return func(n ast.Node) bool {
		s, ok := n.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		x, ok := s.X.(*ast.Ident)
		return ok && x.Name == capName && strings.HasPrefix(s.Sel.Name, "Code") && s.Sel.Name != "CodeOf"
	}
}

// callsOneOf matches a call of a function or method named in names.
func callsOneOf(names map[string]bool) func(ast.Node) bool {
	return func(n ast.Node) bool {
		c, ok := n.(*ast.CallExpr)
		if !ok {
			return false
		}
		switch f := c.Fun.(type) {
		case *ast.Ident:
			return names[f.Name]
		case *ast.SelectorExpr:
			return names[f.Sel.Name]
		}
		return false
	}
}

// mentions reports whether a node under n matches.
func mentions(n ast.Node, match func(ast.Node) bool) bool {
	found := false
	ast.Inspect(n, func(m ast.Node) bool {
		if found || m == nil {
			return false
		}
		found = match(m)
		return !found
	})
	return found
}

// codeStatusMappings finds the maps, switch cases and ifs in n that turn
// a capabilities code into an HTTP status; an if's test may call one of
// predicates (codePredicates).
func codeStatusMappings(n ast.Node, capName, httpName string, predicates map[string]bool) []mapping {
	isCode := isCodeOf(capName)
	testsCode := func(n ast.Node) bool {
		return n != nil && (mentions(n, isCode) || mentions(n, callsOneOf(predicates)))
	}
	isStatus := func(n ast.Node) bool {
		s, ok := n.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		x, ok := s.X.(*ast.Ident)
		return ok && x.Name == httpName && strings.HasPrefix(s.Sel.Name, "Status")
	}
	isNumber := func(n ast.Node) bool {
		l, ok := n.(*ast.BasicLit)
		return ok && l.Kind == token.INT
	}
	var found []mapping
	ast.Inspect(n, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CompositeLit:
			m, ok := n.Type.(*ast.MapType)
			if !ok || !isCode(m.Key) {
				return true
			}
			for _, e := range n.Elts {
				if kv, ok := e.(*ast.KeyValueExpr); ok && (mentions(kv.Value, isStatus) || mentions(kv.Value, isNumber)) {
					found = append(found, mapping{n.Pos(), "a map from capabilities codes to statuses"})
					break
				}
			}
		case *ast.SwitchStmt:
			for _, s := range n.Body.List {
				cc := s.(*ast.CaseClause)
				if codeCase := len(cc.List) > 0 && mentions(&ast.CompositeLit{Elts: cc.List}, isCode); codeCase && mentions(&ast.BlockStmt{List: cc.Body}, isStatus) {
					found = append(found, mapping{cc.Pos(), "a switch case from a capabilities code to a status"})
				}
			}
		case *ast.IfStmt:
			if (testsCode(n.Cond) || n.Init != nil && testsCode(n.Init)) && mentions(n.Body, isStatus) {
				found = append(found, mapping{n.Pos(), "an if from a capabilities code to a status"})
			}
		}
		return true
	})
	return found
}

// statusRecorder is the package that owns the one response writer that
// records a response's status (statuswriter.Writer).
const statusRecorder = "internal/statuswriter"

// One response writer records statuses: no production type outside
// internal/statuswriter has a WriteHeader method that keeps the status it
// is given in a field (a transport that needs the status its handler
// wrote wraps the response in statuswriter.New). The rule must find the
// recorder it allows, or it no longer sees one.
func TestOneStatusRecorder(t *testing.T) {
	owned := 0
	for _, p := range packages(t) {
		r := rel(p.ImportPath)
		for _, f := range p.GoFiles {
			path := filepath.Join(p.Dir, f)
			fset := token.NewFileSet()
			file, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range file.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || !recordsStatus(fd) {
					continue
				}
				if r == statusRecorder {
					owned++
					continue
				}
				t.Errorf("%s/%s:%d: %s records the status it writes: wrap the response in statuswriter.New, the one recorder",
					r, f, fset.Position(fd.Pos()).Line, fd.Name.Name)
			}
		}
	}
	if owned == 0 {
		t.Fatalf("no WriteHeader in %s records its status: the rule no longer recognises a recorder", statusRecorder)
	}
}

// recordsStatus reports whether fd is a WriteHeader method that assigns
// its status parameter to a field.
func recordsStatus(fd *ast.FuncDecl) bool {
	if fd.Recv == nil || fd.Name.Name != "WriteHeader" || fd.Body == nil || len(fd.Type.Params.List) != 1 || len(fd.Type.Params.List[0].Names) != 1 {
		return false
	}
	param := fd.Type.Params.List[0].Names[0].Name
	found := false
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		a, ok := n.(*ast.AssignStmt)
		if !ok || found {
			return !found
		}
		for i, lhs := range a.Lhs {
			if _, field := lhs.(*ast.SelectorExpr); !field || i >= len(a.Rhs) {
				continue
			}
			if id, ok := a.Rhs[i].(*ast.Ident); ok && id.Name == param {
				found = true
			}
		}
		return !found
	})
	return found
}
