package main

// Mail: inbound deliveries per second of 100 KB messages through the real
// SMTP listener (issue 30), and mailList's latency for a mailbox of
// 100,000 messages. Each database runs in a process of its own
// (bench mail), which holds both the server and its SMTP clients.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/smtp"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/mail/mailauth"
	"github.com/enclave-mcp/enclave/storage"
)

// Targets of the mail issue.
const (
	targetDeliveriesPerSec = 200.0 // 100 KB inbound deliveries/s on SQLite
	targetMailListMessages = 100_000
	benchMailDomain        = "mail.bench.test"
)

// MailResult is one database's mail run.
type MailResult struct {
	DB           string  `json:"db"`
	Sessions     int     `json:"smtp_sessions"`
	Mailboxes    int     `json:"mailboxes"`
	MessageBytes int     `json:"message_bytes"`
	Seconds      float64 `json:"measured_seconds"`
	Deliveries   int64   `json:"deliveries"`
	PerSecond    float64 `json:"deliveries_per_second"`
	P50ms        float64 `json:"delivery_p50_ms"`
	P99ms        float64 `json:"delivery_p99_ms"`
	Errors       int64   `json:"errors"`
	ErrSample    string  `json:"error_sample,omitempty"`
	// Stored is the number of messages in the database after the run,
	// every delivery answered 250 included (checked equal to the count of
	// 250s, warm-up included).
	Stored int64 `json:"stored_messages"`
	// CPUPerDelivery is this process's CPU (server and clients; on
	// PostgreSQL not the database's) per delivery, in ms.
	CPUPerDelivery float64 `json:"process_cpu_ms_per_delivery"`
	// List is mailList through Registry.Invoke for a mailbox of
	// ListMessages messages.
	ListMessages int     `json:"list_messages,omitempty"`
	ListFillSecs float64 `json:"list_fill_seconds,omitempty"`
	ListCalls    int     `json:"list_calls,omitempty"`
	ListP50ms    float64 `json:"list_p50_ms,omitempty"`
	ListP99ms    float64 `json:"list_p99_ms,omitempty"`
}

// noDNS is the bench's resolver for the sender checks: every name is
// unknown, at once (the checks run, their DNS costs nothing and no
// packet leaves the machine).
type noDNS struct{}

func notFound(name string) error {
	return &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
}
func (noDNS) LookupTXT(_ context.Context, n string) ([]string, error) { return nil, notFound(n) }
func (noDNS) LookupMX(_ context.Context, n string) ([]*net.MX, error) { return nil, notFound(n) }
func (noDNS) LookupIPAddr(_ context.Context, n string) ([]net.IPAddr, error) {
	return nil, notFound(n)
}
func (noDNS) LookupAddr(_ context.Context, n string) ([]string, error) { return nil, notFound(n) }

// benchMessage is a message of about size bytes: a text body and a binary
// attachment (base64), with a unique Message-ID.
func benchMessage(seq int64, to string, size int) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "From: Carol <carol@outside.test>\r\nTo: %s\r\nSubject: bench message %d\r\nMessage-ID: <bench-%d-%d@outside.test>\r\n", to, seq, time.Now().UnixNano(), seq)
	fmt.Fprintf(&b, "Date: Mon, 07 Dec 2026 03:00:00 +0000\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"b1\"\r\n\r\n")
	b.WriteString("--b1\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n")
	line := "All work and no play makes a long message, delivered to a mailbox.\r\n"
	for b.Len() < size*6/10 {
		b.WriteString(line)
	}
	b.WriteString("\r\n--b1\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=\"data.bin\"\r\nContent-Transfer-Encoding: base64\r\n\r\n")
	raw := make([]byte, (size-b.Len()-40)*3/4)
	for i := range raw {
		raw[i] = byte(i*7 + int(seq))
	}
	enc := base64.StdEncoding.EncodeToString(raw)
	for len(enc) > 76 {
		b.WriteString(enc[:76] + "\r\n")
		enc = enc[76:]
	}
	b.WriteString(enc + "\r\n--b1--\r\n")
	return b.Bytes()
}

// mailMain starts a server (mail on, the SMTP listener on 127.0.0.1, the
// sender checks on with a resolver knowing no name), then -sessions SMTP
// clients (net/smtp, one connection each, many transactions per
// connection) deliver -size messages to -mailboxes users in a closed
// loop: a warm-up, then the measured window. Then, unless -list 0, it
// fills another user's mailbox with -list messages and times mailList.
func mailMain(args []string) error {
	fs := flag.NewFlagSet("mail", flag.ContinueOnError)
	db := fs.String("db", "sqlite", "sqlite or postgres (ENCLAVE_TEST_POSTGRES)")
	sessions := fs.Int("sessions", 8, "concurrent SMTP sessions (the listener allows 10 per client address)")
	boxes := fs.Int("mailboxes", 8, "recipient users, each session delivering to one in turn")
	size := fs.Int("size", 100*1024, "message size in bytes")
	warmup := fs.Duration("warmup", 2*time.Second, "warm-up, not measured")
	duration := fs.Duration("duration", 10*time.Second, "measured window")
	list := fs.Int("list", targetMailListMessages, "messages of the mailbox mailList is timed on (0: skip)")
	listCalls := fs.Int("list-calls", 200, "measured mailList calls")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the measured window (server and clients) to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *sessions < 1 || *boxes < 1 || *size < 1024 {
		return errors.New("mail: want -sessions ≥ 1, -mailboxes ≥ 1, -size ≥ 1024")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "enclave-mailbench-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	dbURL := ""
	if *db == "postgres" {
		u, drop, err := pgSchema(ctx, dir, os.Getenv("ENCLAVE_TEST_POSTGRES"))
		if err != nil {
			return err
		}
		defer drop()
		dbURL = u
	}
	srv, err := enclave.New(ctx, enclave.Config{
		DataDir: dir, DatabaseURL: dbURL,
		Accounts: accounts.Config{Argon2: accounts.Argon2Params{MemoryKiB: 64, Iterations: 1}},
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Mail: mail.Options{Domain: benchMailDomain,
			// Counted by the meter as always, never reached.
			ReceivesPerDay: 1 << 40,
			Authenticate:   mailauth.Check(mailauth.Options{Resolver: noDNS{}})},
	})
	if err != nil {
		return err
	}
	defer srv.Close()
	var rcpts []string
	for i := range *boxes {
		name := fmt.Sprintf("mailbox%02d", i)
		if _, _, err := srv.Accounts().Identity.CreateUser(ctx, accounts.CreateUserInput{Email: name + "@example.test", Username: name, Password: "bench-password-0123456789", Verified: true}); err != nil {
			return err
		}
		rcpts = append(rcpts, name+"@"+benchMailDomain)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- srv.Mail().Serve(sctx, ln) }()
	defer func() { stop(); <-served }()

	res := MailResult{DB: *db, Sessions: *sessions, Mailboxes: *boxes, MessageBytes: len(benchMessage(0, rcpts[0], *size))}
	var (
		ok, measured, errs atomic.Int64
		seq                atomic.Int64
		measuring, done    atomic.Bool
		mu                 sync.Mutex
		lat                []float64
		sample             string
		wg                 sync.WaitGroup
	)
	fail := func(err error) {
		errs.Add(1)
		mu.Lock()
		if sample == "" {
			sample = err.Error()
		}
		mu.Unlock()
	}
	addr := ln.Addr().String()
	for i := range *sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c *smtp.Client
			defer func() {
				if c != nil {
					_ = c.Quit()
				}
			}()
			for n := i; !done.Load(); n += *sessions {
				if c == nil {
					var err error
					if c, err = smtp.Dial(addr); err != nil {
						fail(err)
						time.Sleep(100 * time.Millisecond)
						continue
					}
				}
				to := rcpts[n%len(rcpts)]
				msg := benchMessage(seq.Add(1), to, *size)
				t0 := time.Now()
				if err := send(c, to, msg); err != nil {
					fail(err)
					_ = c.Close()
					c = nil
					continue
				}
				ok.Add(1)
				if measuring.Load() {
					measured.Add(1)
					mu.Lock()
					lat = append(lat, float64(time.Since(t0).Microseconds())/1000)
					mu.Unlock()
				}
			}
		}()
	}
	time.Sleep(*warmup)
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	c0, t0 := cpuTime(), time.Now()
	measuring.Store(true)
	time.Sleep(*duration)
	measuring.Store(false)
	if *cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	res.Seconds, res.Deliveries = time.Since(t0).Seconds(), measured.Load()
	cpu := cpuTime() - c0
	done.Store(true)
	wg.Wait()
	res.PerSecond = float64(res.Deliveries) / res.Seconds
	res.Errors, res.ErrSample = errs.Load(), sample
	if res.Deliveries > 0 {
		res.CPUPerDelivery = cpu.Seconds() * 1000 / float64(res.Deliveries)
	}
	slices.Sort(lat)
	if len(lat) > 0 {
		res.P50ms, res.P99ms = lat[len(lat)/2], lat[len(lat)*99/100]
	}
	// Every 250 is a stored message.
	if err := srv.Store().DB.NewRaw("SELECT count(*) FROM mail_messages").Scan(ctx, &res.Stored); err != nil {
		return err
	}
	if res.Stored != ok.Load() {
		return fmt.Errorf("mail: %d deliveries answered 250 but %d messages are stored", ok.Load(), res.Stored)
	}
	fmt.Fprintf(os.Stderr, "deliveries: %.1f/s (%d in %.1f s), p50 %.1f ms, p99 %.1f ms, %d errors\n", res.PerSecond, res.Deliveries, res.Seconds, res.P50ms, res.P99ms, res.Errors)

	if *list > 0 {
		if err := mailListRun(ctx, srv, &res, *list, *listCalls); err != nil {
			return fmt.Errorf("mailList: %w", err)
		}
	}
	b, _ := json.Marshal(res)
	fmt.Printf("RESULT %s\n", b)
	return nil
}

// send runs one SMTP transaction on c.
func send(c *smtp.Client, to string, msg []byte) error {
	if err := c.Mail("carol@outside.test"); err != nil {
		return err
	}
	if err := c.Rcpt(to); err != nil {
		return err
	}
	w, err := c.Data()
	if err != nil {
		return err
	}
	if _, err := w.Write(msg); err != nil {
		return err
	}
	return w.Close() // the server's answer: 250 or an error
}

// mailListRun fills a fresh user's inbox with n messages (bulk inserts,
// one thread) and times mailList (its first page) through Registry.Invoke.
func mailListRun(ctx context.Context, srv *enclave.Server, res *MailResult, n, calls int) error {
	u, _, err := srv.Accounts().Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "lister@example.test", Username: "lister", Password: "bench-password-0123456789", Verified: true})
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := fillMailbox(ctx, srv.Store(), u.ID, n); err != nil {
		return err
	}
	res.ListMessages, res.ListFillSecs = n, time.Since(t0).Seconds()
	caller, err := srv.Accounts().LoadCaller(ctx, u.StableID)
	if err != nil {
		return err
	}
	lat := make([]float64, 0, calls)
	for i := range calls + 10 {
		s := time.Now()
		r, err := srv.Registry().Invoke(ctx, caller, "mailList", []byte(`{}`))
		if err != nil {
			return err
		}
		out, _ := r.Structured.(mail.ListOutput)
		if r.IsError || len(out.Messages) == 0 {
			return fmt.Errorf("mailList: an error or an empty page: %+v", r)
		}
		if i >= 10 { // 10 unmeasured
			lat = append(lat, float64(time.Since(s).Microseconds())/1000)
		}
	}
	slices.Sort(lat)
	res.ListCalls, res.ListP50ms, res.ListP99ms = calls, lat[len(lat)/2], lat[len(lat)*99/100]
	fmt.Fprintf(os.Stderr, "mailList at %d messages: p50 %.2f ms, p99 %.2f ms\n", n, res.ListP50ms, res.ListP99ms)
	return nil
}

// fillMailbox inserts n messages for owner in one thread, 1,000 a
// statement.
func fillMailbox(ctx context.Context, st *storage.Store, owner int64, n int) error {
	now := time.Now().UTC()
	var thread int64
	if err := st.DB.NewRaw("INSERT INTO mail_threads (public_id, user_id, subject, message_count, last_message_at, created_at) VALUES ('thr_listbench', ?, 'bench', ?, ?, ?) RETURNING id",
		owner, n, now, now).Scan(ctx, &thread); err != nil {
		return err
	}
	const batch = 1000
	for at := 0; at < n; at += batch {
		var q strings.Builder
		q.WriteString("INSERT INTO mail_messages (public_id, user_id, thread_id, folder, delivery_key, message_id, from_addr, rcpt, subject, text_body, size_bytes, received_at) VALUES ")
		var args []any
		for i := at; i < min(n, at+batch); i++ {
			if i > at {
				q.WriteString(", ")
			}
			q.WriteString("(?, ?, ?, 'inbox', ?, ?, ?, ?, ?, ?, 1000, ?)")
			args = append(args, fmt.Sprintf("msg_listbench%08d", i), owner, thread, fmt.Sprintf("key%d", i), fmt.Sprintf("id%d@x.test", i),
				fmt.Sprintf("sender%d@x.test", i%500), "lister@"+benchMailDomain, fmt.Sprintf("subject of message %d", i),
				fmt.Sprintf("a short body of message %d", i), now.Add(time.Duration(i-n)*time.Second))
		}
		if _, err := st.DB.NewRaw(q.String(), args...).Exec(ctx); err != nil {
			return err
		}
	}
	if st.Dialect() == storage.Postgres {
		_, err := st.DB.ExecContext(ctx, "ANALYZE mail_messages")
		return err
	}
	return nil
}

// runMail runs bench mail in a fresh process.
func runMail(self, logDir string, db string, args []string) (MailResult, error) {
	p, err := startProc("mail-"+db, -1, logDir, "", append([]string{self, "mail", "-db", db}, args...)...)
	if err != nil {
		return MailResult{}, err
	}
	defer p.stop(15 * time.Second)
	line, err := p.waitLine("RESULT ", 30*time.Minute)
	if err != nil {
		return MailResult{}, err
	}
	var r MailResult
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		return r, err
	}
	fmt.Printf("  %.1f deliveries/s of %d bytes (p50 %.1f ms), mailList p50 %.2f ms at %d messages\n", r.PerSecond, r.MessageBytes, r.P50ms, r.ListP50ms, r.ListMessages)
	return r, nil
}

func printMail(w io.Writer, rs []MailResult) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintf(w, "\n## Mail: inbound SMTP deliveries (net/smtp clients on loopback, sender checks on) and mailList\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| db\t sessions\t message bytes\t deliveries/s\t × target (200/s)\t p50 ms\t p99 ms\t errors\t process CPU-ms/delivery\t mailList messages\t mailList p50 ms\t mailList p99 ms\t")
	fmt.Fprintln(tw, "|---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "| %s\t %d\t %d\t %.1f\t %.2f\t %.1f\t %.1f\t %d\t %.2f\t %d\t %.2f\t %.2f\t\n", r.DB, r.Sessions, r.MessageBytes, r.PerSecond,
			r.PerSecond/targetDeliveriesPerSec, r.P50ms, r.P99ms, r.Errors, r.CPUPerDelivery, r.ListMessages, r.ListP50ms, r.ListP99ms)
	}
	tw.Flush()
	for _, r := range rs {
		if r.DB == "sqlite" {
			fmt.Fprintf(w, "\n- inbound deliveries of ~100 KB messages on SQLite ≥ %.0f/s: %s (%.1f/s, %.2f×)\n", targetDeliveriesPerSec,
				map[bool]string{true: "REACHED", false: "NOT reached"}[r.PerSecond >= targetDeliveriesPerSec], r.PerSecond, r.PerSecond/targetDeliveriesPerSec)
		}
	}
}

// mailDBs parses -mail (the databases of the mail row).
func mailDBs(flag string) []string {
	switch flag {
	case "", "none":
		return nil
	case "both":
		return []string{"sqlite", "postgres"}
	}
	return []string{flag}
}
