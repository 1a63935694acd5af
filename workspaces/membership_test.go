package workspaces_test

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
	"github.com/enclave-mcp/enclave/workspaces"
)

func TestMembershipLifecycle(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st, 0)
		ann, bob, cat, eve := e.user("ann"), e.user("bob"), e.user("cat"), e.user("eve")
		ws := e.create(ann, "Conference")

		var list workspaces.ListOutput
		e.must(ann, "workspaceList", nil, &list)
		if len(list.Workspaces) != 1 || list.Workspaces[0].ID != ws || list.Workspaces[0].Role != workspaces.RoleOwner {
			t.Fatalf("ann's list = %+v", list)
		}
		e.must(bob, "workspaceList", nil, &list)
		if len(list.Workspaces) != 0 {
			t.Fatalf("bob sees %+v", list)
		}

		// A non-member and an unknown id get the same answer.
		errMember := e.call(eve, "workspaceGet", map[string]any{"workspaceId": ws}, nil)
		errUnknown := e.call(eve, "workspaceGet", map[string]any{"workspaceId": "w_aaaaaaaaaaaaaaaaaaaaaaaaaa"}, nil)
		errBad := e.call(eve, "workspaceGet", map[string]any{"workspaceId": "../../etc/passwd"}, nil)
		wantCode(t, errMember, capabilities.CodeNotFound, "non-member get")
		if errMember.Error() != errUnknown.Error() || errMember.Error() != errBad.Error() {
			t.Fatalf("non-member %q, unknown %q and malformed %q differ", errMember, errUnknown, errBad)
		}
		for _, name := range []string{"workspaceMemberList", "workspaceLeave", "workspaceDelete"} {
			err := e.call(eve, name, map[string]any{"workspaceId": ws}, nil)
			if err == nil || err.Error() != errUnknown.Error() {
				t.Fatalf("%s by non-member: %v", name, err)
			}
		}

		// An address nobody verified cannot take an invitation.
		una := e.unverifiedUser("una")
		e.must(ann, "workspaceMemberInvite", map[string]any{"workspaceId": ws, "email": "una@example.test", "role": "viewer"}, nil)
		wantCode(t, e.call(una, "workspaceInvitationAccept", map[string]any{"token": e.lastToken("una@example.test")}, nil), capabilities.CodeConflict, "unverified address")
		wantCode(t, e.call(una, "workspaceGet", map[string]any{"workspaceId": ws}, nil), capabilities.CodeNotFound, "unverified member")

		// Invitations: single use, for the invited address only, expiring.
		e.must(ann, "workspaceMemberInvite", map[string]any{"workspaceId": ws, "email": " Bob@Example.test ", "role": "admin"}, nil)
		tok := e.lastToken("bob@example.test")
		wantCode(t, e.call(eve, "workspaceInvitationAccept", map[string]any{"token": tok}, nil), capabilities.CodeNotFound, "accept by another address")
		var joined workspaces.Workspace
		e.must(bob, "workspaceInvitationAccept", map[string]any{"token": tok}, &joined)
		if joined.ID != ws || joined.Role != workspaces.RoleAdmin {
			t.Fatalf("bob joined %+v", joined)
		}
		wantCode(t, e.call(bob, "workspaceInvitationAccept", map[string]any{"token": tok}, nil), capabilities.CodeNotFound, "second use")
		wantCode(t, e.call(ann, "workspaceMemberInvite", map[string]any{"workspaceId": ws, "email": "bob@example.test", "role": "viewer"}, nil),
			capabilities.CodeConflict, "inviting a member")

		e.must(bob, "workspaceMemberInvite", map[string]any{"workspaceId": ws, "email": "cat@example.test", "role": "viewer"}, nil)
		late := e.lastToken("cat@example.test")
		e.clock.add(workspaces.DefaultInvitationTTL + time.Second)
		wantCode(t, e.call(cat, "workspaceInvitationAccept", map[string]any{"token": late}, nil), capabilities.CodeNotFound, "expired invitation")
		// An admin cannot invite an owner.
		wantCode(t, e.call(bob, "workspaceMemberInvite", map[string]any{"workspaceId": ws, "email": "cat@example.test", "role": "owner"}, nil),
			capabilities.CodeNotFound, "admin inviting an owner")
		e.join(bob, cat, ws, workspaces.RoleViewer)

		var members workspaces.MembersOutput
		e.must(cat, "workspaceMemberList", map[string]any{"workspaceId": ws}, &members)
		if len(members.Members) != 3 || len(members.Invitations) != 0 {
			t.Fatalf("members seen by a viewer: %+v", members)
		}
		// A viewer cannot invite or change roles.
		wantCode(t, e.call(cat, "workspaceMemberInvite", map[string]any{"workspaceId": ws, "email": "eve@example.test", "role": "viewer"}, nil),
			capabilities.CodeNotFound, "viewer inviting")
		wantCode(t, e.call(cat, "workspaceMemberRoleSet", map[string]any{"workspaceId": ws, "userId": cat.UserID, "role": "admin"}, nil),
			capabilities.CodeNotFound, "viewer promoting itself")
		// An admin cannot touch an owner.
		wantCode(t, e.call(bob, "workspaceMemberRoleSet", map[string]any{"workspaceId": ws, "userId": ann.UserID, "role": "viewer"}, nil),
			capabilities.CodeNotFound, "admin demoting the owner")
		wantCode(t, e.call(bob, "workspaceMemberRemove", map[string]any{"workspaceId": ws, "userId": ann.UserID}, nil),
			capabilities.CodeNotFound, "admin removing the owner")

		// The last owner cannot leave, be demoted or removed.
		wantCode(t, e.call(ann, "workspaceLeave", map[string]any{"workspaceId": ws}, nil), capabilities.CodeConflict, "last owner leaving")
		wantCode(t, e.call(ann, "workspaceMemberRoleSet", map[string]any{"workspaceId": ws, "userId": ann.UserID, "role": "admin"}, nil),
			capabilities.CodeConflict, "last owner demoted")
		wantCode(t, e.call(ann, "workspaceMemberRemove", map[string]any{"workspaceId": ws, "userId": ann.UserID}, nil),
			capabilities.CodeConflict, "last owner removed")
		// With a second owner, the first may go.
		var m workspaces.Member
		e.must(ann, "workspaceMemberRoleSet", map[string]any{"workspaceId": ws, "userId": bob.UserID, "role": "owner"}, &m)
		if m.Role != workspaces.RoleOwner {
			t.Fatalf("bob = %+v", m)
		}
		e.must(ann, "workspaceLeave", map[string]any{"workspaceId": ws}, nil)
		wantCode(t, e.call(ann, "workspaceGet", map[string]any{"workspaceId": ws}, nil), capabilities.CodeNotFound, "after leaving")

		// A removed member loses access at the next call.
		e.must(cat, "workspaceGet", map[string]any{"workspaceId": ws}, nil)
		e.must(bob, "workspaceMemberRemove", map[string]any{"workspaceId": ws, "userId": cat.UserID}, nil)
		wantCode(t, e.call(cat, "workspaceGet", map[string]any{"workspaceId": ws}, nil), capabilities.CodeNotFound, "after removal")
	})
}

// TestLastOwnerConcurrent: two owners demoting each other at once leave
// exactly one owner.
func TestLastOwnerConcurrent(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st, 0)
		ann, bob := e.user("ann"), e.user("bob")
		ws := e.create(ann, "Pair")
		e.join(ann, bob, ws, workspaces.RoleOwner)
		for i := 0; i < 5; i++ {
			errs := make(chan error, 2)
			go func() {
				errs <- e.call(ann, "workspaceMemberRemove", map[string]any{"workspaceId": ws, "userId": bob.UserID}, nil)
			}()
			go func() {
				errs <- e.call(bob, "workspaceMemberRemove", map[string]any{"workspaceId": ws, "userId": ann.UserID}, nil)
			}()
			e1, e2 := <-errs, <-errs
			var members workspaces.MembersOutput
			survivor := ann
			if err := e.call(ann, "workspaceMemberList", map[string]any{"workspaceId": ws}, &members); err != nil {
				survivor = bob
				e.must(bob, "workspaceMemberList", map[string]any{"workspaceId": ws}, &members)
			}
			owners := 0
			for _, m := range members.Members {
				if m.Role == workspaces.RoleOwner {
					owners++
				}
			}
			if owners != 1 || (e1 == nil) == (e2 == nil) {
				t.Fatalf("round %d: %d owners left, errors %v / %v", i, owners, e1, e2)
			}
			other := bob
			if survivor.UserID == bob.UserID {
				other = ann
			}
			e.join(survivor, other, ws, workspaces.RoleOwner)
		}
	})
}

func TestWorkspaceDeleteTwoStep(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st, 0)
		ann, bob := e.user("ann"), e.user("bob")
		ws := e.create(ann, "Doomed")
		e.join(ann, bob, ws, workspaces.RoleAdmin)
		e.must(ann, "counterAdd", map[string]any{"workspaceId": ws, "counter": "c", "by": 1}, nil)

		wantCode(t, e.call(bob, "workspaceDelete", map[string]any{"workspaceId": ws}, nil), capabilities.CodeNotFound, "admin deleting")
		var first workspaces.DeleteOutput
		e.must(ann, "workspaceDelete", map[string]any{"workspaceId": ws}, &first)
		if first.Deleted || first.ConfirmationToken == "" {
			t.Fatalf("first step = %+v", first)
		}
		e.must(ann, "workspaceGet", map[string]any{"workspaceId": ws}, nil) // still there
		wantCode(t, e.call(ann, "workspaceDelete", map[string]any{"workspaceId": ws, "confirmationToken": "wrong"}, nil),
			capabilities.CodeConflict, "wrong token")
		// An expired token is refused.
		e.clock.add(workspaces.DeleteConfirmationTTL + time.Second)
		wantCode(t, e.call(ann, "workspaceDelete", map[string]any{"workspaceId": ws, "confirmationToken": first.ConfirmationToken}, nil),
			capabilities.CodeConflict, "expired token")
		e.must(ann, "workspaceDelete", map[string]any{"workspaceId": ws}, &first)
		var done workspaces.DeleteOutput
		e.must(ann, "workspaceDelete", map[string]any{"workspaceId": ws, "confirmationToken": first.ConfirmationToken}, &done)
		if !done.Deleted {
			t.Fatalf("second step = %+v", done)
		}
		for _, c := range []capabilities.Caller{ann, bob} {
			wantCode(t, e.call(c, "workspaceGet", map[string]any{"workspaceId": ws}, nil), capabilities.CodeNotFound, "after delete")
		}
		// Its state is gone: a counter read through the store finds nothing.
		n, err := st.DB.NewSelect().Table("workspace_members").Where("workspace_id = ?", ws).Count(t.Context())
		if err != nil || n != 0 {
			t.Fatalf("members left: %d %v", n, err)
		}
		if st.Dialect() == storage.Postgres {
			n, err := st.DB.NewSelect().Table("counters").Where("workspace_id = ?", ws).Count(t.Context())
			if err != nil || n != 0 {
				t.Fatalf("counter rows left: %d %v", n, err)
			}
		}
	})
}

// TestInvitationRecordsPruned: records of long-expired invitations go when
// the workspace next invites.
func TestInvitationRecordsPruned(t *testing.T) {
	st := storagetest.Open(t, storage.SQLite)
	e := newEnv(t, st, 0)
	ann := e.user("ann")
	ws := e.create(ann, "Pruned")
	e.must(ann, "workspaceMemberInvite", map[string]any{"workspaceId": ws, "email": "x@example.test", "role": "viewer"}, nil)
	count := func() int64 {
		n, err := st.DB.NewSelect().Table("workspace_invitations").Where("workspace_id = ?", ws).Count(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	e.clock.add(workspaces.DefaultInvitationTTL + workspaces.InvitationRecordKeep - time.Hour)
	e.must(ann, "workspaceMemberInvite", map[string]any{"workspaceId": ws, "email": "y@example.test", "role": "viewer"}, nil)
	if n := count(); n != 2 {
		t.Fatalf("%d invitations before the keep time ends", n)
	}
	e.clock.add(2 * time.Hour)
	e.must(ann, "workspaceMemberInvite", map[string]any{"workspaceId": ws, "email": "z@example.test", "role": "viewer"}, nil)
	if n := count(); n != 2 {
		t.Fatalf("%d invitations after the first one's keep time", n)
	}
}

// A deletion whose state removal fails after the directory commit is
// finished by DropJob, queued in that commit; a live workspace is never
// dropped by it.
func TestWorkspaceDeletionRetriedByJob(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		ctx := context.Background()
		e := newEnv(t, st, 0)
		ann := e.user("ann")
		ws, live := e.create(ann, "Doomed"), e.create(ann, "Live")
		e.must(ann, "counterAdd", map[string]any{"workspaceId": ws, "counter": "c", "by": 1}, nil)
		e.must(ann, "counterAdd", map[string]any{"workspaceId": live, "counter": "c", "by": 1}, nil)
		var fail atomic.Bool
		fail.Store(true)
		e.svc.OnDelete(func(context.Context, string) error {
			if fail.Load() {
				return errors.New("blob store unavailable")
			}
			return nil
		})
		before := jobsOf(t, st, workspaces.DropJob)
		var first workspaces.DeleteOutput
		e.must(ann, "workspaceDelete", map[string]any{"workspaceId": ws}, &first)
		if err := e.call(ann, "workspaceDelete", map[string]any{"workspaceId": ws, "confirmationToken": first.ConfirmationToken}, nil); err == nil {
			t.Fatal("the deletion hook failed but the delete reported success")
		}
		if got := jobsOf(t, st, workspaces.DropJob); got != before+1 {
			t.Fatalf("drop jobs %d → %d", before, got)
		}
		revision := func(id string) (int64, error) {
			var rev int64
			err := e.svc.WorkspaceStore().View(ctx, id, func(ctx context.Context, tx bun.Tx) error {
				return tx.NewSelect().Table("workspace_state").Column("revision").Where("workspace_id = ?", id).Scan(ctx, &rev)
			})
			return rev, err
		}
		if st.Dialect() == storage.Postgres {
			if rev, err := revision(ws); err != nil || rev != 1 {
				t.Fatalf("state before the job: %d %v", rev, err)
			}
		}
		fail.Store(false)
		if err := e.svc.DropDeleted(ctx, ws); err != nil {
			t.Fatal(err)
		}
		if st.Dialect() == storage.Postgres {
			if _, err := revision(ws); !errors.Is(err, sql.ErrNoRows) {
				t.Fatalf("state after the job: %v", err)
			}
		} else if _, err := os.Stat(filepath.Join(e.dataDir, "workspaces", ws+".db")); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("workspace file after the job: %v", err)
		}
		// Twice is harmless, and a live workspace is never dropped.
		if err := errors.Join(e.svc.DropDeleted(ctx, ws), e.svc.DropDeleted(ctx, live)); err != nil {
			t.Fatal(err)
		}
		if rev, err := revision(live); err != nil || rev != 1 {
			t.Fatalf("live workspace after DropDeleted: %d %v", rev, err)
		}
	})
}
