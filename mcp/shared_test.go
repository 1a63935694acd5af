package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/capabilitiestest"
	"github.com/enclave-mcp/enclave/cluster"
)

// memSessions is a SessionStore in memory, shared by the replicas of a test.
type memSessions struct {
	mu      sync.Mutex
	byHash  map[string]SessionRecord
	answers map[string][]byte
}

func newMemSessions() *memSessions {
	return &memSessions{byHash: map[string]SessionRecord{}, answers: map[string][]byte{}}
}

func (m *memSessions) CreateSession(_ context.Context, rec SessionRecord, keep int) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.byHash[SessionHash(rec.ID)] = rec
	return nil, nil
}

func (m *memSessions) LoadSession(_ context.Context, id string) (SessionRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, ok := m.byHash[SessionHash(id)]
	if !ok {
		return SessionRecord{}, ErrSessionNotFound
	}
	rec.ID = id
	return rec, nil
}

func (m *memSessions) SaveSession(_ context.Context, rec SessionRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.byHash[SessionHash(rec.ID)]; ok && old.UserID == rec.UserID {
		m.byHash[SessionHash(rec.ID)] = rec
	}
	return nil
}

func (m *memSessions) TouchSessions(context.Context, []string, time.Time) error { return nil }

func (m *memSessions) DeleteSession(_ context.Context, id string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.byHash[SessionHash(id)]
	delete(m.byHash, SessionHash(id))
	return ok, nil
}

func (m *memSessions) ExpireSessions(context.Context, time.Time) ([]string, error) { return nil, nil }

func (m *memSessions) PutAnswer(_ context.Context, _, key string, answer []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.answers[key] = answer
	return nil
}

func (m *memSessions) TakeAnswer(_ context.Context, key string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.answers[key]
	if !ok {
		return nil, ErrSessionNotFound
	}
	delete(m.answers, key)
	return a, nil
}

// replicas starts two servers sharing a session store and a bus.
func replicas(t *testing.T) (a, b *fixture, busA, busB *cluster.LoopbackBus) {
	t.Helper()
	group, store := cluster.NewLoopback(), newMemSessions()
	busA, busB = group.Join(), group.Join()
	a = newFixture(t, func(o *Options) { o.Bus, o.Sessions = busA, store })
	b = newFixture(t, func(o *Options) { o.Bus, o.Sessions = busB, store })
	return a, b, busA, busB
}

func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// streamReady waits until mcp-go serves sid's GET stream on f (a marker
// notification gets through), and reads up to the marker.
func streamReady(t *testing.T, f *fixture, sid string, next func() map[string]any) {
	t.Helper()
	eventually(t, "the GET stream", func() bool {
		return f.srv.notifySession(sid, "test/ready", nil) == nil
	})
	for m := next(); m == nil || m["method"] != "test/ready"; m = next() {
		if m == nil {
			t.Fatal("the stream ended")
		}
	}
}

func TestSharedSessionServedByAnyReplicaOnlyToItsOwner(t *testing.T) {
	a, b, busA, _ := replicas(t)
	sid := a.initialize("alice-token")

	resp := b.request(http.MethodPost, "alice-token", sid, rpc(2, "tools/list", nil))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("tools/list on the other replica: %d %s", resp.StatusCode, readAll(resp))
	}
	if !strings.Contains(fmt.Sprint(result(t, resp)), "echo") {
		t.Fatal("tools/list on the other replica lists no tools")
	}
	for _, token := range []string{"bob-token", "admin-token"} {
		if resp := b.request(http.MethodPost, token, sid, rpc(3, "tools/list", nil)); resp.StatusCode != http.StatusNotFound {
			t.Fatalf("%s using alice's session on the other replica: %d", token, resp.StatusCode)
		}
	}
	if resp := b.request(http.MethodPost, "alice-token", newSessionID(), rpc(3, "tools/list", nil)); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("forged session id: %d", resp.StatusCode)
	}

	// State set on one replica is seen by the other (refreshed over the bus).
	if resp := b.request(http.MethodPost, "alice-token", sid, rpc(4, "logging/setLevel", map[string]any{"level": "error"})); resp.StatusCode != http.StatusOK {
		t.Fatalf("setLevel: %d", resp.StatusCode)
	}
	eventually(t, "the log level on replica A", func() bool { return a.srv.sessions.logLevel(sid) == "error" })
	if _, elicit, _ := a.srv.sessions.clientCan(sid); !elicit {
		t.Fatal("replica A lost the client's declared capabilities")
	}
	if _, elicit, _ := b.srv.sessions.clientCan(sid); !elicit {
		t.Fatal("replica B does not know the client's declared capabilities")
	}

	// DELETE on B ends the session on A too.
	if resp := b.request(http.MethodDelete, "alice-token", sid, ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("DELETE: %d", resp.StatusCode)
	}
	if resp := a.request(http.MethodPost, "alice-token", sid, rpc(5, "tools/list", nil)); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("session deleted on B, used on A: %d", resp.StatusCode)
	}

	// With A's bus cut off, A cannot trust its cache: a session deleted on
	// B meanwhile is refused on A all the same.
	sid2 := a.initialize("alice-token")
	if resp := b.request(http.MethodPost, "alice-token", sid2, rpc(6, "tools/list", nil)); resp.StatusCode != http.StatusOK {
		t.Fatalf("second session on B: %d", resp.StatusCode)
	}
	busA.Disconnect()
	if resp := b.request(http.MethodDelete, "alice-token", sid2, ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("DELETE: %d", resp.StatusCode)
	}
	if resp := a.request(http.MethodPost, "alice-token", sid2, rpc(7, "tools/list", nil)); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("session deleted on B while A's bus was down, used on A: %d", resp.StatusCode)
	}
	busA.Reconnect()
}

func TestSharedSessionResourceUpdateReachesStreamOnOtherReplica(t *testing.T) {
	a, b, _, _ := replicas(t)
	read := func(_ context.Context, _ *capabilities.Call, uri string, _ map[string]string) ([]capabilities.ResourceContents, error) {
		return []capabilities.ResourceContents{{URI: uri, Text: "x"}}, nil
	}
	for _, f := range []*fixture{a, b} {
		must(t, f.reg.RegisterResource(capabilities.Resource{URI: "test://public", Name: "public", Read: read}))
	}
	alice := a.initialize("alice-token")
	bob := a.initialize("bob-token")
	stream := sseReader(a.request(http.MethodGet, "alice-token", alice, ""))
	bobStream := sseReader(a.request(http.MethodGet, "bob-token", bob, ""))
	streamReady(t, a, alice, stream)
	streamReady(t, a, bob, bobStream)
	// Subscribed on B; the stream is on A.
	if resp := b.request(http.MethodPost, "alice-token", alice, rpc(4, "resources/subscribe", map[string]any{"uri": "test://public"})); resp.StatusCode != http.StatusOK {
		t.Fatalf("subscribe: %d", resp.StatusCode)
	}
	eventually(t, "the subscription on replica A", func() bool {
		_, ok := a.srv.sessions.subscribers("test://public")[alice]
		return ok
	})
	b.srv.NotifyResourceUpdated(t.Context(), "test://public")
	m := stream()
	if m["method"] != "notifications/resources/updated" || !strings.Contains(fmt.Sprint(m["params"]), "test://public") {
		t.Fatalf("alice's stream on A carried %v", m)
	}
	must(t, a.srv.notifySession(bob, "test/sentinel", nil))
	if m := bobStream(); m["method"] != "test/sentinel" {
		t.Fatalf("bob (not subscribed) received %v first", m)
	}
}

func TestSharedSessionAnswerOnOtherReplicaReachesTheCall(t *testing.T) {
	a, b, _, _ := replicas(t)
	alice := a.initialize("alice-token")
	bob := a.initialize("bob-token")
	call := a.request(http.MethodPost, "alice-token", alice, rpc(5, "tools/call", map[string]any{"name": "ask"}))
	next := sseReader(call)
	ask := next()
	if ask == nil || ask["method"] != "elicitation/create" {
		t.Fatalf("first event = %v", ask)
	}
	id, _ := json.Marshal(ask["id"])
	answer := func(name string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"action":"accept","content":{"name":%q}}}`, id, name)
	}
	if resp := b.request(http.MethodPost, "bob-token", alice, answer("bob")); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("bob answering on alice's session on B: %d", resp.StatusCode)
	}
	if resp := b.request(http.MethodPost, "bob-token", bob, answer("bob")); resp.StatusCode == http.StatusAccepted {
		// Accepted for bob's own session, it must still not reach alice's call.
		_ = resp
	}
	if resp := b.request(http.MethodPost, "alice-token", alice, answer("alice")); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("alice's answer on B: %d", resp.StatusCode)
	}
	final := next()
	if got := fmt.Sprint(final["result"]); !strings.Contains(got, "accept:alice") {
		t.Fatalf("result = %v", final)
	}
}

func TestListChangedBroadcastReachesOtherReplica(t *testing.T) {
	a, b, _, _ := replicas(t)
	alice := a.initialize("alice-admin-token")
	if resp := a.request(http.MethodPost, "alice-admin-token", alice, rpc(2, "tools/list", nil)); resp.StatusCode != http.StatusOK {
		t.Fatal(resp.Status)
	}
	stream := sseReader(a.request(http.MethodGet, "alice-admin-token", alice, ""))
	streamReady(t, a, alice, stream)
	// Alice becomes an admin (say, on B) and B broadcasts the change.
	a.loader.Set(capabilitiestest.Admin("alice"))
	b.srv.NotifyListChanged(t.Context())
	if m := stream(); m["method"] != "notifications/tools/list_changed" {
		t.Fatalf("stream carried %v", m)
	}
}

type memEvent struct {
	id, stream string
	msg        json.RawMessage
}

// memEvents is an EventLog in memory.
type memEvents struct {
	*memSessions
	emu    sync.Mutex
	seq    int
	events map[string][]memEvent
}

func (m *memEvents) AppendEvent(_ context.Context, hash, _, stream string, msg json.RawMessage) (string, error) {
	m.emu.Lock()
	defer m.emu.Unlock()
	m.seq++
	id := fmt.Sprintf("e%d", m.seq)
	m.events[hash] = append(m.events[hash], memEvent{id, stream, append(json.RawMessage(nil), msg...)})
	return id, nil
}

func (m *memEvents) ReplayEvents(_ context.Context, hash, last string, send func(string, json.RawMessage) error) (string, error) {
	m.emu.Lock()
	evs := slices.Clone(m.events[hash])
	m.emu.Unlock()
	i := slices.IndexFunc(evs, func(e memEvent) bool { return e.id == last })
	if i < 0 {
		return "", ErrUnknownEvent
	}
	stream := evs[i].stream
	for _, e := range evs[i+1:] {
		if e.stream == stream {
			if err := send(e.id, e.msg); err != nil {
				return stream, err
			}
		}
	}
	return stream, nil
}

func (m *memEvents) PurgeEvents(_ context.Context, hash string) error {
	m.emu.Lock()
	defer m.emu.Unlock()
	delete(m.events, hash)
	return nil
}

// sseEvents reads "id"/"data" pairs from an SSE stream.
func sseEvents(resp *http.Response) func() (string, map[string]any) {
	sc := bufio.NewScanner(resp.Body)
	return func() (string, map[string]any) {
		id := ""
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "id: "); ok {
				id = v
			}
			if data, ok := strings.CutPrefix(line, "data: "); ok {
				var m map[string]any
				if json.Unmarshal([]byte(data), &m) == nil {
					return id, m
				}
			}
		}
		return "", nil
	}
}

// TestResumeStreamOnAnotherReplica: a GET stream broken on replica A is
// resumed on replica B with Last-Event-ID: B sends what A recorded after
// that id, then carries the stream on; another session cannot resume it.
func TestResumeStreamOnAnotherReplica(t *testing.T) {
	group := cluster.NewLoopback()
	store := &memEvents{memSessions: newMemSessions(), events: map[string][]memEvent{}}
	a := newFixture(t, func(o *Options) { o.Bus, o.Sessions = group.Join(), store })
	b := newFixture(t, func(o *Options) { o.Bus, o.Sessions = group.Join(), store })
	alice := a.initialize("alice-token")
	bob := a.initialize("bob-token")

	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.url, nil)
	req.Header.Set("Authorization", "Bearer alice-token")
	req.Header.Set(sessionHeader, alice)
	req.Header.Set(versionHeader, testProtocol)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	next := sseEvents(resp)
	eventually(t, "the stream on A", func() bool { return len(a.srv.sessions.withStreams()) == 1 })
	must(t, a.srv.notifySession(alice, "test/one", nil))
	firstID, first := next()
	if first["method"] != "test/one" || firstID == "" {
		t.Fatalf("first event %q %v: want test/one with an id", firstID, first)
	}
	cancel() // the connection breaks
	resp.Body.Close()
	eventually(t, "the stream to close", func() bool { return len(a.srv.sessions.withStreams()) == 0 })
	// Sent while the client is away: recorded by A.
	must(t, a.srv.notifySession(alice, "test/two", nil))
	must(t, a.srv.notifySession(alice, "test/three", nil))
	eventually(t, "the events to be recorded", func() bool {
		store.emu.Lock()
		defer store.emu.Unlock()
		return len(store.events[SessionHash(alice)]) >= 3
	})

	resume := func(f *fixture, token, sid string) *http.Response {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, f.url, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set(sessionHeader, sid)
		req.Header.Set(versionHeader, testProtocol)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Last-Event-ID", firstID)
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	if r := resume(b, "bob-token", bob); r.StatusCode != http.StatusBadRequest {
		t.Fatalf("bob resuming with alice's event id: %d", r.StatusCode)
	}
	r := resume(b, "alice-token", alice)
	if r.StatusCode != http.StatusOK {
		t.Fatalf("resume on B: %d %s", r.StatusCode, readAll(r))
	}
	next = sseEvents(r)
	for _, want := range []string{"test/two", "test/three"} {
		if _, m := next(); m["method"] != want {
			t.Fatalf("replayed %v, want %s", m, want)
		}
	}
	// The stream goes on, on B.
	eventually(t, "the stream on B", func() bool {
		return b.srv.notifySession(alice, "test/four", nil) == nil
	})
	if id, m := next(); m["method"] != "test/four" || id == "" {
		t.Fatalf("after the replay: %q %v", id, m)
	}
}

// TestResumeStreamOnSameReplica: a GET stream resumed on the replica that
// holds it gets what it missed once, then the stream itself; a request id
// that names no event is refused before anything is written.
func TestResumeStreamOnSameReplica(t *testing.T) {
	group := cluster.NewLoopback()
	store := &memEvents{memSessions: newMemSessions(), events: map[string][]memEvent{}}
	a := newFixture(t, func(o *Options) { o.Bus, o.Sessions = group.Join(), store })
	alice := a.initialize("alice-token")
	get := func(ctx context.Context, last string) *http.Response {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.url, nil)
		req.Header.Set("Authorization", "Bearer alice-token")
		req.Header.Set(sessionHeader, alice)
		req.Header.Set(versionHeader, testProtocol)
		req.Header.Set("Accept", "text/event-stream")
		if last != "" {
			req.Header.Set("Last-Event-ID", last)
		}
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	ctx, cancel := context.WithCancel(t.Context())
	next := sseEvents(get(ctx, ""))
	must(t, a.srv.notifySession(alice, "test/one", nil))
	firstID, first := next()
	if first["method"] != "test/one" || firstID == "" {
		t.Fatalf("first event %q %v: want test/one with an id", firstID, first)
	}
	cancel()
	eventually(t, "the stream to close", func() bool { return len(a.srv.sessions.withStreams()) == 0 })
	must(t, a.srv.notifySession(alice, "test/two", nil))
	eventually(t, "the event to be recorded", func() bool {
		store.emu.Lock()
		defer store.emu.Unlock()
		return len(store.events[SessionHash(alice)]) >= 2
	})
	if r := get(t.Context(), "no-such-event"); r.StatusCode != http.StatusBadRequest {
		t.Fatalf("unknown Last-Event-ID: %d", r.StatusCode)
	}
	r := get(t.Context(), firstID)
	if r.StatusCode != http.StatusOK {
		t.Fatalf("resume: %d %s", r.StatusCode, readAll(r))
	}
	next = sseEvents(r)
	if _, m := next(); m["method"] != "test/two" {
		t.Fatalf("replayed %v, want test/two", m)
	}
	must(t, a.srv.notifySession(alice, "test/three", nil))
	if id, m := next(); m["method"] != "test/three" || id == "" {
		t.Fatalf("after the replay: %q %v, want test/three with an id", id, m)
	}
}

// TestToolsChangedSeenOnOneReplicaReachesStreamOnAnother: the request that
// notices a session's tools changed runs on B; the session's GET stream is
// on A, and carries the notification. (Her token carries the admin scope,
// so becoming an admin opens tools.)
func TestToolsChangedSeenOnOneReplicaReachesStreamOnAnother(t *testing.T) {
	a, b, _, _ := replicas(t)
	alice := a.initialize("alice-admin-token")
	if resp := a.request(http.MethodPost, "alice-admin-token", alice, rpc(2, "tools/list", nil)); resp.StatusCode != http.StatusOK {
		t.Fatal(resp.Status)
	}
	stream := sseReader(a.request(http.MethodGet, "alice-admin-token", alice, ""))
	streamReady(t, a, alice, stream)
	eventually(t, "B to know the listed tools", func() bool {
		if resp := b.request(http.MethodPost, "alice-admin-token", alice, rpc(3, "ping", nil)); resp.StatusCode != http.StatusOK {
			t.Fatal(resp.Status)
		}
		rec, _ := b.srv.sessions.snapshot(alice)
		return rec.ToolsFP != ""
	})
	b.loader.Set(capabilitiestest.Admin("alice")) // B loads her fresh: an admin now
	if resp := b.request(http.MethodPost, "alice-admin-token", alice, rpc(4, "ping", nil)); resp.StatusCode != http.StatusOK {
		t.Fatal(resp.Status)
	}
	got := make(chan map[string]any, 1)
	go func() { got <- stream() }()
	select {
	case m := <-got:
		if m["method"] != "notifications/tools/list_changed" {
			t.Fatalf("alice's stream on A carried %v", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("alice's stream on A carried nothing")
	}
}
