package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/internal/relclient"
)

// The soak: one enclave server (a process of its own, `bench soak-serve`)
// and N clients in this process, each a user of its own with its own
// address (X-Forwarded-For through a trusted loopback proxy), mixing MCP
// calls, sessions opened and closed, token refreshes and web sign-ins for
// the whole duration. It reports the errors (every answer that is not a
// success, except the rate limiter's designed 429s), p50/p99 per window,
// and the server's heap, goroutines, open files and SQL connections at the
// start and at the end, and fails when they grow beyond the stated bounds.

const soakPassword = "soak-password-0123456789"

// ServerStats is what soak-serve reports about itself.
type ServerStats struct {
	HeapAllocMiB float64 `json:"heap_alloc_mib"` // after a GC
	Goroutines   int     `json:"goroutines"`
	OpenFiles    int     `json:"open_files"`
	SQLOpen      int     `json:"sql_open_connections"` // writer + reader pools
	SQLInUse     int     `json:"sql_in_use"`
	RSSMiB       float64 `json:"rss_mib"`
	MCPSessions  int     `json:"-"`
}

// SoakWindow is one slice of the run.
type SoakWindow struct {
	StartS    float64 `json:"start_s"`
	Ops       int     `json:"ops"`
	Errors    int     `json:"errors"`
	Throttled int     `json:"throttled_429"`
	P50ms     float64 `json:"p50_ms"`
	P99ms     float64 `json:"p99_ms"`
}

// SoakReport is the whole run.
type SoakReport struct {
	When       time.Time         `json:"when"`
	Machine    Machine           `json:"machine"`
	Duration   string            `json:"duration"`
	Clients    int               `json:"clients"`
	DB         string            `json:"db"`
	Ops        map[string]int    `json:"ops"`
	Errors     int               `json:"errors"`
	ErrorKinds map[string]int    `json:"error_kinds,omitempty"`
	Throttled  int               `json:"throttled_429"`
	Throttles  map[string]int    `json:"throttled_by_operation,omitempty"`
	Windows    []SoakWindow      `json:"windows"`
	Start, End ServerStats       `json:"-"`
	Stats      map[string]any    `json:"server"`
	Bounds     map[string]string `json:"bounds"`
	Pass       bool              `json:"pass"`
	Failures   []string          `json:"failures,omitempty"`
}

func soakMain(args []string) error {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	duration := fs.Duration("duration", 10*time.Minute, "how long the clients run")
	clients := fs.Int("clients", 200, "concurrent clients, each a user of its own")
	think := fs.Duration("think", 100*time.Millisecond, "mean pause between one client's actions")
	windows := fs.Int("windows", 10, "latency windows reported over the run")
	db := fs.String("db", "sqlite", "sqlite or postgres (ENCLAVE_TEST_POSTGRES)")
	outDir := fs.String("out", "bench/results", "directory for the JSON report and the server's log")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		return err
	}
	logDir, err := os.MkdirTemp(*outDir, "logs-soak-*")
	if err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-sig; stopAll(); os.Exit(130) }()
	defer stopAll()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	srvArgs := []string{self, "soak-serve", "-users", fmt.Sprint(*clients), "-db", *db, "-max-lifetime", (*duration + 10*time.Minute).String()}
	p, err := startProc("soak-server", -1, logDir, "", srvArgs...)
	if err != nil {
		return err
	}
	defer p.stop(20 * time.Second)
	line, err := p.waitLine("READY ", 5*time.Minute)
	if err != nil {
		return err
	}
	addrs := strings.Fields(line)
	base, statsURL := "http://"+addrs[0], "http://"+addrs[1]+"/stats"
	fmt.Printf("enclave soak: %d clients for %s on %s, server %s (pid %d)\n", *clients, *duration, *db, base, p.pid())

	// Sign every client in (the OAuth flow through the pages), then take
	// the starting figures.
	ctx := context.Background()
	transport := &http.Transport{MaxIdleConnsPerHost: *clients * 2, IdleConnTimeout: 30 * time.Second}
	cs := make([]*soakClient, *clients)
	var setup sync.WaitGroup
	var setupErr atomic.Value
	sem := make(chan struct{}, 16)
	for i := range cs {
		cs[i] = &soakClient{n: i, base: base, email: fmt.Sprintf("soak%d@example.test", i), ip: fmt.Sprintf("10.9.%d.%d", i/250, i%250+1), transport: transport,
			rng: rand.New(rand.NewPCG(uint64(i), 7))}
		setup.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := cs[i].begin(ctx); err != nil {
				setupErr.Store(err)
			}
		})
	}
	setup.Wait()
	if err, _ := setupErr.Load().(error); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	time.Sleep(2 * time.Second)
	startStats, err := fetchStats(statsURL)
	if err != nil {
		return err
	}
	fmt.Printf("start: %+v\n", startStats)

	rep := SoakReport{When: time.Now().UTC(), Machine: machine(false), Duration: duration.String(), Clients: *clients, DB: *db,
		Ops: map[string]int{}, ErrorKinds: map[string]int{}}
	rec := newSoakRecorder(*duration, *windows)
	runCtx, cancel := context.WithTimeout(ctx, *duration)
	defer cancel()
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() { c.run(runCtx, rec, *think) })
	}
	progress := time.NewTicker(max(*duration/10, time.Second))
	go func() {
		for range progress.C {
			st, _ := fetchStats(statsURL)
			fmt.Printf("  %s: %d ops, %d errors, %d 429; server heap %.1f MiB, %d goroutines, %d files, %d SQL conns\n",
				time.Since(rec.start).Round(time.Second), rec.ops.Load(), rec.errs.Load(), rec.throttled.Load(), st.HeapAllocMiB, st.Goroutines, st.OpenFiles, st.SQLOpen)
		}
	}()
	wg.Wait()
	progress.Stop()
	// Clients end their sessions; idle connections close; then the end
	// figures, once the server has had a moment to settle.
	for _, c := range cs {
		c.end(ctx)
	}
	transport.CloseIdleConnections()
	time.Sleep(3 * time.Second)
	endStats, err := fetchStats(statsURL)
	if err != nil {
		return err
	}
	fmt.Printf("end:   %+v\n", endStats)

	rep.Windows = rec.windows()
	rep.Ops = rec.opCounts()
	rep.Errors = int(rec.errs.Load())
	rep.Throttled = int(rec.throttled.Load())
	rep.ErrorKinds, rep.Throttles = map[string]int{}, map[string]int{}
	for k, v := range rec.errorKinds() {
		if op, ok := strings.CutPrefix(k, "429 "); ok {
			rep.Throttles[op] = v
		} else {
			rep.ErrorKinds[k] = v
		}
	}
	rep.Start, rep.End = startStats, endStats
	rep.Stats = map[string]any{"start": startStats, "end": endStats}
	// The bounds: what "flat" means for this run.
	bounds := []struct {
		name        string
		start, end  float64
		slack, mult float64
	}{
		{"goroutines", float64(startStats.Goroutines), float64(endStats.Goroutines), 50, 1},
		{"heap_alloc_mib", startStats.HeapAllocMiB, endStats.HeapAllocMiB, 32, 1.5},
		{"open_files", float64(startStats.OpenFiles), float64(endStats.OpenFiles), 20, 1},
		{"sql_open_connections", float64(startStats.SQLOpen), float64(endStats.SQLOpen), 10, 1},
	}
	rep.Bounds = map[string]string{}
	rep.Pass = rep.Errors == 0
	if rep.Errors > 0 {
		rep.Failures = append(rep.Failures, fmt.Sprintf("%d errors: %v", rep.Errors, rep.ErrorKinds))
	}
	for _, b := range bounds {
		limit := b.start*b.mult + b.slack
		rep.Bounds[b.name] = fmt.Sprintf("end ≤ %.4g×start + %.4g (= %.1f)", b.mult, b.slack, limit)
		if b.end > limit {
			rep.Pass = false
			rep.Failures = append(rep.Failures, fmt.Sprintf("%s grew: %.1f → %.1f (bound %.1f)", b.name, b.start, b.end, limit))
		}
	}
	printSoak(rep)
	b, _ := json.MarshalIndent(rep, "", "  ")
	if err := os.WriteFile(filepath.Join(*outDir, "soak-latest.json"), b, 0o644); err != nil {
		return err
	}
	if !rep.Pass {
		return fmt.Errorf("soak failed: %s", strings.Join(rep.Failures, "; "))
	}
	return nil
}

func fetchStats(u string) (ServerStats, error) {
	resp, err := http.Get(u)
	if err != nil {
		return ServerStats{}, err
	}
	defer resp.Body.Close()
	var st ServerStats
	err = json.NewDecoder(resp.Body).Decode(&st)
	return st, err
}

func printSoak(r SoakReport) {
	fmt.Printf("\n### Soak: %d clients, %s, %s\n\n", r.Clients, r.Duration, r.DB)
	ops := make([]string, 0, len(r.Ops))
	total := 0
	for k, v := range r.Ops {
		ops = append(ops, fmt.Sprintf("%s %d", k, v))
		total += v
	}
	slices.Sort(ops)
	fmt.Printf("operations: %d (%s); errors: %d; designed 429s: %d %v\n\n", total, strings.Join(ops, ", "), r.Errors, r.Throttled, r.Throttles)
	fmt.Println("| window start | ops | errors | 429 | p50 ms | p99 ms |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|")
	for _, w := range r.Windows {
		fmt.Printf("| %.0f s | %d | %d | %d | %.1f | %.1f |\n", w.StartS, w.Ops, w.Errors, w.Throttled, w.P50ms, w.P99ms)
	}
	fmt.Println("\n| server | start | end | bound |")
	fmt.Println("|---|---:|---:|---|")
	fmt.Printf("| heap (after GC), MiB | %.1f | %.1f | %s |\n", r.Start.HeapAllocMiB, r.End.HeapAllocMiB, r.Bounds["heap_alloc_mib"])
	fmt.Printf("| goroutines | %d | %d | %s |\n", r.Start.Goroutines, r.End.Goroutines, r.Bounds["goroutines"])
	fmt.Printf("| open files | %d | %d | %s |\n", r.Start.OpenFiles, r.End.OpenFiles, r.Bounds["open_files"])
	fmt.Printf("| SQL connections | %d | %d | %s |\n", r.Start.SQLOpen, r.End.SQLOpen, r.Bounds["sql_open_connections"])
	fmt.Printf("| RSS, MiB | %.1f | %.1f | (reported) |\n", r.Start.RSSMiB, r.End.RSSMiB)
	if r.Pass {
		fmt.Println("\nPASS")
	} else {
		fmt.Println("\nFAIL:", strings.Join(r.Failures, "; "))
	}
}

// soakRecorder collects latencies per window and counts.
type soakRecorder struct {
	start time.Time
	width time.Duration
	mu    sync.Mutex
	lat   [][]float64 // per window, ms
	errW  []int
	thrW  []int
	ops   atomic.Int64
	errs  atomic.Int64
	opsBy map[string]int
	kinds map[string]int

	throttled atomic.Int64
}

func newSoakRecorder(d time.Duration, n int) *soakRecorder {
	n = max(n, 1)
	return &soakRecorder{start: time.Now(), width: max(d/time.Duration(n), time.Second), lat: make([][]float64, n+1), errW: make([]int, n+1), thrW: make([]int, n+1),
		opsBy: map[string]int{}, kinds: map[string]int{}}
}

func (r *soakRecorder) record(op string, took time.Duration, err error) {
	// Answers that arrive after the end count in the last window.
	w := min(int(time.Since(r.start)/r.width), len(r.lat)-2)
	r.ops.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.opsBy[op]++
	switch {
	case err == nil:
		r.lat[w] = append(r.lat[w], float64(took.Microseconds())/1000)
	case relclient.StatusOf(err) == http.StatusTooManyRequests:
		r.throttled.Add(1)
		r.thrW[w]++
		r.kinds["429 "+op]++
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		// the run ended while the request was in flight: not the server's
	default:
		r.errs.Add(1)
		r.errW[w]++
		k := op + ": " + err.Error()
		if len(k) > 160 {
			k = k[:160]
		}
		r.kinds[k]++
	}
}

func (r *soakRecorder) windows() []SoakWindow {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []SoakWindow
	for i, l := range r.lat {
		if len(l) == 0 && r.errW[i] == 0 {
			continue
		}
		slices.Sort(l)
		out = append(out, SoakWindow{StartS: (time.Duration(i) * r.width).Seconds(), Ops: len(l) + r.errW[i] + r.thrW[i], Errors: r.errW[i], Throttled: r.thrW[i],
			P50ms: soakPct(l, 0.50), P99ms: soakPct(l, 0.99)})
	}
	return out
}

func soakPct(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(int(float64(len(sorted))*p), len(sorted)-1)]
}

func (r *soakRecorder) opCounts() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps(r.opsBy)
}

func (r *soakRecorder) errorKinds() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps(r.kinds)
}

func maps(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// soakClient is one user: an agent (OAuth tokens, an MCP session) and a
// person (web sign-ins).
type soakClient struct {
	n         int
	base      string
	email, ip string
	transport http.RoundTripper
	rng       *rand.Rand

	agent *relclient.Client
	tok   relclient.Tokens
	sess  *relclient.Session
	seq   int
}

func (c *soakClient) begin(ctx context.Context) error {
	c.agent = relclient.New(c.base, c.transport)
	c.agent.ForwardedFor = c.ip
	var err error
	if c.tok, err = c.agent.Authorize(ctx, c.email, soakPassword); err != nil {
		return fmt.Errorf("client %d: %w", c.n, err)
	}
	if c.sess, err = c.agent.Open(ctx, c.tok.AccessToken); err != nil {
		return fmt.Errorf("client %d: %w", c.n, err)
	}
	return nil
}

func (c *soakClient) end(ctx context.Context) {
	if c.sess != nil {
		_ = c.sess.Close(ctx)
	}
}

func (c *soakClient) run(ctx context.Context, rec *soakRecorder, think time.Duration) {
	for ctx.Err() == nil {
		if think > 0 {
			d := time.Duration(c.rng.ExpFloat64() * float64(think))
			select {
			case <-ctx.Done():
				return
			case <-time.After(min(d, 10*think)):
			}
		}
		op, start := "", time.Now()
		var err error
		switch x := c.rng.IntN(100); {
		case x < 30:
			op = "call whoami"
			err = c.call(ctx, "whoami", map[string]any{})
		case x < 55:
			op = "call secretSet"
			c.seq++
			err = c.call(ctx, "secretSet", map[string]any{"name": fmt.Sprintf("k%d", c.seq%20), "value": fmt.Sprintf("v%d", c.seq)})
		case x < 75:
			op = "call secretList"
			err = c.call(ctx, "secretList", map[string]any{"limit": 50})
		case x < 85:
			op = "session reopen"
			_ = c.sess.Close(ctx)
			var s *relclient.Session
			if s, err = c.agent.Open(ctx, c.tok.AccessToken); err == nil {
				c.sess = s
			}
		case x < 93:
			op = "token refresh"
			var t relclient.Tokens
			if t, err = c.agent.Refresh(ctx, c.tok); err == nil {
				c.tok = t
				c.sess.Token = t.AccessToken
			}
		default:
			op = "web sign-in"
			w := relclient.New(c.base, c.transport)
			w.ForwardedFor = c.ip
			if err = w.SignIn(ctx, c.email, soakPassword); err == nil {
				var status int
				if status, _, err = w.Get(ctx, "/account"); err == nil && status != http.StatusOK {
					err = &relclient.StatusError{What: "account page", Status: status}
				}
			}
		}
		rec.record(op, time.Since(start), err)
	}
}

func (c *soakClient) call(ctx context.Context, tool string, args any) error {
	r, err := c.sess.Call(ctx, tool, args)
	if err == nil && r.IsError {
		return fmt.Errorf("%s: tool error: %s", tool, r.Text())
	}
	return err
}

// soakServeMain is the server of the soak, in a process of its own.
func soakServeMain(args []string) error {
	fs := flag.NewFlagSet("soak-serve", flag.ContinueOnError)
	users := fs.Int("users", 200, "users to create")
	db := fs.String("db", "sqlite", "sqlite or postgres")
	maxLife := fs.Duration("max-lifetime", 30*time.Minute, "exit by itself after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *maxLife)
	defer cancel()
	dir, err := os.MkdirTemp("", "enclave-soak-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	dbURL := ""
	if *db == "postgres" {
		pg := os.Getenv("ENCLAVE_TEST_POSTGRES")
		if pg == "" {
			return errors.New("-db postgres needs ENCLAVE_TEST_POSTGRES")
		}
		u, drop, err := pgSchema(context.Background(), dir, pg)
		if err != nil {
			return err
		}
		defer drop()
		dbURL = u
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	srv, err := enclave.New(ctx, enclave.Config{
		Addr: ln.Addr().String(), DataDir: dir, DatabaseURL: dbURL,
		// The clients stand behind a loopback "proxy": each has an address
		// of its own, as real users do.
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
		// Cheap hashing: the soak measures the server's stability, not argon2.
		Accounts: accounts.Config{Argon2: accounts.Argon2Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1}},
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	defer srv.Close()
	for i := range *users {
		if _, _, err := srv.Accounts().Identity.CreateUser(ctx, accounts.CreateUserInput{
			Email: fmt.Sprintf("soak%d@example.test", i), Username: fmt.Sprintf("soak%d", i), Password: soakPassword, Verified: true,
		}); err != nil {
			return err
		}
	}
	statsLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	stats := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		st := ServerStats{HeapAllocMiB: float64(ms.HeapAlloc) / (1 << 20), Goroutines: runtime.NumGoroutine()}
		if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
			st.OpenFiles = len(fds)
		}
		w1, r1 := srv.Store().DB.Stats(), srv.Store().Reader.Stats()
		st.SQLOpen, st.SQLInUse = w1.OpenConnections, w1.InUse
		if srv.Store().Reader != srv.Store().DB {
			st.SQLOpen += r1.OpenConnections
			st.SQLInUse += r1.InUse
		}
		if kib, err := statusKiB("self", "VmRSS"); err == nil {
			st.RSSMiB = float64(kib) / 1024
		}
		_ = json.NewEncoder(w).Encode(st)
	})}
	go func() { _ = stats.Serve(statsLn) }()
	defer stats.Close()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ctx, ln) }()
	fmt.Printf("READY %s %s\n", ln.Addr(), statsLn.Addr())
	return <-errc
}
