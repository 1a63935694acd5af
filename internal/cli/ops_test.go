package cli

import (
	"bufio"
	"flag"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/accounts"
)

func TestLogLevel(t *testing.T) {
	o := &options{}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	o.register(fs)
	var buf syncBuffer
	if err := fs.Parse([]string{"--log-level", "warn"}); err != nil {
		t.Fatal(err)
	}
	if err := o.finish(&buf); err != nil {
		t.Fatal(err)
	}
	o.log.Info("hidden line")
	o.log.Warn("shown line")
	if strings.Contains(buf.String(), "hidden line") || !strings.Contains(buf.String(), "shown line") {
		t.Fatalf("--log-level warn logged %q", buf.String())
	}
	if code, _, errOut := run(t, nil, "version", "--log-level", "loud"); code != 2 || !strings.Contains(errOut, "--log-level") {
		t.Fatalf("bad level: %d %s", code, errOut)
	}
}

// Secret flags are read from the file named by ENCLAVE_<NAME>_FILE.
func TestSecretsFromFiles(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "elsewhere.db")
	file := filepath.Join(dir, "database-url")
	if err := os.WriteFile(file, []byte("sqlite://"+db+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"ENCLAVE_DATA_DIR": dir, "ENCLAVE_DATABASE_URL_FILE": file}
	if code, out, errOut := run(t, env, "migrate"); code != 0 {
		t.Fatalf("migrate: %d %s %s", code, out, errOut)
	}
	if _, err := os.Stat(db); err != nil {
		t.Fatalf("the database named in the file was not used: %v", err)
	}
	env["ENCLAVE_DATABASE_URL"] = "sqlite://" + db
	if code, _, errOut := run(t, env, "migrate"); code != 2 || !strings.Contains(errOut, "both ENCLAVE_DATABASE_URL and ENCLAVE_DATABASE_URL_FILE") {
		t.Fatalf("both set: %d %s", code, errOut)
	}
	pw := filepath.Join(dir, "smtp-password")
	os.WriteFile(pw, []byte("from-a-file\n"), 0o600)
	o := &options{}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	o.register(fs)
	if err := applyEnv(fs, func(k string) string { return map[string]string{"ENCLAVE_SMTP_PASSWORD_FILE": pw}[k] }); err != nil {
		t.Fatal(err)
	}
	if o.smtp.Password != "from-a-file" {
		t.Fatalf("smtp password = %q", o.smtp.Password)
	}
	if code, _, errOut := run(t, map[string]string{"ENCLAVE_SMTP_PASSWORD_FILE": filepath.Join(dir, "missing")}, "version"); code != 2 || !strings.Contains(errOut, "ENCLAVE_SMTP_PASSWORD_FILE") {
		t.Fatalf("missing file: %d %s", code, errOut)
	}
}

func TestOperatorFlags(t *testing.T) {
	o := &options{}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	o.register(fs)
	if err := fs.Parse([]string{"--signup", "invite", "--allowed-origins", "https://a.example.com, http://localhost:5173/", "--metrics-addr", "127.0.0.1:9090", "--shutdown-timeout", "3s", "--no-migrate",
		"--smtp-url", "smtp://u:p@mail.example.com?tls=tls", "--smtp-from", "noreply@example.com"}); err != nil {
		t.Fatal(err)
	}
	if err := o.finish(&syncBuffer{}); err != nil {
		t.Fatal(err)
	}
	c := o.cfg
	if c.Signup != accounts.SignupInvite || !slices.Equal(c.AllowedOrigins, []string{"https://a.example.com", "http://localhost:5173"}) || c.MetricsAddr != "127.0.0.1:9090" ||
		c.ShutdownTimeout.Seconds() != 3 || !c.NoMigrate || c.Mailer == nil {
		t.Fatalf("config %+v", c)
	}
	for _, bad := range [][]string{{"--signup", "sometimes"}, {"--allowed-origins", "app.example.com"}, {"--allowed-origins", "https://a.example.com/path"},
		{"--smtp-url", "smtp://h?tls=maybe"}, {"--smtp-url", "smtp://h", "--smtp-addr", "h:25"}} {
		if code, _, _ := run(t, nil, append([]string{"version"}, bad...)...); code != 2 {
			t.Errorf("%v: exit %d, want 2", bad, code)
		}
	}
}

// pendingLine matches a migration the status lists as pending (a
// migration's name may contain the word).
var pendingLine = regexp.MustCompile(`(?m)^\s*pending\s`)

func TestMigrateStatus(t *testing.T) {
	env := map[string]string{"ENCLAVE_DATA_DIR": t.TempDir()}
	code, out, _ := run(t, env, "migrate", "status")
	if code != 1 || !strings.Contains(out, "pending  0001_") {
		t.Fatalf("status before migrating: %d %s", code, out)
	}
	if code, _, _ := run(t, env, "migrate"); code != 0 {
		t.Fatal("migrate failed")
	}
	code, out, _ = run(t, env, "migrate", "status")
	if code != 0 || !strings.Contains(out, "applied  0001_") || pendingLine.MatchString(out) || !strings.Contains(out, "the schema is current") {
		t.Fatalf("status after migrating: %d %s", code, out)
	}
}

func TestHealthcheck(t *testing.T) {
	_, base := serveDir(t, t.TempDir())
	addr := strings.TrimPrefix(base, "http://")
	if code, out, errOut := run(t, map[string]string{"ENCLAVE_ADDR": addr}, "healthcheck"); code != 0 || !strings.Contains(out, `"ok"`) {
		t.Fatalf("healthcheck of a ready server: %d %s %s", code, out, errOut)
	}
	// A wildcard listen address is probed on loopback.
	_, port, _ := strings.Cut(addr, ":")
	if code, _, errOut := run(t, map[string]string{"ENCLAVE_ADDR": "0.0.0.0:" + port}, "healthcheck"); code != 0 {
		t.Fatalf("healthcheck via a wildcard address: %d %s", code, errOut)
	}
	down := httptest.NewServer(nil)
	down.Close()
	if code, _, _ := run(t, nil, "healthcheck", "--url", down.URL+"/readyz"); code != 1 {
		t.Fatalf("healthcheck of nothing: %d, want 1", code)
	}
}

var docFlag = regexp.MustCompile("^\\| `--([a-z0-9-]+)`")

// docs/configuration.md lists every flag of every command, and nothing
// else.
func TestConfigurationDocListsEveryFlag(t *testing.T) {
	f, err := os.Open("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	documented := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := docFlag.FindStringSubmatch(sc.Text()); m != nil {
			documented[m[1]] = true
		}
	}
	actual := map[string]bool{}
	for _, c := range commands() {
		fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
		(&options{}).register(fs)
		if c.flags != nil {
			c.flags(fs)
		}
		fs.VisitAll(func(f *flag.Flag) { actual[f.Name] = true })
	}
	for name := range actual {
		if !documented[name] {
			t.Errorf("--%s is not in docs/configuration.md", name)
		}
	}
	for name := range documented {
		if !actual[name] {
			t.Errorf("docs/configuration.md lists --%s, which no command has", name)
		}
	}
	for _, name := range sharedFlags {
		if !actual[name] {
			t.Errorf("sharedFlags names --%s, which is not a flag", name)
		}
	}
}

// The image build copies the whole context into its build stage, whose
// layers stay in the builder's cache: the secrets the compose file reads
// (deploy/secrets), a keeper key, a database and backup archives made in
// the checkout must be left out of it.
func TestDockerContextLeavesOutSecrets(t *testing.T) {
	b, err := os.ReadFile("../../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, l)
		}
	}
	excluded := func(p string) bool {
		for _, pat := range patterns {
			for _, cand := range []string{pat, strings.TrimPrefix(pat, "**/")} {
				if ok, _ := filepath.Match(cand, p); ok {
					return true
				}
				if ok, _ := filepath.Match(cand, filepath.Base(p)); ok && strings.HasPrefix(pat, "**/") {
					return true
				}
				if strings.HasPrefix(p, cand+"/") {
					return true
				}
			}
		}
		return false
	}
	for _, p := range []string{"deploy/secrets/database_url", "secrets/smtp_url", "enclave-data/keeper.key", "keeper.key",
		"data/enclave.db", "enclave.db-wal", "enclave-backup.tar.gz", "backup.pgdump", ".env"} {
		if !excluded(p) {
			t.Errorf("%s would be sent to the image build", p)
		}
	}
}
