package e2e

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/storage/storagetest"
	"github.com/enclave-mcp/enclave/web"
)

// recordingMailer keeps what it is given; it fails while down is set.
type recordingMailer struct {
	mu   sync.Mutex
	down bool
	sent []web.Message
}

func (m *recordingMailer) Send(_ context.Context, msg web.Message) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return errors.New("mail server unreachable")
	}
	m.sent = append(m.sent, msg)
	return nil
}

func (m *recordingMailer) messages() []web.Message {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]web.Message(nil), m.sent...)
}

// Nothing is lost: a verification link is written to the outbox in the
// same transaction as its token, survives a restart with the mail server
// down, and is delivered by the next process once the server is back.
func TestMailSurvivesARestart(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			sc := storagetest.Config(t, d)
			cfg := func(m web.Mailer) enclave.Config {
				return enclave.Config{DataDir: sc.DataDir, DatabaseURL: sc.DatabaseURL, Mailer: m, Logger: quiet(), Accounts: fastArgon}
			}

			// First process: the mail server is down; sign up, then stop.
			down := &recordingMailer{down: true}
			srv := openServer(t, cfg(down))
			bg, stopBG := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { srv.RunBackground(bg); close(done) }()
			form := url.Values{"email": {"new@example.com"}, "username": {"newcomer"}, "password": {"a long enough password"}}
			req := httptest.NewRequest("POST", "/signup", strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			rec := httptest.NewRecorder()
			srv.Handler().ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				t.Fatalf("signup: %d", rec.Code)
			}
			var pending int
			// (The account's user.created event rides the outbox too.)
			if err := srv.Store().DB.NewSelect().Table("outbox").ColumnExpr("count(*)").Where("topic = 'mail'").Scan(ctx, &pending); err != nil || pending != 1 {
				t.Fatalf("outbox rows after signup: %d, %v", pending, err)
			}
			stopBG()
			<-done
			srv.Close()

			// Second process: the mail server is back; the link goes out.
			up := &recordingMailer{}
			srv = openServer(t, cfg(up))
			// Past the first attempt's lease or backoff, it is due again.
			if _, err := srv.Store().DB.ExecContext(ctx, "UPDATE outbox SET next_attempt_at = ?", time.Now().UTC().Add(-time.Second)); err != nil {
				t.Fatal(err)
			}
			bg, stopBG = context.WithCancel(ctx)
			done = make(chan struct{})
			go func() { srv.RunBackground(bg); close(done) }()
			defer func() { stopBG(); <-done }()
			deadline := time.Now().Add(15 * time.Second)
			for len(up.messages()) == 0 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			msgs := up.messages()
			if len(msgs) != 1 || msgs[0].To != "new@example.com" || !strings.Contains(msgs[0].Text, "/verify-email?token=") {
				t.Fatalf("delivered after the restart: %+v", msgs)
			}
			if len(down.messages()) != 0 {
				t.Fatal("the down mailer delivered")
			}
			// The row goes right after the send returns: wait for it.
			for {
				err := srv.Store().DB.NewSelect().Table("outbox").ColumnExpr("count(*)").Where("topic = 'mail'").Scan(ctx, &pending)
				if err == nil && pending == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("outbox rows after delivery: %d, %v", pending, err)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}
