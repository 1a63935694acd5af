package adminaudit

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/internal/clientnet"
	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/storage"
)

// Admin records a call of a capability it knows, refused by its handler
// or not, with the admin's and the client network's hashes and the flag
// it changed; a capability it does not know is left as it is.
func TestAdminRecordsKnownCapabilities(t *testing.T) {
	ctx := context.Background()
	store, err := storage.Open(ctx, storage.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := migrations.ApplyAll(ctx, store.DB, nil, log); err != nil {
		t.Fatal(err)
	}
	l := audit.New(store, []byte("0123456789abcdef0123456789abcdef"), log)
	ok := func(context.Context, *capabilities.Call, json.RawMessage) (capabilities.Result, error) {
		return capabilities.Result{}, nil
	}
	failed := func(context.Context, *capabilities.Call, json.RawMessage) (capabilities.Result, error) {
		return capabilities.Result{}, errors.New("refused")
	}
	caps := Recorder{Log: l}.Admin([]capabilities.Capability{
		{Name: "adminFeatureSet", Handler: ok},
		{Name: "adminOAuthClientBlock", Handler: failed},
		{Name: "whoami", Handler: ok},
	})
	call := &capabilities.Call{Caller: capabilities.Caller{UserID: "admin-1"}}
	cctx := clientnet.WithAddr(ctx, "203.0.113.0/24")
	for _, c := range caps {
		_, _ = c.Handler(cctx, call, json.RawMessage(`{"name":"beta","enabled":true,"clientId":"c-9"}`))
	}
	page, err := l.Query(ctx, audit.Filter{}, storage.PageRequest{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]audit.Event{}
	for _, e := range page.Items {
		got[e.Action] = e
	}
	if len(got) != 2 {
		t.Fatalf("rows %v: want one for each known capability, none for whoami", got)
	}
	f := got["admin_feature_set"]
	if f.Result != audit.ResultSuccess || f.Reason != "beta on" || f.UserHash != l.HashUser("admin-1") || f.IPHash != l.HashIP("203.0.113.0/24") || f.IPHash == "" {
		t.Errorf("feature row %+v", f)
	}
	if b := got["admin_client_block"]; b.Result != audit.ResultFailure || b.ClientID != "c-9" {
		t.Errorf("client block row %+v: want a failure naming the client", b)
	}
}
