package events_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/events"
)

// pathCounter counts requests per path and answers 500 on the paths in
// fail, 200 elsewhere.
type pathCounter struct {
	mu   sync.Mutex
	fail map[string]bool
	hits map[string]int
}

func (p *pathCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.hits[r.URL.Path]++
	fail := p.fail[r.URL.Path]
	p.mu.Unlock()
	if fail {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (p *pathCounter) count(path string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hits[path]
}

// A delivery waiting for its retry belongs to the subscription chosen at
// dispatch. Once that subscription is deleted, the retry goes nowhere, even
// when a new subscription (another admin's, with another event filter)
// takes the deleted one's row id, as SQLite hands out the highest rowid
// again after its row is deleted.
func TestWebhookRetryNeverReachesAReusedSubscriptionID(t *testing.T) {
	pc := &pathCounter{fail: map[string]bool{"/a": true}, hits: map[string]int{}}
	ts := httptest.NewTLSServer(pc)
	defer ts.Close()
	for _, d := range enclavetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			pc.mu.Lock()
			pc.hits = map[string]int{}
			pc.mu.Unlock()
			s := startWithTarget(t, string(d), ts, 0, nil)
			ada := s.CreateUser(t, "ada", capabilities.RoleAdmin)
			bob := s.CreateUser(t, "bob", capabilities.RoleAdmin)
			var a events.WebhookCreateOutput
			if err := invoke(t, s, sessionCaller(t, ada), "adminWebhookCreate",
				events.WebhookCreateInput{URL: ts.URL + "/a", Events: []string{events.UserCreated}}, &a); err != nil {
				t.Fatal(err)
			}
			s.CreateUser(t, "carl")
			// The first attempt fails; the retry waits its backoff (2 s).
			waitFor(t, 10*time.Second, "the first attempt", func() bool { return pc.count("/a") >= 1 })
			if err := invoke(t, s, ada.Caller(t), "adminWebhookDelete", events.WebhookRef{ID: a.Webhook.ID}, nil); err != nil {
				t.Fatal(err)
			}
			var b events.WebhookCreateOutput
			if err := invoke(t, s, sessionCaller(t, bob), "adminWebhookCreate",
				events.WebhookCreateInput{URL: ts.URL + "/b", Events: []string{events.RoleRemoved}}, &b); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 20*time.Second, "the waiting delivery to be handled", func() bool {
				var pending int
				if err := s.Store().DB.NewSelect().Table("outbox").ColumnExpr("count(*)").
					Where("topic = ? AND dead_at IS NULL", "job:enclave.event.webhook").Scan(t.Context(), &pending); err != nil {
					t.Fatal(err)
				}
				return pending == 0
			})
			if n := pc.count("/b"); n != 0 {
				t.Fatalf("bob's new subscription (only role.removed) received %d request(s) of ada's deleted subscription", n)
			}
		})
	}
}
