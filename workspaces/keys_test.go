package workspaces_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/migrations"
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
		wantCode(t, e.call(ann, "workspaceKeyCreate", map[string]any{"workspaceId": ws, "name": "ci", "maxRole": "admin", "currentPassword": keyPassword}, nil),
			capabilities.CodeNotFound, "key creation with a token")
		bobSession := bob
		bobSession.Session = true
		wantCode(t, e.call(bobSession, "workspaceKeyCreate", map[string]any{"workspaceId": ws, "name": "ci", "maxRole": "admin", "currentPassword": keyPassword}, nil),
			capabilities.CodeNotFound, "key creation by an admin")
		var writer, reader workspaces.NewKey
		e.must(session, "workspaceKeyCreate", map[string]any{"workspaceId": ws, "name": "writer", "maxRole": "admin", "currentPassword": keyPassword}, &writer)
		e.must(session, "workspaceKeyCreate", map[string]any{"workspaceId": ws, "name": "reader", "maxRole": "viewer", "currentPassword": keyPassword}, &reader)
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
		e.must(bobSession, "workspaceKeyCreate", map[string]any{"workspaceId": ws, "name": "bob", "maxRole": "owner", "currentPassword": keyPassword}, &owner2)
		e.must(ann, "workspaceMemberRoleSet", map[string]any{"workspaceId": ws, "userId": bob.UserID, "role": "viewer"}, nil)
		wantCode(t, e.call(e.keyCaller(owner2.Key), "counterAdd", map[string]any{"workspaceId": ws, "counter": "k", "by": 1}, nil),
			capabilities.CodeNotFound, "key of a demoted maker")
	})
}

// Making a key takes the account's current password (Config.Reauthenticate
// decides; enclave also asks for a second factor), and the owner is told
// by mail in the key's transaction; a refused attempt makes no key and
// sends nothing.
func TestWorkspaceKeyCreateNeedsPassword(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st, 0)
		ann := e.user("ann")
		ws := e.create(ann, "Keys")
		session := ann
		session.Session = true
		args := func(password string) map[string]any {
			m := map[string]any{"workspaceId": ws, "name": "ci", "maxRole": "admin"}
			if password != "" {
				m["currentPassword"] = password
			}
			return m
		}
		wantCode(t, e.call(session, "workspaceKeyCreate", args(""), nil), capabilities.CodeInvalidInput, "key without a password")
		err := e.call(session, "workspaceKeyCreate", args("not the password"), nil)
		wantCode(t, err, capabilities.CodeInvalidInput, "key with a wrong password")
		if !strings.Contains(err.Error(), "current password is not correct") {
			t.Fatalf("wrong password: %v", err)
		}
		bad := args(keyPassword)
		bad["name"] = "ci\nSubject: forged"
		wantCode(t, e.call(session, "workspaceKeyCreate", bad, nil), capabilities.CodeInvalidInput, "a key name of two lines")
		n, err := st.DB.NewSelect().Table("workspace_api_keys").Count(context.Background())
		if err != nil || n != 0 || len(e.keyMails) != 0 {
			t.Fatalf("refused attempts left %d keys, %d mails (%v)", n, len(e.keyMails), err)
		}
		var k workspaces.NewKey
		e.must(session, "workspaceKeyCreate", args(keyPassword), &k)
		if len(e.keyMails) != 1 {
			t.Fatalf("%d key mails", len(e.keyMails))
		}
		m := e.keyMails[0]
		if m.To != "ann@example.test" || m.Username != "ann" || m.WorkspaceName != "Keys" || m.KeyName != "ci" || m.MaxRole != workspaces.RoleAdmin {
			t.Fatalf("key mail %+v", m)
		}
		if strings.Contains(fmt.Sprint(m), k.Key) {
			t.Fatal("the mail holds the key")
		}
	})
}

// An account's live keys are listed to it across workspaces (never to
// another account, never to a key); RevokeUserKeysInTx (the password-
// change hook) revokes them all and no one else's; the maker of a key may
// revoke it even when no longer owner, an admin no one else's.
func TestOwnWorkspaceKeys(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		ctx := context.Background()
		e := newEnv(t, st, 0)
		ann, bob := e.user("ann"), e.user("bob")
		one, two := e.create(ann, "One"), e.create(ann, "Two")
		e.join(ann, bob, one, workspaces.RoleOwner)
		as, bs := ann, bob
		as.Session, bs.Session = true, true
		mk := func(c capabilities.Caller, ws, name string) workspaces.NewKey {
			t.Helper()
			var k workspaces.NewKey
			e.must(c, "workspaceKeyCreate", map[string]any{"workspaceId": ws, "name": name, "maxRole": "viewer", "currentPassword": keyPassword}, &k)
			return k
		}
		a1, a2, b1 := mk(as, one, "ann-one"), mk(as, two, "ann-two"), mk(bs, one, "bob-one")
		list := func(c capabilities.Caller) []workspaces.OwnKey {
			t.Helper()
			var out workspaces.OwnKeysOutput
			e.must(c, "workspaceKeyListOwn", nil, &out)
			return out.Keys
		}
		got := list(ann)
		if len(got) != 2 || got[0].ID != a1.ID || got[0].WorkspaceName != "One" || got[0].Name != "ann-one" || got[1].WorkspaceID != two {
			t.Fatalf("ann's keys %+v", got)
		}
		if got := list(bob); len(got) != 1 || got[0].ID != b1.ID {
			t.Fatalf("bob's keys %+v", got)
		}
		wantCode(t, e.call(e.keyCaller(a1.Key), "workspaceKeyListOwn", nil, nil), capabilities.CodeNotFound, "listing with a key")

		// Bob, demoted to admin, revokes his own key but not ann's.
		e.must(ann, "workspaceMemberRoleSet", map[string]any{"workspaceId": one, "userId": bob.UserID, "role": "admin"}, nil)
		wantCode(t, e.call(bob, "workspaceKeyRevoke", map[string]any{"workspaceId": one, "keyId": a1.ID}, nil), capabilities.CodeNotFound, "an admin revokes another's key")
		e.must(bob, "workspaceKeyRevoke", map[string]any{"workspaceId": one, "keyId": b1.ID}, nil)
		if got := list(bob); len(got) != 0 {
			t.Fatalf("bob's keys after revoking %+v", got)
		}
		e.must(ann, "workspaceMemberRoleSet", map[string]any{"workspaceId": one, "userId": bob.UserID, "role": "owner"}, nil)
		b2 := mk(bs, one, "bob-again")

		// The password-change hook ends all of ann's keys, in its
		// transaction, and none of bob's.
		var annID int64
		if err := st.DB.NewSelect().Table("users").Column("id").Where("stable_user_id = ?", ann.UserID).Scan(ctx, &annID); err != nil {
			t.Fatal(err)
		}
		if err := st.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error { return e.svc.RevokeUserKeysInTx(ctx, tx, annID) }); err != nil {
			t.Fatal(err)
		}
		for _, k := range []workspaces.NewKey{a1, a2} {
			if _, err := e.svc.VerifyKey(ctx, k.Key); !errors.Is(err, workspaces.ErrInvalidKey) {
				t.Fatalf("%s after the hook: %v", k.Name, err)
			}
		}
		if got := list(ann); len(got) != 0 {
			t.Fatalf("ann's keys after the hook %+v", got)
		}
		if _, err := e.svc.VerifyKey(ctx, b2.Key); err != nil {
			t.Fatalf("bob's key after ann's hook: %v", err)
		}
	})
}

// Keys made before the rule that keys die with the password, and before
// their account's last password change, are revoked by migration 0197;
// later keys, and other accounts' keys, stay.
func TestMigrationRevokesKeysOlderThanThePassword(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		ctx := context.Background()
		e := newEnv(t, st, 0)
		ann, bob := e.user("ann"), e.user("bob")
		aw, bw := e.create(ann, "Ann's"), e.create(bob, "Bob's")
		as, bs := ann, bob
		as.Session, bs.Session = true, true
		mk := func(c capabilities.Caller, ws, name string) workspaces.NewKey {
			t.Helper()
			var k workspaces.NewKey
			e.must(c, "workspaceKeyCreate", map[string]any{"workspaceId": ws, "name": name, "maxRole": "viewer", "currentPassword": keyPassword}, &k)
			return k
		}
		e.clock.add(500 * time.Millisecond) // fractions: SQLite compares the text
		old := mk(as, aw, "before")
		e.clock.add(time.Minute + 123456*time.Microsecond)
		changed := e.clock.now()
		if _, err := st.DB.NewUpdate().Table("users").Set("password_changed_at = ?", changed).Where("stable_user_id = ?", ann.UserID).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		e.clock.add(time.Minute)
		later, bobs := mk(as, aw, "after"), mk(bs, bw, "bob")

		ms, err := migrations.Load(string(st.Dialect()))
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(ms, func(m migrations.Migration) bool { return m.Version == 197 })
		if i < 0 {
			t.Fatal("no migration 0197")
		}
		if _, err := st.DB.ExecContext(ctx, ms[i].SQL); err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.VerifyKey(ctx, old.Key); !errors.Is(err, workspaces.ErrInvalidKey) {
			t.Fatalf("a key older than the password: %v", err)
		}
		for _, k := range []workspaces.NewKey{later, bobs} {
			if _, err := e.svc.VerifyKey(ctx, k.Key); err != nil {
				t.Fatalf("key %s: %v", k.Name, err)
			}
		}
		var revoked time.Time
		if err := st.DB.NewSelect().Table("workspace_api_keys").Column("revoked_at").Where("id = ?", old.ID).Scan(ctx, &revoked); err != nil || !revoked.Equal(changed) {
			t.Fatalf("revoked at %v, want %v (%v)", revoked, changed, err)
		}
	})
}
