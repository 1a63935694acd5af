package sqlsessions

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/internal/envelope"
	"github.com/enclave-mcp/enclave/mcp"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

func users(t *testing.T, s *storage.Store) (alice, bob string) {
	t.Helper()
	now := time.Now().UTC()
	for i, name := range []string{"alice", "bob"} {
		_, err := s.DB.ExecContext(context.Background(), "INSERT INTO users (id, stable_user_id, email, username, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
			i+1, strings.Repeat(name[:1], 64), name+"@example.com", name, now, now)
		if err != nil {
			t.Fatal(err)
		}
	}
	return strings.Repeat("a", 64), strings.Repeat("b", 64)
}

// TestSessions: a stored session comes back with its owner and state, by
// id only (the table holds the hash); another user's save changes nothing;
// creating beyond the per-user limit evicts the least recently used; idle
// sessions expire; deletion is idempotent.
func TestSessions(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		alice, bob := users(t, s)
		st := New(s)
		clock := time.Now().UTC()
		st.now = func() time.Time { return clock }
		rec := mcp.SessionRecord{ID: "sid-1", UserID: alice, ProtocolVersion: "2025-11-25",
			ClientInfo: json.RawMessage(`{"name":"c","version":"1"}`), CanElicit: true}
		if _, err := st.CreateSession(ctx, rec, 2); err != nil {
			t.Fatal(err)
		}
		if _, err := st.CreateSession(ctx, mcp.SessionRecord{ID: "x", UserID: "nobody"}, 2); err == nil {
			t.Fatal("a session for an unknown user was stored")
		}
		var raw int
		if err := s.DB.NewRaw("SELECT count(*) FROM mcp_sessions WHERE id_hash = ?", "sid-1").Scan(ctx, &raw); err != nil || raw != 0 {
			t.Fatalf("the raw session id is stored (%d, %v)", raw, err)
		}
		got, err := st.LoadSession(ctx, "sid-1")
		if err != nil || got.UserID != alice || !got.CanElicit || got.CanSample || got.ProtocolVersion != "2025-11-25" || !strings.Contains(string(got.ClientInfo), `"c"`) {
			t.Fatalf("load = %+v, %v", got, err)
		}
		if _, err := st.LoadSession(ctx, "sid-2"); !errors.Is(err, mcp.ErrSessionNotFound) {
			t.Fatalf("unknown id: %v", err)
		}

		got.LogLevel, got.Subscriptions, got.ToolsFP = "error", []string{"a://1", "a://2"}, "#fp"
		if err := st.SaveSession(ctx, got); err != nil {
			t.Fatal(err)
		}
		// Bob cannot change alice's session through its id.
		forged := got
		forged.UserID, forged.LogLevel = bob, "debug"
		if err := st.SaveSession(ctx, forged); err != nil {
			t.Fatal(err)
		}
		got, _ = st.LoadSession(ctx, "sid-1")
		if got.LogLevel != "error" || !slices.Equal(got.Subscriptions, []string{"a://1", "a://2"}) || got.ToolsFP != "#fp" || got.UserID != alice {
			t.Fatalf("after save = %+v", got)
		}

		// Per-user limit 2: the third session evicts the least recently used.
		clock = clock.Add(time.Minute)
		if _, err := st.CreateSession(ctx, mcp.SessionRecord{ID: "sid-2", UserID: alice}, 2); err != nil {
			t.Fatal(err)
		}
		if _, err := st.CreateSession(ctx, mcp.SessionRecord{ID: "bob-1", UserID: bob}, 2); err != nil {
			t.Fatal(err)
		}
		clock = clock.Add(time.Minute)
		if err := st.TouchSessions(ctx, []string{"sid-1"}, clock); err != nil {
			t.Fatal(err)
		}
		clock = clock.Add(time.Minute)
		evicted, err := st.CreateSession(ctx, mcp.SessionRecord{ID: "sid-3", UserID: alice}, 2)
		if err != nil || !slices.Equal(evicted, []string{mcp.SessionHash("sid-2")}) {
			t.Fatalf("evicted %v, %v; want sid-2's hash", evicted, err)
		}
		if _, err := st.LoadSession(ctx, "bob-1"); err != nil {
			t.Fatalf("bob's session was evicted by alice's: %v", err)
		}

		// Expiry ends what was idle since the cutoff, nothing else.
		hashes, err := st.ExpireSessions(ctx, clock.Add(-90*time.Second))
		if err != nil || !slices.Equal(hashes, []string{mcp.SessionHash("bob-1")}) {
			t.Fatalf("expired %v, %v; want bob-1", hashes, err)
		}
		if ok, err := st.DeleteSession(ctx, "sid-1"); !ok || err != nil {
			t.Fatalf("delete: %v %v", ok, err)
		}
		if ok, _ := st.DeleteSession(ctx, "sid-1"); ok {
			t.Fatal("deleted twice")
		}
	})
}

func TestAnswers(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		alice, _ := users(t, s)
		st := New(s)
		if err := st.PutAnswer(ctx, alice, "k1", []byte(`{"result":{}}`)); err != nil {
			t.Fatal(err)
		}
		if err := st.PutAnswer(ctx, "nobody", "k2", []byte(`{}`)); err == nil {
			t.Fatal("an answer for an unknown user was stored")
		}
		got, err := st.TakeAnswer(ctx, "k1")
		if err != nil || string(got) != `{"result":{}}` {
			t.Fatalf("take = %s, %v", got, err)
		}
		if _, err := st.TakeAnswer(ctx, "k1"); !errors.Is(err, mcp.ErrSessionNotFound) {
			t.Fatalf("taken twice: %v", err)
		}
		// A stale answer is not delivered and is dropped by the sweep.
		st.PutAnswer(ctx, alice, "k3", []byte(`{}`))
		st.now = func() time.Time { return time.Now().Add(AnswerTTL + time.Minute) }
		if _, err := st.TakeAnswer(ctx, "k3"); !errors.Is(err, mcp.ErrSessionNotFound) {
			t.Fatalf("stale answer: %v", err)
		}
		st.ExpireSessions(ctx, time.Now().Add(-time.Hour))
		var n int
		s.DB.NewRaw("SELECT count(*) FROM mcp_session_answers").Scan(ctx, &n)
		if n != 0 {
			t.Fatalf("%d stale answers left", n)
		}
	})
}

// TestEvents: events replay after an id on its own stream, in order, only
// within the session that recorded them and the window.
func TestEvents(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		alice, _ := users(t, s)
		st := New(s)
		h1, h2 := mcp.SessionHash("s1"), mcp.SessionHash("s2")
		var ids []string
		for i, stream := range []string{"L:a", "r", "L:a", "L:a"} {
			id, err := st.AppendEvent(ctx, h1, alice, stream, json.RawMessage(`{"n":`+string(rune('0'+i))+`}`))
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		var got []string
		stream, err := st.ReplayEvents(ctx, h1, ids[0], func(id string, m json.RawMessage) error {
			got = append(got, id+"="+string(m))
			return nil
		})
		want := []string{ids[2] + `={"n":2}`, ids[3] + `={"n":3}`}
		if err != nil || stream != "L:a" || !slices.Equal(got, want) {
			t.Fatalf("replay = %q %v %v; want %v", stream, got, err, want)
		}
		if _, err := st.ReplayEvents(ctx, h2, ids[0], func(string, json.RawMessage) error { return nil }); !errors.Is(err, mcp.ErrUnknownEvent) {
			t.Fatalf("another session's event id: %v", err)
		}
		st.now = func() time.Time { return time.Now().Add(EventTTL + time.Minute) }
		if _, err := st.ReplayEvents(ctx, h1, ids[0], func(string, json.RawMessage) error { return nil }); !errors.Is(err, mcp.ErrUnknownEvent) {
			t.Fatalf("an event out of the window: %v", err)
		}
		if err := st.PurgeEvents(ctx, h1); err != nil {
			t.Fatal(err)
		}
		var n int
		s.DB.NewRaw("SELECT count(*) FROM mcp_session_events").Scan(ctx, &n)
		if n != 0 {
			t.Fatalf("%d events left after purge", n)
		}
	})
}

// TestAnswersBoundedPerUser: a client can park answers naming requests
// that wait nowhere (the replica handing them over cannot tell); they are
// bounded per user and in size, and one user's flood does not stop
// another's answers.
func TestAnswersBoundedPerUser(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		alice, bob := users(t, s)
		st := New(s)
		for i := range MaxAnswersPerUser {
			if err := st.PutAnswer(ctx, alice, "flood:"+strconv.Itoa(i), []byte(`{"result":{}}`)); err != nil {
				t.Fatalf("answer %d: %v", i, err)
			}
		}
		if err := st.PutAnswer(ctx, alice, "flood:over", []byte(`{"result":{}}`)); !errors.Is(err, ErrTooManyAnswers) {
			t.Fatalf("answer over the per-user bound: %v", err)
		}
		if err := st.PutAnswer(ctx, bob, "bob:1", []byte(`{"result":{}}`)); err != nil {
			t.Fatalf("bob's answer while alice is at her bound: %v", err)
		}
		if err := st.PutAnswer(ctx, bob, "bob:big", make([]byte, MaxAnswerBytes+1)); !errors.Is(err, ErrTooManyAnswers) {
			t.Fatalf("oversized answer: %v", err)
		}
		if _, err := st.TakeAnswer(ctx, "flood:0"); err != nil {
			t.Fatal(err)
		}
		if err := st.PutAnswer(ctx, alice, "flood:again", []byte(`{"result":{}}`)); err != nil {
			t.Fatalf("answer after one was taken: %v", err)
		}
		var n int
		if err := s.DB.NewRaw("SELECT count(*) FROM mcp_session_answers").Scan(ctx, &n); err != nil || n != MaxAnswersPerUser+1 {
			t.Fatalf("%d answers stored (%v), want %d", n, err, MaxAnswersPerUser+1)
		}
	})
}

// TestEventsAndAnswersSealed: with a sealer, what a stream recorded (a
// tool result may hold a credential shown once) and what a client
// answered are not kept in the clear, come back intact, and do not open
// when moved to another session's row.
func TestEventsAndAnswersSealed(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		alice, _ := users(t, s)
		ring, err := envelope.Open(ctx, s.DB, s.Keeper)
		if err != nil {
			t.Fatal(err)
		}
		st := NewSealed(s, ring)
		h1, h2 := mcp.SessionHash("s1"), mcp.SessionHash("s2")
		first, err := st.AppendEvent(ctx, h1, alice, "r", json.RawMessage(`{"n":0}`))
		if err != nil {
			t.Fatal(err)
		}
		secret := `{"result":{"content":[{"type":"text","text":"api key sk-live-4242"}]}}`
		if _, err := st.AppendEvent(ctx, h1, alice, "r", json.RawMessage(secret)); err != nil {
			t.Fatal(err)
		}
		if err := st.PutAnswer(ctx, alice, h1+":enclave-x-1", []byte(`{"result":{"content":{"password":"hunter2"}}}`)); err != nil {
			t.Fatal(err)
		}
		var raw []string
		for _, q := range []string{"SELECT message FROM mcp_session_events", "SELECT answer FROM mcp_session_answers"} {
			var vs []string
			if err := s.DB.NewRaw(q).Scan(ctx, &vs); err != nil {
				t.Fatal(err)
			}
			raw = append(raw, vs...)
		}
		for _, v := range raw {
			if strings.Contains(v, "sk-live-4242") || strings.Contains(v, "hunter2") || strings.Contains(v, `"n"`) {
				t.Fatalf("stored in the clear: %s", v)
			}
		}
		var got []string
		if _, err := st.ReplayEvents(ctx, h1, first, func(_ string, m json.RawMessage) error {
			got = append(got, string(m))
			return nil
		}); err != nil || !slices.Equal(got, []string{secret}) {
			t.Fatalf("replay = %v, %v", got, err)
		}
		if a, err := st.TakeAnswer(ctx, h1+":enclave-x-1"); err != nil || !strings.Contains(string(a), "hunter2") {
			t.Fatalf("answer = %s, %v", a, err)
		}
		// A sealed event moved to another session does not open there.
		if _, err := s.DB.NewRaw("UPDATE mcp_session_events SET session_hash = ?", h2).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := st.ReplayEvents(ctx, h2, first, func(string, json.RawMessage) error { return nil }); err == nil {
			t.Fatal("an event moved to another session's rows was replayed there")
		}
	})
}

// TestEventIDsCarryNoCounter: the event ids one session sees say nothing
// about how many events other sessions recorded in between.
func TestEventIDsCarryNoCounter(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		alice, bob := users(t, s)
		st := New(s)
		ha, hb := mcp.SessionHash("a"), mcp.SessionHash("b")
		first, err := st.AppendEvent(ctx, ha, alice, "L:x", json.RawMessage(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		for range 40 {
			if _, err := st.AppendEvent(ctx, hb, bob, "L:y", json.RawMessage(`{}`)); err != nil {
				t.Fatal(err)
			}
		}
		second, err := st.AppendEvent(ctx, ha, alice, "L:x", json.RawMessage(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		common := 0
		for common < min(len(first), len(second)) && first[common] == second[common] {
			common++
		}
		if common >= 8 || len(first) < 16 {
			t.Fatalf("event ids %q and %q share structure (a counter?)", first, second)
		}
		var got []string
		if _, err := st.ReplayEvents(ctx, ha, first, func(id string, _ json.RawMessage) error {
			got = append(got, id)
			return nil
		}); err != nil || !slices.Equal(got, []string{second}) {
			t.Fatalf("replay after %q = %v, %v", first, got, err)
		}
	})
}

// TestSpendPruneFailure: the occasional drop of expired ids failing does
// not fail the spend that triggered it: that id is recorded already, so an
// error would refuse the state's only retry for good.
func TestSpendPruneFailure(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	ctx := context.Background()
	if _, err := s.DB.ExecContext(ctx, "CREATE TRIGGER no_prune BEFORE DELETE ON mcp_spent_states BEGIN SELECT RAISE(ABORT, 'prune refused'); END"); err != nil {
		t.Fatal(err)
	}
	st := New(s)
	if _, err := st.Spend(ctx, "expired", time.Now().Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(15 * time.Minute)
	for i := 1; i < 256; i++ {
		id := "p-" + strconv.Itoa(i)
		if fresh, err := st.Spend(ctx, id, exp); err != nil || !fresh {
			t.Fatalf("spend %d (a prune runs on the 256th): %v %v", i, fresh, err)
		}
	}
}

// TestSpend: a requestState id is fresh once, across Store values on one
// database (replicas), also when many spend it at once; expired ids are
// dropped now and then.
func TestSpend(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		a, b := New(s), New(s)
		exp := time.Now().Add(15 * time.Minute)
		if fresh, err := a.Spend(ctx, "state-1", exp); err != nil || !fresh {
			t.Fatalf("first spend: %v %v", fresh, err)
		}
		if fresh, err := b.Spend(ctx, "state-1", exp); err != nil || fresh {
			t.Fatalf("the other replica spent it again: %v %v", fresh, err)
		}
		var wins atomic.Int32
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if fresh, err := []*Store{a, b}[i%2].Spend(ctx, "state-2", exp); err == nil && fresh {
					wins.Add(1)
				}
			}()
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("8 concurrent spends of one id: %d fresh", wins.Load())
		}
		c := New(s) // its 256th spend prunes
		for i := 0; i < 256; i++ {
			if _, err := c.Spend(ctx, "old-"+strconv.Itoa(i), time.Now().Add(-time.Minute)); err != nil {
				t.Fatal(err)
			}
		}
		var left int
		if err := s.DB.NewRaw("SELECT count(*) FROM mcp_spent_states WHERE expires_at < ?", time.Now().UTC()).Scan(ctx, &left); err != nil || left != 0 {
			t.Fatalf("expired ids kept: %d (%v)", left, err)
		}
	})
}
