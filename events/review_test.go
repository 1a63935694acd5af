package events_test

import (
	"context"
	"fmt"
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

// Filling the counter with client networks (an IPv6 sender holds tens of
// thousands of /64s) never stops it from counting users: a user's burst
// still fires. And denials from networks the full table cannot track are
// counted together, so the flood itself raises an alert.
func TestDenialBurstsSurviveANetworkFlood(t *testing.T) {
	d := events.NewDenialBursts(events.BurstOptions{Threshold: 5, Window: time.Hour, Cooldown: time.Hour})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var overflow []events.Burst
	for i := range 60000 {
		ip := fmt.Sprintf("2001:db8:%x:%x::1", i>>16, i&0xffff)
		for _, b := range d.Record(t0.Add(time.Duration(i)*time.Millisecond), "", ip) {
			overflow = append(overflow, b)
		}
	}
	if len(overflow) != 1 || overflow[0].Scope != "network" || overflow[0].Key != "" {
		t.Fatalf("the untracked networks raised %+v, want one network alert for the untracked subjects", overflow)
	}
	now := t0.Add(2 * time.Minute)
	var got []events.Burst
	for range 5 {
		got = d.Record(now, "victim-user", "")
	}
	if len(got) != 1 || got[0].Scope != "user" || got[0].Key != "victim-user" {
		t.Fatalf("a user's burst after a network flood fired %+v", got)
	}
}

// Concurrent creations never take an admin past MaxWebhooksPerAdmin.
func TestWebhookLimitHoldsUnderConcurrentCreates(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		ada := s.CreateUser(t, "ada", capabilities.RoleAdmin)
		c := sessionCaller(t, ada)
		for i := range events.MaxWebhooksPerAdmin - 2 {
			if err := invoke(t, s, c, "adminWebhookCreate", events.WebhookCreateInput{URL: fmt.Sprintf("https://example.com/%d", i)}, nil); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Go(func() {
				_, _, _ = s.Events().CreateWebhook(t.Context(), ada.ID, fmt.Sprintf("https://example.com/c%d", i), nil, "")
			})
		}
		wg.Wait()
		n, err := s.Store().DB.NewSelect().Table("webhook_subscriptions").Where("user_id = ?", ada.ID).Count(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if n > events.MaxWebhooksPerAdmin {
			t.Fatalf("%d subscriptions, at most %d allowed", n, events.MaxWebhooksPerAdmin)
		}
	})
}

// A webhook target that is slow to answer holds only its own deliveries:
// the rest of the post-commit work (other events, mail) goes on meanwhile.
func TestSlowWebhookTargetDoesNotStallOtherWork(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 16)
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer ts.Close()
	defer close(release)
	var mu sync.Mutex
	var seen []string
	s := startWithTarget(t, string(enclavetest.Dialects()[0]), ts, 0, func(srv *enclave.Server) error {
		return srv.Events().Subscribe("test", func(_ context.Context, e events.Event) error {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, string(e.Data))
			return nil
		}, events.UserCreated)
	})
	ada := s.CreateUser(t, "ada", capabilities.RoleAdmin)
	if err := invoke(t, s, sessionCaller(t, ada), "adminWebhookCreate",
		events.WebhookCreateInput{URL: ts.URL + "/slow", Events: []string{events.UserCreated}}, nil); err != nil {
		t.Fatal(err)
	}
	s.CreateUser(t, "carl")
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the webhook was never called")
	}
	// The target holds carl's delivery (up to the 10 s request timeout);
	// dora's event still reaches the in-process subscriber before that.
	dora := s.CreateUser(t, "dora")
	waitFor(t, 7*time.Second, "dora's event while the webhook is held", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.ContainsFunc(seen, func(d string) bool { return strings.Contains(d, dora.StableID) })
	})
}

// A target URL's path and query may hold a token (chat services' webhook
// URLs do): the list shows them on the admin's web page only; an agent
// sees the target's origin.
func TestWebhookListHidesTheTargetPathFromAgents(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		ada := s.CreateUser(t, "ada", capabilities.RoleAdmin)
		target := "https://chat.example.com/api/webhooks/123/tok_SECRETPART?thread=tok_QUERYPART"
		if err := invoke(t, s, sessionCaller(t, ada), "adminWebhookCreate", events.WebhookCreateInput{URL: target}, nil); err != nil {
			t.Fatal(err)
		}
		var list events.WebhookListOutput
		if err := invoke(t, s, ada.Caller(t), "adminWebhookList", struct{}{}, &list); err != nil {
			t.Fatal(err)
		}
		if len(list.Webhooks) != 1 || strings.Contains(list.Webhooks[0].URL, "tok_") || !strings.HasPrefix(list.Webhooks[0].URL, "https://chat.example.com/") {
			t.Fatalf("an agent's list: %+v", list.Webhooks)
		}
		if err := invoke(t, s, sessionCaller(t, ada), "adminWebhookList", struct{}{}, &list); err != nil {
			t.Fatal(err)
		}
		if len(list.Webhooks) != 1 || list.Webhooks[0].URL != target {
			t.Fatalf("the web page's list: %+v", list.Webhooks)
		}
	})
}
