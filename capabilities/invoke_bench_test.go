package capabilities_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
)

type benchEchoIn struct {
	Text string `json:"text" jsonschema:"text to echo"`
}

type benchAuditor struct{ n int }

func (a *benchAuditor) RecordDenial(context.Context, capabilities.Denial) { a.n++ }

// benchQuota counts calls per user in memory.
type benchQuota struct {
	mu sync.Mutex
	n  map[string]int64
}

func (q *benchQuota) Allow(_ context.Context, c capabilities.Caller, _ string) error {
	q.mu.Lock()
	q.n[c.UserID]++
	q.mu.Unlock()
	return nil
}

// BenchmarkInvokeChokePoint is the choke point of one capability call: account state,
// role and permission, scope, quota, input validation, the handler.
func BenchmarkInvokeChokePoint(b *testing.B) {
	aud := &benchAuditor{}
	r := capabilities.NewRegistry(capabilities.Options{
		Auditor: aud,
		Quota:   &benchQuota{n: map[string]int64{}},
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	err := r.Register(capabilities.Define(capabilities.Spec[benchEchoIn, capabilities.Result]{
		Name: "benchEcho", Domain: "bench", Description: "Echoes its text.",
		Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
		Requires:    capabilities.Requirement{Role: capabilities.RoleUser, Permissions: []capabilities.Permission{capabilities.ReadUserOwn}},
		Handler: func(_ context.Context, _ *capabilities.Call, in benchEchoIn) (capabilities.Result, error) {
			return capabilities.TextResult(in.Text), nil
		},
	}))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	args := json.RawMessage(`{"text":"hello"}`)
	user := capabilities.Caller{
		UserID: "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0", Username: "bench",
		Roles:       []string{capabilities.RoleUser},
		Permissions: []capabilities.Permission{capabilities.CreateUserOwn, capabilities.ReadUserOwn, capabilities.UpdateUserOwn, capabilities.DeleteUserOwn},
		State:       capabilities.AccountActive, Scopes: []string{"mcp"}, Interactive: true,
	}
	b.Run("allowed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := r.Invoke(ctx, user, "benchEcho", args); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("denied", func(b *testing.B) {
		noRole := user
		noRole.Roles, noRole.Permissions = nil, nil
		b.ReportAllocs()
		for b.Loop() {
			if _, err := r.Invoke(ctx, noRole, "benchEcho", args); err == nil {
				b.Fatal("a caller without the role was served")
			}
		}
	})
}
