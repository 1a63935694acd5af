package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"

	gosmtp "github.com/emersion/go-smtp"
)

// outsideMail is an SMTP server standing in for the outside world: it
// keeps every message it is handed, with its envelope.
type outsideMail struct {
	addr string
	mu   sync.Mutex
	got  []outsideMessage
}

type outsideMessage struct {
	From string
	To   []string
	Raw  []byte
}

func startOutsideMail(t *testing.T) *outsideMail {
	t.Helper()
	o := &outsideMail{}
	srv := gosmtp.NewServer(o)
	srv.Domain = "outside.test"
	srv.AllowInsecureAuth = true
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o.addr = ln.Addr().String()
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return o
}

func (o *outsideMail) NewSession(*gosmtp.Conn) (gosmtp.Session, error) {
	return &outsideSession{o: o}, nil
}

type outsideSession struct {
	o    *outsideMail
	from string
	to   []string
}

func (s *outsideSession) Mail(from string, _ *gosmtp.MailOptions) error { s.from = from; return nil }
func (s *outsideSession) Rcpt(to string, _ *gosmtp.RcptOptions) error {
	s.to = append(s.to, to)
	return nil
}
func (s *outsideSession) Data(r io.Reader) error {
	var b bytes.Buffer
	if _, err := io.Copy(&b, r); err != nil {
		return err
	}
	s.o.mu.Lock()
	s.o.got = append(s.o.got, outsideMessage{From: s.from, To: s.to, Raw: b.Bytes()})
	s.o.mu.Unlock()
	return nil
}
func (s *outsideSession) Reset()        { s.from, s.to = "", nil }
func (s *outsideSession) Logout() error { return nil }

// userMail returns the messages sent with a VERP envelope sender (users'
// outbound mail, not the server's own transactional mail).
func (o *outsideMail) userMail() []outsideMessage {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []outsideMessage
	for _, m := range o.got {
		if strings.HasPrefix(m.From, "bounces+") {
			out = append(out, m)
		}
	}
	return out
}

// waitUserMail waits until n user messages have arrived.
func (o *outsideMail) waitUserMail(t *testing.T, n int) []outsideMessage {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := o.userMail()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("the outside world received %d user messages, want %d", len(got), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type mailBearer struct{ token string }

func (b mailBearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// mailConfirmer answers every elicitation with action and keeps what the
// person was shown.
type mailConfirmer struct {
	action mcpgo.ElicitationResponseAction
	mu     sync.Mutex
	shown  []string
}

func (c *mailConfirmer) Elicit(_ context.Context, req mcpgo.ElicitationRequest) (*mcpgo.ElicitationResult, error) {
	c.mu.Lock()
	c.shown = append(c.shown, req.Params.Message)
	c.mu.Unlock()
	return &mcpgo.ElicitationResult{ElicitationResponse: mcpgo.ElicitationResponse{Action: c.action, Content: map[string]any{"send": true}}}, nil
}

// mailAgent is an mcp-go client that can be asked (elicitation) on a
// session-based protocol version.
func mailAgent(t *testing.T, base, token string, confirmer *mailConfirmer) *mcpclient.Client {
	return mailAgentOn(t, base, token, confirmer, "2025-11-25")
}

// mailAgentOn is mailAgent on protocol version: on the stateless
// 2026-07-28 the question comes back as an input-required result that the
// client answers by calling again.
func mailAgentOn(t *testing.T, base, token string, confirmer *mailConfirmer, version string) *mcpclient.Client {
	t.Helper()
	tr, err := transport.NewStreamableHTTP(base+"/mcp", transport.WithHTTPBasicClient(&http.Client{Transport: mailBearer{token}}))
	if err != nil {
		t.Fatal(err)
	}
	c := mcpclient.NewClient(tr, mcpclient.WithProtocolVersion(version), mcpclient.WithElicitationHandler(confirmer))
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Initialize(t.Context(), mcpgo.InitializeRequest{Params: mcpgo.InitializeParams{
		ProtocolVersion: version,
		ClientInfo:      mcpgo.Implementation{Name: "mail-agent", Version: "1"},
		Capabilities:    mcpgo.ClientCapabilities{Elicitation: &mcpgo.ElicitationCapability{}},
	}}); err != nil {
		t.Fatal(err)
	}
	return c
}

// mailSendCall calls mailSend and returns the result's text and whether
// it is an error.
func mailSendCall(t *testing.T, c *mcpclient.Client, args map[string]any) (string, map[string]any, bool) {
	t.Helper()
	res, err := c.CallTool(t.Context(), mcpgo.CallToolRequest{Params: mcpgo.CallToolParams{Name: "mailSend", Arguments: args}})
	if err != nil {
		t.Fatalf("mailSend: %v", err)
	}
	var text strings.Builder
	for _, ct := range res.Content {
		if tc, ok := ct.(mcpgo.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	structured, _ := res.StructuredContent.(map[string]any)
	return text.String(), structured, res.IsError
}

// mailDSN is an RFC 3464 report that the message with Message-ID msgID
// could not be delivered to rcpt.
func mailDSN(to, rcpt, msgID string) []byte {
	return []byte(fmt.Sprintf("From: MAILER-DAEMON@outside.test\r\nTo: %s\r\nSubject: Undelivered Mail Returned to Sender\r\nMIME-Version: 1.0\r\n"+
		"Content-Type: multipart/report; report-type=delivery-status; boundary=\"DSN\"\r\n\r\n"+
		"--DSN\r\nContent-Type: text/plain\r\n\r\nThe mail system could not deliver your message.\r\n"+
		"--DSN\r\nContent-Type: message/delivery-status\r\n\r\nReporting-MTA: dns; outside.test\r\n\r\nFinal-Recipient: rfc822; %s\r\nAction: failed\r\nStatus: 5.1.1\r\nDiagnostic-Code: smtp; 550 5.1.1 no such user\r\n\r\n"+
		"--DSN\r\nContent-Type: text/rfc822-headers\r\n\r\nMessage-ID: <%s>\r\nSubject: x\r\n\r\n--DSN--\r\n", to, rcpt, msgID))
}
