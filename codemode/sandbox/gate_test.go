package sandbox

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func mustAcquire(t *testing.T, g *Gate, key string) func() {
	t.Helper()
	release, err := g.Acquire(context.Background(), key)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	return release
}

// acquireAsync starts an Acquire and returns a channel that gets its error
// (nil once it holds a slot), and the slot's release through *release.
func acquireAsync(g *Gate, key string, release *func()) <-chan error {
	done := make(chan error, 1)
	go func() {
		r, err := g.Acquire(context.Background(), key)
		*release = r
		done <- err
	}()
	return done
}

func waiting(g *Gate) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queue)
}

// waitQueued waits until n Acquires are queued.
func waitQueued(t *testing.T, g *Gate, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for waiting(g) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiting, want %d", waiting(g), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func notYet(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("Acquire returned (%v) while the gate was full", err)
	case <-time.After(20 * time.Millisecond):
	}
}

func TestGateDefaults(t *testing.T) {
	for _, test := range []struct{ total, perUser int }{{2, 1}, {4, 2}, {8, 4}, {64, 4}} {
		g := NewGate(0, test.total, 0)
		if g.perUser != test.perUser || g.wait != 10*time.Second {
			t.Errorf("total %d: %d per user, wait %v; want %d per user", test.total, g.perUser, g.wait, test.perUser)
		}
	}
	if g := NewGate(0, 0, 0); g.total < 2 {
		t.Errorf("default total %d", g.total)
	}
}

func TestGatePerKey(t *testing.T) {
	g := NewGate(2, 10, time.Minute)
	r1 := mustAcquire(t, g, "alice")
	mustAcquire(t, g, "alice")
	mustAcquire(t, g, "bob") // other keys are not held up

	var r3 func()
	done := acquireAsync(g, "alice", &r3)
	notYet(t, done)
	r1()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestGateTotal(t *testing.T) {
	g := NewGate(10, 2, time.Minute)
	r1 := mustAcquire(t, g, "a")
	mustAcquire(t, g, "b")

	var r3 func()
	done := acquireAsync(g, "c", &r3)
	notYet(t, done)
	r1()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestGateFIFO(t *testing.T) {
	g := NewGate(10, 1, time.Minute)
	release := mustAcquire(t, g, "first")

	const n = 5
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r, err := g.Acquire(context.Background(), "k")
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			r()
		})
		waitQueued(t, g, i+1) // queue them in a known order
	}
	release()
	wg.Wait()
	for i, got := range order {
		if got != i {
			t.Fatalf("granted in order %v, want 0..%d", order, n-1)
		}
	}
}

// TestGateSkipsFullKeys checks that a waiter whose key is at its bound does
// not hold up a later waiter that could run.
func TestGateSkipsFullKeys(t *testing.T) {
	g := NewGate(1, 2, time.Minute)
	ra := mustAcquire(t, g, "a")
	rb := mustAcquire(t, g, "b")

	var ra2, rc func()
	doneA := acquireAsync(g, "a", &ra2) // waits for a's slot
	waitQueued(t, g, 1)
	doneC := acquireAsync(g, "c", &rc) // waits for any slot
	waitQueued(t, g, 2)

	rb() // a slot, but a is still at its bound: c goes
	if err := <-doneC; err != nil {
		t.Fatal(err)
	}
	notYet(t, doneA)
	ra()
	if err := <-doneA; err != nil {
		t.Fatal(err)
	}
}

func TestGateBusy(t *testing.T) {
	g := NewGate(1, 1, 30*time.Millisecond)
	release := mustAcquire(t, g, "a")
	defer release()

	start := time.Now()
	_, err := g.Acquire(context.Background(), "a")
	var busy *BusyError
	if !errors.As(err, &busy) || busy.RetryAfter < time.Second {
		t.Fatalf("err = %v, want a BusyError with RetryAfter of at least 1s", err)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Errorf("gave up after %v, before the wait", d)
	}
	var re *RunError
	if !errors.As(err, &re) || re.Kind != KindBusy || re.Message == "" {
		t.Fatalf("as a RunError: %+v", re)
	}
	if waiting(g) != 0 {
		t.Error("the waiter stayed queued")
	}
}

func TestGateContext(t *testing.T) {
	g := NewGate(1, 1, time.Minute)
	release := mustAcquire(t, g, "a")
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		time.Sleep(10 * time.Millisecond)
		cancel()
	}()
	if _, err := g.Acquire(ctx, "a"); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	release()
	mustAcquire(t, g, "a") // the cancelled waiter did not take the slot
}

func TestGateReleaseIsIdempotent(t *testing.T) {
	g := NewGate(1, 1, 30*time.Millisecond)
	release := mustAcquire(t, g, "a")
	release()
	release()
	release()
	mustAcquire(t, g, "a")
	if _, err := g.Acquire(context.Background(), "b"); err == nil {
		t.Fatal("releasing three times freed more than one slot")
	}
}
