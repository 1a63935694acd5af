//go:build nats || full

package cluster_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/cluster"
)

// natsServer starts nats-server on a free port (the test skips when the
// binary is not installed; CI installs it) and returns its URL and a func
// that stops it.
func natsServer(t *testing.T, port int) (string, func()) {
	t.Helper()
	url, _, stop := startNATS(t, port)
	return url, stop
}

// startNATS is natsServer that also returns the server's process.
func startNATS(t *testing.T, port int) (string, *exec.Cmd, func()) {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil && os.Getenv("ENCLAVE_TEST_NATS") == "1" {
		t.Fatalf("ENCLAVE_TEST_NATS=1 but nats-server is not installed: %v", err)
	}
	if err != nil {
		t.Skip("nats-server not installed (set ENCLAVE_TEST_NATS=1 to require it)")
	}
	if port == 0 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
	}
	cmd := exec.Command(bin, "-a", "127.0.0.1", "-p", fmt.Sprint(port))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop := func() {
		_ = cmd.Process.Kill()
		<-done
	}
	t.Cleanup(stop)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("nats-server did not start")
		}
	}
	return "nats://" + addr, cmd, stop
}

func TestNATSBus(t *testing.T) {
	url, stop := natsServer(t, 0)
	open := func(u string) cluster.Bus {
		b, err := cluster.Open(context.Background(), cluster.OpenOptions{BusURL: u, DatabaseURL: "sqlite:///x"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	a, b := open(url), open(url)
	other := open(url + "?subject=another.deployment")
	if _, ok := a.(*cluster.NATS); !ok {
		t.Fatalf("nats:// bus URL gave %T", a)
	}
	inA, inB, inOther := newInbox(), newInbox(), newInbox()
	a.Subscribe("mcp.session.end", inA.handler)
	b.Subscribe("mcp.session.end", inB.handler)
	other.Subscribe("mcp.session.end", inOther.handler)
	if err := a.Publish(context.Background(), "mcp.session.end", []byte("h1")); err != nil {
		t.Fatal(err)
	}
	inA.want(t, "mcp.session.end=h1")
	inB.want(t, "mcp.session.end=h1")
	inA.none(t, 100*time.Millisecond)
	inOther.none(t, 0)

	// The server goes away: a gap, unhealthy; it comes back: a gap, healthy,
	// and messages flow again.
	gaps := make(chan bool, 10)
	b.OnGap(func() { gaps <- b.Healthy() })
	stop()
	select {
	case healthy := <-gaps:
		if healthy {
			t.Fatal("gap on disconnect came with Healthy() true")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no gap when the NATS server stopped")
	}
	port := strings.TrimPrefix(url, "nats://127.0.0.1:")
	var p int
	fmt.Sscan(port, &p)
	natsServer(t, p)
	select {
	case healthy := <-gaps:
		if !healthy {
			t.Fatal("gap on reconnect came with Healthy() false")
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no reconnection to the restarted NATS server")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		a.Publish(context.Background(), "mcp.session.end", []byte("h2"))
		select {
		case got := <-inB.ch:
			if got != "mcp.session.end=h2" {
				t.Fatalf("got %q", got)
			}
			return
		case <-time.After(200 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatal("no message after the reconnection")
			}
		}
	}
}
