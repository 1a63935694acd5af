package events_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/events"
	"github.com/enclave-mcp/enclave/storage"
)

// receiver is a webhook target: it records every request and answers 500
// to the first failFirst of them, 200 after.
type receiver struct {
	mu        sync.Mutex
	failFirst int
	reqs      []received
}

type received struct {
	header http.Header
	body   []byte
	status int
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	status := http.StatusOK
	if len(rc.reqs) < rc.failFirst {
		status = http.StatusInternalServerError
	}
	rc.reqs = append(rc.reqs, received{header: r.Header.Clone(), body: body, status: status})
	rc.mu.Unlock()
	w.WriteHeader(status)
}

func (rc *receiver) all() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.reqs)
}

func (rc *receiver) reset(failFirst int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.failFirst, rc.reqs = failFirst, nil
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func invoke(t *testing.T, s *enclavetest.Server, c capabilities.Caller, name string, in, out any) error {
	t.Helper()
	raw, _ := json.Marshal(in)
	res, err := s.Registry().Invoke(t.Context(), c, name, raw)
	if err != nil {
		return err
	}
	if out != nil {
		b, _ := json.Marshal(res.Structured)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatal(err)
		}
	}
	return nil
}

// sessionCaller is the admin at the web page (adminWebhookCreate is
// session-only: it answers with the secret).
func sessionCaller(t *testing.T, u *enclavetest.User) capabilities.Caller {
	c := u.Caller(t)
	c.Session = true
	return c
}

func startWithTarget(t *testing.T, d string, ts *httptest.Server, maxFailures int, setup func(*enclave.Server) error) *enclavetest.Server {
	pool := x509.NewCertPool()
	pool.AddCert(ts.Certificate())
	return enclavetest.Start(t, enclavetest.Options{Dialect: storageDialect(d), Setup: setup, Config: enclave.Config{
		WebhookAllowPrivate: true, WebhookRootCAs: pool, WebhookMaxFailures: maxFailures,
	}})
}

// A webhook receives the event signed with its secret; the docs' verifier
// accepts it, rejects it replayed later and rejects it under another
// secret; a 500 is retried with the same event id; and a subscription
// whose owner is no longer an admin receives nothing.
func TestWebhookDelivery(t *testing.T) {
	rc := &receiver{}
	ts := httptest.NewTLSServer(rc)
	defer ts.Close()
	for _, d := range enclavetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			rc.reset(1)
			var mu sync.Mutex
			var seen []events.Event
			s := startWithTarget(t, string(d), ts, 0, func(srv *enclave.Server) error {
				return srv.Events().Subscribe("test", func(_ context.Context, e events.Event) error {
					mu.Lock()
					defer mu.Unlock()
					seen = append(seen, e)
					return nil
				})
			})
			ada := s.CreateUser(t, "ada", capabilities.RoleAdmin)
			bob := s.CreateUser(t, "bob", capabilities.RoleAdmin)
			// The events of these accounts are dispatched before the
			// subscription exists.
			waitFor(t, 10*time.Second, "bob's role event", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return slices.ContainsFunc(seen, func(e events.Event) bool {
					return e.Type == events.RoleAssigned && strings.Contains(string(e.Data), bob.StableID)
				})
			})

			var created events.WebhookCreateOutput
			err := invoke(t, s, sessionCaller(t, ada), "adminWebhookCreate",
				events.WebhookCreateInput{URL: ts.URL + "/hook", Events: []string{events.UserCreated, events.RoleAssigned}}, &created)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(created.Secret, "whsec_") || created.Webhook.State != "active" {
				t.Fatalf("created: %+v", created)
			}
			// Over MCP (no session) the create capability is not offered:
			// the secret only reaches the admin's web page.
			if err := invoke(t, s, ada.Caller(t), "adminWebhookCreate", events.WebhookCreateInput{URL: ts.URL}, nil); capabilities.CodeOf(err) != capabilities.CodeNotFound {
				t.Fatalf("create without a session: %v", err)
			}
			// The secret is sealed at rest.
			var stored string
			if err := s.Store().DB.NewSelect().Table("webhook_subscriptions").Column("secret_sealed").Scan(t.Context(), &stored); err != nil || strings.Contains(stored, created.Secret) {
				t.Fatalf("stored secret %q, %v", stored, err)
			}

			carl := s.CreateUser(t, "carl")
			// First attempt: 500; the retry (after the 2 s backoff) succeeds.
			waitFor(t, 20*time.Second, "the retried delivery", func() bool { return len(rc.all()) >= 2 })
			reqs := rc.all()
			if reqs[0].status != 500 || reqs[1].status != 200 {
				t.Fatalf("statuses %d, %d", reqs[0].status, reqs[1].status)
			}
			if reqs[0].header.Get(events.HeaderEventID) != reqs[1].header.Get(events.HeaderEventID) {
				t.Fatal("the retry carries another event id")
			}
			r := reqs[1]
			if err := VerifyWebhook(created.Secret, r.header, r.body, time.Now()); err != nil {
				t.Fatalf("verify: %v", err)
			}
			if err := VerifyWebhook(created.Secret, r.header, r.body, time.Now().Add(10*time.Minute)); err == nil {
				t.Fatal("the verifier accepted the request replayed ten minutes later")
			}
			if err := VerifyWebhook("whsec_other", r.header, r.body, time.Now()); err == nil {
				t.Fatal("the verifier accepted another secret")
			}
			tampered := []byte(strings.Replace(string(r.body), carl.StableID, bob.StableID, 1))
			if err := VerifyWebhook(created.Secret, r.header, tampered, time.Now()); err == nil {
				t.Fatal("the verifier accepted a changed body")
			}
			var e events.Event
			if err := json.Unmarshal(r.body, &e); err != nil {
				t.Fatal(err)
			}
			var data map[string]any
			_ = json.Unmarshal(e.Data, &data)
			if e.Type != events.UserCreated || e.ID != r.header.Get(events.HeaderEventID) || e.CreatedAt.IsZero() ||
				len(data) != 1 || data["userId"] != carl.StableID {
				t.Fatalf("event %+v data %v", e, data)
			}
			if raw := string(r.body); strings.Contains(raw, carl.Email) || strings.Contains(raw, "password") {
				t.Fatalf("payload carries account content: %s", raw)
			}

			// The list shows the subscription healthy again, never the secret.
			var list events.WebhookListOutput
			if err := invoke(t, s, ada.Caller(t), "adminWebhookList", struct{}{}, &list); err != nil {
				t.Fatal(err)
			}
			if len(list.Webhooks) != 1 || list.Webhooks[0].ConsecutiveFailures != 0 || list.Webhooks[0].LastSuccessAt == nil {
				t.Fatalf("list: %+v", list)
			}
			b, _ := json.Marshal(list)
			if strings.Contains(string(b), created.Secret) {
				t.Fatal("the list shows the secret")
			}

			// Ada stops being an admin: the next event reaches the in-process
			// subscriber but not her webhook.
			if _, err := s.Accounts().Roles.RevokeAdminAsOperator(t.Context(), ada.ID); err != nil {
				t.Fatal(err)
			}
			before := len(rc.all())
			dave := s.CreateUser(t, "dave")
			waitFor(t, 10*time.Second, "the in-process subscriber", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return slices.ContainsFunc(seen, func(e events.Event) bool {
					return e.Type == events.UserCreated && strings.Contains(string(e.Data), dave.StableID)
				})
			})
			time.Sleep(1500 * time.Millisecond)
			var pending int
			if err := s.Store().DB.NewSelect().Table("outbox").ColumnExpr("count(*)").Where("topic = ?", "job:enclave.event.webhook").Scan(t.Context(), &pending); err != nil {
				t.Fatal(err)
			}
			if n := len(rc.all()); n != before || pending != 0 {
				t.Fatalf("a former admin's webhook got %d more requests (%d pending)", n-before, pending)
			}
		})
	}
}

// Repeated failures disable a subscription, and the admin sees why.
func TestWebhookDisabledAfterFailures(t *testing.T) {
	rc := &receiver{}
	ts := httptest.NewTLSServer(rc)
	defer ts.Close()
	for _, d := range enclavetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			rc.reset(1000)
			s := startWithTarget(t, string(d), ts, 2, nil)
			ada := s.CreateUser(t, "ada", capabilities.RoleAdmin)
			var created events.WebhookCreateOutput
			if err := invoke(t, s, sessionCaller(t, ada), "adminWebhookCreate", events.WebhookCreateInput{URL: ts.URL}, &created); err != nil {
				t.Fatal(err)
			}
			s.CreateUser(t, "carl")
			var list events.WebhookListOutput
			waitFor(t, 20*time.Second, "the subscription to be disabled", func() bool {
				if err := invoke(t, s, ada.Caller(t), "adminWebhookList", struct{}{}, &list); err != nil {
					t.Fatal(err)
				}
				return list.Webhooks[0].State == "disabled"
			})
			w := list.Webhooks[0]
			if !strings.Contains(w.DisabledReason, "HTTP 500") || !strings.Contains(w.DisabledReason, "2 failed") || w.DisabledAt == nil {
				t.Fatalf("disabled: %+v", w)
			}
			if n := len(rc.all()); n != 2 {
				t.Fatalf("%d attempts, want 2", n)
			}
			// Nothing more is sent to it.
			s.CreateUser(t, "dora")
			time.Sleep(1500 * time.Millisecond)
			if n := len(rc.all()); n != 2 {
				t.Fatalf("a disabled subscription got a request (%d)", n)
			}
		})
	}
}

// Admins manage only their own subscriptions; other people do not see the
// capabilities at all; targets must be https and public.
func TestWebhookCapabilitiesIsolation(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		ada := s.CreateUser(t, "ada", capabilities.RoleAdmin)
		bob := s.CreateUser(t, "bob", capabilities.RoleAdmin)
		ann := s.CreateUser(t, "ann")
		for _, bad := range []string{"http://example.com/hook", "https://127.0.0.1/hook", "https://[::1]/x", "https://169.254.169.254/latest", "https://10.1.2.3/", "https://localhost/x", "https://user:pw@example.com/", "ftp://example.com", ""} {
			err := invoke(t, s, sessionCaller(t, ada), "adminWebhookCreate", events.WebhookCreateInput{URL: bad}, nil)
			if capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
				t.Fatalf("create %q: %v", bad, err)
			}
		}
		if err := invoke(t, s, sessionCaller(t, ada), "adminWebhookCreate", events.WebhookCreateInput{URL: "https://example.com/hook", Events: []string{"Not A Type"}}, nil); capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
			t.Fatalf("bad type: %v", err)
		}
		var created events.WebhookCreateOutput
		if err := invoke(t, s, sessionCaller(t, ada), "adminWebhookCreate", events.WebhookCreateInput{URL: "https://example.com/hook"}, &created); err != nil {
			t.Fatal(err)
		}
		// Bob, another admin, neither sees nor deletes it.
		var list events.WebhookListOutput
		if err := invoke(t, s, bob.Caller(t), "adminWebhookList", struct{}{}, &list); err != nil || len(list.Webhooks) != 0 {
			t.Fatalf("bob's list: %+v %v", list, err)
		}
		if err := invoke(t, s, bob.Caller(t), "adminWebhookDelete", events.WebhookRef{ID: created.Webhook.ID}, nil); capabilities.CodeOf(err) != capabilities.CodeNotFound {
			t.Fatalf("bob deletes ada's webhook: %v", err)
		}
		// A plain user cannot call any of them.
		for _, name := range []string{"adminWebhookList", "adminWebhookDelete", "adminWebhookCreate"} {
			c := sessionCaller(t, ann)
			if err := invoke(t, s, c, name, map[string]any{"id": created.Webhook.ID, "url": "https://example.com"}, nil); capabilities.CodeOf(err) != capabilities.CodeNotFound {
				t.Fatalf("ann calls %s: %v", name, err)
			}
		}
		if err := invoke(t, s, ada.Caller(t), "adminWebhookList", struct{}{}, &list); err != nil || len(list.Webhooks) != 1 {
			t.Fatalf("ada's list: %+v %v", list, err)
		}
		if err := invoke(t, s, ada.Caller(t), "adminWebhookDelete", events.WebhookRef{ID: created.Webhook.ID}, nil); err != nil {
			t.Fatal(err)
		}
		if err := invoke(t, s, ada.Caller(t), "adminWebhookList", struct{}{}, &list); err != nil || len(list.Webhooks) != 0 {
			t.Fatalf("after delete: %+v %v", list, err)
		}
		// Deleting an admin's account removes their subscriptions.
		if err := invoke(t, s, sessionCaller(t, bob), "adminWebhookCreate", events.WebhookCreateInput{URL: "https://example.com/b"}, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Lifecycle().Delete(t.Context(), bob.Owner()); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := s.Store().DB.NewSelect().Table("webhook_subscriptions").ColumnExpr("count(*)").Scan(t.Context(), &n); err != nil || n != 0 {
			t.Fatalf("subscriptions left: %d %v", n, err)
		}
	})
}

func storageDialect(d string) storage.Dialect { return storage.Dialect(d) }
