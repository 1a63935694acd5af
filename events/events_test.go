package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/events"
)

type collector struct {
	mu   sync.Mutex
	seen []events.Event
}

func (c *collector) add(_ context.Context, e events.Event) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = append(c.seen, e)
	return nil
}

func (c *collector) find(typ, contains string) (events.Event, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.IndexFunc(c.seen, func(e events.Event) bool {
		return e.Type == typ && strings.Contains(string(e.Data), contains)
	})
	if i < 0 {
		return events.Event{}, false
	}
	return c.seen[i], true
}

func (c *collector) types() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, e := range c.seen {
		out = append(out, e.Type)
	}
	return out
}

// Every account change publishes its event in its own transaction, with
// identifiers and the changed field only; an embedder's event published in
// a transaction that rolls back is never delivered, one that commits is.
func TestAccountChangesPublishEvents(t *testing.T) {
	var all, roles collector
	enclavetest.Each(t, enclavetest.Options{Setup: func(srv *enclave.Server) error {
		all, roles = collector{}, collector{}
		return errors.Join(srv.Events().Subscribe("all", all.add),
			srv.Events().Subscribe("roles", roles.add, events.RoleAssigned, events.RoleRemoved))
	}}, func(t *testing.T, s *enclavetest.Server) {
		ctx := t.Context()
		ada := s.CreateUser(t, "ada", capabilities.RoleAdmin)
		ann := s.CreateUser(t, "ann")
		acc := s.Accounts()
		if _, err := acc.Roles.AssignRole(ctx, ann.ID, capabilities.RoleUser); err != nil { // already held: no event
			t.Fatal(err)
		}
		if _, err := s.Store().DB.NewRaw("INSERT INTO roles (name, created_at) VALUES ('editor', ?)", time.Now().UTC()).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := acc.Roles.AssignRole(ctx, ann.ID, "editor"); err != nil {
			t.Fatal(err)
		}
		if _, err := acc.Roles.RemoveRole(ctx, ann.ID, "editor"); err != nil {
			t.Fatal(err)
		}
		if _, err := acc.Lifecycle.Suspend(ctx, ann.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := acc.Lifecycle.Unsuspend(ctx, ann.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Lifecycle().Delete(ctx, ann.Owner()); err != nil {
			t.Fatal(err)
		}
		// An embedder's own events: one rolled back, one committed.
		boom := errors.New("boom")
		err := s.Store().RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
			if _, err := s.Events().Publish(ctx, tx, "invoice.paid", map[string]string{"invoice": "rolled-back"}); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatal(err)
		}
		err = s.Store().RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
			_, err := s.Events().Publish(ctx, tx, "invoice.paid", map[string]string{"invoice": "committed"})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Events().Publish(ctx, s.Store().DB, "Not.A.Type", nil); err == nil {
			t.Fatal("an invalid type was published")
		}

		want := []struct{ typ, role string }{
			{events.UserCreated, ""}, {events.RoleAssigned, "editor"}, {events.RoleRemoved, "editor"},
			{events.UserSuspended, ""}, {events.UserUnsuspended, ""}, {events.UserDeleted, ""},
		}
		for _, w := range want {
			waitFor(t, 10*time.Second, w.typ, func() bool { _, ok := all.find(w.typ, ann.StableID); return ok })
			e, _ := all.find(w.typ, ann.StableID)
			var data map[string]string
			if err := json.Unmarshal(e.Data, &data); err != nil {
				t.Fatal(err)
			}
			wantData := map[string]string{"userId": ann.StableID}
			if w.role != "" {
				wantData["role"] = w.role
			}
			if len(data) != len(wantData) || data["userId"] != ann.StableID || data["role"] != w.role {
				t.Fatalf("%s data %v, want %v", w.typ, data, wantData)
			}
			if !strings.HasPrefix(e.ID, "evt_") || e.CreatedAt.IsZero() {
				t.Fatalf("event %+v", e)
			}
		}
		if _, ok := all.find(events.RoleAssigned, ada.StableID); !ok {
			t.Fatal("the operator's admin grant published no role.assigned")
		}
		waitFor(t, 10*time.Second, "the committed embedder event", func() bool { _, ok := all.find("invoice.paid", "committed"); return ok })
		time.Sleep(500 * time.Millisecond)
		if _, ok := all.find("invoice.paid", "rolled-back"); ok {
			t.Fatal("an event of a rolled-back transaction was delivered")
		}
		// The filtered subscriber got role events only, and no role.assigned
		// for the role ann already held.
		for _, typ := range roles.types() {
			if typ != events.RoleAssigned && typ != events.RoleRemoved {
				t.Fatalf("the role subscriber got %s", typ)
			}
		}
		n := 0
		for _, typ := range all.types() {
			if typ == events.RoleAssigned {
				n++
			}
		}
		if n != 2 { // ada's admin, ann's editor
			t.Fatalf("%d role.assigned events, want 2: %v", n, all.types())
		}
	})
}

// A subscriber that fails is retried on its own; another subscriber of the
// same event gets it once.
func TestSubscriberRetryIsIsolated(t *testing.T) {
	var ok collector
	var mu sync.Mutex
	fails := 0
	enclavetest.Each(t, enclavetest.Options{Setup: func(srv *enclave.Server) error {
		ok, fails = collector{}, 0
		return errors.Join(
			srv.Events().Subscribe("ok", ok.add, "thing.happened"),
			srv.Events().Subscribe("flaky", func(context.Context, events.Event) error {
				mu.Lock()
				defer mu.Unlock()
				fails++
				if fails == 1 {
					return errors.New("not yet")
				}
				return nil
			}, "thing.happened"))
	}}, func(t *testing.T, s *enclavetest.Server) {
		if _, err := s.Events().PublishNow(t.Context(), "thing.happened", map[string]int{"n": 1}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 15*time.Second, "the flaky subscriber's retry", func() bool { mu.Lock(); defer mu.Unlock(); return fails >= 2 })
		time.Sleep(300 * time.Millisecond)
		if n := len(ok.types()); n != 1 {
			t.Fatalf("the healthy subscriber got the event %d times", n)
		}
	})
}

func TestSubscribeValidates(t *testing.T) {
	s := enclavetest.Start(t, enclavetest.Options{})
	nop := func(context.Context, events.Event) error { return nil }
	if err := s.Events().Subscribe("Bad Name", nop); err == nil {
		t.Fatal("bad name accepted")
	}
	if err := s.Events().Subscribe("x", nop, "nodot"); err == nil {
		t.Fatal("bad type accepted")
	}
	if err := s.Events().Subscribe("x", nil); err == nil {
		t.Fatal("nil handler accepted")
	}
}
