package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// ServerResult is one server's row.
type ServerResult struct {
	Key         string      `json:"key"`
	Mode        string      `json:"load_mode,omitempty"` // what the clients called (echo when empty; see loadMode)
	Round       int         `json:"round"`
	Clients     int         `json:"clients"`
	Name        string      `json:"name"`
	Load        LoadResult  `json:"load"`
	CPUSeconds  float64     `json:"server_cpu_seconds"`
	CPUPer1k    float64     `json:"server_cpu_seconds_per_1000_calls"`
	PeakRSSMiB  float64     `json:"server_peak_rss_mib"`
	CPUUtil     float64     `json:"server_cpu_utilisation"`  // of one core, over the window
	LoadCPUUtil float64     `json:"loadgen_cpu_utilisation"` // of one core, over the window
	SQL         *QueryTrace `json:"sql_per_call,omitempty"`
	Skipped     string      `json:"skipped,omitempty"`
}

// Report is everything one run measured.
type Report struct {
	When      time.Time      `json:"when"`
	Machine   Machine        `json:"machine"`
	Flags     map[string]any `json:"flags"`
	Servers   []ServerResult `json:"servers"`    // the best round of each server
	AllRounds []ServerResult `json:"all_rounds"` // every round, in the order run
	Scaling   []ScaleResult  `json:"scaling"`
	// Revocation is the propagation of a revocation to another replica.
	Revocation *RevocationResult `json:"revocation,omitempty"`
	// CodeModeBombs is the server's RSS around code mode memory bombs.
	CodeModeBombs *BombResult `json:"codemode_memory_bombs,omitempty"`
	// MemorySearch is memorySearch's latency over a large corpus.
	MemorySearch []MemorySearchResult `json:"memory_search,omitempty"`
	// BucketExport is the account export of one large bucket.
	BucketExport []BucketExportResult `json:"bucket_export,omitempty"`
	// Mail is inbound SMTP deliveries/s and mailList's latency.
	Mail []MailResult `json:"mail,omitempty"`
}

// Machine describes where the run happened.
type Machine struct {
	CPU, Kernel, Go, Node string
	Cores                 int
	MemGiB                float64
	Pinned                bool
}

var serverNames = map[string]string{
	// The floor: net/http, one JSON-RPC envelope decoded and one answer
	// encoded, no MCP library, no auth (floor.go).
	"f": "(f) floor: net/http JSON-RPC echo, no MCP library, no auth",
	"a": "(a) mcp-go bare, no auth",
	"b": "(b) enclave, OAuth+roles+quota, SQLite, caller cache",
	"c": "(c) enclave, OAuth+roles+quota, PostgreSQL, caller cache",
	// The same with the caller cache off: every call runs the SQL bearer
	// check (what (b) and (c) measured before the cache).
	"b0": "(b0) as (b), caller cache off",
	"c0": "(c0) as (c), caller cache off",
	// Two replicas of (c) on one PostgreSQL, both on the server core, the
	// clients spread over them; invalidations travel on the PostgreSQL bus.
	"c2": "(c2) as (c), two replicas",
	"d":  "(d) TS SDK + requireBearerAuth",
	// Not in the default set: (b) with the quota counted in SQL.
	"bsql": "(b-sql) as (b), quota as one SQL UPSERT per call",
	// Not in the default set: (b) with enclave's default quota (package quota).
	"bmeter": "(b-meter) as (b), quota.Meter (memory, SQL batch flush)",
}

func runMain(args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	revocations := fs.Int("revocations", 100, "revocations timed between two replicas on PostgreSQL (0: skip; needs ENCLAVE_TEST_POSTGRES)")
	servers := fs.String("servers", "f,a,b,c,d", "servers to compare (f, also spelled floor: plain net/http JSON-RPC echo; c needs ENCLAVE_TEST_POSTGRES, d needs node; bsql is (b) with an SQL quota counter, bmeter (b) with enclave's quota.Meter)")
	clientList := fs.String("clients", "16", "concurrent clients, each with its own user, token and session; a comma-separated list (e.g. 16,200) measures every server at each")
	warmup := fs.Duration("warmup", 3*time.Second, "warm-up per server, not measured")
	duration := fs.Duration("duration", 10*time.Second, "measured window per server and round")
	rate := fs.Float64("rate", 0, "offered load in calls/s spread over the clients (0: closed loop, as fast as each server answers)")
	nRounds := fs.Int("rounds", 2, "rounds over all servers; each server's best round (by throughput) is reported")
	quota := fs.String("quota", "memory", "quota counter of (b) and (c): memory, sql or none")
	logLevel := fs.String("log-level", "warn", "enclave's log level (info adds its per-request access log)")
	scaleRows := fs.String("scale", "10000,100000,1000000", "row counts of the export/deletion scaling run (empty: skip)")
	scaleDB := fs.String("scale-db", "sqlite", "scaling run database: sqlite, postgres or both")
	pin := fs.Bool("pin", true, "pin the server to core 0 and the load generator to core 1 (taskset)")
	outDir := fs.String("out", "bench/results", "directory for the JSON report and process logs")
	codeMode := fs.Bool("codemode", true, "add the code mode rows after (b) and (c) (execute of a trivial program and of one calling echo) and the memory-bomb run")
	cmWarmup := fs.Duration("codemode-warmup", 1*time.Second, "warm-up of each code mode row, not measured")
	cmDuration := fs.Duration("codemode-duration", 5*time.Second, "measured window of each code mode row and round")
	bombs := fs.Int("codemode-bombs", defaultBombs, "memory bombs (executes exhausting the VM's memory) sent to a fresh (b), with its RSS read before and after (0: skip); run when (b) is measured or when this flag is given")
	bombCode := fs.String("codemode-bomb-code", codeBomb, "the memory bomb's program")
	bombSettle := fs.Duration("codemode-settle", 2*time.Second, "pause before and after the bombs, before each RSS reading")
	bombBound := fs.Duration("codemode-bomb-max", 0, "the most time the bombs may take (0: 3 s a bomb, at least 2 min)")
	withStorageRows := fs.Bool("storage", true, "add the storage rows after (b) and (c): tools/call storageGet and storageSet, against the same server's echo")
	stWarmup := fs.Duration("storage-warmup", 1*time.Second, "warm-up of each storage row, not measured")
	stDuration := fs.Duration("storage-duration", 5*time.Second, "measured window of each storage row and round")
	memSearch := fs.String("memory-search", "10000,100000", "memorySearch latency for users of these many memories among -memory-total in all (empty: skip)")
	memTotal := fs.Int("memory-total", 1_000_000, "memories of all users in the memorySearch run")
	memDB := fs.String("memory-db", "both", "memorySearch run database: sqlite, postgres or both (postgres needs ENCLAVE_TEST_POSTGRES)")
	memCache := fs.String("memory-cache", filepath.Join(os.TempDir(), "enclave-memorybench"), "directory keeping the SQLite corpus of the memorySearch run between runs (empty: build it afresh)")
	bucketRows := fs.String("bucket-export", "10000,1000000", "keys of one bucket exported with the account, each size in a fresh process, peak heap sampled (empty: skip)")
	mailDB := fs.String("mail", "both", "the mail row (inbound SMTP deliveries/s of 100 KB messages, mailList p50): sqlite, postgres, both (postgres needs ENCLAVE_TEST_POSTGRES) or none")
	mailDuration := fs.Duration("mail-duration", 10*time.Second, "measured window of the mail row's deliveries")
	mailList := fs.Int("mail-list", 100_000, "messages of the mailbox the mail row times mailList on (0: skip)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	bombsGiven := false
	fs.Visit(func(f *flag.Flag) { bombsGiven = bombsGiven || f.Name == "codemode-bombs" })
	if *bombBound <= 0 {
		*bombBound = max(2*time.Minute, time.Duration(*bombs)*3*time.Second)
	}
	var levels []int
	for _, f := range strings.Split(*clientList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("-clients %q: want a comma-separated list of positive counts", *clientList)
		}
		levels = append(levels, n)
	}
	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		return err
	}
	logDir, err := os.MkdirTemp(*outDir, "logs-*")
	if err != nil {
		return err
	}
	if logDir, err = filepath.Abs(logDir); err != nil {
		return err
	}

	// Stop every child on interrupt, and on any return.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "bench: %s: stopping children\n", s)
		stopAll()
		os.Exit(130)
	}()
	defer stopAll()

	self, err := os.Executable()
	if err != nil {
		return err
	}
	serverCore, loadCore := 0, 1
	_, tsErr := exec.LookPath("taskset")
	pinned := *pin && tsErr == nil && runtime.NumCPU() >= 2
	if !pinned {
		serverCore, loadCore = -1, -1
	}
	rep := Report{When: time.Now().UTC(), Machine: machine(pinned), Flags: map[string]any{
		"clients": *clientList, "warmup": warmup.String(), "duration": duration.String(), "rounds": *nRounds, "rate": *rate, "quota": *quota, "log_level": *logLevel,
		"codemode": *codeMode, "codemode_warmup": cmWarmup.String(), "codemode_duration": cmDuration.String(), "codemode_bombs": *bombs,
		"storage": *withStorageRows, "storage_warmup": stWarmup.String(), "storage_duration": stDuration.String(),
		"memory_search": *memSearch, "memory_total": *memTotal, "memory_db": *memDB, "bucket_export": *bucketRows,
		"mail": *mailDB, "mail_duration": mailDuration.String(), "mail_list": *mailList,
	}}
	fmt.Printf("enclave bench: %s clients, %s warm-up + %s measured per server; %s, %d cores, pinned=%v\n",
		*clientList, *warmup, *duration, rep.Machine.CPU, rep.Machine.Cores, pinned)

	pg := os.Getenv("ENCLAVE_TEST_POSTGRES")
	var keys []string
	if *servers != "" {
		for _, k := range strings.Split(*servers, ",") {
			k = strings.TrimSpace(k)
			if k == "floor" {
				k = "f"
			}
			keys = append(keys, k)
		}
	}
	if *withStorageRows {
		keys = withStorage(keys)
	}
	if *codeMode {
		keys = withCodeMode(keys)
	}
	skipped := map[string]string{}
	for _, key := range keys {
		key = strings.TrimSpace(key)
		if serverNames[key] == "" {
			return fmt.Errorf("unknown server %q", key)
		}
		switch {
		case strings.HasPrefix(key, "c") && pg == "":
			skipped[key] = "ENCLAVE_TEST_POSTGRES not set"
		case key == "d":
			if err := nodeReady(); err != nil {
				skipped[key] = err.Error()
			}
		}
	}
	// Rounds interleave the servers, so that a burst of noise from other
	// work on the machine hits one round of each rather than one server.
	for _, clients := range levels {
		rounds := map[string][]ServerResult{}
		for round := 1; round <= *nRounds; round++ {
			for _, key := range keys {
				key = strings.TrimSpace(key)
				r := ServerResult{Key: key, Name: serverNames[key], Round: round, Clients: clients}
				if skipped[key] != "" {
					continue
				}
				wu, du := *warmup, *duration
				switch {
				case isCodeMode(key):
					r.Mode, wu, du = loadMode(key), *cmWarmup, *cmDuration
				case isStorage(key):
					r.Mode, wu, du = loadMode(key), *stWarmup, *stDuration
				}
				fmt.Printf("%d clients, round %d/%d, %s: running…\n", clients, round, *nRounds, r.Name)
				if err := measureServer(&r, self, logDir, serverCore, loadCore, clients, *rate, wu, du, *quota, *logLevel, pg); err != nil {
					return fmt.Errorf("%s: %w", r.Name, err)
				}
				rounds[key] = append(rounds[key], r)
				rep.AllRounds = append(rep.AllRounds, r)
			}
		}
		for _, key := range keys {
			key = strings.TrimSpace(key)
			if skipped[key] != "" {
				fmt.Printf("%s: skipped (%s)\n", serverNames[key], skipped[key])
				rep.Servers = append(rep.Servers, ServerResult{Key: key, Name: serverNames[key], Clients: clients, Skipped: skipped[key]})
				continue
			}
			// Closed loop: the best round is the fastest. Paced: every round
			// carries the same load, and the best is the one with the lowest p99.
			best := rounds[key][0]
			for _, r := range rounds[key][1:] {
				if (*rate == 0 && r.Load.RPS > best.Load.RPS) || (*rate > 0 && r.Load.P99ms < best.Load.P99ms) {
					best = r
				}
			}
			rep.Servers = append(rep.Servers, best)
		}
	}
	if *codeMode && *bombs > 0 && (bombsGiven || slices.Contains(keys, "b") || slices.Contains(keys, "bx") || slices.Contains(keys, "bxe")) {
		fmt.Printf("code mode: %d memory bombs over %d clients against (b)…\n", *bombs, levels[0])
		br, err := measureBombs(self, logDir, serverCore, loadCore, levels[0], *bombs, *bombCode, *bombSettle, *bombBound, *quota, *logLevel)
		if err != nil {
			return fmt.Errorf("memory bombs: %w", err)
		}
		rep.CodeModeBombs = br
	}
	if *revocations > 0 && pg != "" {
		fmt.Printf("revocation propagation: %d revocations between two replicas on PostgreSQL…\n", *revocations)
		rr, err := measureRevocations(pg, *revocations)
		if err != nil {
			return fmt.Errorf("revocations: %w", err)
		}
		rep.Revocation = &rr
	}

	if *scaleRows != "" {
		var sizes []int
		for _, s := range strings.Split(*scaleRows, ",") {
			if s = strings.TrimSpace(s); s != "" {
				n, err := strconv.Atoi(s)
				if err != nil {
					return fmt.Errorf("-scale: %w", err)
				}
				sizes = append(sizes, n)
			}
		}
		dbs := []string{*scaleDB}
		if *scaleDB == "both" {
			dbs = []string{"sqlite", "postgres"}
		}
		for _, db := range dbs {
			if db == "postgres" && pg == "" {
				fmt.Println("scaling on postgres: skipped (ENCLAVE_TEST_POSTGRES not set)")
				continue
			}
			for _, n := range sizes {
				fmt.Printf("scaling: %s, %d rows…\n", db, n)
				sr, err := runScale(self, logDir, serverCore, db, n)
				if err != nil {
					return err
				}
				rep.Scaling = append(rep.Scaling, sr)
			}
		}
	}

	dbsOf := func(flag string) []string {
		if flag == "both" {
			return []string{"sqlite", "postgres"}
		}
		return []string{flag}
	}
	if *memSearch != "" {
		for _, db := range dbsOf(*memDB) {
			if db == "postgres" && pg == "" {
				fmt.Println("memorySearch on postgres: skipped (ENCLAVE_TEST_POSTGRES not set)")
				continue
			}
			fmt.Printf("memorySearch: %s, users of %s memories among %d…\n", db, *memSearch, *memTotal)
			r, err := runMemorySearch(self, logDir, serverCore, db, *memTotal, *memSearch, *memCache)
			if err != nil {
				return fmt.Errorf("memorySearch: %w", err)
			}
			rep.MemorySearch = append(rep.MemorySearch, r)
		}
	}
	if *bucketRows != "" {
		for _, db := range dbsOf(*scaleDB) {
			if db == "postgres" && pg == "" {
				continue
			}
			for _, f := range strings.Split(*bucketRows, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(f))
				if err != nil || n < 1 {
					return fmt.Errorf("-bucket-export %q: want positive counts", *bucketRows)
				}
				fmt.Printf("bucket export: %s, %d keys…\n", db, n)
				r, err := runBucketExport(self, logDir, serverCore, db, n)
				if err != nil {
					return fmt.Errorf("bucket export: %w", err)
				}
				rep.BucketExport = append(rep.BucketExport, r)
			}
		}
	}

	for _, db := range mailDBs(*mailDB) {
		if db == "postgres" && pg == "" {
			fmt.Println("mail on postgres: skipped (ENCLAVE_TEST_POSTGRES not set)")
			continue
		}
		fmt.Printf("mail: %s, inbound SMTP deliveries for %s, mailList at %d messages…\n", db, *mailDuration, *mailList)
		r, err := runMail(self, logDir, db, []string{"-duration", mailDuration.String(), "-list", strconv.Itoa(*mailList)})
		if err != nil {
			return fmt.Errorf("mail: %w", err)
		}
		rep.Mail = append(rep.Mail, r)
	}

	printReport(os.Stdout, rep)
	b, _ := json.MarshalIndent(rep, "", "  ")
	path := filepath.Join(*outDir, "latest.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return err
	}
	fmt.Printf("\nreport: %s; process logs: %s\n", path, logDir)
	return nil
}

// nodeDir is bench/node, next to this source file or under the working
// directory.
func nodeDir() string {
	if _, file, _, ok := runtime.Caller(0); ok {
		d := filepath.Join(filepath.Dir(file), "node")
		if _, err := os.Stat(filepath.Join(d, "package.json")); err == nil {
			return d
		}
	}
	return filepath.Join("bench", "node")
}

// nodeReady installs the TypeScript SDK from package-lock.json when it is
// not installed yet.
func nodeReady() error {
	if _, err := exec.LookPath("node"); err != nil {
		return errors.New("node not found")
	}
	dir := nodeDir()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk")); err == nil {
		return nil
	}
	fmt.Printf("installing the TypeScript SDK (npm ci in %s)…\n", dir)
	cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("npm ci: %w", err)
	}
	return nil
}

func measureServer(r *ServerResult, self, logDir string, serverCore, loadCore, clients int, rate float64, warmup, duration time.Duration, quota, logLevel, pg string) error {
	life := warmup + duration + 3*time.Minute
	tokens := filepath.Join(logDir, "tokens-"+r.Key+".txt")
	trace := ""
	var argv, joinArgv []string
	dir := ""
	switch r.Key {
	case "a", "f":
		argv = []string{self, "serve", "-kind", r.Key, "-max-lifetime", life.String()}
		tokens = ""
	case "b", "c", "b0", "c0", "c2", "bsql", "bmeter", "bx", "bxe", "cx", "cxe", "bsg", "bss", "csg", "css":
		kind, ttl := r.Key[:1], "30s"
		switch r.Key {
		case "bsql":
			quota = "sql"
		case "bmeter":
			quota = "meter"
		case "b0", "c0":
			ttl = "0"
		}
		argv = []string{self, "serve", "-kind", kind, "-users", strconv.Itoa(clients), "-tokens-out", tokens,
			"-quota", quota, "-log-level", logLevel, "-max-lifetime", life.String(), "-caller-cache-ttl", ttl}
		if loadMode(r.Key) == modeEcho { // (b)'s trace is of echo: the same server
			trace = filepath.Join(logDir, fmt.Sprintf("sql-%s-%d.json", r.Key, clients))
			argv = append(argv, "-trace-out", trace)
		}
		if kind == "c" {
			argv = append(argv, "-pg", pg)
		}
		if r.Key == "c2" {
			joinArgv = []string{self, "serve", "-kind", "c", "-pg", pg, "-quota", quota, "-log-level", logLevel,
				"-max-lifetime", life.String(), "-caller-cache-ttl", ttl, "-join", filepath.Join(logDir, "replica-state.json")}
			argv = append(argv, "-state-out", filepath.Join(logDir, "replica-state.json"))
		}
	case "d":
		// The peer's tokens are random opaque strings, one per user.
		var lines []string
		for range clients {
			lines = append(lines, randomToken())
		}
		if err := os.WriteFile(tokens, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			return err
		}
		dir = nodeDir()
		argv = []string{"node", "server.mjs", "--tokens", tokens, "--max-lifetime-ms", strconv.FormatInt(life.Milliseconds(), 10)}
	}
	srv, err := startProc("server-"+r.Key, serverCore, logDir, dir, argv...)
	if err != nil {
		return err
	}
	defer srv.stop(15 * time.Second)
	addr, err := srv.waitLine("READY ", 3*time.Minute)
	if err != nil {
		return err
	}
	target := "http://" + addr + "/mcp"
	procs := []*proc{srv}
	if joinArgv != nil {
		// The second replica, on the same core: the pair gets the same CPU
		// as one server.
		second, err := startProc("server-"+r.Key+"-2", serverCore, logDir, "", joinArgv...)
		if err != nil {
			return err
		}
		defer second.stop(15 * time.Second)
		addr2, err := second.waitLine("READY ", 3*time.Minute)
		if err != nil {
			return err
		}
		target += ",http://" + addr2 + "/mcp"
		procs = append(procs, second)
	}
	largv := []string{self, "load", "-url", target, "-clients", strconv.Itoa(clients),
		"-warmup", warmup.String(), "-duration", duration.String(), "-rate", strconv.FormatFloat(rate, 'f', -1, 64)}
	if tokens != "" {
		largv = append(largv, "-tokens", tokens)
	}
	if r.Mode != "" {
		largv = append(largv, "-mode", r.Mode)
	}
	ld, err := startProc("load-"+r.Key, loadCore, logDir, "", largv...)
	if err != nil {
		return err
	}
	defer ld.stop(5 * time.Second)
	timeout := warmup + duration + 2*time.Minute
	if _, err := ld.waitLine("MEASURE_START", timeout); err != nil {
		return err
	}
	cpu0, err := cpuOf(procs)
	if err != nil {
		return err
	}
	lcpu0, _ := cpuSeconds(ld.pid())
	t0 := time.Now()
	if _, err := ld.waitLine("MEASURE_END", timeout); err != nil {
		return err
	}
	cpu1, err := cpuOf(procs)
	if err != nil {
		return err
	}
	lcpu1, _ := cpuSeconds(ld.pid())
	window := time.Since(t0).Seconds()
	res, err := ld.waitLine("RESULT ", time.Minute)
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(res), &r.Load); err != nil {
		return err
	}
	var hwm int64
	for _, p := range procs {
		h, err := statusKiB(strconv.Itoa(p.pid()), "VmHWM")
		if err != nil {
			return err
		}
		hwm += h
	}
	r.CPUSeconds = cpu1 - cpu0
	if r.Load.Requests > 0 {
		r.CPUPer1k = r.CPUSeconds / float64(r.Load.Requests) * 1000
	}
	r.PeakRSSMiB = float64(hwm) / 1024
	r.LoadCPUUtil = (lcpu1 - lcpu0) / window
	r.CPUUtil = r.CPUSeconds / window
	if trace != "" {
		var tr QueryTrace
		if b, err := os.ReadFile(trace); err == nil && json.Unmarshal(b, &tr) == nil {
			r.SQL = &tr
		}
	}
	if r.Load.Errors > 0 {
		fmt.Printf("  %d errors, e.g. %v\n", r.Load.Errors, r.Load.ErrSample)
	}
	fmt.Printf("  %.0f req/s, p50 %.2f ms, p99 %.2f ms, %.3f CPU-s/1k calls, peak RSS %.1f MiB\n",
		r.Load.RPS, r.Load.P50ms, r.Load.P99ms, r.CPUPer1k, r.PeakRSSMiB)
	return nil
}

// cpuOf sums the CPU time of the server processes.
func cpuOf(procs []*proc) (float64, error) {
	var sum float64
	for _, p := range procs {
		c, err := cpuSeconds(p.pid())
		if err != nil {
			return 0, err
		}
		sum += c
	}
	return sum, nil
}

func randomToken() string {
	f, err := os.Open("/dev/urandom")
	if err != nil {
		panic(err)
	}
	defer f.Close()
	b := make([]byte, 32)
	_, _ = io.ReadFull(f, b)
	return fmt.Sprintf("%x", b)
}

func machine(pinned bool) Machine {
	m := Machine{Go: runtime.Version(), Cores: runtime.NumCPU(), Pinned: pinned}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				m.CPU = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	if kib, err := statusKiBFile("/proc/meminfo", "MemTotal"); err == nil {
		m.MemGiB = float64(kib) / (1 << 20)
	}
	if out, err := exec.Command("uname", "-r").Output(); err == nil {
		m.Kernel = strings.TrimSpace(string(out))
	}
	if out, err := exec.Command("node", "--version").Output(); err == nil {
		m.Node = strings.TrimSpace(string(out))
	}
	return m
}

func statusKiBFile(path, key string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			return strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s", key)
}

func printReport(w io.Writer, rep Report) {
	if len(rep.Servers) == 0 {
		printBombs(w, rep.CodeModeBombs)
		if len(rep.Scaling) > 0 {
			printScaling(w, rep.Scaling)
		}
		printRevocation(w, rep)
		printMemorySearch(w, rep.MemorySearch)
		printBucketExport(w, rep.BucketExport)
		printMail(w, rep.Mail)
		return
	}
	load := "closed loop"
	paced := false
	if r, _ := rep.Flags["rate"].(float64); r > 0 {
		load = fmt.Sprintf("offered %.0f calls/s", r)
		paced = true
	}
	var levels []int
	for _, s := range rep.Servers {
		if !slices.Contains(levels, s.Clients) {
			levels = append(levels, s.Clients)
		}
	}
	for _, n := range levels {
		var servers, plain []ServerResult
		for _, s := range rep.Servers {
			if s.Clients == n {
				servers = append(servers, s)
				if !isCodeMode(s.Key) && !isStorage(s.Key) {
					plain = append(plain, s)
				}
			}
		}
		if len(plain) > 0 {
			printLevel(w, rep, n, load, plain)
			if !paced {
				printFloorTargets(w, n, plain)
				printTargets(w, n, plain)
			}
		}
		printCodeMode(w, rep, n, servers, paced)
		printStorage(w, rep, n, servers)
	}
	printBombs(w, rep.CodeModeBombs)
	if paced {
		fmt.Fprintf(w, "\n(paced run: every server carried the same offered load, so the targets are judged on a closed-loop run)\n")
	}
	printRevocation(w, rep)
	printSQL(w, rep)
	if len(rep.Scaling) > 0 {
		printScaling(w, rep.Scaling)
	}
	printMemorySearch(w, rep.MemorySearch)
	printBucketExport(w, rep.BucketExport)
	printMail(w, rep.Mail)
}

func printLevel(w io.Writer, rep Report, clients int, load string, servers []ServerResult) {
	fmt.Fprintf(w, "\n## MCP tools/call, %d clients, %s, %s measured per server and round, best of %v rounds\n", clients, load, rep.Flags["duration"], rep.Flags["rounds"])
	fmt.Fprintf(w, "machine: %s, %d cores, %.1f GiB, kernel %s, %s, node %s, pinned=%v\n\n",
		rep.Machine.CPU, rep.Machine.Cores, rep.Machine.MemGiB, rep.Machine.Kernel, rep.Machine.Go, rep.Machine.Node, rep.Machine.Pinned)
	f, okF := floorOf(servers)
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| server\t req/s\t throughput ×(f)\t p50 ms\t p99 ms\t p99.9 ms\t errors\t server CPU-s/1k calls\t server core use\t peak RSS MiB\t loadgen core use\t")
	fmt.Fprintln(tw, "|---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t")
	var a *ServerResult
	for i := range servers {
		s := &servers[i]
		if s.Skipped != "" {
			fmt.Fprintf(tw, "| %s\t skipped: %s\t\t\t\t\t\t\t\t\t\t\n", s.Name, s.Skipped)
			continue
		}
		if s.Key == "a" {
			a = s
		}
		fmt.Fprintf(tw, "| %s\t %.0f\t %s\t %.2f\t %.2f\t %.2f\t %d\t %.3f\t %.0f%%\t %.1f\t %.0f%%\t\n", s.Name, s.Load.RPS, ratioCell(okF, s.Load.RPS, f.Load.RPS),
			s.Load.P50ms, s.Load.P99ms, s.Load.P999ms, s.Load.Errors, s.CPUPer1k, 100*s.CPUUtil, s.PeakRSSMiB, 100*s.LoadCPUUtil)
	}
	tw.Flush()
	if !okF && (a == nil || a.Load.RPS <= 0) {
		return
	}
	fmt.Fprintf(w, "\n### Ratios to (f) the floor and to (a) bare mcp-go, %d clients\n\n", clients)
	tw = tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| server\t throughput ×(f)\t p50 ×(f)\t p99 ×(f)\t CPU per call ×(f)\t throughput ×(a)\t p50 ×(a)\t p99 ×(a)\t CPU per call ×(a)\t")
	fmt.Fprintln(tw, "|---\t---\t---\t---\t---\t---\t---\t---\t---\t")
	okA := a != nil
	var sa ServerResult
	if okA {
		sa = *a
	}
	for _, s := range servers {
		if s.Key == "f" || s.Skipped != "" {
			continue
		}
		fmt.Fprintf(tw, "| %s\t %s\t %s\t %s\t %s\t %s\t %s\t %s\t %s\t\n", s.Name,
			ratioCell(okF, s.Load.RPS, f.Load.RPS), ratioCell(okF, s.Load.P50ms, f.Load.P50ms), ratioCell(okF, s.Load.P99ms, f.Load.P99ms), ratioCell(okF, s.CPUPer1k, f.CPUPer1k),
			ratioCell(okA, s.Load.RPS, sa.Load.RPS), ratioCell(okA, s.Load.P50ms, sa.Load.P50ms), ratioCell(okA, s.Load.P99ms, sa.Load.P99ms), ratioCell(okA, s.CPUPer1k, sa.CPUPer1k))
	}
	tw.Flush()
}

// floorOf is the measured floor row (f) among servers of one level.
func floorOf(servers []ServerResult) (ServerResult, bool) {
	for _, s := range servers {
		if s.Key == "f" && s.Skipped == "" && s.Load.RPS > 0 {
			return s, true
		}
	}
	return ServerResult{}, false
}

// ratioCell is x/y with two decimals, or "–" when y is not measured.
func ratioCell(ok bool, x, y float64) string {
	if !ok || y == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", x/y)
}

// printTargets judges the targets of issue 19 on one concurrency level:
// the throughput and saturated-p99 ratios at the first level, the p99
// ratio alone at 200 clients and more.
func printTargets(w io.Writer, clients int, servers []ServerResult) {
	byKey := map[string]ServerResult{}
	for _, s := range servers {
		if s.Skipped == "" {
			byKey[s.Key] = s
		}
	}
	fmt.Fprintf(w, "\n### Targets of issue 19, %d clients\n\n", clients)
	target := func(name string, ok bool, have bool, detail string) {
		verdict := "not measured"
		if have {
			verdict = map[bool]string{true: "REACHED", false: "NOT reached"}[ok]
		}
		fmt.Fprintf(w, "- %s: %s (%s)\n", name, verdict, detail)
	}
	sa, okA := byKey["a"]
	sd, okD := byKey["d"]
	for _, t := range []struct {
		key          string
		rps, p99, vd float64
	}{{"b", 0.7, 1.5, 5}, {"c", 0.5, 3, 5}} {
		s, ok := byKey[t.key]
		if clients >= 200 {
			target(fmt.Sprintf("(%s) p99 ≤ 2× (a) at %d clients", t.key, clients), okA && ok && s.Load.P99ms <= 2*sa.Load.P99ms, okA && ok, fmt.Sprintf("%.2f×", safeDiv(s.Load.P99ms, sa.Load.P99ms)))
			continue
		}
		target(fmt.Sprintf("(%s) throughput ≥ %.1f× (a)", t.key, t.rps), okA && ok && s.Load.RPS >= t.rps*sa.Load.RPS, okA && ok, fmt.Sprintf("%.2f×", safeDiv(s.Load.RPS, sa.Load.RPS)))
		target(fmt.Sprintf("(%s) p99 ≤ %.1f× (a)", t.key, t.p99), okA && ok && s.Load.P99ms <= t.p99*sa.Load.P99ms, okA && ok, fmt.Sprintf("%.2f×", safeDiv(s.Load.P99ms, sa.Load.P99ms)))
		target(fmt.Sprintf("(%s) throughput ≥ %.0f× (d)", t.key, t.vd), ok && okD && s.Load.RPS >= t.vd*sd.Load.RPS, ok && okD, fmt.Sprintf("%.2f×", safeDiv(s.Load.RPS, sd.Load.RPS)))
	}
}

// printFloorTargets judges the performance targets of issue 27 on one
// concurrency level, in the same run: at up to 16 clients (b) ≥ 0.65× the
// floor and ≥ 1.25× bare mcp-go, (c) ≥ 0.6× the floor, and the CPU per
// call of (b) and (c) ≤ 0.8× bare mcp-go's; at 200 clients and more, (b)'s
// p99 ≤ bare mcp-go's.
func printFloorTargets(w io.Writer, clients int, servers []ServerResult) {
	byKey := map[string]ServerResult{}
	for _, s := range servers {
		if s.Skipped == "" && s.Load.RPS > 0 {
			byKey[s.Key] = s
		}
	}
	sf, okF := byKey["f"]
	sa, okA := byKey["a"]
	sb, okB := byKey["b"]
	sc, okC := byKey["c"]
	fmt.Fprintf(w, "\n### Targets of issue 27 (the floor), %d clients\n\n", clients)
	target := func(name string, have, ok bool, x, y float64) {
		verdict := "not measured"
		if have {
			verdict = map[bool]string{true: "REACHED", false: "NOT reached"}[ok]
		}
		fmt.Fprintf(w, "- %s: %s (%.2f×)\n", name, verdict, safeDiv(x, y))
	}
	if clients >= 200 {
		target(fmt.Sprintf("(b) p99 ≤ (a)'s at %d clients", clients), okA && okB, sb.Load.P99ms <= sa.Load.P99ms, sb.Load.P99ms, sa.Load.P99ms)
		return
	}
	target("(b) throughput ≥ 0.65× (f) the floor", okF && okB, sb.Load.RPS >= 0.65*sf.Load.RPS, sb.Load.RPS, sf.Load.RPS)
	target("(b) throughput ≥ 1.25× (a) bare mcp-go", okA && okB, sb.Load.RPS >= 1.25*sa.Load.RPS, sb.Load.RPS, sa.Load.RPS)
	target("(c) throughput ≥ 0.6× (f) the floor", okF && okC, sc.Load.RPS >= 0.6*sf.Load.RPS, sc.Load.RPS, sf.Load.RPS)
	target("(b) server CPU per call ≤ 0.8× (a)'s", okA && okB, sb.CPUPer1k <= 0.8*sa.CPUPer1k, sb.CPUPer1k, sa.CPUPer1k)
	target("(c) server CPU per call ≤ 0.8× (a)'s (the database's CPU not counted)", okA && okC, sc.CPUPer1k <= 0.8*sa.CPUPer1k, sc.CPUPer1k, sa.CPUPer1k)
}

func printRevocation(w io.Writer, rep Report) {
	r := rep.Revocation
	if r == nil {
		return
	}
	fmt.Fprintf(w, "\n### Revocation seen by another replica (PostgreSQL bus, loopback), %d changes\n\n", r.N)
	fmt.Fprintf(w, "p50 %.2f ms, p99 %.2f ms, max %.2f ms; target p99 ≤ 250 ms: %s\n", r.P50ms, r.P99ms, r.MaxMs,
		map[bool]string{true: "REACHED", false: "NOT reached"}[r.P99ms <= 250])
}

func printSQL(w io.Writer, rep Report) {
	for _, s := range rep.Servers {
		if s.SQL == nil {
			continue
		}
		fmt.Fprintf(w, "\n### SQL statements of one authenticated tools/call, %s (traced in process)\n\n", s.Name)
		fmt.Fprintf(w, "first call of a session: %d; steady state: %d\n", len(s.SQL.FirstCall), len(s.SQL.SecondCall))
		for i, q := range s.SQL.SecondCall {
			if len(q) > 160 {
				q = q[:160] + "…"
			}
			fmt.Fprintf(w, "%d. %s\n", i+1, q)
		}
	}
}

func safeDiv(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
