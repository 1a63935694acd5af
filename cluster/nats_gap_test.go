//go:build nats || full

package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/cluster"
	"github.com/enclave-mcp/enclave/internal/callercache"
)

// cacheOn attaches a caller cache to b, as the server does.
func cacheOn(t *testing.T, b cluster.Bus) *callercache.Cache[string] {
	t.Helper()
	c := callercache.New[string](callercache.Options{TTL: time.Hour})
	t.Cleanup(c.Attach(cacheBus{b}))
	return c
}

type cacheBus struct{ cluster.Bus }

func (b cacheBus) Subscribe(topic string, h func(topic string, payload []byte)) func() {
	return b.Bus.Subscribe(topic, cluster.Handler(h))
}

// cached stores a value for token and reports whether the cache serves it
// back: false while the cache is bypassed.
func cached(c *callercache.Cache[string], token string) bool {
	c.Put(c.Begin(), token, 7, "g", time.Time{}, "caller")
	v, ok := c.Get(token)
	return ok && v == "caller"
}

func newNATS(t *testing.T, o cluster.NATSOptions) *cluster.NATS {
	t.Helper()
	if o.Logger == nil {
		o.Logger = quiet()
	}
	b, err := cluster.NewNATS(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
	}
}

// gapLog records every gap of a bus with the health it came with.
func gapLog(b cluster.Bus) chan bool {
	ch := make(chan bool, 100)
	b.OnGap(func() { ch <- b.Healthy() })
	return ch
}

func wantGap(t *testing.T, gaps chan bool, healthy bool, what string) {
	t.Helper()
	select {
	case h := <-gaps:
		if h != healthy {
			t.Fatalf("%s: gap with Healthy() %v, want %v", what, h, healthy)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("%s: no gap", what)
	}
}

// Messages the client drops because the handlers do not keep up (a slow
// consumer) are a gap: the caller cache is flushed and bypassed until the
// handlers keep up again.
func TestNATSSlowConsumerIsAGap(t *testing.T) {
	url, _ := natsServer(t, 0)
	a := newNATS(t, cluster.NATSOptions{URL: url})
	b := newNATS(t, cluster.NATSOptions{URL: url, PendingMessages: 4})
	cache := cacheOn(t, b)
	if !cached(cache, "tok") {
		t.Fatal("a healthy bus's cache does not serve")
	}
	gaps := gapLog(b)
	release := make(chan struct{})
	var got atomic.Int64
	b.Subscribe("t", func(string, []byte) {
		<-release // the first message blocks the receiving goroutine
		got.Add(1)
	})
	for i := range 100 {
		if err := a.Publish(context.Background(), "t", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	wantGap(t, gaps, false, "slow consumer")
	if b.Healthy() {
		t.Fatal("bus healthy while it drops messages")
	}
	if _, ok := cache.Get("tok"); ok {
		t.Fatal("the cache served an entry from before the drop")
	}
	if cached(cache, "tok2") {
		t.Fatal("the cache serves while its bus drops messages")
	}
	close(release)
	wantGap(t, gaps, true, "handlers keep up again")
	if n := got.Load(); n >= 100 {
		t.Fatalf("%d of 100 messages delivered: nothing was dropped, the test proves nothing", n)
	}
	if !cached(cache, "tok3") {
		t.Fatal("the cache does not serve after the bus recovered")
	}
	// Messages flow again.
	in := newInbox()
	b.Subscribe("u", in.handler)
	if err := a.Publish(context.Background(), "u", []byte("after")); err != nil {
		t.Fatal(err)
	}
	in.want(t, "u=after")
}

// gate forwards TCP connections to a NATS server while open; closed, it
// cuts them and refuses new ones (a replica's own link to the server).
type gate struct {
	ln     net.Listener
	target string
	open   atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func newGate(t *testing.T, target string) *gate {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{ln: ln, target: target}
	g.open.Store(true)
	t.Cleanup(func() { ln.Close(); g.shut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !g.open.Load() {
				c.Close()
				continue
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			g.mu.Lock()
			g.conns = append(g.conns, c, s)
			g.mu.Unlock()
			pipe := func(dst, src net.Conn) { _, _ = io.Copy(dst, src); dst.Close(); src.Close() }
			go pipe(c, s)
			go pipe(s, c)
		}
	}()
	return g
}

func (g *gate) url() string { return "nats://" + g.ln.Addr().String() }

func (g *gate) shut() {
	g.open.Store(false)
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range g.conns {
		c.Close()
	}
	g.conns = nil
}

// A publication while the server is down is not sent: Publish says so,
// the bus is unhealthy (its cache bypassed) and sends it again once it is
// connected, so a replica that was listening all along receives it.
func TestNATSPublishDuringOutageIsRetried(t *testing.T) {
	url, stop := natsServer(t, 0)
	g := newGate(t, strings.TrimPrefix(url, "nats://"))
	a := newNATS(t, cluster.NATSOptions{URL: g.url(), FlushTimeout: 500 * time.Millisecond})
	b := newNATS(t, cluster.NATSOptions{URL: url})
	cacheA := cacheOn(t, a)
	inB := newInbox()
	b.Subscribe("t", inB.handler)
	if err := a.Publish(context.Background(), "t", []byte("before")); err != nil {
		t.Fatal(err)
	}
	inB.want(t, "t=before")
	gapsA := gapLog(a)

	stop()
	wantGap(t, gapsA, false, "server stopped")
	g.shut()      // A stays cut off until the test lets it reconnect
	for range 2 { // the same message twice is kept once
		err := a.Publish(context.Background(), "t", []byte("during"))
		if !errors.Is(err, cluster.ErrUnconfirmed) {
			t.Fatalf("publish while the server is down: %v, want ErrUnconfirmed", err)
		}
	}
	if n := a.Retrying(); n != 1 {
		t.Fatalf("%d messages kept for retry, want 1", n)
	}
	if a.Healthy() || cached(cacheA, "tok") {
		t.Fatal("bus healthy (cache serving) with a message not sent")
	}

	port := url[strings.LastIndex(url, ":")+1:]
	var p int
	fmt.Sscan(port, &p)
	natsServer(t, p)
	waitFor(t, "B reconnected", 15*time.Second, b.Healthy)
	inB.none(t, 300*time.Millisecond) // not sent while A is cut off

	g.open.Store(true)
	inB.want(t, "t=during")
	waitFor(t, "A healthy after sending what it kept", 15*time.Second, func() bool { return a.Healthy() && a.Retrying() == 0 })
	if !cached(cacheA, "tok") {
		t.Fatal("cache bypassed after the bus recovered")
	}
	inB.none(t, 200*time.Millisecond) // sent once
}

// A publication the server does not confirm within FlushTimeout (it is
// alive but not answering) is not counted as sent either, and goes through
// once the server answers again.
func TestNATSUnconfirmedPublishIsRetried(t *testing.T) {
	url, cmd, _ := startNATS(t, 0)
	a := newNATS(t, cluster.NATSOptions{URL: url, FlushTimeout: 300 * time.Millisecond})
	b := newNATS(t, cluster.NATSOptions{URL: url})
	cacheA := cacheOn(t, a)
	inB := newInbox()
	b.Subscribe("t", inB.handler)
	gapsA := gapLog(a)

	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "server stopped", 5*time.Second, func() bool {
		// /proc/PID/stat: "pid (comm) STATE ..."; T is stopped.
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
		i := strings.LastIndexByte(string(b), ')')
		return err == nil && i > 0 && len(b) > i+2 && b[i+2] == 'T'
	})
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	err := a.Publish(context.Background(), "t", []byte("stalled"))
	if !errors.Is(err, cluster.ErrUnconfirmed) {
		t.Fatalf("publish to a server that does not answer: %v, want ErrUnconfirmed", err)
	}
	wantGap(t, gapsA, false, "unconfirmed publish")
	if a.Healthy() || cached(cacheA, "tok") {
		t.Fatal("bus healthy (cache serving) with an unconfirmed message")
	}
	// Published meanwhile: queued behind the first.
	if err := a.Publish(context.Background(), "t", []byte("second")); !errors.Is(err, cluster.ErrUnconfirmed) {
		t.Fatalf("publish behind an unconfirmed one: %v, want ErrUnconfirmed", err)
	}
	if n := a.Retrying(); n != 2 {
		t.Fatalf("%d messages kept, want 2", n)
	}
	resume()
	// Both arrive, in order (the first perhaps more than once: the server
	// may have had it all along).
	var seen []string
	for len(seen) == 0 || seen[len(seen)-1] != "t=second" {
		select {
		case m := <-inB.ch:
			seen = append(seen, m)
		case <-time.After(15 * time.Second):
			t.Fatalf("after resuming the server, B received %q", seen)
		}
	}
	if seen[0] != "t=stalled" {
		t.Fatalf("B received %q: want the first message first", seen)
	}
	waitFor(t, "A healthy after the retry", 15*time.Second, func() bool { return a.Healthy() && a.Retrying() == 0 })
	wantGap(t, gapsA, true, "recovered")
	if !cached(cacheA, "tok") {
		t.Fatal("cache bypassed after the bus recovered")
	}
}
