package architecture

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

const module = "github.com/enclave-mcp/enclave"

// pkg is what go list says of one package of the module.
type pkg struct {
	ImportPath string
	Dir        string
	Name       string
	Doc        string
	GoFiles    []string
	Imports    []string
	Deps       []string
}

// listModule runs go list once for all the tests.
var listModule = sync.OnceValues(func() ([]pkg, error) {
	cmd := exec.Command("go", "list", "-json", module+"/...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		return nil, err
	}
	var all []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			return nil, err
		}
		all = append(all, p)
	}
	return all, nil
})

// packages lists every package of the module (production files only).
func packages(t *testing.T) []pkg {
	t.Helper()
	all, err := listModule()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	if len(all) < 20 {
		t.Fatalf("go list found only %d packages", len(all))
	}
	return all
}

// rel is a package's path inside the module ("" for the root).
func rel(path string) string {
	return strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
}

// under reports whether the package at rel path p is dir or inside it.
func under(p string, dirs ...string) bool {
	for _, d := range dirs {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

// transports are the packages that speak to the outside: they call the
// domains, never the other way round.
var transports = []string{"mcp", "web", "oauth"}

// mayImportTransports are the packages that sit above the transports:
// the root assembling a server, the middleware around its whole HTTP
// surface (it knows the transports' paths), the binary and its CLI, the
// test kit, the end-to-end suites, the benchmarks and the examples
// (embedders).
var mayImportTransports = []string{"cmd", "internal/cli", "internal/httpmw", "enclavetest", "e2e", "bench", "examples"}

// No domain package imports a transport, directly or through another
// package (one of mayImportTransports, say): data flows transport →
// capabilities/domains → storage, never back (DESIGN.md).
func TestDomainsImportNoTransport(t *testing.T) {
	checked := 0
	for _, p := range packages(t) {
		r := rel(p.ImportPath)
		if r == "" || under(r, transports...) || under(r, mayImportTransports...) {
			continue
		}
		checked++
		for _, imp := range p.Imports {
			if ir := strings.TrimPrefix(imp, module+"/"); ir != imp && under(ir, transports...) {
				t.Errorf("%s imports the transport %s: a domain must not know how it is reached", r, ir)
			}
		}
		for _, dep := range p.Deps {
			if dr := strings.TrimPrefix(dep, module+"/"); dr != dep && under(dr, transports...) && !slices.Contains(p.Imports, dep) {
				t.Errorf("%s depends on the transport %s through its imports: a domain must not know how it is reached", r, dr)
			}
		}
	}
	if checked < 15 {
		t.Fatalf("only %d domain packages checked", checked)
	}
}

// webSQLFiles are the files of package web that still reach SQL: the
// hand-off to the transactional mail sender (mail.Transactional), whose
// SendInTx writes its outbox row in the transaction of the account flow
// that sends it (tokens.go). The sender itself moved to the mail domain
// (#30); the flows' transactions move with #27. The list only shrinks, and
// an entry that no longer imports SQL fails the test.
var webSQLFiles = []string{"mail.go", "tokens.go"}

// sqlImports are the packages that give code SQL.
var sqlImports = []string{"database/sql", "github.com/uptrace/bun", "github.com/jackc/pgx/v5", "modernc.org/sqlite"}

// The web shell holds no SQL: a page parses, invokes a capability,
// renders. Checked per file, so a new page cannot hide behind an old
// exception.
func TestWebImportsNoSQL(t *testing.T) {
	for _, p := range packages(t) {
		if rel(p.ImportPath) != "web" {
			continue
		}
		fset := token.NewFileSet()
		var stale []string
		for _, f := range p.GoFiles {
			file, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			sql := false
			for _, imp := range file.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				for _, s := range sqlImports {
					if path == s || strings.HasPrefix(path, s+"/") {
						sql = true
					}
				}
			}
			allowed := slices.Contains(webSQLFiles, f)
			switch {
			case sql && !allowed:
				t.Errorf("web/%s imports SQL: a page handler invokes a capability instead", f)
			case !sql && allowed:
				stale = append(stale, f)
			}
		}
		for _, f := range stale {
			t.Errorf("web/%s no longer imports SQL: drop it from webSQLFiles", f)
		}
		return
	}
	t.Fatal("package web not found")
}

// Every package opens with a doc comment that says what it owns.
func TestEveryPackageHasADoc(t *testing.T) {
	for _, p := range packages(t) {
		if strings.TrimSpace(p.Doc) == "" {
			t.Errorf("%s has no package doc comment", p.ImportPath)
			continue
		}
		// go list gives the doc's first sentence; "Package x ..." or,
		// for a command, "Command ..." / "Enclave ...": at least a few
		// words of its own.
		if n := len(strings.Fields(p.Doc)); n < 4 {
			t.Errorf("%s: package doc %q says too little", p.ImportPath, p.Doc)
		}
	}
}

// The root package assembles a server and holds nothing else: it has no
// test file over rootTestLineLimit lines of its own, so whole-server suites
// live in e2e/. Files over the limit would be listed in rootLargeTests; the
// list only shrinks, and issue #27 emptied it.
func TestRootTestsStaySmall(t *testing.T) {
	const rootTestLineLimit = 400
	files, err := filepath.Glob("../../*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		n := lines(t, f)
		name := filepath.Base(f)
		if n > rootTestLineLimit && !slices.Contains(rootLargeTests, name) {
			t.Errorf("%s has %d lines: whole-server suites belong in e2e/ (limit %d for the root)", name, n, rootTestLineLimit)
		}
		if n <= rootTestLineLimit && slices.Contains(rootLargeTests, name) {
			t.Errorf("%s is down to %d lines: drop it from rootLargeTests", name, n)
		}
	}
}

// rootLargeTests are the root's test files over the limit today: none (the
// root keeps its examples and the internal tests of unexported code).
var rootLargeTests = []string{}

func lines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte("\n"))
}

// sqlBuilders are the calls that write SQL (bun's query builders and
// database/sql's entry points).
var sqlBuilders = []string{"NewSelect", "NewInsert", "NewUpdate", "NewDelete", "NewRaw", "NewMerge",
	"NewCreateTable", "NewDropTable", "ExecContext", "QueryContext", "QueryRowContext"}

// The root's production files assemble and hold nothing else: no SQL (a
// query belongs to the package that owns its table), no capability of its
// own (a capability belongs to its domain), no token verifier (verifiers
// live next to what they verify, mcp/verifiers).
func TestRootHoldsOnlyAssembly(t *testing.T) {
	files, err := filepath.Glob("../../*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		checked++
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(f)
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				if n.Recv != nil && n.Name.Name == "VerifyToken" {
					t.Errorf("%s: a token verifier (%s) in the root: put it next to what it verifies (mcp/verifiers)", fset.Position(n.Pos()), n.Name.Name)
				}
				if n.Recv != nil && slices.Contains(rootForeignMethods, n.Name.Name) {
					t.Errorf("%s: %s in the root implements another package's interface (a forwarder, an auditor, a handler): put it in that domain's package", fset.Position(n.Pos()), n.Name.Name)
				}
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if slices.Contains(sqlBuilders, sel.Sel.Name) {
					t.Errorf("%s: SQL (%s) in the root's %s: the package that owns the table runs it", fset.Position(n.Pos()), sel.Sel.Name, name)
				}
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "capabilities" && sel.Sel.Name == "Define" {
					t.Errorf("%s: a capability defined in the root's %s: it belongs to its domain's package", fset.Position(n.Pos()), name)
				}
			}
			return true
		})
	}
	if checked < 5 {
		t.Fatalf("only %d root production files checked", checked)
	}
}

// rootFiles are the root's production files, each with its line budget:
// the Config and its defaults, the Server's exported methods, New and
// the named wiring steps, the optional domains' steps and the
// declarations gathered from the packages owning the tables. Behaviour
// belongs to a domain's package (a Wire constructor, a Deferred, a
// verifier) or a single-purpose internal package (httpmw, health,
// adminaudit), never to a new root file; issue #27 took the root from
// 3067 production lines in 24 files to these. A budget only shrinks.
var rootFiles = map[string]int{
	"doc.go":              16,
	"enclave.go":          357, // Config: mostly its documentation
	"server.go":           442,
	"assemble.go":         432,
	"assemble_domains.go": 117,
	"declarations.go":     106,
}

// rootForeignMethods are methods that make a root type stand in for
// another package's: an HTTP handler or middleware, a denial auditor, a
// refusal observer, the OAuth pages' forwarder, a connections source.
var rootForeignMethods = []string{"ServeHTTP", "RecordDenial", "TokenRefused", "Login", "Consent", "ConsentScopes", "AuthorizeError", "Use", "RevokeAll"}

// The root holds only the files of rootFiles, each within its budget.
func TestRootFilesAndBudgets(t *testing.T) {
	files, err := filepath.Glob("../../*.go")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range files {
		name := filepath.Base(f)
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		seen[name] = true
		budget, ok := rootFiles[name]
		if !ok {
			t.Errorf("%s is a new root production file: put the behaviour in its domain's package or a single-purpose internal/ package, and the wiring step in assemble.go", name)
			continue
		}
		if n := lines(t, f); n > budget {
			t.Errorf("%s has %d lines, over its budget of %d: move behaviour out of the root, do not raise the budget", name, n, budget)
		}
	}
	for name := range rootFiles {
		if !seen[name] {
			t.Errorf("rootFiles names %s, which is gone: drop it", name)
		}
	}
}
