package workspaces_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
	"github.com/enclave-mcp/enclave/workspaces"
)

func jobsOf(t *testing.T, st *storage.Store, kind string) int64 {
	t.Helper()
	n, err := st.DB.NewSelect().Table("outbox").Where("topic = ?", "job:"+kind).Count(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func blobsUnder(t *testing.T, st *storage.Store, prefix string) int {
	t.Helper()
	n := 0
	it := st.Bucket.List(nil)
	for {
		obj, err := it.Next(context.Background())
		if err != nil {
			break
		}
		if strings.HasPrefix(obj.Key, prefix) {
			n++
		}
	}
	return n
}

func TestWorkspaceFiles(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st, 0)
		ann, bob, val := e.user("ann"), e.user("bob"), e.user("val")
		ws := e.create(ann, "Files")
		e.join(ann, bob, ws, workspaces.RoleAdmin)
		e.join(ann, val, ws, workspaces.RoleViewer)
		up := func(c capabilities.Caller, name, ct string, content []byte) (workspaces.OpResult[workspaces.FileInfo], error) {
			var r workspaces.OpResult[workspaces.FileInfo]
			err := e.call(c, "fileUpload", map[string]any{"workspaceId": ws, "name": name, "contentType": ct, "contentBase64": base64.StdEncoding.EncodeToString(content)}, &r)
			return r, err
		}
		v1, err := up(bob, "agenda.txt", "text/plain", []byte("day one"))
		if err != nil || v1.Result.Version != 1 {
			t.Fatalf("upload: %+v %v", v1, err)
		}
		v2, err := up(bob, "agenda.txt", "text/plain", []byte("day one and two"))
		if err != nil || v2.Result.Version != 2 || v2.Result.FileID != v1.Result.FileID {
			t.Fatalf("second version: %+v %v", v2, err)
		}
		// Limits: type, size, bytes that lie about their type; viewers do not upload.
		for what, try := range map[string]func() error{
			"type": func() error { _, err := up(bob, "x.exe", "application/x-msdownload", []byte("MZ")); return err },
			"size": func() error {
				_, err := up(bob, "big.txt", "text/plain", bytes.Repeat([]byte("a"), 65<<10))
				return err
			},
			"sniff":  func() error { _, err := up(bob, "fake.png", "image/png", []byte("not a png")); return err },
			"binary": func() error { _, err := up(bob, "bin.txt", "text/plain", []byte{0, 1, 2, 0xff}); return err },
			"name":   func() error { _, err := up(bob, "../x.txt", "text/plain", []byte("x")); return err },
		} {
			wantCode(t, try(), capabilities.CodeInvalidInput, what)
		}
		_, err = up(val, "v.txt", "text/plain", []byte("x"))
		wantCode(t, err, capabilities.CodeNotFound, "viewer upload")

		var dl workspaces.OpResult[workspaces.FileContent]
		e.must(val, "fileDownload", map[string]any{"workspaceId": ws, "fileId": v1.Result.FileID, "version": 1}, &dl)
		if dl.Result.Content != base64.StdEncoding.EncodeToString([]byte("day one")) {
			t.Fatalf("download v1 = %q", dl.Result.Content)
		}

		// Phase one: only an owner deletes; downloads stop at once.
		wantCode(t, e.call(bob, "fileDelete", map[string]any{"workspaceId": ws, "fileId": v1.Result.FileID, "version": 1}, nil), capabilities.CodeNotFound, "admin delete")
		before := jobsOf(t, st, workspaces.PurgeJob)
		var del workspaces.OpResult[workspaces.FileInfo]
		e.must(ann, "fileDelete", map[string]any{"workspaceId": ws, "fileId": v1.Result.FileID, "version": 1, "reason": "typo"}, &del)
		if !del.Result.CleanupPending || del.Result.DeletedAt == nil {
			t.Fatalf("tombstone: %+v", del.Result)
		}
		if got := jobsOf(t, st, workspaces.PurgeJob); got != before+1 {
			t.Fatalf("purge jobs %d → %d", before, got)
		}
		wantCode(t, e.call(val, "fileDownload", map[string]any{"workspaceId": ws, "fileId": v1.Result.FileID, "version": 1}, nil), capabilities.CodeNotFound, "download after delete")
		e.must(val, "fileDownload", map[string]any{"workspaceId": ws, "fileId": v1.Result.FileID}, &dl)
		if dl.Result.Version != 2 {
			t.Fatalf("newest version after deleting v1: %+v", dl.Result.FileInfo)
		}
		prefix := workspaces.BlobPrefix(ws)
		if n := blobsUnder(t, st, prefix); n != 2 {
			t.Fatalf("%d blobs before the job", n)
		}
		var list workspaces.OpResult[workspaces.FileListOutput]
		e.must(ann, "fileList", map[string]any{"workspaceId": ws}, &list)
		pending := 0
		for _, f := range list.Result.Files {
			if f.CleanupPending {
				pending++
			}
		}
		if pending != 1 {
			t.Fatalf("cleanup pending not visible: %+v", list.Result.Files)
		}
		// Other members see live versions only, even when they ask for more.
		for _, who := range []string{"admin", "viewer"} {
			c := map[string]capabilities.Caller{"admin": bob, "viewer": val}[who]
			var theirs workspaces.OpResult[workspaces.FileListOutput]
			e.must(c, "fileList", map[string]any{"workspaceId": ws, "includeDeleted": true}, &theirs)
			for _, f := range theirs.Result.Files {
				if f.DeletedAt != nil || f.CleanupPending || f.DeletedBy != "" || f.Reason != "" {
					t.Fatalf("%s sees a deleted version: %+v", who, f)
				}
			}
			if len(theirs.Result.Files) != len(list.Result.Files)-1 {
				t.Fatalf("%s sees %d files, want the %d live ones", who, len(theirs.Result.Files), len(list.Result.Files)-1)
			}
		}
		// The export (owners and admins) keeps the tombstone; who deleted
		// it and why are in the owner's only, as in fileList.
		for who, c := range map[string]capabilities.Caller{"owner": ann, "admin": bob} {
			var exp workspaces.Export
			e.must(c, "workspaceExport", map[string]any{"workspaceId": ws}, &exp)
			found := false
			for _, f := range exp.Files {
				if f.FileID != v1.Result.FileID || f.Version != 1 {
					continue
				}
				found = true
				if f.DeletedAt == nil {
					t.Fatalf("%s's export lost the tombstone: %+v", who, f)
				}
				if owner := who == "owner"; owner != (f.DeletedBy != "" && f.Reason == "typo") || !owner && (f.DeletedBy != "" || f.Reason != "") {
					t.Fatalf("%s's export shows deletedBy %q reason %q", who, f.DeletedBy, f.Reason)
				}
			}
			if !found {
				t.Fatalf("%s's export has no tombstone of v1", who)
			}
		}
		// A retry is an owner's, for a pending cleanup only.
		wantCode(t, e.call(ann, "fileCleanupRetry", map[string]any{"workspaceId": ws, "fileId": v1.Result.FileID, "version": 2}, nil), capabilities.CodeConflict, "retry without pending cleanup")
		wantCode(t, e.call(bob, "fileCleanupRetry", map[string]any{"workspaceId": ws, "fileId": v1.Result.FileID, "version": 1}, nil), capabilities.CodeNotFound, "admin retry")
		e.must(ann, "fileCleanupRetry", map[string]any{"workspaceId": ws, "fileId": v1.Result.FileID, "version": 1}, nil)
		if got := jobsOf(t, st, workspaces.PurgeJob); got != before+2 {
			t.Fatalf("retry did not enqueue: %d", got)
		}
		// fileDeletionConfirm is the system's only.
		wantCode(t, e.call(ann, "fileDeletionConfirm", map[string]any{"workspaceId": ws, "fileId": v1.Result.FileID, "version": 1}, nil), capabilities.CodeNotFound, "confirm by a member")

		// Phase two: the job removes the bytes and confirms; twice is harmless.
		for range 2 {
			if err := e.svc.PurgeFile(context.Background(), ws, v1.Result.FileID, 1); err != nil {
				t.Fatal(err)
			}
		}
		if n := blobsUnder(t, st, prefix); n != 1 {
			t.Fatalf("%d blobs after the job", n)
		}
		list = workspaces.OpResult[workspaces.FileListOutput]{}
		e.must(ann, "fileList", map[string]any{"workspaceId": ws, "includeDeleted": true}, &list)
		for _, f := range list.Result.Files {
			if f.Version == 1 && (f.CleanupPending || f.PurgedAt == nil || f.Reason != "typo") {
				t.Fatalf("v1 after purge: %+v", f)
			}
		}
		evs, err := e.svc.Events(context.Background(), ws, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		last := evs[len(evs)-1]
		if last.Op != "fileDeletionConfirm" || last.Actor != "system" {
			t.Fatalf("last event %+v", last)
		}

		// Deleting the workspace removes its remaining bytes.
		var first workspaces.DeleteOutput
		e.must(ann, "workspaceDelete", map[string]any{"workspaceId": ws}, &first)
		e.must(ann, "workspaceDelete", map[string]any{"workspaceId": ws, "confirmationToken": first.ConfirmationToken}, nil)
		if n := blobsUnder(t, st, prefix); n != 0 {
			t.Fatalf("%d blobs after workspace deletion", n)
		}
	})
}
