package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// rootPackageBudget is the most packages (standard library included) that
// the library root, github.com/enclave-mcp/enclave, may depend on:
// "go list -deps ." from the module root. .ci/run checks the same number.
// The aim is 450; what holds it above is upstream, and each lever left
// needs a fork:
//   - fosite's root package (every OAuth endpoint) imports
//     github.com/ory/x/otelx for one helper (End), and otelx links its
//     Jaeger, Zipkin and OTLP exporters with gRPC, gogo and Google
//     protobuf, the Jaeger remote sampler and logrus. A local otelx with
//     End alone takes the root from 721 to 660 packages and the release
//     binary from 41.60 to 40.12 MiB. fosite v0.49.0 is the newest on the
//     module proxy; every ory/x there (v0.0.561 to v0.0.729) has the same
//     otelx, and newer Jaeger samplers still link gogo protobuf.
//   - gocloud.dev's portable types (blob, docstore, pubsub, secrets) pull
//     OpenTelemetry's metric SDK (gocloud.dev/internal/otel, whose views
//     are in their public API) and gax-go with gRPC (internal/retry,
//     pubsub, for a backoff). With both stubbed too, the root needs 567
//     packages; the binary loses 80 KB (the linker already drops the rest).
//     gocloud.dev v0.49.0, the newest, imports gRPC from blob and
//     secrets themselves.
//   - fosite/handler/oauth2 imports fosite/storage, which links testify and
//     gomock (see upstreamTestImports): 12 packages.
//   - The Prometheus client: 18 packages (more once nothing else links
//     Google protobuf).
//
// The standard library is 246 of them (16 vendored). The NATS bus
// (cluster, -tags nats) is not counted: the default build leaves it out. Issue #28 took it
// from 737 to 721: federation verifies ID tokens with go-jose v3, which
// fosite links, instead of go-oidc with go-jose v4 (4); mail sends with
// emersion/go-smtp's client, which the inbound listener links, instead of
// go-mail (7); github.com/prometheus/common stays at v0.72.0, the version
// client_golang asks for, because v0.73 made expfmt link an ABNF parser
// with go/format, go/parser and go/ast (9). Issue #27 added two of the
// module's own (mcp/mcpwire, the /mcp wiring moved out of the root, and
// internal/background), no dependency: 723.
const rootPackageBudget = 723

// testOnly reports whether an import path is a package made for tests.
func testOnly(p string) bool {
	return p == "testing" || strings.HasPrefix(p, "testing/") ||
		p == "github.com/golang/mock" || strings.HasPrefix(p, "github.com/golang/mock/") ||
		p == "go.uber.org/mock" || strings.HasPrefix(p, "go.uber.org/mock/") ||
		p == "github.com/stretchr/testify" || strings.HasPrefix(p, "github.com/stretchr/testify/")
}

// upstreamTestImports are the imports of test-only packages by third-party
// production packages that the binary cannot avoid yet, each as
// "importer -> imported":
//   - fosite's handler/oauth2 (the authorization code grant, revocation,
//     and handler/pkce through it) imports fosite/storage for its
//     transaction helpers; that package's in-memory store imports
//     fosite/internal, fosite's generated mocks.
//   - fosite's root package imports github.com/ory/x/otelx, which links the
//     Jaeger exporter, whose vendored Thrift library has a logger for tests.
//
// Any other path to a test-only package fails the test, and so does an
// entry here that no longer occurs (an upgrade removed it: drop it).
var upstreamTestImports = []string{
	"github.com/ory/fosite/internal -> github.com/golang/mock/gomock",
	"github.com/ory/fosite/internal -> github.com/stretchr/testify/require",
	"github.com/ory/fosite/internal -> testing",
	"go.opentelemetry.io/otel/exporters/jaeger/internal/third_party/thrift/lib/go/thrift -> testing",
}

// goList returns the import graph of pattern's dependencies, run from the
// module root.
func goList(t *testing.T, pattern string) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", pattern)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list %s: %v\n%s", pattern, err, ee.Stderr)
		}
		t.Fatalf("go list %s: %v", pattern, err)
	}
	g := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		g[f[0]] = f[1:]
	}
	return g
}

// chain is one import path from root to target in g, for messages.
func chain(g map[string][]string, root, target string) string {
	prev := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == target {
			var path []string
			for q := p; q != ""; q = prev[q] {
				path = append([]string{q}, path...)
			}
			return strings.Join(path, " -> ")
		}
		for _, d := range g[p] {
			if _, seen := prev[d]; !seen {
				prev[d] = p
				queue = append(queue, d)
			}
		}
	}
	return "(no path)"
}

// The binary links no test-only package (testing, gomock, testify) except
// through the upstream imports listed above.
func TestNoTestOnlyPackagesInTheBinary(t *testing.T) {
	const self = "github.com/enclave-mcp/enclave/cmd/enclave"
	g := goList(t, "./cmd/enclave")
	known := map[string]bool{}
	for _, e := range upstreamTestImports {
		known[e] = false
	}
	var bad []string
	for p, imports := range g {
		if testOnly(p) {
			continue
		}
		for _, d := range imports {
			if !testOnly(d) {
				continue
			}
			edge := p + " -> " + d
			if _, ok := known[edge]; ok {
				known[edge] = true
				continue
			}
			bad = append(bad, chain(g, self, d)+" (new edge: "+edge+")")
		}
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Errorf("a test-only package is linked into the binary: %s", b)
	}
	logged := map[string]bool{}
	for _, e := range upstreamTestImports {
		importer := strings.SplitN(e, " -> ", 2)[0]
		switch {
		case !known[e]:
			t.Errorf("the known upstream import %q no longer occurs: remove it from upstreamTestImports", e)
		case !logged[importer]:
			logged[importer] = true
			t.Logf("known upstream: %s", chain(g, self, importer))
		}
	}
}

// The library root stays within its package budget.
func TestRootPackageBudget(t *testing.T) {
	g := goList(t, ".")
	t.Logf("github.com/enclave-mcp/enclave depends on %d packages (budget %d, aim 450)", len(g), rootPackageBudget)
	if len(g) > rootPackageBudget {
		t.Errorf("the library root depends on %d packages, over its budget of %d", len(g), rootPackageBudget)
	}
}

// releaseTags are the build tags of every release build (.ci/release.sh,
// .ci/image.sh, the Dockerfile, .ci/run's size budget): grpcnotrace keeps
// gRPC (linked by the gocloud.dev portable types and the OTLP exporter)
// from importing golang.org/x/net/trace, whose debug pages execute
// html/template.
const releaseTags = "grpcnotrace"

// The release binary links nothing that looks methods up by name through
// reflect (reflect.Value.MethodByName or Method with a computed index,
// text/template's field evaluation, ...). One such call anywhere makes the
// linker keep every exported method of every type that reaches an
// interface; it cost the binary 6.3 MB (12%) before issue #28. The linker
// says which functions do it (-dumpdep marks them <ReflectMethod>); the
// message gives the call chain from main that links each one. The build
// uses .ci/run's release-budget flags, so it reuses that step's cache.
func TestNoReflectMethodLookup(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the release binary")
	}
	out := filepath.Join(t.TempDir(), "enclave")
	cmd := exec.Command("go", "build", "-trimpath", "-tags", releaseTags, "-ldflags", "-s -w -dumpdep", "-o", out, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go build: %v\n%.2000s", err, stderr.String())
	}
	// Each line is "from -> to", in the order the linker reached the
	// symbols; the first edge into a symbol is how it was reached.
	clean := func(s string) (string, bool) {
		marked := strings.Contains(s, "<ReflectMethod>")
		s = strings.ReplaceAll(s, "<ReflectMethod>", "")
		s = strings.ReplaceAll(s, "<UsedInIface>", "")
		return strings.TrimSpace(s), marked
	}
	via := map[string]string{}
	var marked []string
	lines := 0
	sc := bufio.NewScanner(&stderr)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		from, to, ok := strings.Cut(sc.Text(), " -> ")
		if !ok {
			continue
		}
		lines++
		from, _ = clean(from)
		to, m := clean(to)
		if _, seen := via[to]; !seen {
			via[to] = from
			if m {
				marked = append(marked, to)
			}
		}
	}
	if lines == 0 {
		t.Fatal("the linker printed no dependencies (-dumpdep)")
	}
	// reflect's own lookups are marked when a caller outside reflect is;
	// the callers say what to change.
	var callers []string
	for _, sym := range marked {
		if !strings.HasPrefix(sym, "reflect.") {
			callers = append(callers, sym)
		}
	}
	if len(callers) > 0 {
		marked = callers
	}
	for _, sym := range marked {
		path := []string{sym}
		for seen := map[string]bool{sym: true}; path[0] != "main.main"; {
			p, ok := via[path[0]]
			if !ok || p == "" || seen[p] {
				break
			}
			seen[p] = true
			path = append([]string{p}, path...)
		}
		t.Errorf("the binary looks methods up by name through reflect, which keeps every exported method: %s", strings.Join(path, " -> "))
	}
}
