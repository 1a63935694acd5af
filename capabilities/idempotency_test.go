package capabilities_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/capabilitiestest"
)

// memStore is an in-memory IdempotencyStore.
type memStore struct {
	mu     sync.Mutex
	next   int64
	rows   map[capabilities.IdempotencyKey]*capabilities.IdempotencyRecord
	byID   map[int64]capabilities.IdempotencyKey
	claims int
}

func newMemStore() *memStore {
	return &memStore{rows: map[capabilities.IdempotencyKey]*capabilities.IdempotencyRecord{}, byID: map[int64]capabilities.IdempotencyKey{}}
}

func (m *memStore) Claim(_ context.Context, k capabilities.IdempotencyKey) (capabilities.IdempotencyRecord, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	id := k
	id.ArgsHash = ""
	if r, ok := m.rows[id]; ok {
		return *r, false, nil
	}
	m.next++
	m.claims++
	m.rows[id] = &capabilities.IdempotencyRecord{ID: m.next, ArgsHash: k.ArgsHash}
	m.byID[m.next] = id
	return *m.rows[id], true, nil
}

func (m *memStore) Complete(_ context.Context, id int64, result []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.rows[m.byID[id]]
	r.Done, r.Result = true, result
	return nil
}

func (m *memStore) Release(_ context.Context, id int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.rows, m.byID[id])
	return nil
}

func withKey(key any) context.Context {
	return capabilities.WithRequestMeta(context.Background(), map[string]any{capabilities.MetaIdempotencyKey: key})
}

func TestIdempotencyKeyRules(t *testing.T) {
	store := newMemStore()
	reg := capabilities.NewRegistry(capabilities.Options{Idempotency: store, NoBuiltins: true})
	var runs int
	var fail error
	mk := func(name string, ann capabilities.Annotations) capabilities.Capability {
		return capabilities.Define(capabilities.Spec[echoIn, capabilities.Result]{
			Name: name, Domain: "test", Description: "test", Annotations: &ann,
			Handler: func(_ context.Context, _ *capabilities.Call, in echoIn) (capabilities.Result, error) {
				runs++
				if fail != nil {
					return capabilities.Result{}, fail
				}
				return capabilities.Result{Content: []capabilities.Content{capabilities.Text{Text: in.Text}, capabilities.ResourceLink{URI: "x:/1", Name: "one"}}, Structured: map[string]any{"n": runs}}, nil
			},
		})
	}
	if err := reg.Register(mk("doIt", write), mk("setIt", capabilities.Annotations{Idempotent: true})); err != nil {
		t.Fatal(err)
	}
	user := capabilitiestest.User("u1")

	// Same key, same arguments in another key order: replayed, content
	// and structured content intact.
	first, err := reg.Invoke(withKey("k1"), user, "doIt", []byte(`{"text":"a","times":1}`))
	if err != nil {
		t.Fatal(err)
	}
	again, err := reg.Invoke(withKey("k1"), user, "doIt", []byte(` {"times":1, "text":"a"}`))
	if err != nil || runs != 1 {
		t.Fatalf("replay: runs %d, err %v", runs, err)
	}
	if len(again.Content) != 2 || again.Content[0].(capabilities.Text).Text != "a" || again.Content[1].(capabilities.ResourceLink).Name != "one" || !strings.Contains(string(again.Structured.(json.RawMessage)), `"n":1`) {
		t.Fatalf("replayed %+v, first %+v", again, first)
	}
	// Other arguments: conflict.
	if _, err := reg.Invoke(withKey("k1"), user, "doIt", []byte(`{"text":"b"}`)); capabilities.CodeOf(err) != capabilities.CodeConflict || runs != 1 {
		t.Fatalf("other arguments: %v, runs %d", err, runs)
	}
	// Another user, same key: runs.
	if _, err := reg.Invoke(withKey("k1"), capabilitiestest.User("u2"), "doIt", []byte(`{"text":"a","times":1}`)); err != nil || runs != 2 {
		t.Fatalf("other user: %v, runs %d", err, runs)
	}
	// An idempotent capability ignores the key.
	for range 2 {
		if _, err := reg.Invoke(withKey("k1"), user, "setIt", []byte(`{"text":"a"}`)); err != nil {
			t.Fatal(err)
		}
	}
	if runs != 4 {
		t.Fatalf("idempotent capability: runs %d, want 4", runs)
	}
	// A domain error is stored and replayed; an internal error releases
	// the key so a retry runs.
	fail = capabilities.Errorf(capabilities.CodeNotFound, "no such thing")
	for range 2 {
		if _, err := reg.Invoke(withKey("k2"), user, "doIt", []byte(`{"text":"a"}`)); capabilities.CodeOf(err) != capabilities.CodeNotFound || !strings.Contains(err.Error(), "no such thing") {
			t.Fatalf("domain error: %v", err)
		}
	}
	if runs != 5 {
		t.Fatalf("domain error replay: runs %d, want 5", runs)
	}
	fail = errors.New("database down")
	if _, err := reg.Invoke(withKey("k3"), user, "doIt", []byte(`{"text":"a"}`)); capabilities.CodeOf(err) != capabilities.CodeInternal {
		t.Fatalf("internal error: %v", err)
	}
	fail = nil
	if _, err := reg.Invoke(withKey("k3"), user, "doIt", []byte(`{"text":"a"}`)); err != nil || runs != 7 {
		t.Fatalf("retry after an internal error: %v, runs %d (want 7)", err, runs)
	}
	// Malformed keys: invalid input, nothing runs.
	for _, bad := range []any{"", strings.Repeat("é", 129), 7, nil, "a\nb"} {
		_, err := reg.Invoke(withKey(bad), user, "doIt", []byte(`{"text":"a"}`))
		if capabilities.CodeOf(err) != capabilities.CodeInvalidInput || !errors.Is(err, capabilities.ErrInvalidRequestMeta) {
			t.Errorf("key %#v: %v", bad, err)
		}
	}
	if _, err := reg.Invoke(withKey(strings.Repeat("é", 128)), user, "doIt", []byte(`{"text":"a"}`)); err != nil {
		t.Errorf("128 characters: %v", err)
	}
	// An anonymous caller cannot use a key.
	if _, err := reg.Invoke(withKey("k9"), capabilities.Caller{AllScopes: true}, "doIt", []byte(`{"text":"a"}`)); err == nil {
		t.Error("anonymous caller with a key ran")
	}
}

// A duplicate arriving while the first call runs waits for its result.
func TestIdempotencyConcurrentDuplicateWaits(t *testing.T) {
	store := newMemStore()
	reg := capabilities.NewRegistry(capabilities.Options{Idempotency: store, NoBuiltins: true})
	var mu sync.Mutex
	runs := 0
	held := make(chan struct{})
	ann := write
	if err := reg.Register(capabilities.Define(capabilities.Spec[echoIn, echoOut]{
		Name: "slow", Domain: "test", Description: "test", Annotations: &ann,
		Handler: func(_ context.Context, _ *capabilities.Call, in echoIn) (echoOut, error) {
			<-held
			mu.Lock()
			runs++
			mu.Unlock()
			return echoOut{Echo: in.Text}, nil
		},
	})); err != nil {
		t.Fatal(err)
	}
	user := capabilitiestest.User("u1")
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range 3 {
		wg.Go(func() { _, errs[i] = reg.Invoke(withKey("same"), user, "slow", []byte(`{"text":"a"}`)) })
	}
	time.Sleep(200 * time.Millisecond)
	close(held)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if runs != 1 {
		t.Fatalf("handler ran %d times, want 1", runs)
	}
}

// A duplicate of a call that keeps running is told so, clearly, and does
// not run the handler.
func TestIdempotencyStillRunning(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the idempotency wait (5 s)")
	}
	reg := capabilities.NewRegistry(capabilities.Options{Idempotency: newMemStore(), NoBuiltins: true})
	held := make(chan struct{})
	var runs atomicInt
	ann := write
	if err := reg.Register(capabilities.Define(capabilities.Spec[echoIn, echoOut]{
		Name: "stuck", Domain: "test", Description: "test", Annotations: &ann,
		Handler: func(_ context.Context, _ *capabilities.Call, in echoIn) (echoOut, error) {
			runs.add()
			<-held
			return echoOut{Echo: in.Text}, nil
		},
	})); err != nil {
		t.Fatal(err)
	}
	user := capabilitiestest.User("u1")
	first := make(chan error, 1)
	go func() {
		_, err := reg.Invoke(withKey("k"), user, "stuck", []byte(`{"text":"a"}`))
		first <- err
	}()
	for runs.get() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	_, err := reg.Invoke(withKey("k"), user, "stuck", []byte(`{"text":"a"}`))
	if capabilities.CodeOf(err) != capabilities.CodeConflict || !strings.Contains(err.Error(), "still running") {
		t.Fatalf("duplicate of a running call: %v", err)
	}
	close(held)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if runs.get() != 1 {
		t.Fatalf("handler ran %d times", runs.get())
	}
}

type atomicInt struct {
	mu sync.Mutex
	n  int
}

func (a *atomicInt) add() { a.mu.Lock(); a.n++; a.mu.Unlock() }
func (a *atomicInt) get() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n
}

// A keyed handler outlives an ordinary cancellation (the client went away
// or timed out: the retry gets its result) but ends when the transport
// stops the call on purpose (ErrCallStopped), and the stopped call does
// not spend the key.
func TestIdempotencyStopEndsKeyedCall(t *testing.T) {
	reg := capabilities.NewRegistry(capabilities.Options{Idempotency: newMemStore(), NoBuiltins: true})
	var runs atomicInt
	ann := write
	if err := reg.Register(capabilities.Define(capabilities.Spec[echoIn, echoOut]{
		Name: "hold", Domain: "test", Description: "test", Annotations: &ann,
		Handler: func(ctx context.Context, _ *capabilities.Call, in echoIn) (echoOut, error) {
			runs.add()
			select {
			case <-ctx.Done():
				return echoOut{}, ctx.Err()
			case <-time.After(300 * time.Millisecond):
				return echoOut{Echo: in.Text}, nil
			}
		},
	})); err != nil {
		t.Fatal(err)
	}
	user := capabilitiestest.User("u1")
	call := func(key string, cause error) (echoOut, error) {
		ctx, cancel := context.WithCancelCause(withKey(key))
		go func() { time.Sleep(30 * time.Millisecond); cancel(cause) }()
		res, err := reg.Invoke(ctx, user, "hold", []byte(`{"text":"a"}`))
		if err != nil {
			return echoOut{}, err
		}
		var out echoOut
		b, _ := json.Marshal(res.Structured)
		_ = json.Unmarshal(b, &out)
		return out, nil
	}
	// The client went away: the handler finishes, the retry replays.
	if out, err := call("gone", context.Canceled); err != nil || out.Echo != "a" {
		t.Fatalf("ordinary cancellation: %+v %v", out, err)
	}
	if out, err := call("gone", context.Canceled); err != nil || out.Echo != "a" || runs.get() != 1 {
		t.Fatalf("retry: %+v %v, runs %d", out, err, runs.get())
	}
	// Stopped on purpose: the handler ends, and the key runs again.
	start := time.Now()
	if _, err := call("stopped", capabilities.ErrCallStopped); err == nil || time.Since(start) > 250*time.Millisecond {
		t.Fatalf("stopped call: err %v after %v, want it ended at once", err, time.Since(start))
	}
	if _, err := reg.Invoke(withKey("stopped"), user, "hold", []byte(`{"text":"a"}`)); err != nil || runs.get() != 3 {
		t.Fatalf("after a stop: %v, runs %d (want 3)", err, runs.get())
	}
}

// A read-only capability ignores an idempotency key (reads have no effect
// to run once): its result is not stored, and a repeat reads afresh
// instead of replaying what may since have changed or been deleted.
func TestIdempotencyKeyIgnoredByReads(t *testing.T) {
	store := newMemStore()
	reg := capabilities.NewRegistry(capabilities.Options{Idempotency: store, NoBuiltins: true})
	value := "secret-1"
	if err := reg.Register(capabilities.Define(capabilities.Spec[echoIn, echoOut]{
		Name: "readIt", Domain: "test", Description: "test", Annotations: &capabilities.Annotations{ReadOnly: true},
		Handler: func(context.Context, *capabilities.Call, echoIn) (echoOut, error) {
			return echoOut{Echo: value}, nil
		},
	})); err != nil {
		t.Fatal(err)
	}
	user := capabilitiestest.User("u1")
	if _, err := reg.Invoke(withKey("r"), user, "readIt", []byte(`{"text":"x"}`)); err != nil {
		t.Fatal(err)
	}
	value = "deleted"
	res, err := reg.Invoke(withKey("r"), user, "readIt", []byte(`{"text":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(res.Structured); !strings.Contains(string(b), "deleted") {
		t.Fatalf("a keyed read replayed a stored result: %s", b)
	}
	if store.claims != 0 {
		t.Fatalf("a read claimed %d keys", store.claims)
	}
}

// The key belongs to the request's call only: a handler that invokes other
// capabilities (in-line, with its own context) does not pass it on, so
// its inner calls all run, and twice with the same arguments is twice.
func TestIdempotencyKeyNotInheritedByInnerCalls(t *testing.T) {
	store := newMemStore()
	reg := capabilities.NewRegistry(capabilities.Options{Idempotency: store, NoBuiltins: true})
	var inner atomicInt
	ann := write
	if err := reg.Register(
		capabilities.Define(capabilities.Spec[echoIn, echoOut]{
			Name: "addOne", Domain: "test", Description: "test", Annotations: &ann,
			Handler: func(context.Context, *capabilities.Call, echoIn) (echoOut, error) {
				inner.add()
				return echoOut{Echo: "added"}, nil
			},
		}),
		capabilities.Define(capabilities.Spec[echoIn, echoOut]{
			Name: "addTwo", Domain: "test", Description: "test", Annotations: &ann,
			Handler: func(ctx context.Context, call *capabilities.Call, in echoIn) (echoOut, error) {
				for range 2 {
					if _, err := reg.Invoke(ctx, call.Caller, "addOne", []byte(`{"text":"x"}`)); err != nil {
						return echoOut{}, err
					}
				}
				return echoOut{Echo: "two"}, nil
			},
		}),
	); err != nil {
		t.Fatal(err)
	}
	user := capabilitiestest.User("u1")
	for range 2 { // the retry replays the outer call
		if _, err := reg.Invoke(withKey("batch"), user, "addTwo", []byte(`{"text":"x"}`)); err != nil {
			t.Fatal(err)
		}
	}
	if inner.get() != 2 {
		t.Fatalf("inner calls ran %d times, want 2 (once per inner call, none on the replay)", inner.get())
	}
}

// renewStore is a memStore that counts renewals of running claims.
type renewStore struct {
	*memStore
	renewals atomicInt
}

func (s *renewStore) Renew(_ context.Context, id int64) error {
	s.mu.Lock()
	running := s.rows[s.byID[id]] != nil && !s.rows[s.byID[id]].Done
	s.mu.Unlock()
	if running {
		s.renewals.add()
	}
	return nil
}

// While a keyed handler runs, its claim is renewed (so a store can tell a
// live claim from one whose replica died); renewals stop when it ends.
func TestIdempotencyClaimRenewedWhileRunning(t *testing.T) {
	defer capabilities.SetIdempotencyRenew(10 * time.Millisecond)()
	store := &renewStore{memStore: newMemStore()}
	reg := capabilities.NewRegistry(capabilities.Options{Idempotency: store, NoBuiltins: true})
	ann := write
	if err := reg.Register(capabilities.Define(capabilities.Spec[echoIn, echoOut]{
		Name: "long", Domain: "test", Description: "test", Annotations: &ann,
		Handler: func(_ context.Context, _ *capabilities.Call, in echoIn) (echoOut, error) {
			time.Sleep(150 * time.Millisecond)
			return echoOut{Echo: in.Text}, nil
		},
	})); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Invoke(withKey("k"), capabilitiestest.User("u1"), "long", []byte(`{"text":"a"}`)); err != nil {
		t.Fatal(err)
	}
	n := store.renewals.get()
	if n < 3 {
		t.Fatalf("renewed %d times during a 150 ms call every 10 ms", n)
	}
	time.Sleep(50 * time.Millisecond)
	if store.renewals.get() != n {
		t.Fatal("renewals went on after the call ended")
	}
}

// A call that ran but whose result cannot be stored (structured content
// that does not marshal) spends its key: a retry is told so, clearly, and
// does not run the handler again.
func TestIdempotencyUnstorableResultSpendsTheKey(t *testing.T) {
	store := newMemStore()
	reg := capabilities.NewRegistry(capabilities.Options{Idempotency: store, NoBuiltins: true})
	var runs atomicInt
	ann := write
	if err := reg.Register(capabilities.Define(capabilities.Spec[echoIn, capabilities.Result]{
		Name: "odd", Domain: "test", Description: "test", Annotations: &ann,
		Handler: func(context.Context, *capabilities.Call, echoIn) (capabilities.Result, error) {
			runs.add()
			return capabilities.Result{Content: []capabilities.Content{capabilities.Text{Text: "done"}}, Structured: map[string]any{"c": make(chan int)}}, nil
		},
	})); err != nil {
		t.Fatal(err)
	}
	user := capabilitiestest.User("u1")
	if _, err := reg.Invoke(withKey("k"), user, "odd", []byte(`{"text":"a"}`)); err != nil {
		t.Fatal(err)
	}
	_, err := reg.Invoke(withKey("k"), user, "odd", []byte(`{"text":"a"}`))
	if capabilities.CodeOf(err) != capabilities.CodeConflict || !strings.Contains(err.Error(), "already ran") || runs.get() != 1 {
		t.Fatalf("retry of a call whose result was not kept: %v, runs %d", err, runs.get())
	}
}

// A handler's quota refusal says the call did not happen: it is not
// stored, so the client's retry with the same key after the quota resets
// runs the call.
func TestIdempotencyQuotaRefusalNotStored(t *testing.T) {
	reg := capabilities.NewRegistry(capabilities.Options{Idempotency: newMemStore(), NoBuiltins: true})
	spent := true
	var runs atomicInt
	ann := write
	if err := reg.Register(capabilities.Define(capabilities.Spec[echoIn, echoOut]{
		Name: "fetch", Domain: "test", Description: "test", Annotations: &ann,
		Handler: func(_ context.Context, _ *capabilities.Call, in echoIn) (echoOut, error) {
			runs.add()
			if spent {
				return echoOut{}, &capabilities.Error{Code: capabilities.CodeQuotaExceeded, Message: "daily quota spent", RetryAfter: time.Now().Add(time.Hour)}
			}
			return echoOut{Echo: in.Text}, nil
		},
	})); err != nil {
		t.Fatal(err)
	}
	user := capabilitiestest.User("u1")
	_, err := reg.Invoke(withKey("k"), user, "fetch", []byte(`{"text":"a"}`))
	if capabilities.CodeOf(err) != capabilities.CodeQuotaExceeded {
		t.Fatalf("first call: %v", err)
	}
	if _, ok := capabilities.RetryAfterOf(err); !ok {
		t.Fatal("the quota refusal lost its retry time")
	}
	spent = false
	if _, err := reg.Invoke(withKey("k"), user, "fetch", []byte(`{"text":"a"}`)); err != nil || runs.get() != 2 {
		t.Fatalf("retry after the quota reset: %v, runs %d (want 2)", err, runs.get())
	}
}
