package events_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/events"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// The address rule holds at connect time, not only at creation: a
// subscription to a loopback target (made while the operator allowed
// private targets) gets nothing once the server runs without
// --webhook-allow-private, and its admin sees why.
func TestWebhookTargetCheckedAtConnect(t *testing.T) {
	rc := &receiver{}
	ts := httptest.NewTLSServer(rc)
	defer ts.Close()
	pool := x509.NewCertPool()
	pool.AddCert(ts.Certificate())
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			rc.reset(0)
			ctx := context.Background()
			sc := storagetest.Config(t, d)
			cfg := enclave.Config{DataDir: sc.DataDir, DatabaseURL: sc.DatabaseURL, WebhookRootCAs: pool,
				Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
				Accounts: accounts.Config{Argon2: accounts.Argon2Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1}}}

			open := cfg
			open.WebhookAllowPrivate = true
			srv, err := enclave.New(ctx, open)
			if err != nil {
				t.Fatal(err)
			}
			ada, _, err := srv.Accounts().Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "ada@example.com", Username: "ada", Password: "a long password for ada", Verified: true})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := srv.Accounts().Roles.GrantAdminAsOperator(ctx, ada.ID); err != nil {
				t.Fatal(err)
			}
			caller, err := srv.Accounts().LoadCaller(ctx, ada.StableID)
			if err != nil {
				t.Fatal(err)
			}
			caller.Interactive, caller.Session, caller.AllScopes = true, true, true
			raw, _ := json.Marshal(events.WebhookCreateInput{URL: ts.URL + "/hook", Events: []string{events.UserCreated}})
			if _, err := srv.Registry().Invoke(ctx, caller, "adminWebhookCreate", raw); err != nil {
				t.Fatal(err)
			}
			srv.Close()

			srv, err = enclave.New(ctx, cfg) // private targets not allowed
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			bg, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { srv.RunBackground(bg); close(done) }()
			defer func() { stop(); <-done }()
			if _, _, err := srv.Accounts().Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "carl@example.com", Username: "carl", Password: "a long password for carl"}); err != nil {
				t.Fatal(err)
			}
			var list events.WebhookListOutput
			waitFor(t, 15*time.Second, "the refused attempt", func() bool {
				res, err := srv.Registry().Invoke(ctx, caller, "adminWebhookList", nil)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := json.Marshal(res.Structured)
				_ = json.Unmarshal(b, &list)
				return len(list.Webhooks) == 1 && list.Webhooks[0].LastError != ""
			})
			if w := list.Webhooks[0]; !strings.Contains(w.LastError, "private, loopback or link-local") || w.ConsecutiveFailures < 1 {
				t.Fatalf("webhook %+v", w)
			}
			if n := len(rc.all()); n != 0 {
				t.Fatalf("the loopback target got %d requests", n)
			}
		})
	}
}
