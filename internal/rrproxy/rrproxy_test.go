package rrproxy_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
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
