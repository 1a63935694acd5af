package oauth_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

func TestGrantCapabilities(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		ctx := context.Background()
		e := newEnv(t, st)
		_, alice, aliceTok := e.signIn()
		_, bob, bobTok := e.signIn()
		owners := map[string]int64{"alice": alice, "bob": bob}
		ownerOf := func(_ context.Context, c capabilities.Caller) (capabilities.Owner, error) {
			id, ok := owners[c.UserID]
			if !ok {
				return storage.Owner{}, errors.New("no such user")
			}
			return storage.Owner{ID: id, StableID: c.UserID}, nil
		}
		reg := capabilities.NewRegistry(capabilities.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err := reg.Register(e.srv.Capabilities(ownerOf)...); err != nil {
			t.Fatal(err)
		}
		v, _ := capabilities.NewVocabulary()
		caller := func(id string) capabilities.Caller {
			return capabilities.Caller{UserID: id, Roles: []string{"user"}, Permissions: v.RolePermissions(capabilities.RoleUser),
				State: capabilities.AccountActive, AllScopes: true, Interactive: true}
		}
		invoke := func(c capabilities.Caller, name, args string) string {
			t.Helper()
			res, err := reg.Invoke(ctx, c, name, json.RawMessage(args))
			if err != nil {
				t.Fatalf("%s %s: %v", name, args, err)
			}
			out, _ := json.Marshal(res.Structured)
			return string(out)
		}
		var list struct {
			Grants []struct{ ID, ClientName string }
		}
		if err := json.Unmarshal([]byte(invoke(caller("alice"), "oauthGrantList", `{}`)), &list); err != nil || len(list.Grants) != 1 || list.Grants[0].ClientName == "" {
			t.Fatalf("alice's list: %+v %v", list, err)
		}
		aliceGrant := list.Grants[0].ID
		if out := invoke(caller("bob"), "oauthGrantList", `{}`); strings.Contains(out, aliceGrant) {
			t.Fatalf("bob sees alice's grant: %s", out)
		}
		if out := invoke(caller("bob"), "oauthGrantRevoke", `{"id":"`+aliceGrant+`"}`); out != `{"revoked":false}` {
			t.Fatalf("bob revoking alice's grant: %s", out)
		}
		if e.mcpStatus(aliceTok.AccessToken) != http.StatusOK {
			t.Fatal("bob's attempt revoked alice's grant")
		}
		background := caller("alice")
		background.Interactive = false
		if _, err := reg.Invoke(ctx, background, "oauthGrantRevoke", json.RawMessage(`{"id":"`+aliceGrant+`"}`)); err == nil {
			t.Fatal("a background caller revoked a grant")
		}
		if out := invoke(caller("alice"), "oauthGrantRevoke", `{"id":"`+aliceGrant+`"}`); out != `{"revoked":true}` {
			t.Fatalf("alice's revoke: %s", out)
		}
		if e.mcpStatus(aliceTok.AccessToken) != http.StatusUnauthorized || e.mcpStatus(bobTok.AccessToken) != http.StatusOK {
			t.Fatal("revocation hit the wrong grant")
		}
	})
}
