package e2e

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/internal/relclient"
	"github.com/enclave-mcp/enclave/internal/rrproxy"
	"github.com/enclave-mcp/enclave/storage/storagetest"
	"github.com/enclave-mcp/enclave/web"
)

// The cluster suite: three `enclave serve` processes (the real binary) on
// one PostgreSQL behind a round-robin reverse proxy without stickiness. It
// runs only with ENCLAVE_TEST_CLUSTER=1 (.ci/run sets it) and needs
// ENCLAVE_TEST_POSTGRES.
const clusterEnv = "ENCLAVE_TEST_CLUSTER"

func freeListener(t *testing.T) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func TestCluster(t *testing.T) {
	if os.Getenv(clusterEnv) != "1" {
		t.Skipf("set %s=1 to run the cluster suite (three replicas of the real binary)", clusterEnv)
	}
	if os.Getenv(storagetest.PostgresEnv) == "" {
		t.Fatalf("%s=1 needs %s", clusterEnv, storagetest.PostgresEnv)
	}
	ctx := t.Context()
	dbURL := storagetest.PostgresSchemaURL(t)
	smtpLn := freeListener(t)
	smtpAddr := smtpLn.Addr().String()
	smtpLn.Close()
	smtp := startFakeSMTP(t, smtpAddr)
	proxyLn := freeListener(t)
	base := "http://" + proxyLn.Addr().String()
	dataDir := t.TempDir() // shared: the keeper key and the blobs

	var replicas []*crashHarness
	var backends []string
	for range 3 {
		h := newCrashHarness(t, dbURL, smtpAddr)
		h.env = append(h.env, "ENCLAVE_DATA_DIR="+dataDir, "ENCLAVE_BASE_URL="+base)
		replicas = append(replicas, h)
		backends = append(backends, h.base)
	}
	const password = "a long password for the cluster suite"
	for _, who := range []string{"alice", "bob"} {
		if out, err := replicas[0].run(password, "user", "create", "--email", who+"@example.com", "--username", who, "--password-stdin", "--verified"); err != nil {
			t.Fatalf("user create: %v\n%s", err, out)
		}
	}
	for _, h := range replicas {
		h.start()
	}
	proxy, err := rrproxy.New(backends)
	if err != nil {
		t.Fatal(err)
	}
	front := &httptest.Server{Listener: proxyLn, Config: &http.Server{Handler: proxy}}
	front.Start()
	t.Cleanup(front.Close)

	// OAuth through the proxy: registration, authorization, sign-in,
	// consent and the code exchange each land on whichever replica.
	agent := relclient.New(base, nil)
	agent.ForwardedFor = "10.9.0.1"
	tok, err := agent.Authorize(ctx, "alice@example.com", password)
	if err != nil {
		t.Fatalf("OAuth through the proxy: %v", err)
	}
	bobAgent := relclient.New(base, nil)
	bobAgent.ForwardedFor = "10.9.0.2"
	bobTok, err := bobAgent.Authorize(ctx, "bob@example.com", password)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("session on every replica", func(t *testing.T) {
		before := proxy.Hits()
		sess, err := agent.Open(ctx, tok.AccessToken)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 9 {
			r, err := sess.Call(ctx, "secretSet", map[string]any{"name": fmt.Sprintf("spread%d", i), "value": "v"})
			if err != nil || r.IsError {
				t.Fatalf("call %d on the shared session: %v %s", i, err, r.Text())
			}
		}
		for i, n := range proxy.Hits() {
			if n-before[i] < 3 {
				t.Fatalf("replica %d served %d requests; the proxy did not spread them", i, n-before[i])
			}
		}
		// Bob cannot use alice's session id on any replica.
		for range 3 {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
			req.Header.Set("Authorization", "Bearer "+bobTok.AccessToken)
			req.Header.Set("Mcp-Session-Id", sess.ID)
			req.Header.Set("MCP-Protocol-Version", relclient.Protocol)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound {
				t.Fatalf("bob with alice's session: %d", resp.StatusCode)
			}
		}
		if err := sess.Close(ctx); err != nil {
			t.Fatal(err)
		}
		// The other replicas hear of the end over the bus (milliseconds):
		// within a second, every replica refuses the session.
		deadline, refused := time.Now().Add(time.Second), 0
		for refused < 6 {
			if _, err := sess.Call(ctx, "secretList", map[string]any{}); relclient.StatusOf(err) == http.StatusNotFound {
				refused++
			} else if refused = 0; time.Now().After(deadline) {
				t.Fatalf("closed session still served a second later: %v", err)
			}
		}
	})

	t.Run("credential limit shared", func(t *testing.T) {
		c := relclient.New(base, nil)
		c.ForwardedFor = "10.9.9.9"
		n := 0
		for ; n < 3*web.DefaultCredentialRequests+3; n++ {
			err := c.SignIn(ctx, "alice@example.com", "wrong password")
			if relclient.StatusOf(err) == http.StatusTooManyRequests {
				break
			}
		}
		if n != web.DefaultCredentialRequests {
			t.Fatalf("throttled after %d attempts spread over 3 replicas; want %d (one bucket)", n, web.DefaultCredentialRequests)
		}
	})

	t.Run("mail job runs once", func(t *testing.T) {
		var emails []string
		for i := range 6 {
			c := relclient.New(base, nil)
			c.ForwardedFor = fmt.Sprintf("10.8.0.%d", i+1)
			email := fmt.Sprintf("signup%d@example.com", i)
			status, body, err := c.PostForm(ctx, "/signup", url.Values{"email": {email}, "username": {fmt.Sprintf("signup%d", i)}, "password": {password}})
			if err != nil || status != http.StatusOK {
				t.Fatalf("signup: %d %v %.300s", status, err, body)
			}
			emails = append(emails, email)
		}
		count := func(email string) int {
			n := 0
			for _, m := range smtp.all() {
				if strings.Contains(m, email) {
					n++
				}
			}
			return n
		}
		deadline := time.Now().Add(60 * time.Second)
		for _, e := range emails {
			for count(e) == 0 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
		}
		time.Sleep(3 * time.Second) // a duplicate would come now
		for _, e := range emails {
			if n := count(e); n != 1 {
				t.Errorf("mail to %s delivered %d times across 3 replicas; want 1", e, n)
			}
		}
	})

	t.Run("kill -9 under load", func(t *testing.T) {
		var (
			mu      sync.Mutex
			acked   = map[string]bool{}
			reinits = map[int]int{}
			sent    atomic.Int64
			failed  atomic.Int64
		)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				sess, err := agent.Open(ctx, tok.AccessToken)
				if err != nil {
					t.Errorf("writer %d: open: %v", w, err)
					return
				}
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					name := fmt.Sprintf("load-w%d-%05d", w, i)
					sent.Add(1)
					r, err := sess.Call(ctx, "secretSet", map[string]any{"name": name, "value": "v-" + name})
					switch {
					case err == nil && !r.IsError:
						mu.Lock()
						acked[name] = true
						mu.Unlock()
					case relclient.StatusOf(err) == http.StatusNotFound:
						// The session is gone: initialize again.
						mu.Lock()
						reinits[w]++
						mu.Unlock()
						if sess, err = agent.Open(ctx, tok.AccessToken); err != nil {
							t.Errorf("writer %d: reopen: %v", w, err)
							return
						}
					default:
						failed.Add(1) // in flight at the kill: in doubt
					}
				}
			})
		}
		time.Sleep(1500 * time.Millisecond)
		replicas[1].kill()
		time.Sleep(2 * time.Second)
		close(stop)
		wg.Wait()
		t.Logf("writes sent %d, acknowledged %d, in doubt %d; re-initializations %v", sent.Load(), len(acked), failed.Load(), reinits)
		for w, n := range reinits {
			if n > 1 {
				t.Errorf("writer %d re-initialized %d times; want at most once", w, n)
			}
		}
		// A write fails (is in doubt) when it was in flight at the kill, or
		// was sent on a pooled proxy connection to the dead replica before
		// the proxy saw it close (the proxy, like a load balancer, does
		// not repeat a POST that may have been served): at most two per
		// writer.
		if failed.Load() > 8 {
			t.Errorf("%d writes failed; only those in flight at the kill or on a connection to the dead replica (at most two per writer) may", failed.Load())
		}
		sess, err := agent.Open(ctx, tok.AccessToken)
		if err != nil {
			t.Fatal(err)
		}
		have := listAllSecrets(t, sess)
		for name := range acked {
			if !have[name] {
				t.Errorf("acknowledged write %s lost", name)
			}
		}
	})
}
