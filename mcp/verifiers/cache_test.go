package verifiers_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/cluster"
	"github.com/enclave-mcp/enclave/mcp/verifiers"
	"github.com/enclave-mcp/enclave/oauth"
)

// hungBus is a bus whose publications never get through: each waits for
// its context. It counts those in flight and made.
type hungBus struct {
	*cluster.LoopbackBus
	attempts, inFlight atomic.Int32
}

func (b *hungBus) Publish(ctx context.Context, _ string, _ []byte) error {
	b.attempts.Add(1)
	b.inFlight.Add(1)
	defer b.inFlight.Add(-1)
	<-ctx.Done()
	return ctx.Err()
}

type callerChanges struct{ hook func(context.Context, int64) }

func (c *callerChanges) OnCallerChange(f func(context.Context, int64)) { c.hook = f }

// stop (called by the server's Close before the bus and the database
// close) ends the retries of an invalidation that failed to publish and
// waits for them: nothing is published once it has returned.
func TestStopEndsTheRetriesOfAFailedInvalidation(t *testing.T) {
	bus := &hungBus{LoopbackBus: cluster.NewLoopback().Join()}
	changes := &callerChanges{}
	_, stop, err := verifiers.NewCallerCache(verifiers.CacheConfig{TTL: time.Minute, Bus: bus, Accounts: changes, OAuth: &oauth.Server{}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { // the first attempt is bounded (seconds): let it fail
		changes.hook(context.Background(), 7)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the invalidation still waits for the hung bus")
	}
	deadline := time.Now().Add(5 * time.Second)
	for bus.attempts.Load() < 2 || bus.inFlight.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no retry in flight after %d attempts", bus.attempts.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	if n := bus.inFlight.Load(); n != 0 {
		t.Fatalf("stop returned with %d publications in flight", n)
	}
	attempts := bus.attempts.Load()
	time.Sleep(300 * time.Millisecond)
	if n := bus.attempts.Load(); n != attempts {
		t.Fatalf("%d publications after stop returned", n-attempts)
	}
}
