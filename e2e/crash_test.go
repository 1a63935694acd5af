package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/internal/relclient"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// The crash-consistency suite. It builds the real binary, serves it on
// SQLite and on PostgreSQL, drives writes through real clients (MCP
// secretSet/secretDelete with an OAuth token from the real flow, web
// signups that queue verification mail, web account deletions), sends
// SIGKILL at a seeded random moment, restarts, and checks:
//
//   - every write the client saw acknowledged is there (deletions: gone);
//   - nothing is half-applied: a write in flight at the crash is either
//     whole or absent (secret values decrypt to what was sent; every
//     account has its email claim; no owned row outlives its account);
//   - mail queued before a crash is delivered after it;
//   - an account deletion interrupted by the crash completes on retry.
//
// It runs only with ENCLAVE_TEST_CRASH=1 (.ci/run sets it), and then on
// both databases: ENCLAVE_TEST_POSTGRES must be set too.
// ENCLAVE_TEST_CRASH_ROUNDS (default 20) and ENCLAVE_TEST_CRASH_SEED
// (default 1) change the run.

const crashEnv = "ENCLAVE_TEST_CRASH"

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// enclaveBinary builds cmd/enclave once per test binary.
var (
	binOnce sync.Once
	binPath string
	binErr  error
)

func enclaveBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "enclave-crash-bin-*")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "enclave")
		out, err := exec.Command("go", "build", "-o", binPath, "../cmd/enclave").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build ./cmd/enclave: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// crashHarness runs the real binary with one configuration.
type crashHarness struct {
	t    *testing.T
	bin  string
	env  []string
	addr string
	base string
	logs *os.File

	cmd  *exec.Cmd
	done chan struct{}
}

func newCrashHarness(t *testing.T, dbURL string, smtpAddr string) *crashHarness {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	logs, err := os.Create(filepath.Join(t.TempDir(), "enclave.log"))
	if err != nil {
		t.Fatal(err)
	}
	h := &crashHarness{t: t, bin: enclaveBinary(t), addr: addr, base: "http://" + addr, logs: logs}
	h.env = append(os.Environ(),
		"ENCLAVE_ADDR="+addr,
		"ENCLAVE_DATA_DIR="+t.TempDir(),
		"ENCLAVE_DATABASE_URL="+dbURL,
		"ENCLAVE_SMTP_ADDR="+smtpAddr,
		"ENCLAVE_SMTP_FROM=enclave@example.com",
		"ENCLAVE_SMTP_SECURITY=plain",
		"ENCLAVE_TRUSTED_PROXIES=127.0.0.1/32",
		"ENCLAVE_LOG_FORMAT=json",
	)
	t.Cleanup(func() {
		h.kill()
		logs.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logs.Name()); err == nil {
				if len(b) > 8000 {
					b = b[len(b)-8000:]
				}
				t.Logf("server log (tail):\n%s", b)
			}
		}
	})
	return h
}

// run runs a CLI command of the binary and returns its output.
func (h *crashHarness) run(stdin string, args ...string) (string, error) {
	cmd := exec.Command(h.bin, args...)
	cmd.Env = h.env
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// start starts the server and waits until /healthz answers 200.
func (h *crashHarness) start() {
	h.t.Helper()
	cmd := exec.Command(h.bin, "serve")
	cmd.Env = h.env
	cmd.Stdout, cmd.Stderr = h.logs, h.logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	h.cmd, h.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(h.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(h.base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-h.done:
			h.t.Fatalf("enclave serve exited during start-up")
		default:
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("enclave serve not healthy after 30 s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill sends SIGKILL and waits for the process to end.
func (h *crashHarness) kill() {
	if h.cmd == nil {
		return
	}
	_ = h.cmd.Process.Signal(syscall.SIGKILL)
	<-h.done
	h.cmd = nil
}

// stop asks for a graceful shutdown.
func (h *crashHarness) stop() {
	if h.cmd == nil {
		return
	}
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.done:
	case <-time.After(20 * time.Second):
		h.t.Error("enclave serve did not stop within 20 s of SIGTERM")
		h.kill()
	}
	h.cmd = nil
}

// crashLedger is what the clients saw.
type crashLedger struct {
	mu        sync.Mutex
	secrets   map[string]string // acknowledged and not deleted since: name -> value
	deleted   map[string]bool   // acknowledged deletions
	inDoubt   map[string]string // sent, no answer (the crash): name -> value
	signups   []string          // acknowledged signups (emails)
	sent      int               // requests sent
	acked     int               // requests acknowledged
	throttled int               // 429s (designed)
}

func (l *crashLedger) lock() func() { l.mu.Lock(); return l.mu.Unlock }

// TestCrashConsistency: see the top of this file.
func TestCrashConsistency(t *testing.T) {
	if os.Getenv(crashEnv) != "1" {
		t.Skipf("set %s=1 to run the crash-consistency suite (it builds and kills the real binary)", crashEnv)
	}
	if os.Getenv(storagetest.PostgresEnv) == "" {
		t.Fatalf("%s=1 needs %s: the suite runs on both databases", crashEnv, storagetest.PostgresEnv)
	}
	rounds, seed := envInt("ENCLAVE_TEST_CRASH_ROUNDS", 20), envInt("ENCLAVE_TEST_CRASH_SEED", 1)
	for _, d := range []storage.Dialect{storage.SQLite, storage.Postgres} {
		t.Run(string(d), func(t *testing.T) {
			dbURL := ""
			if d == storage.Postgres {
				dbURL = storagetest.PostgresSchemaURL(t)
			}
			runCrashRounds(t, dbURL, rounds, uint64(seed))
		})
	}
}

func runCrashRounds(t *testing.T, dbURL string, rounds int, seed uint64) {
	ctx := t.Context()
	smtpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	smtpAddr := smtpLn.Addr().String()
	smtpLn.Close()
	smtp := startFakeSMTP(t, smtpAddr)
	h := newCrashHarness(t, dbURL, smtpAddr)

	// Accounts: alice (the agent) and a pool of victims, one per round,
	// whose deletion the crash may interrupt.
	const password = "a long password for the crash suite"
	if out, err := h.run(password, "user", "create", "--email", "alice@example.com", "--username", "alice", "--password-stdin", "--verified"); err != nil {
		t.Fatalf("user create: %v\n%s", err, out)
	}
	victims := make([]string, rounds)
	for i := range victims {
		victims[i] = fmt.Sprintf("victim%02d@example.com", i)
		if out, err := h.run(password, "user", "create", "--email", victims[i], "--username", fmt.Sprintf("victim%02d", i), "--password-stdin", "--verified"); err != nil {
			t.Fatalf("user create: %v\n%s", err, out)
		}
	}
	h.start()
	agent := relclient.New(h.base, nil)
	agent.ForwardedFor = "10.1.0.1"
	tok, err := agent.Authorize(ctx, "alice@example.com", password)
	if err != nil {
		t.Fatal(err)
	}
	webAlice := relclient.New(h.base, nil)
	webAlice.ForwardedFor = "10.1.0.2"

	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	led := &crashLedger{secrets: map[string]string{}, deleted: map[string]bool{}, inDoubt: map[string]string{}}
	var ipSeq atomic.Int64
	nextIP := func() string { n := ipSeq.Add(1); return fmt.Sprintf("10.2.%d.%d", n/250, n%250+1) }
	victimAttempted := map[string]string{} // email -> "acked" | "unacked"
	var deleteTook atomic.Int64            // how long the last acknowledged deletion took
	deleteTook.Store(int64(300 * time.Millisecond))
	verifiedRows := 0

	for round := range rounds {
		if h.cmd == nil {
			h.start()
		}
		sess, err := agent.Open(ctx, tok.AccessToken)
		if err != nil {
			t.Fatalf("round %d: open session: %v", round, err)
		}
		webAlice.ForwardedFor = nextIP() // the per-address credential limit is not under test
		if err := webAlice.SignIn(ctx, "alice@example.com", password); err != nil {
			t.Fatalf("round %d: web sign-in: %v", round, err)
		}

		var wg sync.WaitGroup
		stop := make(chan struct{})
		stopped := func() bool {
			select {
			case <-stop:
				return true
			default:
				return false
			}
		}
		// Two MCP writers: secretSet, and now and then a secretDelete of
		// one of their own acknowledged secrets.
		salt := rng.Uint32()
		for w := range 2 {
			wg.Go(func() {
				var mine []string
				for i := 0; !stopped(); i++ {
					if i%5 == 4 && len(mine) > 0 {
						name := mine[0]
						mine = mine[1:]
						r, err := sess.Call(ctx, "secretDelete", map[string]any{"name": name})
						unlock := led.lock()
						led.sent++
						if err == nil && !r.IsError {
							led.acked++
							delete(led.secrets, name)
							led.deleted[name] = true
						} else {
							// In doubt: it may or may not have been deleted.
							led.inDoubt[name] = led.secrets[name]
							delete(led.secrets, name)
						}
						unlock()
						if err != nil {
							return
						}
						continue
					}
					name := fmt.Sprintf("r%02dw%di%04d", round, w, i)
					value := fmt.Sprintf("value-of-%s-%d", name, salt)
					r, err := sess.Call(ctx, "secretSet", map[string]any{"name": name, "value": value})
					unlock := led.lock()
					led.sent++
					switch {
					case err == nil && !r.IsError:
						led.acked++
						led.secrets[name] = value
						mine = append(mine, name)
					case err == nil:
						unlock()
						t.Errorf("round %d: secretSet refused: %s", round, r.Text())
						return
					default:
						led.inDoubt[name] = value
					}
					unlock()
					if err != nil {
						return
					}
				}
			})
		}
		// A web visitor signing up (each signup queues a verification
		// mail in the same transaction).
		wg.Go(func() {
			for i := 0; !stopped(); i++ {
				c := relclient.New(h.base, nil)
				c.ForwardedFor = nextIP()
				email := fmt.Sprintf("s%02dn%03d@example.com", round, i)
				status, _, err := c.PostForm(ctx, "/signup", url.Values{"email": {email}, "username": {fmt.Sprintf("s%02dn%03d", round, i)}, "password": {password}})
				unlock := led.lock()
				led.sent++
				switch {
				case err == nil && status == http.StatusOK:
					led.acked++
					led.signups = append(led.signups, email)
				case status == http.StatusTooManyRequests:
					led.throttled++
				case err == nil:
					unlock()
					t.Errorf("round %d: signup: status %d", round, status)
					return
				}
				unlock()
				if err != nil {
					return
				}
			}
		})
		// This round's victim deletes their account on the web shell.
		victim := victims[round]
		victimDelay := time.Duration(rng.IntN(800)) * time.Millisecond
		victimIP := nextIP()
		deleting := make(chan struct{})
		wg.Go(func() {
			c := relclient.New(h.base, nil)
			c.ForwardedFor = victimIP
			time.Sleep(victimDelay)
			if err := c.SignIn(ctx, victim, password); err != nil {
				return // the crash came first
			}
			close(deleting)
			began := time.Now()
			status, _, err := c.PostForm(ctx, "/account/delete", url.Values{"confirm": {strings.Split(victim, "@")[0]}, "password": {password}})
			unlock := led.lock()
			defer unlock()
			led.sent++
			if err == nil && status < 400 {
				led.acked++
				victimAttempted[victim] = "acked"
				deleteTook.Store(int64(time.Since(began)))
			} else {
				victimAttempted[victim] = "unacked"
			}
		})

		// Half the rounds kill at a random moment; the other half aim at
		// the account deletion: a random moment in the second half of the
		// time the last acknowledged deletion took (its first half is
		// mostly the password check), so that some kills land between the
		// deleting mark and the final transaction.
		wait := time.Duration(200+rng.IntN(1300)) * time.Millisecond
		if rng.IntN(2) == 1 {
			select {
			case <-deleting:
				took := time.Duration(deleteTook.Load())
				wait = took/2 + time.Duration(rng.Int64N(int64(took/2)+1))
			case <-time.After(2 * time.Second):
				wait = 0
			}
		}
		time.Sleep(wait)
		h.kill() // SIGKILL
		close(stop)
		wg.Wait()
		if t.Failed() {
			return
		}

		// Restart and check what the clients saw.
		h.start()
		sess, err = agent.Open(ctx, tok.AccessToken)
		if err != nil {
			t.Fatalf("round %d: open session after the restart: %v", round, err)
		}
		names := listAllSecrets(t, sess)
		unlock := led.lock()
		for name := range led.secrets {
			if !names[name] {
				t.Errorf("round %d: acknowledged secret %s lost", round, name)
			}
		}
		for name := range led.deleted {
			if names[name] {
				t.Errorf("round %d: acknowledged deletion of %s undone", round, name)
			}
		}
		verifiedRows += len(led.secrets) + len(led.deleted)
		// In-doubt writes are whole or absent: a present one decrypts to the
		// value sent. Settle them: present ones are now acknowledged.
		var check []string
		for name, value := range led.inDoubt {
			if names[name] && value != "" {
				check = append(check, name)
			}
		}
		// Plus a sample of acknowledged ones.
		n := 0
		for name := range led.secrets {
			if n++; n > 3 {
				break
			}
			check = append(check, name)
		}
		values := map[string]string{}
		for _, name := range check {
			if v, ok := led.secrets[name]; ok {
				values[name] = v
			} else {
				values[name] = led.inDoubt[name]
			}
		}
		for name, value := range led.inDoubt {
			if names[name] {
				led.secrets[name] = value
			}
			delete(led.inDoubt, name)
		}
		unlock()
		webAlice.ForwardedFor = nextIP()
		if err := webAlice.SignIn(ctx, "alice@example.com", password); err != nil {
			t.Fatalf("round %d: web sign-in after the restart: %v", round, err)
		}
		for name, want := range values {
			status, body, err := webAlice.PostForm(ctx, "/account/secrets/reveal", url.Values{"name": {name}})
			if err != nil || status != http.StatusOK || !strings.Contains(body, want) {
				t.Errorf("round %d: secret %s does not reveal the value sent: %d %v", round, name, status, err)
			}
			verifiedRows++
		}
		_ = sess.Close(ctx)
		if t.Failed() {
			return
		}
	}

	// The end: stop, check the database directly, make the mail claimed by
	// a killed process due (its two-minute lease would otherwise hold it),
	// restart, and let the outbox drain.
	h.stop()
	st, err := storage.Open(ctx, storage.Config{DataDir: envValue(h.env, "ENCLAVE_DATA_DIR"), DatabaseURL: dbURL})
	if err != nil {
		t.Fatal(err)
	}
	var orphans int
	for _, q := range []string{
		// every account has its email claim (signup is one transaction)
		"SELECT count(*) FROM users u WHERE NOT EXISTS (SELECT 1 FROM email_claims c WHERE c.user_id = u.id)",
		// no owned row outlives its account
		"SELECT count(*) FROM user_secrets s WHERE NOT EXISTS (SELECT 1 FROM users u WHERE u.id = s.user_id)",
		"SELECT count(*) FROM user_roles r WHERE NOT EXISTS (SELECT 1 FROM users u WHERE u.id = r.user_id)",
	} {
		var n int
		if err := st.DB.NewRaw(q).Scan(ctx, &n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("half-applied rows: %q = %d", q, n)
		}
		orphans += n
	}
	for _, email := range led.signups {
		var n int
		if err := st.DB.NewRaw("SELECT count(*) FROM users WHERE email = ?", email).Scan(ctx, &n); err != nil || n != 1 {
			t.Errorf("acknowledged signup %s: %d accounts, %v", email, n, err)
		}
	}
	midway := 0 // deletions the crash interrupted after the account was marked
	for email := range victimAttempted {
		var n int
		if err := st.DB.NewRaw("SELECT count(*) FROM users WHERE email = ? AND deleting_at IS NOT NULL", email).Scan(ctx, &n); err != nil {
			t.Fatal(err)
		}
		midway += n
	}
	if _, err := st.DB.NewRaw("UPDATE outbox SET next_attempt_at = ? WHERE dead_at IS NULL", time.Now().UTC().Add(-time.Second)).Exec(ctx); err != nil {
		t.Fatal(err)
	}
	st.Close()

	h.start()
	// Interrupted deletions complete on retry (the operator's command).
	retried := 0
	for email, outcome := range victimAttempted {
		out, err := h.run("", "user", "delete", email)
		switch {
		case outcome == "acked" && err == nil:
			t.Errorf("acknowledged deletion of %s: the account is still there:\n%s", email, out)
		case err == nil:
			retried++
		case !strings.Contains(out, "no account has the email"):
			t.Errorf("retrying the deletion of %s: %v\n%s", email, err, out)
		}
	}
	// Every acknowledged signup's mail goes out (at least once).
	deadline := time.Now().Add(60 * time.Second)
	var missing []string
	for {
		got := map[string]bool{}
		for _, m := range smtp.all() {
			for _, email := range led.signups {
				if strings.Contains(m, email) {
					got[email] = true
				}
			}
		}
		missing = missing[:0]
		for _, email := range led.signups {
			if !got[email] {
				missing = append(missing, email)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(missing) > 0 {
		t.Errorf("%d acknowledged signups never got their mail: %v", len(missing), missing)
	}
	h.stop()
	t.Logf("crash rounds %d (seed %d): %d requests sent, %d acknowledged, %d throttled (429); %d secret row checks after restarts; "+
		"%d signups' mail delivered (%d messages, duplicates allowed); %d deletions attempted, %d unacknowledged and completed on retry (%d of them interrupted after the account was marked deleting); half-applied rows %d",
		rounds, seed, led.sent, led.acked, led.throttled, verifiedRows, len(led.signups), len(smtp.all()), len(victimAttempted), retried, midway, orphans)
	writeCrashFigures(t, map[string]any{
		"database": map[bool]string{true: "postgres", false: "sqlite"}[dbURL != ""], "rounds": rounds, "seed": seed,
		"sent": led.sent, "acknowledged": led.acked, "throttled": led.throttled, "rows_verified": verifiedRows,
		"signups_mailed": len(led.signups), "messages": len(smtp.all()), "deletions": len(victimAttempted),
		"deletions_completed_on_retry": retried, "deletions_interrupted_midway": midway, "half_applied": orphans, "lost": 0,
	})
}

// writeCrashFigures appends the run's figures to the file named by
// ENCLAVE_TEST_CRASH_REPORT, when set (docs/reliability.md is made from it).
func writeCrashFigures(t *testing.T, fig map[string]any) {
	path := os.Getenv("ENCLAVE_TEST_CRASH_REPORT")
	if path == "" || t.Failed() {
		return
	}
	b, _ := json.Marshal(fig)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	_, _ = f.Write(append(b, '\n'))
}

func envValue(env []string, key string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}

// listAllSecrets pages through secretList.
func listAllSecrets(t *testing.T, s *relclient.Session) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	cursor := ""
	for {
		args := map[string]any{"limit": 1000}
		if cursor != "" {
			args["cursor"] = cursor
		}
		r, err := s.Call(t.Context(), "secretList", args)
		if err != nil || r.IsError {
			t.Fatalf("secretList: %v %s", err, r.Text())
		}
		var out struct {
			Secrets []struct {
				Name string `json:"name"`
			} `json:"secrets"`
			NextCursor string `json:"nextCursor"`
		}
		if err := json.NewDecoder(bytes.NewReader(r.Structured)).Decode(&out); err != nil {
			t.Fatal(err)
		}
		for _, s := range out.Secrets {
			names[s.Name] = true
		}
		if cursor = out.NextCursor; cursor == "" {
			return names
		}
	}
}
