package cli

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

func TestOTLPFlagsRefused(t *testing.T) {
	if code, _, errOut := run(t, nil, "serve", "--otlp-endpoint", "localhost:4318"); code != 2 || !strings.Contains(errOut, "--otlp-endpoint") {
		t.Fatalf("bad endpoint: code %d, stderr %q", code, errOut)
	}
	if code, _, errOut := run(t, map[string]string{"ENCLAVE_OTLP_HEADER": "novalue"}, "serve"); code != 2 || !strings.Contains(errOut, "--otlp-header") {
		t.Fatalf("bad header: code %d, stderr %q", code, errOut)
	}
}

// The header values are API keys: no refusal, no --help, no log line
// shows them, whether from the flag, ENCLAVE_OTLP_HEADER or its _FILE.
func TestOTLPHeaderNeverShown(t *testing.T) {
	const secret = "sk-otlp-SECRET-41"
	for _, env := range []map[string]string{
		{"ENCLAVE_OTLP_HEADER": "x-api-key=" + secret},
		{"ENCLAVE_OTLP_HEADER": "x-api-key: " + secret + "="},
		{"ENCLAVE_OTLP_HEADER": "x-api-key=" + secret + "%0Ainjected"},
	} {
		for _, args := range [][]string{{"serve", "--help"}, {"serve", "--otlp-endpoint", "nohost"}, {"serve", "--otlp-endpoint", "http://u:" + secret + "@c:4318"}} {
			_, out, errOut := run(t, env, args...)
			if strings.Contains(out+errOut, secret) {
				t.Errorf("%v %v: the output shows the header value: %q", env, args, out+errOut)
			}
		}
	}
}

// serve --otlp-endpoint exports spans with the --otlp-header headers, and
// flushes what is still batched when it stops.
func TestServeExportsTraces(t *testing.T) {
	var mu sync.Mutex
	var names []string
	var keys []string
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			t.Errorf("OTLP body: %v", err)
		}
		mu.Lock()
		keys = append(keys, r.Header.Get("X-Api-Key"))
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					names = append(names, s.Name)
				}
			}
		}
		mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	defer recv.Close()

	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	done := make(chan int, 1)
	env := map[string]string{"ENCLAVE_DATA_DIR": t.TempDir(), "ENCLAVE_OTLP_HEADER": "x-api-key=k123"}
	go func() {
		done <- Main(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--otlp-endpoint", recv.URL}, &Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut, Getenv: func(k string) string { return env[k] }})
	}()
	health := regexp.MustCompile(`health:\s+(http://127\.0\.0\.1:\d+)/healthz`)
	var base string
	for deadline := time.Now().Add(20 * time.Second); base == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if m := health.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
		}
	}
	if base == "" {
		cancel()
		t.Fatalf("serve did not start: %s", errOut.String())
	}
	resp, err := http.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("serve exited with %d: %s", code, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
	mu.Lock()
	defer mu.Unlock()
	found := false
	for _, n := range names {
		found = found || n == "GET /healthz"
	}
	if !found {
		t.Errorf("no GET /healthz span exported at exit; got %v", names)
	}
	for _, k := range keys {
		if k != "k123" {
			t.Errorf("an export carried X-Api-Key %q", k)
		}
	}
}
