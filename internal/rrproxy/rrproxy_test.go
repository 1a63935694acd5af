package rrproxy_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/enclave-mcp/enclave/internal/rrproxy"
)

func TestRoundRobinSkipsDeadBackendAndKeepsForwardedFor(t *testing.T) {
	var seen [2]string
	mk := func(i int) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			seen[i] = r.Header.Get("X-Forwarded-For")
			io.WriteString(w, string(rune('a'+i))+string(b))
		}))
	}
	a, b := mk(0), mk(1)
	defer a.Close()
	defer b.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := "http://" + ln.Addr().String()
	ln.Close()
	p, err := rrproxy.New([]string{a.URL, dead, b.URL})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	defer front.Close()
	var got []string
	for range 4 {
		req, _ := http.NewRequest(http.MethodPost, front.URL, strings.NewReader("x"))
		req.Header.Set("X-Forwarded-For", "10.0.0.1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got = append(got, string(body))
	}
	// The dead backend's turns go to the next live one; both live ones
	// serve, with the body forwarded.
	if all := strings.Join(got, ","); !strings.Contains(all, "ax") || !strings.Contains(all, "bx") || strings.Count(all, "x") != 4 {
		t.Fatalf("answers %v", got)
	}
	if seen[0] != "10.0.0.1, 127.0.0.1" || seen[1] != "10.0.0.1, 127.0.0.1" {
		t.Fatalf("X-Forwarded-For %q %q", seen[0], seen[1])
	}
	if h := p.Hits(); h[1] != 0 || h[0]+h[2] != 4 {
		t.Fatalf("hits %v", h)
	}
}

// Under concurrent requests every request still reaches a live backend:
// each one tries the backends in turn from its own start, so the counter
// moving under it cannot send it to the dead one twice.
func TestConcurrentRequestsNeverFailOnADeadBackend(t *testing.T) {
	live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer live.Close()
	var dead []string
	for range 3 {
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		dead = append(dead, "http://"+ln.Addr().String())
		ln.Close()
	}
	p, err := rrproxy.New(append(dead, live.URL))
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	defer front.Close()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 16 {
		wg.Go(func() {
			for range 50 {
				resp, err := http.Post(front.URL, "text/plain", strings.NewReader("x"))
				if err != nil {
					failed.Add(1)
					continue
				}
				if resp.StatusCode != http.StatusOK {
					failed.Add(1)
				}
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d of 800 requests failed with one live backend", n)
	}
}
