package egress_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/internal/egress"
)

func TestPublic(t *testing.T) {
	for addr, want := range map[string]bool{
		"8.8.8.8":             true,
		"1.1.1.1":             true,
		"2606:4700::1111":     true,
		"127.0.0.1":           false,
		"127.8.9.10":          false,
		"10.1.2.3":            false,
		"172.16.0.1":          false,
		"172.31.255.255":      false,
		"192.168.1.1":         false,
		"169.254.169.254":     false, // cloud metadata
		"100.100.100.200":     false, // metadata in shared space
		"100.64.0.1":          false,
		"0.0.0.0":             false,
		"0.1.2.3":             false,
		"255.255.255.255":     false,
		"224.0.0.1":           false,
		"192.0.2.5":           false,
		"198.18.0.1":          false,
		"::":                  false,
		"::1":                 false,
		"fe80::1":             false,
		"fc00::1":             false,
		"fd00:ec2::254":       false, // metadata over IPv6
		"ff02::1":             false,
		"::ffff:127.0.0.1":    false, // mapped
		"::ffff:8.8.8.8":      true,
		"64:ff9b::7f00:1":     false, // NAT64 of 127.0.0.1
		"64:ff9b::808:808":    true,  // NAT64 of 8.8.8.8
		"2002:7f00:1::":       false, // 6to4 of 127.0.0.1
		"2002:a00:1::":        false, // 6to4 of 10.0.0.1
		"2002:808:808::":      true,
		"2001:db8::1":         false,
		"2001:0:4136:e378::1": false, // Teredo
		"::127.0.0.1":         false, // IPv4-compatible
		// Local-use NAT64 (RFC 8215) is not globally reachable, and the
		// IPv4 address sits where the local prefix length puts it (here
		// a /64: bits 72-103, 127.0.0.1), not always in the last 32 bits.
		"64:ff9b:1:0:7f:0:108:808": false,
		"64:ff9b:1::808:808":       false,
		"::ffff:0:7f00:1":          false, // IPv4-translated (SIIT)
		"2001:2::1":                false, // benchmarking
		"3fff::1":                  false, // documentation (RFC 9637)
		"5f00::1":                  false, // SRv6 SIDs
		"100:0:0:1::1":             false, // dummy prefix
	} {
		if got := egress.Public(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Public(%s) = %v, want %v", addr, got, want)
		}
	}
}

func tlsServer(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func trusting(srv *httptest.Server, o egress.Options) *http.Client {
	o.TLSConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig
	return egress.NewClient(o)
}

func TestLoopbackRefusedAtConnect(t *testing.T) {
	hits := 0
	srv := tlsServer(t, func(w http.ResponseWriter, r *http.Request) { hits++ })
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "https://"))
	c := trusting(srv, egress.Options{})
	// A literal address and a name that resolves to loopback are both
	// refused: the check is on the address dialled, not on the URL.
	for _, u := range []string{srv.URL, "https://localhost:" + port + "/"} {
		_, err := c.Get(u)
		if !errors.Is(err, egress.ErrForbiddenAddress) {
			t.Errorf("GET %s: err = %v, want ErrForbiddenAddress", u, err)
		}
	}
	if hits != 0 {
		t.Fatalf("the server was reached %d times", hits)
	}
	resp, err := trusting(srv, egress.Options{AllowPrivate: true}).Get(srv.URL)
	if err != nil {
		t.Fatalf("AllowPrivate: %v", err)
	}
	resp.Body.Close()
	if hits != 1 {
		t.Fatalf("hits = %d, want 1", hits)
	}
}

func TestHTTPSOnly(t *testing.T) {
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("plain http server reached")
	}))
	defer plain.Close()
	c := egress.NewClient(egress.Options{AllowPrivate: true})
	if _, err := c.Get(plain.URL); !errors.Is(err, egress.ErrScheme) {
		t.Fatalf("http URL: err = %v, want ErrScheme", err)
	}
	// A redirect from https to http is refused too.
	srv := tlsServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, plain.URL, http.StatusFound)
	})
	if _, err := trusting(srv, egress.Options{AllowPrivate: true}).Get(srv.URL); !errors.Is(err, egress.ErrScheme) {
		t.Fatalf("redirect to http: err = %v, want ErrScheme", err)
	}
	if _, err := c.Get("https://user:pw@example.invalid/"); err == nil || !strings.Contains(err.Error(), "credentials") {
		t.Fatalf("credentials in URL: err = %v", err)
	}
}

func TestRedirects(t *testing.T) {
	var srv *httptest.Server
	srv = tlsServer(t, func(w http.ResponseWriter, r *http.Request) {
		var n int
		fmt.Sscanf(r.URL.Path, "/%d", &n)
		if n < 10 {
			http.Redirect(w, r, fmt.Sprintf("%s/%d", srv.URL, n+1), http.StatusFound)
			return
		}
		io.WriteString(w, "end")
	})
	c := trusting(srv, egress.Options{AllowPrivate: true, MaxRedirects: 2})
	if _, err := c.Get(srv.URL + "/8"); err != nil {
		t.Fatalf("two redirects: %v", err)
	}
	if _, err := c.Get(srv.URL + "/7"); !errors.Is(err, egress.ErrTooManyRedirects) {
		t.Fatalf("three redirects: err = %v, want ErrTooManyRedirects", err)
	}
	resp, err := trusting(srv, egress.Options{AllowPrivate: true, MaxRedirects: -1}).Get(srv.URL + "/1")
	if err != nil || resp.StatusCode != http.StatusFound {
		t.Fatalf("no-follow: resp %v err %v", resp, err)
	}
	resp.Body.Close()
	hook := errors.New("host not allowed")
	c = trusting(srv, egress.Options{AllowPrivate: true, CheckRedirect: func(*http.Request, []*http.Request) error { return hook }})
	if _, err := c.Get(srv.URL + "/9"); !errors.Is(err, hook) {
		t.Fatalf("hook: err = %v", err)
	}
}

func TestResponseSizeLimit(t *testing.T) {
	srv := tlsServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("chunked") != "" {
			w.(http.Flusher).Flush() // no Content-Length
		} else {
			w.Header().Set("Content-Length", r.URL.Query().Get("n"))
		}
		io.WriteString(w, strings.Repeat("x", atoi(r.URL.Query().Get("n"))))
	})
	c := trusting(srv, egress.Options{AllowPrivate: true, MaxResponseBytes: 100})
	for _, q := range []string{"?n=100", "?n=100&chunked=1"} {
		resp, err := c.Get(srv.URL + q)
		if err != nil {
			t.Fatal(err)
		}
		body, err := egress.ReadAll(resp)
		if err != nil || len(body) != 100 {
			t.Fatalf("%s: %d bytes, err %v", q, len(body), err)
		}
	}
	if _, err := c.Get(srv.URL + "?n=101"); !errors.Is(err, egress.ErrResponseTooLarge) {
		t.Fatalf("declared length over limit: err = %v", err)
	}
	resp, err := c.Get(srv.URL + "?n=5000&chunked=1")
	if err != nil {
		t.Fatal(err)
	}
	body, err := egress.ReadAll(resp)
	if !errors.Is(err, egress.ErrResponseTooLarge) || len(body) != 100 {
		t.Fatalf("streamed body over limit: %d bytes, err %v", len(body), err)
	}
}

func atoi(s string) (n int) { fmt.Sscan(s, &n); return }
