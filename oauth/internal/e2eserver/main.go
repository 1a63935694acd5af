// Command e2eserver runs a complete enclave server for end-to-end OAuth
// tests with clients written elsewhere (.ci/oauth-client.sh drives it with
// the official TypeScript SDK).
//
// It listens on a loopback port (-listen, to come back on the same one
// after a restart), creates two verified accounts (or, on a data directory
// and database that already hold them, finds them) and prints one JSON line
// with the base URL, the accounts' credentials, the first account's ids and
// the address of an inspection endpoint (see inspect; its /mail lists the
// mail the server sent out, to a capturing SMTP server on loopback). It serves until
// stdin closes or it gets SIGINT/SIGTERM.
//
// Login and consent are the web shell's own pages (fields email and
// password; buttons named decision), exactly as a person sees them.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/internal/rrproxy"
	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/storage"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2eserver:", err)
		os.Exit(1)
	}
}

func run() error {
	dataDir := flag.String("data", "", "data directory (required; use a fresh temporary one)")
	databaseURL := flag.String("database-url", "", "database URL (default SQLite in the data directory)")
	replicas := flag.Int("replicas", 1, "serve this many replicas (each with its own pools and bus) on -database-url behind a round-robin proxy")
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on (a restarted server passes its predecessor's, so that the base URL stays)")
	flag.Parse()
	if *dataDir == "" {
		return errors.New("-data is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { // a closed stdin (the driving script ended) stops the server
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()

	ln, err := listenRetry(*listen)
	if err != nil {
		return err
	}
	base := "http://" + ln.Addr().String()
	// Mail (mailSend) leaves through a capturing SMTP server on loopback.
	if outside, err = startCapture(ctx); err != nil {
		return err
	}
	relay, err := mail.NewSMTPMailer(mail.SMTPConfig{Addr: outside.addr, From: "noreply@" + mailDomain, Security: mail.SMTPPlaintext})
	if err != nil {
		return err
	}
	cfg := enclave.Config{
		BaseURL:     base,
		DataDir:     *dataDir,
		DatabaseURL: *databaseURL,
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Mail:        mail.Options{Domain: mailDomain},
		Mailer:      relay,
	}
	if *replicas > 1 {
		if !strings.HasPrefix(*databaseURL, "postgres") {
			return errors.New("-replicas needs a postgres:// -database-url")
		}
		return runReplicas(ctx, ln, cfg, *replicas)
	}
	srv, err := enclave.New(ctx, cfg)
	if err != nil {
		return err
	}
	if err := ready(ctx, srv, base, 1); err != nil {
		return err
	}
	return srv.Serve(ctx, ln)
}

// ready creates the accounts and prints the line the driving script waits
// for: the first account as email and password, a second one (to check
// that what the first saves stays its own) as email2 and password2, and
// the number of replicas behind baseURL.
//
// On a restart (the accounts exist already) it creates nothing. userID and
// stableID are the first account's, for the inspection endpoint, whose
// address is inspectURL.
func ready(ctx context.Context, srv *enclave.Server, base string, replicas int) error {
	users := []struct{ email, username, password string }{
		{"agent-owner@example.test", "agentowner", "correct horse battery staple"},
		{"second-user@example.test", "seconduser", "another horse battery staple"},
	}
	var first accounts.User
	for i, u := range users {
		got, err := srv.Accounts().Identity.UserByEmail(ctx, u.email)
		if err != nil { // not there yet: a first start
			got, _, err = srv.Accounts().Identity.CreateUser(ctx, accounts.CreateUserInput{
				Email: u.email, Username: u.username, Password: u.password, Verified: true,
			})
			if err != nil {
				return err
			}
		}
		if i == 0 {
			first = got
		}
	}
	inspectURL, err := inspect(ctx, srv)
	if err != nil {
		return err
	}
	line, _ := json.Marshal(map[string]any{
		"baseURL": base,
		"email":   users[0].email, "password": users[0].password,
		"email2": users[1].email, "password2": users[1].password,
		"replicas": replicas,
		"userID":   first.ID, "stableID": first.StableID,
		"inspectURL": inspectURL,
	})
	fmt.Println(string(line))
	return nil
}

// runReplicas serves n replicas of one configuration, each on a port of its
// own, behind a round-robin proxy on ln (no stickiness): every step of the
// OAuth flow and every MCP request may land on a different replica. They
// share cfg, so the data directory as well as the database: the blob
// bucket (package sources) and the keeper key are the same for all.
func runReplicas(ctx context.Context, ln net.Listener, cfg enclave.Config, n int) error {
	var backends []string
	var servers []*enclave.Server
	var listeners []net.Listener
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	for range n {
		rl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		srv, err := enclave.New(ctx, cfg)
		if err != nil {
			rl.Close()
			return err
		}
		servers = append(servers, srv)
		listeners = append(listeners, rl)
		backends = append(backends, "http://"+rl.Addr().String())
	}
	proxy, err := rrproxy.New(backends)
	if err != nil {
		return err
	}
	front := &http.Server{Handler: proxy, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = front.Serve(ln) }()
	defer front.Close()
	errc := make(chan error, n)
	for i, srv := range servers {
		go func() { errc <- srv.Serve(ctx, listeners[i]) }()
	}
	if err := ready(ctx, servers[0], cfg.BaseURL, n); err != nil {
		return err
	}
	var first error
	for range n {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// listenRetry listens on addr, retrying for a few seconds while the port
// is still held (a restarted server takes its predecessor's port).
func listenRetry(addr string) (net.Listener, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		ln, err := net.Listen("tcp", addr)
		if err == nil || time.Now().After(deadline) {
			return ln, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// inspect serves, on a loopback port of its own (not the server's), what
// the server itself holds of one owner: GET /owned?id=<users.id>&stableID=
// answers {"total": n, "surfaces": {"<table>": n, "blob:<domain>": n,
// "custom:<name>": n}} over every surface of the ownership inventory
// (storage.Inventory) with a count of the owner's items, so that a client
// can check that a deletion left nothing. It returns the endpoint's URL.
func inspect(ctx context.Context, srv *enclave.Server) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /owned", func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseInt(r.URL.Query().Get("id"), 10, 64)
		sid := r.URL.Query().Get("stableID")
		if err != nil || id <= 0 || sid == "" {
			http.Error(w, "id and stableID are required", http.StatusBadRequest)
			return
		}
		o := storage.Owner{ID: id, StableID: sid}
		inv, st := srv.Inventory(), srv.Store()
		surfaces := map[string]int64{}
		var total int64
		add := func(name string, n int64, err error) bool {
			if err != nil {
				http.Error(w, name+": "+err.Error(), http.StatusInternalServerError)
				return false
			}
			surfaces[name] = n
			total += n
			return true
		}
		for _, t := range inv.Tables() {
			n, err := storage.CountRows(r.Context(), st.DB, t, o)
			if !add(t.Name, n, err) {
				return
			}
		}
		for _, d := range inv.BlobPrefixes() {
			keys, err := storage.ListBlobs(r.Context(), st.Bucket, o, d)
			if !add("blob:"+d.Domain, int64(len(keys)), err) {
				return
			}
		}
		for _, c := range inv.Customs() {
			if c.Count == nil {
				continue
			}
			n, err := c.Count(r.Context(), o)
			if !add("custom:"+c.Name, n, err) {
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"total": total, "surfaces": surfaces})
	})
	if outside != nil {
		// GET /mail lists what the outside world received.
		mux.HandleFunc("GET /mail", outside.serveHTTP)
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	context.AfterFunc(ctx, func() { _ = hs.Close() })
	return "http://" + ln.Addr().String() + "/owned", nil
}
