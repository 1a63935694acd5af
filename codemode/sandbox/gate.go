package sandbox

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"time"
)

// Gate bounds concurrent runs: at most perUser for one key and total across
// keys. Further runs wait, first come first served, up to the gate's wait,
// then fail with a *BusyError (a RunError of Kind "busy" through errors.As).
//
// First come first served holds among the waiters that could run: a waiter
// whose key is at its perUser bound does not hold up waiters for other keys.
// A run holds its slot until its engine has ended: give the release
// function to Run as Program.Release, and an engine still running after
// its Run returned (see Stuck) keeps its user's slot, so one user's stuck
// engines never take more than that user's bound.
type Gate struct {
	perUser, total int
	wait           time.Duration

	mu      sync.Mutex
	running int
	perKey  map[string]int
	queue   []*waiter
	hold    time.Duration // moving average of how long a run holds its slot
}

type waiter struct {
	key     string
	ready   chan struct{} // closed once granted
	granted bool
}

// NewGate returns a gate. Zero or negative arguments take the defaults:
// total 2*GOMAXPROCS (at least 2), perUser 4 but at most half of total (at
// least 1), so that one key never holds every slot, and wait 10 s.
func NewGate(perUser, total int, wait time.Duration) *Gate {
	if total <= 0 {
		total = max(2, 2*runtime.GOMAXPROCS(0))
	}
	if perUser <= 0 {
		perUser = min(4, max(1, total/2))
	}
	if wait <= 0 {
		wait = 10 * time.Second
	}
	return &Gate{perUser: perUser, total: total, wait: wait, perKey: map[string]int{}}
}

// Acquire waits for a slot for key and returns the function that gives it
// back, which may be called more than once. The error is a *BusyError when
// no slot freed up within the gate's wait, or ctx.Err().
func (g *Gate) Acquire(ctx context.Context, key string) (release func(), err error) {
	g.mu.Lock()
	if g.fits(key) {
		g.take(key)
		g.mu.Unlock()
		return g.releaser(key), nil
	}
	w := &waiter{key: key, ready: make(chan struct{})}
	g.queue = append(g.queue, w)
	g.mu.Unlock()

	timer := time.NewTimer(g.wait)
	defer timer.Stop()
	select {
	case <-w.ready:
		return g.releaser(key), nil
	case <-timer.C:
		err = &BusyError{RetryAfter: g.retryAfter()}
	case <-ctx.Done():
		err = ctx.Err()
	}

	g.mu.Lock()
	granted := w.granted
	if !granted {
		g.queue = slices.DeleteFunc(g.queue, func(q *waiter) bool { return q == w })
	}
	g.mu.Unlock()
	switch {
	case !granted:
		return nil, err
	case ctx.Err() != nil:
		// Granted as the caller gave up: pass the slot on.
		g.releaser(key)()
		return nil, ctx.Err()
	default:
		// Granted as the wait ran out: take it.
		return g.releaser(key), nil
	}
}

// fits reports whether a run for key may start now. g.mu is held.
func (g *Gate) fits(key string) bool {
	return g.running < g.total && g.perKey[key] < g.perUser
}

func (g *Gate) take(key string) {
	g.running++
	g.perKey[key]++
}

func (g *Gate) releaser(key string) func() {
	start := time.Now()
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.running--
			if g.perKey[key]--; g.perKey[key] == 0 {
				delete(g.perKey, key)
			}
			g.observe(time.Since(start))
			g.grant()
		})
	}
}

// grant starts, in order, every waiter that fits. g.mu is held.
func (g *Gate) grant() {
	for i := 0; i < len(g.queue) && g.running < g.total; {
		w := g.queue[i]
		if !g.fits(w.key) {
			i++
			continue
		}
		g.take(w.key)
		w.granted = true
		close(w.ready)
		g.queue = slices.Delete(g.queue, i, i+1)
	}
}

// observe folds how long a run held its slot into the average that
// RetryAfter is based on. g.mu is held.
func (g *Gate) observe(d time.Duration) {
	if g.hold == 0 {
		g.hold = d
		return
	}
	g.hold = (7*g.hold + d) / 8
}

// retryAfter is about how long one run holds a slot, between 1 and 30 s.
func (g *Gate) retryAfter() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return min(max(g.hold, time.Second), 30*time.Second)
}
