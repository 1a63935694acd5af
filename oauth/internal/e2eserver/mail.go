package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"sync"

	gosmtp "github.com/emersion/go-smtp"
)

// mailDomain is the server's mail domain: the first account sends from
// agentowner@mailDomain.
const mailDomain = "mail.e2e.test"

// outside is the SMTP server standing in for the outside world: the
// server's mailer relays to it, and GET /mail on the inspection endpoint
// lists what it received.
var outside *capture

// capture keeps every message handed to it, with its envelope.
type capture struct {
	addr string
	mu   sync.Mutex
	got  []captured
}

type captured struct {
	From string   `json:"from"`
	To   []string `json:"to"`
	Raw  string   `json:"raw"`
}

// startCapture serves a capturing SMTP server on a loopback port until
// ctx ends.
func startCapture(ctx context.Context) (*capture, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c := &capture{addr: ln.Addr().String()}
	srv := gosmtp.NewServer(c)
	srv.Domain = "outside.test"
	srv.MaxMessageBytes = 4 << 20
	go func() { _ = srv.Serve(ln) }()
	context.AfterFunc(ctx, func() { _ = srv.Close() })
	return c, nil
}

func (c *capture) NewSession(*gosmtp.Conn) (gosmtp.Session, error) { return &captureSession{c: c}, nil }

func (c *capture) serveHTTP(w http.ResponseWriter, _ *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"messages": append([]captured{}, c.got...)})
}

type captureSession struct {
	c    *capture
	from string
	to   []string
}

func (s *captureSession) Mail(from string, _ *gosmtp.MailOptions) error { s.from = from; return nil }
func (s *captureSession) Rcpt(to string, _ *gosmtp.RcptOptions) error {
	s.to = append(s.to, to)
	return nil
}
func (s *captureSession) Data(r io.Reader) error {
	var b bytes.Buffer
	if _, err := io.Copy(&b, r); err != nil {
		return err
	}
	s.c.mu.Lock()
	s.c.got = append(s.c.got, captured{From: s.from, To: s.to, Raw: b.String()})
	s.c.mu.Unlock()
	return nil
}
func (s *captureSession) Reset()        { s.from, s.to = "", nil }
func (s *captureSession) Logout() error { return nil }
