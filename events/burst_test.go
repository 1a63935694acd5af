package events_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/events"
)

func TestDenialBurstsCounting(t *testing.T) {
	d := events.NewDenialBursts(events.BurstOptions{Threshold: 3, Window: time.Minute, Cooldown: 10 * time.Minute})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// Two denials, then one after the window: still under the threshold.
	d.Record(t0, "u1", "203.0.113.7")
	d.Record(t0.Add(10*time.Second), "u1", "198.51.100.1")
	if got := d.Record(t0.Add(75*time.Second), "u1", "192.0.2.1"); len(got) != 0 {
		t.Fatalf("fired with denials outside the window: %+v", got)
	}
	// Three inside the window fire, once per subject.
	d.Record(t0.Add(80*time.Second), "u1", "")
	got := d.Record(t0.Add(85*time.Second), "u1", "")
	if len(got) != 1 || got[0].Scope != "user" || got[0].Key != "u1" || got[0].Count != 3 {
		t.Fatalf("fired %+v", got)
	}
	// Cooldown: more denials stay quiet until it ends.
	for i := range 10 {
		if got := d.Record(t0.Add(90*time.Second+time.Duration(i)*time.Second), "u1", ""); len(got) != 0 {
			t.Fatalf("fired again in the cooldown: %+v", got)
		}
	}
	if got := d.Record(t0.Add(86*time.Second+10*time.Minute), "u1", ""); len(got) != 0 {
		t.Fatalf("fired after the cooldown without a new burst: %+v", got)
	}
	d.Record(t0.Add(87*time.Second+10*time.Minute), "u1", "")
	if got := d.Record(t0.Add(88*time.Second+10*time.Minute), "u1", ""); len(got) != 1 {
		t.Fatalf("a new burst after the cooldown did not fire: %+v", got)
	}

	// Networks: IPv4 /24 and IPv6 /64 group addresses; other users count
	// for the network.
	n := events.NewDenialBursts(events.BurstOptions{Threshold: 3, Window: time.Minute})
	n.Record(t0, "a", "203.0.113.7")
	n.Record(t0, "b", "203.0.113.200")
	got = n.Record(t0, "c", "203.0.113.9")
	if len(got) != 1 || got[0].Scope != "network" || got[0].Key != "203.0.113.0/24" {
		t.Fatalf("network burst %+v", got)
	}
	n.Record(t0, "", "2001:db8:1:2::1")
	n.Record(t0, "", "2001:db8:1:2:ffff::9")
	if got := n.Record(t0, "", "2001:db8:1:3::1"); len(got) != 0 {
		t.Fatalf("another /64 counted together: %+v", got)
	}
	if got := n.Record(t0, "", "2001:db8:1:2::/64"); len(got) != 1 || got[0].Key != "2001:db8:1:2::/64" {
		t.Fatalf("IPv6 /64 burst %+v", got)
	}
	if events.Network("not an ip") != "" || events.Network("::ffff:10.0.0.9") != "10.0.0.0/24" {
		t.Fatal("Network")
	}
}

// Denials at the choke point, over MCP, raise one security.denial_burst
// per subject (the user and their network), naming them only by hash.
func TestDenialBurstEvent(t *testing.T) {
	var got collector
	enclavetest.Each(t, enclavetest.Options{
		Config: enclave.Config{DenialBurst: events.BurstOptions{Threshold: 3, Window: time.Hour}},
		Setup: func(srv *enclave.Server) error {
			got = collector{}
			return srv.Events().Subscribe("alerts", got.add, events.SecurityDenialBurst)
		},
	}, func(t *testing.T, s *enclavetest.Server) {
		ann := s.CreateUser(t, "ann")
		mcp := ann.MCP(t)
		for range 6 {
			if res, err := mcp.Call("adminUserList", map[string]any{}); err == nil && !res.IsError {
				t.Fatal("a plain user listed accounts")
			}
		}
		waitFor(t, 10*time.Second, "two alerts", func() bool { return len(got.types()) >= 2 })
		time.Sleep(500 * time.Millisecond)
		got.mu.Lock()
		seen := append([]events.Event(nil), got.seen...)
		got.mu.Unlock()
		if len(seen) != 2 {
			t.Fatalf("%d alerts, want one per subject (cooldown): %v", len(seen), got.types())
		}
		scopes := map[string]bool{}
		for _, e := range seen {
			var a events.BurstAlert
			if err := json.Unmarshal(e.Data, &a); err != nil {
				t.Fatal(err)
			}
			scopes[a.Scope] = true
			if a.Count != 3 || a.Threshold != 3 || a.WindowSeconds != 3600 || a.ObservedAt.IsZero() || len(a.Subject) != 32 {
				t.Fatalf("alert %+v", a)
			}
			raw := string(e.Data)
			for _, leak := range []string{ann.StableID, ann.Email, ann.Username, "127.0.0"} {
				if strings.Contains(raw, leak) {
					t.Fatalf("the alert names %q: %s", leak, raw)
				}
			}
		}
		if !scopes["user"] || !scopes["network"] {
			t.Fatalf("scopes %v", scopes)
		}
	})
}
