package cli

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func run(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb syncBuffer
	code = Main(context.Background(), args, &Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }})
	return code, out.String(), errb.String()
}

func TestVersion(t *testing.T) {
	code, out, _ := run(t, nil, "version")
	if code != 0 || !strings.HasPrefix(out, "enclave ") || !strings.Contains(out, "cluster buses: local, postgres") {
		t.Fatalf("version: code %d, out %q", code, out)
	}
}

func TestUsage(t *testing.T) {
	code, _, errOut := run(t, nil, "frobnicate")
	if code != 2 || !strings.Contains(errOut, `unknown command "frobnicate"`) || !strings.Contains(errOut, "serve") {
		t.Fatalf("unknown command: code %d, stderr %q", code, errOut)
	}
	if code, _, _ := run(t, nil, "help"); code != 0 {
		t.Fatalf("help: code %d", code)
	}
	if code, _, errOut := run(t, nil, "version", "extra"); code != 2 || !strings.Contains(errOut, "no arguments") {
		t.Fatalf("extra argument: code %d, stderr %q", code, errOut)
	}
	if code, _, errOut := run(t, nil, "migrate", "--log-format", "xml"); code != 2 || !strings.Contains(errOut, "want text or json") {
		t.Fatalf("bad log format: code %d, stderr %q", code, errOut)
	}
	if code, _, errOut := run(t, map[string]string{"ENCLAVE_PRODUCTION": "maybe"}, "migrate"); code != 2 || !strings.Contains(errOut, "ENCLAVE_PRODUCTION") {
		t.Fatalf("bad env value: code %d, stderr %q", code, errOut)
	}
}

func TestMigrateTwice(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := run(t, nil, "migrate", "--data-dir", dir)
	if code != 0 || !strings.Contains(out, "applied 0001_users_rbac") {
		t.Fatalf("first migrate: code %d, out %q, err %q", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "enclave.db")); err != nil {
		t.Fatalf("no database in the data dir: %v", err)
	}
	code, out, _ = run(t, nil, "migrate", "--data-dir", dir)
	if code != 0 || !strings.Contains(out, "up to date") {
		t.Fatalf("second migrate: code %d, out %q", code, out)
	}
}

func TestMigratePostgresFromEnv(t *testing.T) {
	url := storagetest.PostgresSchemaURL(t) // skips without PostgreSQL
	code, out, errOut := run(t, map[string]string{"ENCLAVE_DATABASE_URL": url, "ENCLAVE_DATA_DIR": t.TempDir()}, "migrate")
	if code != 0 || !strings.Contains(out, "applied 0001_users_rbac") {
		t.Fatalf("migrate: code %d, out %q, err %q", code, out, errOut)
	}
}

// serve starts, prints where everything is, answers /healthz and stops
// cleanly when its context ends (as on SIGINT/SIGTERM).
func TestServe(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	done := make(chan struct{})
	var code int
	env := map[string]string{"ENCLAVE_DATA_DIR": dir, "ENCLAVE_LOG_FORMAT": "json"}
	go func() {
		defer close(done)
		code = Main(ctx, []string{"serve", "--addr", "127.0.0.1:0"}, &Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut, Getenv: func(k string) string { return env[k] }})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("serve did not stop")
		}
	})

	health := regexp.MustCompile(`health:\s+(http://127\.0\.0\.1:\d+)/healthz`)
	var base string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if m := health.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
			break
		}
		select {
		case <-done:
			t.Fatalf("serve exited with %d: %s", code, errOut.String())
		default:
		}
	}
	if base == "" {
		t.Fatalf("serve printed no health URL; stdout %q stderr %q", out.String(), errOut.String())
	}
	for _, want := range []string{"MCP endpoint: " + base + "/mcp", "enclave admin grant"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("banner lacks %q:\n%s", want, out.String())
		}
	}
	resp, err := http.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"ok"`) || resp.Header.Get("X-Request-Id") == "" {
		t.Fatalf("healthz: %d %q, request id %q", resp.StatusCode, body, resp.Header.Get("X-Request-Id"))
	}

	cancel()
	select {
	case <-done:
		if code != 0 {
			t.Fatalf("serve exited with %d after shutdown: %s", code, errOut.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop after its context ended")
	}
	if !strings.Contains(errOut.String(), `"msg":"shutting down"`) {
		t.Errorf("no JSON shutdown log line in %q", errOut.String())
	}
	if strings.Contains(errOut.String(), "non-loopback") {
		t.Errorf("warned about a loopback address: %q", errOut.String())
	}
}

// serve warns when it listens beyond loopback in development mode.
func TestServeWarnsOnNonLoopbackInDevelopment(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	done := make(chan int)
	env := map[string]string{"ENCLAVE_DATA_DIR": t.TempDir(), "ENCLAVE_LOG_FORMAT": "json"}
	go func() {
		done <- Main(ctx, []string{"serve", "--addr", "0.0.0.0:0", "--base-url", "http://localhost:8080"},
			&Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut, Getenv: func(k string) string { return env[k] }})
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("serve did not stop")
		}
	}()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && !strings.Contains(out.String(), "is serving on"); {
		select {
		case code := <-done:
			t.Fatalf("serve exited with %d: %s", code, errOut.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if !strings.Contains(errOut.String(), `"level":"WARN"`) || !strings.Contains(errOut.String(), "non-loopback address") || !strings.Contains(errOut.String(), "--production") {
		t.Fatalf("no warning about a non-loopback address in development: %q", errOut.String())
	}
}

func TestServeRefusesHTTPInProduction(t *testing.T) {
	code, _, errOut := run(t, nil, "serve", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--production")
	if code != 1 || !strings.Contains(errOut, "https base URL") {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
}

func TestMailAndProxyFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--trusted-proxies", "10.0.0.0/8,not-a-net"}, "--trusted-proxies"},
		{[]string{"--allowed-origins", "https://app.example.com,app.example.com"}, "--allowed-origins"},
		{[]string{"--allowed-origins", "https://app.example.com/path"}, "--allowed-origins"},
		{[]string{"--smtp-addr", "127.0.0.1:2525", "--smtp-from", "a@example.com", "--smtp-security", "rot13"}, "--smtp-security"},
		{[]string{"--smtp-addr", "mail.example.com:25", "--smtp-from", "a@example.com", "--smtp-security", "plain"}, "loopback"},
	} {
		code, _, errOut := run(t, nil, append([]string{"migrate", "--data-dir", t.TempDir()}, tc.args...)...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

// With an https base URL and an SMTP relay, production mode starts.
func TestServeInProduction(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	done := make(chan int, 1)
	env := map[string]string{"ENCLAVE_SMTP_PASSWORD": ""}
	go func() {
		done <- Main(ctx, []string{"serve", "--production", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir(),
			"--base-url", "https://mcp.example.com", "--smtp-addr", "127.0.0.1:2525", "--smtp-from", "noreply@example.com", "--smtp-security", "plain"},
			&Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut, Getenv: func(k string) string { return env[k] }})
	}()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(out.String(), "MCP endpoint: https://mcp.example.com/mcp") {
		select {
		case code := <-done:
			t.Fatalf("serve exited with %d: %s", code, errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("serve did not start: %q %q", out.String(), errOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
	}
}

// --allowed-origins and ENCLAVE_ALLOWED_ORIGINS fill Config.AllowedOrigins;
// the flag wins over the variable.
func TestAllowedOriginsFlag(t *testing.T) {
	for _, tc := range []struct {
		env  string
		args []string
		want string
	}{
		{"https://a.example, https://b.example:8443", nil, "[https://a.example https://b.example:8443]"},
		{"https://a.example", []string{"--allowed-origins", "http://localhost:5173"}, "[http://localhost:5173]"},
		{"", nil, "[]"},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		o := &options{}
		o.register(fs)
		err := applyEnv(fs, func(k string) string {
			if k == "ENCLAVE_ALLOWED_ORIGINS" {
				return tc.env
			}
			return ""
		})
		if err == nil {
			err = fs.Parse(tc.args)
		}
		if err == nil {
			err = o.finish(io.Discard)
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(o.cfg.AllowedOrigins); got != tc.want {
			t.Errorf("env %q args %v: AllowedOrigins %s, want %s", tc.env, tc.args, got, tc.want)
		}
	}
}

// --quota and --quota-class (or ENCLAVE_QUOTA, ENCLAVE_QUOTA_CLASS) fill
// Config.QuotaLimits; the flag wins over the variable, and a malformed
// limit is refused with the flag's name.
func TestQuotaFlags(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"ENCLAVE_QUOTA": "default=5000/day, search=200/day", "ENCLAVE_QUOTA_CLASS": "webSearch=search"}, nil,
			"map[default:5000 search:200] map[webSearch:search]"},
		{map[string]string{"ENCLAVE_QUOTA": "default=5000/day"}, []string{"--quota", "default=10"}, "map[default:10] map[]"},
		{nil, nil, "map[] map[]"},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		o := &options{}
		o.register(fs)
		err := applyEnv(fs, func(k string) string { return tc.env[k] })
		if err == nil {
			err = fs.Parse(tc.args)
		}
		if err == nil {
			err = o.finish(io.Discard)
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(o.cfg.QuotaLimits.Daily, " ", o.cfg.QuotaLimits.Classes); got != tc.want {
			t.Errorf("env %v args %v: limits %s, want %s", tc.env, tc.args, got, tc.want)
		}
		if o.cfg.QuotaLimits.Enabled() != (tc.want != "map[] map[]") {
			t.Errorf("env %v args %v: Enabled %v", tc.env, tc.args, o.cfg.QuotaLimits.Enabled())
		}
	}
	for _, bad := range [][]string{{"--quota", "default"}, {"--quota", "default=many/day"}, {"--quota", "default=5/hour"},
		{"--quota", "=5/day"}, {"--quota", "default=-1"}, {"--quota", "a=1/day,a=2/day"}, {"--quota-class", "webSearch"}} {
		code, _, errOut := run(t, nil, append([]string{"version"}, bad...)...)
		if code != 2 || !strings.Contains(errOut, bad[0]) {
			t.Errorf("%v: exit %d, stderr %q; want 2 naming the flag", bad, code, errOut)
		}
	}
}

// A --quota-class naming a class that --quota does not limit would leave
// those capabilities unlimited (a typo like search→serach silently lifts
// their quota), and a capability assigned twice would keep only the last
// class: both are refused.
func TestParseQuotaRefusesSilentUnlimited(t *testing.T) {
	for _, c := range []struct{ limits, classes string }{
		{"default=100/day,search=10/day", "webSearch=serach"},
		{"", "webSearch=search"},
		{"default=100/day,search=10/day", "webSearch=search,webSearch=default"},
		{"Default=100/day", ""},
		{"default=100/day,search=10/day", ""},
	} {
		if l, err := parseQuota(c.limits, c.classes); err == nil {
			t.Errorf("--quota %q --quota-class %q accepted: %+v", c.limits, c.classes, l)
		}
	}
	// Class outbound limits the outbound gateway's requests, not capabilities.
	if l, err := parseQuota("outbound=50/day", ""); err != nil || l.Daily["outbound"] != 50 {
		t.Fatalf("--quota outbound=50/day: %+v %v", l, err)
	}
	if _, err := parseQuota("outbound=0/day", ""); err == nil {
		t.Fatal("--quota outbound=0/day accepted (it would mean the default)")
	}
	l, err := parseQuota("default=100/day,search=10/day", "webSearch=search,fetch=default")
	if err != nil || l.ClassOf("webSearch") != "search" || l.ClassOf("fetch") != "default" {
		t.Fatalf("valid flags: %+v, %v", l, err)
	}
}
