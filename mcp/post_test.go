package mcp

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// An initialize the engine does not answer with a result opens no
// session: sent as a notification (no id) or refused (a params the
// engine cannot read), it used to leave a session behind that no client
// was given, holding one of the user's places.
func TestFailedInitializeOpensNoSession(t *testing.T) {
	f := newFixture(t)
	for _, body := range []string{
		`{"jsonrpc":"2.0","method":"initialize","params":{"protocolVersion":"` + testProtocol + `","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":5,"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
	} {
		resp := f.request(http.MethodPost, "alice-token", "", body)
		answer := readAll(resp)
		if sid := resp.Header.Get(sessionHeader); sid != "" {
			t.Errorf("%s: answered %d %s with session %s", body, resp.StatusCode, answer, sid)
		}
		if n := f.srv.Stats().Sessions; n != 0 {
			t.Errorf("%s: answered %d %s, and %d sessions are open", body, resp.StatusCode, answer, n)
		}
	}
	if sid := f.initialize("alice-token"); sid == "" || f.srv.Stats().Sessions != 1 {
		t.Fatalf("a good initialize after them: session %q, %d open", sid, f.srv.Stats().Sessions)
	}
}

// A client's answer that the envelope reads as 2026-07-28 (so no session
// was bound) and the engine as an older protocol's answer is refused as
// an answer without a session: it is never routed under an empty session
// id (with shared sessions, stored where nothing takes it).
func TestSessionlessAnswerIsRefused(t *testing.T) {
	f := newFixture(t)
	body := `{"jsonrpc":"2.0","id":1,"result":{"action":"accept"},"params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"},"_meta":5}}`
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, f.url, strings.NewReader(body))
	must(t, err)
	req.Header.Set("Authorization", "Bearer alice-token")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	defer resp.Body.Close()
	if got := readAll(resp); resp.StatusCode != http.StatusBadRequest || !strings.Contains(got, "Missing session ID") {
		t.Fatalf("answered %d %s", resp.StatusCode, got)
	}
}

// Requests of one session with the same JSON-RPC id are chained for
// notifications/cancelled: ending any one of them (first, middle, last)
// leaves the others cancellable, and the last to end leaves nothing.
func TestTrackedCallsUnchainInAnyOrder(t *testing.T) {
	for _, order := range [][3]int{{0, 1, 2}, {1, 0, 2}, {2, 1, 0}, {1, 2, 0}} {
		st := newSessionStore(time.Minute, 8, 100, time.Now)
		sid, _ := st.create("u")
		var cancelled [3]int
		var calls [3]*trackedCall
		var ses [3]*session
		var ids [3]string
		for i := range 3 {
			ids[i], ses[i], calls[i] = st.begin(sid, []byte("7"), func() { cancelled[i]++ })
		}
		for n, i := range order {
			st.end(ses[i], ids[i], calls[i])
			st.cancel(sid, []byte("7"))
			for j := range 3 {
				// Cancelled once per cancel sent while it was in progress.
				want := n + 1
				if k := slices.Index(order[:], j); k <= n {
					want = k
				}
				if cancelled[j] != want {
					t.Fatalf("order %v, after ending %d: cancelled %v", order, i, cancelled)
				}
			}
		}
		if len(st.calls) != 0 {
			t.Fatalf("order %v: %d keys left", order, len(st.calls))
		}
	}
}
