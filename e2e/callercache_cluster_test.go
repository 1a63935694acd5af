package e2e

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/cluster"
	"github.com/enclave-mcp/enclave/storage"
)

// Two replicas on one PostgreSQL with the LISTEN/NOTIFY bus: a role
// revoked on A is refused on B within a second, although B had the
// caller cached.
func TestCallerCacheRevocationReachesOtherReplica(t *testing.T) {
	ctx := context.Background()
	a := startCached(t, storage.Postgres, enclave.Config{})
	b := a.Replica(t)
	if _, ok := b.Bus().(*cluster.Postgres); !ok {
		t.Fatalf("replica bus is %T, want the PostgreSQL bus", b.Bus())
	}
	u := a.CreateUser(t, "rhea")
	c := b.MCP(t, u.Token(t))
	if ok, err := callOK(c); !ok || err != nil {
		t.Fatalf("call on B: %v %v", ok, err)
	}
	before := b.OAuth().BearerChecks()
	if ok, err := callOK(c); !ok || err != nil || b.OAuth().BearerChecks() != before {
		t.Fatalf("second call on B: %v %v, not served from B's cache", ok, err)
	}
	start := time.Now()
	if _, err := a.Accounts().Roles.RemoveRole(ctx, u.ID, capabilities.RoleUser); err != nil {
		t.Fatal(err)
	}
	for {
		ok, err := callOK(c)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if time.Since(start) > time.Second {
			t.Fatal("B still served the revoked role a second later")
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("revocation seen on B after %v", time.Since(start))
}

// partitionBus is a bus whose link to the other replicas can be cut: while
// cut it drops what arrives and reports itself unhealthy; cutting and
// healing signal a gap, as a real bus does when its connection breaks and
// comes back.
type partitionBus struct {
	cluster.Bus
	cut   atomic.Bool
	epoch atomic.Uint64
	mu    sync.Mutex
	gaps  []func()
}

func (p *partitionBus) Subscribe(topic string, h cluster.Handler) func() {
	return p.Bus.Subscribe(topic, func(topic string, payload []byte) {
		if !p.cut.Load() {
			h(topic, payload)
		}
	})
}

func (p *partitionBus) OnGap(fn func()) func() {
	p.mu.Lock()
	p.gaps = append(p.gaps, fn)
	p.mu.Unlock()
	return p.Bus.OnGap(fn)
}

func (p *partitionBus) Healthy() bool { return !p.cut.Load() && p.Bus.Healthy() }
func (p *partitionBus) Epoch() uint64 { return p.Bus.Epoch() + p.epoch.Load() }

func (p *partitionBus) set(cut bool) {
	p.cut.Store(cut)
	p.epoch.Add(1)
	p.mu.Lock()
	gaps := append([]func(){}, p.gaps...)
	p.mu.Unlock()
	for _, g := range gaps {
		g()
	}
}

// While replica B's bus is down it serves nothing from its cache (every
// call runs the bearer check, so a role revoked on A meanwhile is refused
// at once), and what it cached before the break is gone when the bus is
// back.
func TestCallerCacheBypassedWhileBusDown(t *testing.T) {
	ctx := context.Background()
	a := startCached(t, storage.Postgres, enclave.Config{})
	var pb *partitionBus
	b := a.Replica(t, func(cfg *enclave.Config) {
		inner, err := cluster.NewPostgres(ctx, cluster.PostgresOptions{DatabaseURL: cfg.DatabaseURL, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { inner.Close() })
		pb = &partitionBus{Bus: inner}
		cfg.Bus = pb
	})
	u := a.CreateUser(t, "remy")
	c := b.MCP(t, u.Token(t))
	warm := func() {
		t.Helper()
		for range 2 {
			if ok, err := callOK(c); !ok || err != nil {
				t.Fatalf("call on B: %v %v", ok, err)
			}
		}
	}
	warm()

	// A break and a recovery: the entry cached before is not served after.
	pb.set(true)
	pb.set(false)
	before := b.OAuth().BearerChecks()
	warm()
	if b.OAuth().BearerChecks() == before {
		t.Fatal("an entry cached before a bus gap was served after it")
	}

	// While down: no call is served from the cache, so A's revocation,
	// which B never hears, is refused on B at the next call.
	pb.set(true)
	before = b.OAuth().BearerChecks()
	warm()
	if n := b.OAuth().BearerChecks() - before; n != 2 {
		t.Fatalf("%d bearer checks for two calls while the bus is down, want 2", n)
	}
	if _, err := a.Accounts().Roles.RemoveRole(ctx, u.ID, capabilities.RoleUser); err != nil {
		t.Fatal(err)
	}
	if ok, _ := callOK(c); ok {
		t.Fatal("B served a stale caller while its bus was down")
	}
	pb.set(false)
	if ok, _ := callOK(c); ok {
		t.Fatal("B served a stale caller after its bus came back")
	}
}
