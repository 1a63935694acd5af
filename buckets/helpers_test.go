package buckets_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/buckets"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
)

// fixture is a migrated store with two users, alice and bob, a registry
// holding the storage capabilities, and the service behind them.
type fixture struct {
	store        *storage.Store
	reg          *capabilities.Registry
	svc          *buckets.Service
	alice, bob   storage.Owner
	aliceC, bobC capabilities.Caller
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func setup(t testing.TB, s *storage.Store, opts buckets.Options) *fixture {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	f := &fixture{store: s}
	owners := map[string]storage.Owner{}
	v, _ := capabilities.NewVocabulary()
	mk := func(id int64, name string) (storage.Owner, capabilities.Caller) {
		o := storage.Owner{ID: id, StableID: strings.Repeat(name[:1], 64)}
		if _, err := s.DB.ExecContext(ctx, "INSERT INTO users (id, stable_user_id, email, username, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
			o.ID, o.StableID, name+"@example.com", name, now, now); err != nil {
			t.Fatal(err)
		}
		owners[o.StableID] = o
		return o, capabilities.Caller{UserID: o.StableID, Roles: []string{capabilities.RoleUser}, Permissions: v.RolePermissions(capabilities.RoleUser),
			State: capabilities.AccountActive, AllScopes: true, Interactive: true}
	}
	f.alice, f.aliceC = mk(1, "alice")
	f.bob, f.bobC = mk(2, "bob")
	f.reg = capabilities.NewRegistry(capabilities.Options{Vocabulary: v, Logger: quiet})
	var err error
	f.svc, err = buckets.New(buckets.Config{Options: opts, Store: s, Registry: f.reg, Logger: quiet,
		Owners: func(_ context.Context, c capabilities.Caller) (capabilities.Owner, error) {
			o, ok := owners[c.UserID]
			if !ok {
				return capabilities.Owner{}, fmt.Errorf("no such user")
			}
			return o, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.reg.Register(f.svc.Capabilities()...); err != nil {
		t.Fatal(err)
	}
	return f
}

// invoke calls a capability through the registry and returns its
// structured output as JSON.
func (f *fixture) invoke(c capabilities.Caller, name string, args any) (json.RawMessage, error) {
	raw, ok := args.(json.RawMessage)
	if !ok {
		b, err := json.Marshal(args)
		if err != nil {
			return nil, err
		}
		raw = b
	}
	res, err := f.reg.Invoke(context.Background(), c, name, raw)
	if err != nil {
		return nil, err
	}
	return json.Marshal(res.Structured)
}

// must is invoke that fails the test on an error, decoding into out.
func (f *fixture) must(t testing.TB, c capabilities.Caller, name string, args, out any) {
	t.Helper()
	b, err := f.invoke(c, name, args)
	if err != nil {
		t.Fatalf("%s(%v): %v", name, args, err)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: decode %s: %v", name, b, err)
		}
	}
}

// wantCode fails the test unless err carries code.
func wantCode(t testing.TB, err error, code capabilities.Code) {
	t.Helper()
	if capabilities.CodeOf(err) != code {
		t.Fatalf("got %v, want %s", err, code)
	}
}

type counters struct{ Bytes, Keys int64 }

// usage reads o's authoritative counters, and what o's rows hold.
func (f *fixture) usage(t testing.TB, o storage.Owner) (counted, stored counters) {
	t.Helper()
	ctx := context.Background()
	err := f.store.DB.NewRaw("SELECT bytes, key_count FROM storage_usage WHERE user_id = ?", o.ID).Scan(ctx, &counted.Bytes, &counted.Keys)
	if err != nil && !strings.Contains(err.Error(), "no rows") {
		t.Fatal(err)
	}
	if err := f.store.DB.NewRaw("SELECT COALESCE(SUM(bytes), 0), COUNT(*) FROM storage_entries WHERE user_id = ?", o.ID).Scan(ctx, &stored.Bytes, &stored.Keys); err != nil {
		t.Fatal(err)
	}
	return counted, stored
}

// rows counts the rows of table owned by o.
func (f *fixture) rows(t testing.TB, table string, o storage.Owner) int64 {
	t.Helper()
	n, err := f.store.DB.NewSelect().Table(table).Where("user_id = ?", o.ID).Count(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func set(storageID, key string, value any) map[string]any {
	return map[string]any{"storageId": storageID, "key": key, "value": value}
}

type getOut struct {
	Found    bool            `json:"found"`
	Value    json.RawMessage `json:"value"`
	Revision int64           `json:"revision"`
}

type listOut struct {
	Keys []struct {
		Key      string `json:"key"`
		Revision int64  `json:"revision"`
		Bytes    int64  `json:"bytes"`
	} `json:"keys"`
	NextCursor string `json:"nextCursor"`
}

func (l listOut) names() []string {
	var out []string
	for _, k := range l.Keys {
		out = append(out, k.Key)
	}
	return out
}

type bucketsOut struct {
	Buckets []struct {
		StorageID string `json:"storageId"`
		Kind      string `json:"kind"`
		Bytes     int64  `json:"bytes"`
		Keys      int64  `json:"keys"`
	} `json:"buckets"`
	Usage struct {
		Bytes, Keys, MaxBytes, MaxKeys int64
	} `json:"usage"`
	NextCursor string `json:"nextCursor"`
}
