package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
)

type fakeWriter struct {
	topic   string
	owner   int64
	payload []byte
}

func (w *fakeWriter) AddOwned(_ context.Context, _ bun.IDB, topic string, owner int64, payload []byte) error {
	w.topic, w.owner, w.payload = topic, owner, payload
	return nil
}

func TestRegisterRefusesBadKinds(t *testing.T) {
	q := New(&fakeWriter{}, nil)
	ok := func(context.Context, Job) error { return nil }
	if err := q.Register("note.wordcount", ok); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		kind string
		h    Handler
	}{{"note.wordcount", ok}, {"Bad Kind", ok}, {"", ok}, {"nohandler", nil}} {
		if err := q.Register(tc.kind, tc.h); err == nil {
			t.Errorf("Register(%q) accepted", tc.kind)
		}
	}
	if err := q.Enqueue(context.Background(), nil, "unregistered", "", nil); !errors.Is(err, ErrUnknownKind) {
		t.Fatalf("unknown kind: %v", err)
	}
}

// The relay's handler hands the kind, user and payload to the registered
// handler, and Job.Invoke reaches the server's invoker as that user.
func TestTopicsDeliverTheJob(t *testing.T) {
	w := &fakeWriter{}
	var invokedAs, invokedName string
	q := New(w, func(_ context.Context, userID, name string, args json.RawMessage) (capabilities.Result, error) {
		invokedAs, invokedName = userID, name
		return capabilities.Result{}, nil
	})
	var got Job
	if err := q.Register("greet", func(ctx context.Context, j Job) error {
		got = j
		_, err := j.Invoke(ctx, "whoami", nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := q.Enqueue(context.Background(), nil, "greet", "", map[string]string{"hello": "world"}); err != nil {
		t.Fatal(err)
	}
	if w.topic != TopicPrefix+"greet" || w.owner != 0 {
		t.Fatalf("written to %q owner %d", w.topic, w.owner)
	}
	h := q.Topics()[TopicPrefix+"greet"]
	// An ownerless job cannot act for anyone.
	if err := h(context.Background(), w.payload); err == nil || invokedAs != "" {
		t.Fatalf("an ownerless job invoked a capability (as %q)", invokedAs)
	}
	// A job for a user (the envelope Enqueue writes for one).
	env, _ := json.Marshal(envelope{User: "u1", Payload: json.RawMessage(`{"hello":"world"}`)})
	if err := h(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	var p map[string]string
	if got.Kind != "greet" || got.UserID != "u1" || got.Decode(&p) != nil || p["hello"] != "world" || invokedAs != "u1" || invokedName != "whoami" {
		t.Fatalf("job %+v, invoked as %q %q", got, invokedAs, invokedName)
	}
	if err := h(context.Background(), []byte("not json")); err == nil {
		t.Fatal("a corrupt payload was accepted")
	}
}
