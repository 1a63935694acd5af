package background

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestGoRunsUntilClosed(t *testing.T) {
	var g Group // the zero value is ready
	done := make(chan struct{})
	if !g.Go(func() { close(done) }) {
		t.Fatal("Go refused before Close")
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the function never ran")
	}
	g.Close()
	var ran atomic.Bool
	if g.Go(func() { ran.Store(true) }) {
		t.Fatal("Go accepted a function after Close")
	}
	g.Close() // a second Close has nothing to wait for
	time.Sleep(20 * time.Millisecond)
	if ran.Load() {
		t.Fatal("a function given after Close ran")
	}
}

func TestCloseWaitsForARunningFunction(t *testing.T) {
	var g Group
	started, release := make(chan struct{}), make(chan struct{})
	var ended atomic.Bool
	g.Go(func() {
		close(started)
		<-release
		time.Sleep(10 * time.Millisecond) // Close must wait past the release too
		ended.Store(true)
	})
	<-started
	closed := make(chan struct{})
	go func() {
		g.Close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("Close returned while a function was running")
	case <-time.After(50 * time.Millisecond):
	}
	// While Close waits, nothing more starts.
	deadline := time.Now().Add(10 * time.Second)
	for g.Go(func() {}) {
		if time.Now().After(deadline) {
			t.Fatal("Go still accepts functions while Close waits")
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close never returned")
	}
	if !ended.Load() {
		t.Fatal("Close returned before the running function ended")
	}
}

func TestGoFromARunningFunctionDuringCloseRunsNothing(t *testing.T) {
	var g Group
	release := make(chan struct{})
	accepted := make(chan bool, 1)
	g.Go(func() {
		<-release
		accepted <- g.Go(func() {})
	})
	closed := make(chan struct{})
	go func() { g.Close(); close(closed) }()
	// Let Close begin (it cannot end while the function waits).
	for {
		g.mu.Lock()
		c := g.closed
		g.mu.Unlock()
		if c {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	if <-accepted {
		t.Fatal("a function started from a running one after Close began")
	}
	<-closed
}

// TestGoRacingClose runs many Go calls against one Close (run it with
// -race): every function Go accepted has ended when Close returns, and
// nothing runs after it.
func TestGoRacingClose(t *testing.T) {
	for round := 0; round < 50; round++ {
		var g Group
		var ran, accepted atomic.Int64
		var callers sync.WaitGroup
		start := make(chan struct{})
		for range 8 {
			callers.Go(func() {
				<-start
				for range 200 {
					if g.Go(func() { ran.Add(1) }) {
						accepted.Add(1)
					}
				}
			})
		}
		close(start)
		time.Sleep(time.Duration(round%5) * 100 * time.Microsecond)
		g.Close()
		atClose := ran.Load()
		callers.Wait()
		if n := accepted.Load(); n != atClose {
			t.Fatalf("round %d: Go accepted %d functions but %d had run when Close returned", round, n, atClose)
		}
		if n := ran.Load(); n != atClose {
			t.Fatalf("round %d: %d functions ran after Close returned", round, n-atClose)
		}
	}
}

func TestNilGroup(t *testing.T) {
	var g *Group
	if g.Go(func() { t.Error("a nil Group ran a function") }) {
		t.Fatal("a nil Group accepted a function")
	}
	g.Close()
}
