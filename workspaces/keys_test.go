package workspaces_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
	"github.com/enclave-mcp/enclave/workspaces"
)

// keyCaller is the caller a transport builds for a verified key.
func (e *env) keyCaller(key string) capabilities.Caller {
	e.t.Helper()
	g, err := e.svc.VerifyKey(context.Background(), key)
	if err != nil {
		e.t.Fatalf("verify key: %v", err)
	}
	return capabilities.Caller{UserID: g.UserID, State: capabilities.AccountActive, Interactive: true,
		Only: g.Only, Credential: g.Credential}
}

func TestWorkspaceKeys(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st, 0)
		ann, bob := e.user("ann"), e.user("bob")
		ws, other := e.create(ann, "Keys"), e.create(ann, "Other")
		e.join(ann, bob, ws, workspaces.RoleAdmin)
		session := ann
		session.Session = true

		// Only an owner, in a web session, creates keys.
		wantCode(t, e.call(ann, "workspaceKeyCreate", map[string]any{"workspaceId": ws, "name": "ci", "maxRole": "admin"}, nil),
			capabilities.CodeNotFound, "key creation with a token")
		bobSession := bob
		bobSession.Session = true
		wantCode(t, e.call(bobSession, "workspaceKeyCreate", map[string]any{"workspaceId": ws, "name": "ci", "maxRole": "admin"}, nil),
			capabilities.CodeNotFound, "key creation by an admin")
		var writer, reader workspaces.NewKey
		e.must(session, "workspaceKeyCreate", map[string]any{"workspaceId": ws, "name": "writer", "maxRole": "admin"}, &writer)
		e.must(session, "workspaceKeyCreate", map[string]any{"workspaceId": ws, "name": "reader", "maxRole": "viewer"}, &reader)
		if !strings.HasPrefix(writer.Key, workspaces.KeyPrefix) {
			t.Fatalf("key %q", writer.Key)
		}
		// Hashed at rest, never listed.
		var keys workspaces.KeysOutput
		e.must(ann, "workspaceKeyList", map[string]any{"workspaceId": ws}, &keys)
		if len(keys.Keys) != 2 {
			t.Fatalf("keys = %+v", keys)
		}
		n, err := st.DB.NewSelect().Table("workspace_api_keys").Where("key_hash = ?", writer.Key).Count(context.Background())
		if err != nil || n != 0 {
			t.Fatalf("a key is stored in clear: %d %v", n, err)
		}

		w, r := e.keyCaller(writer.Key), e.keyCaller(reader.Key)
		var res addResult
		e.must(w, "counterAdd", map[string]any{"workspaceId": ws, "counter": "k", "by": 2}, &res)
		e.must(r, "counterGet", map[string]any{"workspaceId": ws, "counter": "k"}, &res)
		if res.Result.Value != 2 {
			t.Fatalf("read through key: %+v", res)
		}
		wantCode(t, e.call(r, "counterAdd", map[string]any{"workspaceId": ws, "counter": "k", "by": 1}, nil), capabilities.CodeNotFound, "viewer key writing")

		// Another workspace of the same owner answers like an unknown one.
		errOther := e.call(w, "counterGet", map[string]any{"workspaceId": other, "counter": "k"}, nil)
		errUnknown := e.call(w, "counterGet", map[string]any{"workspaceId": "w_cccccccccccccccccccccccccc", "counter": "k"}, nil)
		wantCode(t, errOther, capabilities.CodeNotFound, "key on another workspace")
		if errOther.Error() != errUnknown.Error() {
			t.Fatalf("other %q vs unknown %q", errOther, errUnknown)
		}
		var list workspaces.ListOutput
		e.must(w, "workspaceList", nil, &list)
		if len(list.Workspaces) != 1 || list.Workspaces[0].ID != ws {
			t.Fatalf("key lists %+v", list)
		}
		// No capability outside the workspace's: account, membership, keys.
		for _, name := range []string{"whoami", "workspaceCreate", "workspaceMemberInvite", "workspaceKeyCreate", "workspaceKeyList", "workspaceDelete", "workspaceLeave"} {
			wantCode(t, e.call(w, name, map[string]any{"workspaceId": ws, "name": "x"}, nil), capabilities.CodeNotFound, name+" with a key")
		}

		// Revoked: refused at once, also for a caller built before.
		e.must(ann, "workspaceKeyRevoke", map[string]any{"workspaceId": ws, "keyId": writer.ID}, nil)
		if _, err := e.svc.VerifyKey(context.Background(), writer.Key); !errors.Is(err, workspaces.ErrInvalidKey) {
			t.Fatalf("revoked key verified: %v", err)
		}
		wantCode(t, e.call(w, "counterGet", map[string]any{"workspaceId": ws, "counter": "k"}, nil), capabilities.CodeNotFound, "revoked key")
		if _, err := e.svc.VerifyKey(context.Background(), workspaces.KeyPrefix+"NOTAKEY"); !errors.Is(err, workspaces.ErrInvalidKey) {
			t.Fatalf("unknown key verified: %v", err)
		}
		// A key's role never exceeds its maker's: demoted makers weaken keys.
		var owner2 workspaces.NewKey
		bobSession.Session = true
		e.must(ann, "workspaceMemberRoleSet", map[string]any{"workspaceId": ws, "userId": bob.UserID, "role": "owner"}, nil)
		e.must(bobSession, "workspaceKeyCreate", map[string]any{"workspaceId": ws, "name": "bob", "maxRole": "owner"}, &owner2)
		e.must(ann, "workspaceMemberRoleSet", map[string]any{"workspaceId": ws, "userId": bob.UserID, "role": "viewer"}, nil)
		wantCode(t, e.call(e.keyCaller(owner2.Key), "counterAdd", map[string]any{"workspaceId": ws, "counter": "k", "by": 1}, nil),
			capabilities.CodeNotFound, "key of a demoted maker")
	})
}
