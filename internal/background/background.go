// Package background runs work in the background until its owner closes:
// once Close has begun nothing more starts, and Close returns only after
// everything already started has ended, so that none of it still writes to
// a store (or a bus) its owner closes next.
package background

import "sync"

// Group is the background work of one owner. The zero value is ready to
// use; a Group must not be copied after first use.
type Group struct {
	mu     sync.Mutex
	closed bool // Close has begun (on mu): Go starts nothing
	wg     sync.WaitGroup
}

// Go runs f on a goroutine of its own and reports true, unless Close has
// begun: then it runs nothing and reports false. A nil Group runs nothing.
func (g *Group) Go(f func()) bool {
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	// Under mu: either before Close's Wait or not at all (a WaitGroup
	// must not be added to from zero while it is being waited for).
	g.wg.Go(f)
	return true
}

// Close makes every later Go run nothing and waits for the functions Go
// started to return. It may be called more than once (each call waits), but
// not from a function the Group runs, which it would wait for forever. A
// nil Group has nothing to wait for.
func (g *Group) Close() {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.wg.Wait()
}
