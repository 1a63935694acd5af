package workspaces_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
	"github.com/enclave-mcp/enclave/workspaces"
)

// TestInvitationDiesWithInvitersPower: a link carries no more than its
// sender may give now. An admin's link to an admin role dies when the admin
// is demoted, and any link dies when its sender is removed.
func TestInvitationDiesWithInvitersPower(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st, 0)
		ann, bob, cat, dan := e.user("ann"), e.user("bob"), e.user("cat"), e.user("dan")
		ws := e.create(ann, "Inviters")
		e.join(ann, bob, ws, workspaces.RoleAdmin)

		e.must(bob, "workspaceMemberInvite", map[string]any{"workspaceId": ws, "email": "cat@example.test", "role": "admin"}, nil)
		catTok := e.lastToken("cat@example.test")
		e.must(bob, "workspaceMemberInvite", map[string]any{"workspaceId": ws, "email": "dan@example.test", "role": "viewer"}, nil)
		danTok := e.lastToken("dan@example.test")

		// Bob, demoted to viewer, may no longer give the admin role.
		e.must(ann, "workspaceMemberRoleSet", map[string]any{"workspaceId": ws, "userId": bob.UserID, "role": "viewer"}, nil)
		wantCode(t, e.call(cat, "workspaceInvitationAccept", map[string]any{"token": catTok}, nil), capabilities.CodeNotFound, "link of a demoted admin")
		wantCode(t, e.call(cat, "workspaceGet", map[string]any{"workspaceId": ws}, nil), capabilities.CodeNotFound, "cat after a dead link")

		// Bob, removed, gives nothing.
		e.must(ann, "workspaceMemberRemove", map[string]any{"workspaceId": ws, "userId": bob.UserID}, nil)
		wantCode(t, e.call(dan, "workspaceInvitationAccept", map[string]any{"token": danTok}, nil), capabilities.CodeNotFound, "link of a removed member")
		wantCode(t, e.call(dan, "workspaceGet", map[string]any{"workspaceId": ws}, nil), capabilities.CodeNotFound, "dan after a dead link")
	})
}

// TestSecondInvitationLinkIsUsedUp: two links to one address (a resent
// mail); joining with one kills the other, so that a member later demoted
// or removed cannot take a role back with it.
func TestSecondInvitationLinkIsUsedUp(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st, 0)
		ann, cat := e.user("ann"), e.user("cat")
		ws := e.create(ann, "Resent")
		e.must(ann, "workspaceMemberInvite", map[string]any{"workspaceId": ws, "email": "cat@example.test", "role": "admin"}, nil)
		first := e.lastToken("cat@example.test")
		e.must(ann, "workspaceMemberInvite", map[string]any{"workspaceId": ws, "email": "cat@example.test", "role": "admin"}, nil)
		second := e.lastToken("cat@example.test")
		e.must(cat, "workspaceInvitationAccept", map[string]any{"token": first}, nil)

		// Demoted, cat cannot raise itself with the second link.
		e.must(ann, "workspaceMemberRoleSet", map[string]any{"workspaceId": ws, "userId": cat.UserID, "role": "viewer"}, nil)
		_ = e.call(cat, "workspaceInvitationAccept", map[string]any{"token": second}, nil)
		var d workspaces.Details
		e.must(cat, "workspaceGet", map[string]any{"workspaceId": ws}, &d)
		if d.Role != workspaces.RoleViewer {
			t.Fatalf("a demoted member took back %s with a second link", d.Role)
		}
		// Removed, cat cannot come back with it.
		e.must(ann, "workspaceMemberRemove", map[string]any{"workspaceId": ws, "userId": cat.UserID}, nil)
		wantCode(t, e.call(cat, "workspaceInvitationAccept", map[string]any{"token": second}, nil), capabilities.CodeNotFound, "removed member's second link")
		wantCode(t, e.call(cat, "workspaceGet", map[string]any{"workspaceId": ws}, nil), capabilities.CodeNotFound, "removed member after the second link")
		var m workspaces.MembersOutput
		e.must(ann, "workspaceMemberList", map[string]any{"workspaceId": ws}, &m)
		if len(m.Invitations) != 0 {
			t.Fatalf("pending invitations after joining: %+v", m.Invitations)
		}
	})
}

// TestIdempotencyKeyIsPerMember: another member sending the same key and
// arguments is neither handed the first member's stored result nor told
// its own op ran.
func TestIdempotencyKeyIsPerMember(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st, 0)
		ann, bob := e.user("ann"), e.user("bob")
		ws := e.create(ann, "Idem")
		e.join(ann, bob, ws, workspaces.RoleAdmin)
		args := map[string]any{"workspaceId": ws, "counter": "c", "by": 5, "idempotencyKey": "k-1"}
		var first, again addResult
		e.must(ann, "counterAdd", args, &first)
		e.must(ann, "counterAdd", args, &again)
		if !again.Replayed || again.Revision != first.Revision {
			t.Fatalf("ann's retry = %+v, first %+v", again, first)
		}
		var bobs addResult
		err := e.call(bob, "counterAdd", args, &bobs)
		if err == nil && bobs.Replayed {
			t.Fatalf("bob was handed ann's stored result: %+v", bobs)
		}
		wantCode(t, err, capabilities.CodeConflict, "another member's key")
	})
}

// TestRemovedMembersKeysStayDead: a member's workspace keys are revoked
// when they are removed (or leave), so being invited back does not bring
// them back to life; a deleted workspace leaves no key rows.
func TestRemovedMembersKeysStayDead(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st, 0)
		ann, bob := e.user("ann"), e.user("bob")
		ws := e.create(ann, "Keys")
		e.join(ann, bob, ws, workspaces.RoleOwner)
		bobSession := bob
		bobSession.Session = true
		var k workspaces.NewKey
		e.must(bobSession, "workspaceKeyCreate", map[string]any{"workspaceId": ws, "name": "bob", "maxRole": "admin", "currentPassword": keyPassword}, &k)
		kc := e.keyCaller(k.Key)
		e.must(kc, "counterAdd", map[string]any{"workspaceId": ws, "counter": "c", "by": 1}, nil)

		e.must(ann, "workspaceMemberRemove", map[string]any{"workspaceId": ws, "userId": bob.UserID}, nil)
		wantCode(t, e.call(kc, "counterAdd", map[string]any{"workspaceId": ws, "counter": "c", "by": 1}, nil), capabilities.CodeNotFound, "key of a removed member")
		e.join(ann, bob, ws, workspaces.RoleAdmin)
		wantCode(t, e.call(kc, "counterAdd", map[string]any{"workspaceId": ws, "counter": "c", "by": 1}, nil), capabilities.CodeNotFound, "key of a member invited back")
		if _, err := e.svc.VerifyKey(context.Background(), k.Key); !errors.Is(err, workspaces.ErrInvalidKey) {
			t.Fatalf("a removed member's key still verifies: %v", err)
		}

		// Deleting the workspace deletes its key rows.
		annSession := ann
		annSession.Session = true
		e.must(annSession, "workspaceKeyCreate", map[string]any{"workspaceId": ws, "name": "ann", "maxRole": "viewer", "currentPassword": keyPassword}, nil)
		var del workspaces.DeleteOutput
		e.must(ann, "workspaceDelete", map[string]any{"workspaceId": ws}, &del)
		e.must(ann, "workspaceDelete", map[string]any{"workspaceId": ws, "confirmationToken": del.ConfirmationToken}, nil)
		n, err := st.DB.NewSelect().Table("workspace_api_keys").Where("workspace_id = ?", ws).Count(context.Background())
		if err != nil || n != 0 {
			t.Fatalf("key rows of a deleted workspace: %d %v", n, err)
		}
	})
}

// TestDeletedWorkspaceFileStaysGone: on SQLite, a late purge job or a
// store call for a deleted workspace does not create its file again.
// (SQLite only: per-workspace files are SQLite's.)
func TestDeletedWorkspaceFileStaysGone(t *testing.T) {
	func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st, 0)
		ann := e.user("ann")
		ws := e.create(ann, "Files")
		var up workspaces.OpResult[workspaces.FileInfo]
		e.must(ann, "fileUpload", map[string]any{"workspaceId": ws, "name": "a.txt", "contentType": "text/plain", "contentBase64": "aGVsbG8="}, &up)
		e.must(ann, "fileDelete", map[string]any{"workspaceId": ws, "fileId": up.Result.FileID, "version": 1}, nil)
		var del workspaces.DeleteOutput
		e.must(ann, "workspaceDelete", map[string]any{"workspaceId": ws}, &del)
		e.must(ann, "workspaceDelete", map[string]any{"workspaceId": ws, "confirmationToken": del.ConfirmationToken}, nil)
		path := filepath.Join(e.dataDir, "workspaces", ws+".db")
		if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("file after deletion: %v", err)
		}
		// The purge job of the deleted file runs late.
		if err := e.svc.PurgeFile(context.Background(), ws, up.Result.FileID, 1); err != nil {
			t.Fatalf("late purge: %v", err)
		}
		// An op that passed its membership check just before the deletion.
		err := e.svc.WorkspaceStore().Update(context.Background(), ws, func(context.Context, bun.Tx) error { return nil })
		wantCode(t, err, capabilities.CodeNotFound, "store update of a deleted workspace")
		if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("a deleted workspace's file came back: %v", err)
		}
	}(t, storagetest.Open(t, storage.SQLite))
}

// TestMainTablesAreNotWorkspaceState: on PostgreSQL the workspace state
// shares the main database; a main table that merely has a workspace_id
// column (an embedder's per-user notes about workspaces) is neither in a
// workspace's export nor cleared by its deletion.
func TestMainTablesAreNotWorkspaceState(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		ctx := context.Background()
		if _, err := st.DB.ExecContext(ctx, `CREATE TABLE private_notes (workspace_id TEXT NOT NULL, user_id BIGINT NOT NULL, note TEXT NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		e := newEnv(t, st, 0)
		ann, bob := e.user("ann"), e.user("bob")
		ws := e.create(ann, "Shared")
		e.join(ann, bob, ws, workspaces.RoleAdmin)
		e.must(ann, "counterAdd", map[string]any{"workspaceId": ws, "counter": "a", "by": 1}, nil)
		if _, err := st.DB.ExecContext(ctx, `INSERT INTO private_notes (workspace_id, user_id, note) VALUES (?, 1, 'ann thinks bob is slow')`, ws); err != nil {
			t.Fatal(err)
		}
		var x workspaces.Export
		e.must(bob, "workspaceExport", map[string]any{"workspaceId": ws}, &x)
		if _, leak := x.Tables["private_notes"]; leak {
			t.Fatalf("a main table was exported as workspace state: %+v", x.Tables["private_notes"])
		}
		if len(x.Tables["counters"]) != 1 {
			t.Fatalf("the workspace's own table is missing: %+v", x.Tables)
		}
		var del workspaces.DeleteOutput
		e.must(ann, "workspaceDelete", map[string]any{"workspaceId": ws}, &del)
		e.must(ann, "workspaceDelete", map[string]any{"workspaceId": ws, "confirmationToken": del.ConfirmationToken}, nil)
		n, err := st.DB.NewSelect().Table("private_notes").Count(ctx)
		if err != nil || n != 1 {
			t.Fatalf("a main table's rows were deleted with the workspace: %d left, %v", n, err)
		}
	})
}

// TestRoleChangeUsesRoleUnderLock: an admin demoted while their role
// change waits for the workspace's lock acts as what they are when it runs
// (the role read before the lock let a just-demoted admin promote someone).
func TestRoleChangeUsesRoleUnderLock(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		ctx := context.Background()
		e := newEnv(t, st, 0)
		ann, bob, cat := e.user("ann"), e.user("bob"), e.user("cat")
		ws := e.create(ann, "Race")
		e.join(ann, bob, ws, workspaces.RoleAdmin)
		e.join(ann, cat, ws, workspaces.RoleViewer)

		// An owner's change in flight holds the workspace.
		tx, err := st.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		lock := "UPDATE workspaces SET name = name WHERE id = ?"
		if st.Dialect() == storage.Postgres {
			lock = "SELECT id FROM workspaces WHERE id = ? FOR UPDATE"
		}
		if _, err := tx.ExecContext(ctx, lock, ws); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			done <- e.call(bob, "workspaceMemberRoleSet", map[string]any{"workspaceId": ws, "userId": cat.UserID, "role": "admin"}, nil)
		}()
		time.Sleep(300 * time.Millisecond) // bob's call is past its access check, waiting
		if _, err := tx.ExecContext(ctx, `UPDATE workspace_members SET role = 'viewer'
			WHERE workspace_id = ? AND user_id = (SELECT id FROM users WHERE stable_user_id = ?)`, ws, bob.UserID); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		wantCode(t, <-done, capabilities.CodeNotFound, "role change by a just-demoted admin")
		var d workspaces.Details
		e.must(cat, "workspaceGet", map[string]any{"workspaceId": ws}, &d)
		if d.Role != workspaces.RoleViewer {
			t.Fatalf("a demoted admin made cat %s", d.Role)
		}
	})
}

// TestDownloadAfterNewestVersionDeleted: deleting a file's newest version
// refuses that version at once, and a download naming no version serves
// the newest one left, never the deleted bytes.
func TestDownloadAfterNewestVersionDeleted(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st, 0)
		ann := e.user("ann")
		ws := e.create(ann, "Versions")
		var v1, v2 workspaces.OpResult[workspaces.FileInfo]
		e.must(ann, "fileUpload", map[string]any{"workspaceId": ws, "name": "a.txt", "contentType": "text/plain", "contentBase64": "b25l"}, &v1)     // "one"
		e.must(ann, "fileUpload", map[string]any{"workspaceId": ws, "name": "a.txt", "contentType": "text/plain", "contentBase64": "c2VjcmV0"}, &v2) // "secret"
		if v2.Result.FileID != v1.Result.FileID || v2.Result.Version != 2 {
			t.Fatalf("second upload %+v", v2.Result)
		}
		e.must(ann, "fileDelete", map[string]any{"workspaceId": ws, "fileId": v1.Result.FileID, "version": 2}, nil)
		wantCode(t, e.call(ann, "fileDownload", map[string]any{"workspaceId": ws, "fileId": v1.Result.FileID, "version": 2}, nil), capabilities.CodeNotFound, "deleted version")
		var got workspaces.OpResult[workspaces.FileContent]
		e.must(ann, "fileDownload", map[string]any{"workspaceId": ws, "fileId": v1.Result.FileID}, &got)
		if got.Result.Version != 1 || got.Result.Content != "b25l" {
			t.Fatalf("current version after deleting the newest: %+v", got.Result)
		}
		e.must(ann, "fileDelete", map[string]any{"workspaceId": ws, "fileId": v1.Result.FileID, "version": 1}, nil)
		wantCode(t, e.call(ann, "fileDownload", map[string]any{"workspaceId": ws, "fileId": v1.Result.FileID}, nil), capabilities.CodeNotFound, "every version deleted")
	})
}

// TestWorkspaceNameIsOneLine: a workspace's name goes into the subject and
// body of the invitation mails the server sends; one with a line break or
// another control character is refused as invalid input when created (it
// made every invitation fail inside, or wrote lines of its creator's
// choosing into the server's mail).
func TestWorkspaceNameIsOneLine(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st, 0)
		ann := e.user("ann")
		for _, name := range []string{"Acme\r\nBcc: x@example.test", "Acme\n\nYour account is locked: https://evil.test", "Acme\x1b[2J", "Acme \u202egnp.exe"} {
			wantCode(t, e.call(ann, "workspaceCreate", map[string]any{"name": name}, nil), capabilities.CodeInvalidInput, "name "+name)
		}
		ws := e.create(ann, "Café Ünïcode 🎉")
		e.must(ann, "workspaceMemberInvite", map[string]any{"workspaceId": ws, "email": "bob@example.test", "role": "viewer"}, nil)
	})
}

// TestInviteRefusesUnmailableAddress: an address no mail can be sent to is
// invalid input, refused before anything is recorded (the server's mailer
// refused it inside the transaction, an internal error).
func TestInviteRefusesUnmailableAddress(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st, 0)
		ann := e.user("ann")
		ws := e.create(ann, "Mail")
		for _, addr := range []string{`a"b@example.test`, "a@b@example.test", "a(b)@example.test", "a@[example"} {
			wantCode(t, e.call(ann, "workspaceMemberInvite", map[string]any{"workspaceId": ws, "email": addr, "role": "viewer"}, nil), capabilities.CodeInvalidInput, addr)
		}
		e.must(ann, "workspaceMemberInvite", map[string]any{"workspaceId": ws, "email": "First.Last+tag@Example.test", "role": "viewer"}, nil)
	})
}

// TestConcurrentAcceptsOfTwoLinks: one person opening two links to the
// same workspace at once joins once; neither call fails inside (on
// PostgreSQL they locked the two invitation rows and the workspace in
// opposite orders and deadlocked).
func TestConcurrentAcceptsOfTwoLinks(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st, 0)
		ann := e.user("ann")
		ws := e.create(ann, "Twice")
		for round := range 8 {
			cat := e.user(fmt.Sprintf("cat%d", round))
			email := cat.Username + "@example.test"
			e.must(ann, "workspaceMemberInvite", map[string]any{"workspaceId": ws, "email": email, "role": "viewer"}, nil)
			first := e.lastToken(email)
			e.must(ann, "workspaceMemberInvite", map[string]any{"workspaceId": ws, "email": email, "role": "viewer"}, nil)
			second := e.lastToken(email)
			errs := make(chan error, 2)
			for _, tok := range []string{first, second} {
				go func() { errs <- e.call(cat, "workspaceInvitationAccept", map[string]any{"token": tok}, nil) }()
			}
			joined := 0
			for range 2 {
				err := <-errs
				switch {
				case err == nil:
					joined++
				case capabilities.CodeOf(err) == capabilities.CodeNotFound:
				default:
					t.Fatalf("round %d: an accept failed inside: %v", round, err)
				}
			}
			if joined != 1 {
				t.Fatalf("round %d: %d accepts succeeded", round, joined)
			}
		}
	})
}
