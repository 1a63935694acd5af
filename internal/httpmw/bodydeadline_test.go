package httpmw

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A body that takes longer than the timeout to arrive is cut off; an
// answer that takes longer after the body has arrived is not.
func TestBodyDeadline(t *testing.T) {
	const timeout = 300 * time.Millisecond
	ts := httptest.NewServer(BodyDeadline(timeout, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, "slow body", http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select { // a long streamed answer
		case <-time.After(3 * timeout):
			io.WriteString(w, "done")
		case <-r.Context().Done():
		}
	})))
	defer ts.Close()

	resp, err := http.Post(ts.URL, "text/plain", strings.NewReader("quick body"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(b) != "done" {
		t.Fatalf("long answer after a quick body: %d %q (cut by the body deadline?)", resp.StatusCode, b)
	}

	c, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nab")
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(10 * timeout))
	for time.Since(start) < 5*timeout {
		if _, err := io.WriteString(c, "x"); err != nil {
			break
		}
		time.Sleep(timeout / 10)
	}
	got, _ := io.ReadAll(c)
	if !strings.Contains(string(got), "400") || time.Since(start) > 8*timeout {
		t.Fatalf("trickled body: %q after %s", got, time.Since(start))
	}
}

// A chunked body (no Content-Length) trickled a chunk at a time, and a
// body announced with "Expect: 100-continue" that never follows the
// server's 100 Continue, are cut off at the deadline like a trickled
// Content-Length body.
func TestBodyDeadlineChunkedAndExpectContinue(t *testing.T) {
	const timeout = 300 * time.Millisecond
	ts := httptest.NewServer(BodyDeadline(timeout, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, "slow body", http.StatusBadRequest)
			return
		}
		io.WriteString(w, "read")
	})))
	defer ts.Close()
	for name, send := range map[string]func(c net.Conn, stop <-chan struct{}){
		"chunked": func(c net.Conn, stop <-chan struct{}) {
			io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
			for {
				select {
				case <-stop:
					return
				case <-time.After(timeout / 10):
				}
				if _, err := io.WriteString(c, "1\r\nx\r\n"); err != nil {
					return
				}
			}
		},
		"expect-continue": func(c net.Conn, _ <-chan struct{}) {
			io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n")
		},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := net.Dial("tcp", ts.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			stop := make(chan struct{})
			defer close(stop)
			start := time.Now()
			go send(c, stop)
			_ = c.SetReadDeadline(time.Now().Add(10 * timeout))
			got, _ := io.ReadAll(c)
			if !strings.Contains(string(got), "400") || strings.Contains(string(got), "read") || time.Since(start) > 8*timeout {
				t.Fatalf("%s body: %q after %s", name, got, time.Since(start))
			}
		})
	}
}
