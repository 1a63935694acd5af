package accounts_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// keptResults is an idempotency store that remembers every result it is
// asked to keep.
type keptResults struct {
	capabilities.IdempotencyStore
	mu   sync.Mutex
	kept [][]byte
}

func (k *keptResults) Claim(context.Context, capabilities.IdempotencyKey) (capabilities.IdempotencyRecord, bool, error) {
	return capabilities.IdempotencyRecord{ID: 1}, true, nil
}

func (k *keptResults) Complete(_ context.Context, _ int64, result []byte) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.kept = append(k.kept, bytes.Clone(result))
	return nil
}

func (k *keptResults) Release(context.Context, int64) error { return nil }

// operatorUserCreate's one-time password-setup token (and a password
// given to it) reach the operator in the answer and nowhere else: not the
// registry's log, not a span, not the operator's audit record, not an
// idempotency store, even when the call carries an idempotency key.
func TestOperatorUserCreateSecretsStayInTheAnswer(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		svc, _ := newService(t, s, accounts.Config{})
		var logs bytes.Buffer
		spans := tracetest.NewSpanRecorder()
		rec := &operatorCalls{}
		kept := &keptResults{}
		reg := capabilities.NewRegistry(capabilities.Options{NoBuiltins: true, OperatorAudit: rec, Idempotency: kept,
			Logger:         slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))})
		if err := reg.Register(svc.OperatorCapabilities()...); err != nil {
			t.Fatal(err)
		}
		var secrets []string
		for i, ctx := range []context.Context{context.Background(),
			capabilities.WithRequestMeta(context.Background(), map[string]any{capabilities.MetaIdempotencyKey: "k-1"})} {
			email := []string{"ann@example.com", "ben@example.com"}[i]
			res, err := reg.Invoke(ctx, capabilities.OperatorCaller(), "operatorUserCreate",
				json.RawMessage(`{"email":"`+email+`","username":"`+strings.Split(email, "@")[0]+`"}`))
			if err != nil {
				continue // refused (the key needs a signed-in caller): nothing to leak
			}
			var out accounts.OperatorUserCreateOutput
			raw, _ := json.Marshal(res.Structured)
			if err := json.Unmarshal(raw, &out); err != nil || out.SetupToken == "" {
				t.Fatalf("create %s = %s, %v", email, raw, err)
			}
			secrets = append(secrets, out.SetupToken)
		}
		const password = "correct horse battery staple 42"
		if _, err := reg.Invoke(context.Background(), capabilities.OperatorCaller(), "operatorUserCreate",
			json.RawMessage(`{"email":"cat@example.com","username":"cat","password":"`+password+`"}`)); err != nil {
			t.Fatal(err)
		}
		if len(secrets) == 0 {
			t.Fatal("no setup token was handed out")
		}
		secrets = append(secrets, password)
		var seen strings.Builder
		seen.WriteString(logs.String())
		for _, sp := range spans.Ended() {
			seen.WriteString(sp.Name())
			for _, a := range sp.Attributes() {
				seen.WriteString(" " + string(a.Key) + "=" + a.Value.Emit())
			}
			for _, e := range sp.Events() {
				seen.WriteString(" " + e.Name)
				for _, a := range e.Attributes {
					seen.WriteString(" " + string(a.Key) + "=" + a.Value.Emit())
				}
			}
		}
		rec.mu.Lock()
		for _, c := range rec.calls {
			seen.WriteString(c.Name + " " + c.Subject + " " + c.Outcome + "\n")
		}
		rec.mu.Unlock()
		kept.mu.Lock()
		for _, k := range kept.kept {
			seen.Write(k)
		}
		kept.mu.Unlock()
		for _, secret := range secrets {
			if strings.Contains(seen.String(), secret) {
				t.Errorf("a secret of operatorUserCreate (%q…) was kept outside the answer:\n%s", secret[:4], seen.String())
			}
		}
		if len(spans.Ended()) == 0 {
			t.Error("no span was recorded: the trace was not looked at")
		}
	})
}
