package workspaces_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
	"github.com/enclave-mcp/enclave/web"
	"github.com/enclave-mcp/enclave/workspaces"
)

// mailbox keeps the mail a server sends.
type mailbox struct {
	mu   sync.Mutex
	msgs []web.Message
}

func (m *mailbox) Send(_ context.Context, msg web.Message) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.msgs = append(m.msgs, msg)
	return nil
}

var tokenInLink = regexp.MustCompile(`token=([A-Za-z0-9]+)`)

// token waits for the invitation mailed to addr and returns its token.
func (m *mailbox) token(t *testing.T, addr string, seen int) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		m.mu.Lock()
		count := 0
		for _, msg := range m.msgs {
			if msg.To == addr {
				count++
				if count > seen {
					m.mu.Unlock()
					return tokenInLink.FindStringSubmatch(msg.Text)[1]
				}
			}
		}
		m.mu.Unlock()
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no invitation reached %s", addr)
	return ""
}

func invoke(t *testing.T, s *enclavetest.Server, c capabilities.Caller, name string, args any, out any) error {
	t.Helper()
	raw, _ := json.Marshal(args)
	res, err := s.Registry().Invoke(context.Background(), c, name, raw)
	if err == nil && out != nil {
		b, _ := json.Marshal(res.Structured)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatal(err)
		}
	}
	return err
}

// TestAccountDeletionLeavesWorkspaces: deleting an account takes it out
// of every workspace; a workspace it alone owned passes to its oldest
// admin, or, without one, is deleted with its files.
func TestAccountDeletionLeavesWorkspaces(t *testing.T) {
	box := &mailbox{}
	opts := workspaceServer()
	opts.Config.Mailer = box
	enclavetest.Each(t, opts, func(t *testing.T, s *enclavetest.Server) {
		box.mu.Lock()
		box.msgs = nil
		box.mu.Unlock()
		ctx := context.Background()
		if err := s.Inventory().Check(ctx, s.Store().DB); err != nil {
			t.Fatal(err)
		}
		annU := s.CreateUser(t, "ann")
		users := map[string]*enclavetest.User{}
		for _, n := range []string{"bob", "cat", "dan"} {
			users[n] = s.CreateUser(t, n)
		}
		ann := annU.Caller(t)
		must := func(c capabilities.Caller, name string, args any, out any) {
			t.Helper()
			if err := invoke(t, s, c, name, args, out); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		invited := map[string]int{}
		join := func(ws, who, role string) {
			t.Helper()
			u := users[who]
			must(ann, "workspaceMemberInvite", map[string]any{"workspaceId": ws, "email": u.Email, "role": role}, nil)
			tok := box.token(t, u.Email, invited[u.Email])
			invited[u.Email]++
			must(u.Caller(t), "workspaceInvitationAccept", map[string]any{"token": tok}, nil)
		}
		var w1, w2, w3 workspaces.Workspace
		must(ann, "workspaceCreate", map[string]any{"name": "handed over"}, &w1)
		must(ann, "workspaceCreate", map[string]any{"name": "dropped"}, &w2)
		must(ann, "workspaceCreate", map[string]any{"name": "co-owned"}, &w3)
		join(w1.ID, "bob", "admin")
		join(w1.ID, "cat", "admin")
		join(w2.ID, "dan", "viewer")
		join(w3.ID, "cat", "owner")
		must(ann, "fileUpload", map[string]any{"workspaceId": w2.ID, "name": "n.txt", "contentType": "text/plain",
			"contentBase64": base64.StdEncoding.EncodeToString([]byte("bytes"))}, nil)

		res, err := s.Lifecycle().Delete(ctx, annU.Owner())
		if err != nil {
			t.Fatal(err)
		}
		if res.Deleted["custom:workspaces"] != 3 {
			t.Fatalf("deletion result %+v", res.Deleted)
		}
		var d workspaces.Details
		must(users["bob"].Caller(t), "workspaceGet", map[string]any{"workspaceId": w1.ID}, &d)
		if d.Role != workspaces.RoleOwner || d.Members != 2 {
			t.Fatalf("w1 for its oldest admin: %+v", d)
		}
		must(users["cat"].Caller(t), "workspaceGet", map[string]any{"workspaceId": w1.ID}, &d)
		if d.Role != workspaces.RoleAdmin {
			t.Fatalf("the younger admin became %s", d.Role)
		}
		if err := invoke(t, s, users["dan"].Caller(t), "workspaceGet", map[string]any{"workspaceId": w2.ID}, nil); capabilities.CodeOf(err) != capabilities.CodeNotFound {
			t.Fatalf("w2 survived its only owner: %v", err)
		}
		it := s.Store().Bucket.List(nil)
		for {
			obj, err := it.Next(ctx)
			if err != nil {
				break
			}
			if len(obj.Key) > 0 && obj.Key[:len(workspaces.BlobPrefix(w2.ID))] == workspaces.BlobPrefix(w2.ID) {
				t.Fatalf("blob %s of a deleted workspace left", obj.Key)
			}
		}
		must(users["cat"].Caller(t), "workspaceGet", map[string]any{"workspaceId": w3.ID}, &d)
		if d.Role != workspaces.RoleOwner || d.Members != 1 {
			t.Fatalf("w3: %+v", d)
		}
	})
}

func TestWorkspaceExport(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st, 0)
		ann, val, eve := e.user("ann"), e.user("val"), e.user("eve")
		ws := e.create(ann, "Exported")
		e.join(ann, val, ws, workspaces.RoleViewer)
		e.must(ann, "counterAdd", map[string]any{"workspaceId": ws, "counter": "a", "by": 2}, nil)
		e.must(ann, "counterAdd", map[string]any{"workspaceId": ws, "counter": "b", "by": 3}, nil)
		var up workspaces.OpResult[workspaces.FileInfo]
		e.must(ann, "fileUpload", map[string]any{"workspaceId": ws, "name": "f.txt", "contentType": "text/plain",
			"contentBase64": base64.StdEncoding.EncodeToString([]byte("file bytes"))}, &up)
		// Another workspace's rows never leak into this export.
		other := e.create(eve, "Other")
		e.must(eve, "counterAdd", map[string]any{"workspaceId": other, "counter": "z", "by": 9}, nil)

		wantCode(t, e.call(val, "workspaceExport", map[string]any{"workspaceId": ws}, nil), capabilities.CodeNotFound, "viewer export")
		wantCode(t, e.call(eve, "workspaceExport", map[string]any{"workspaceId": ws}, nil), capabilities.CodeNotFound, "non-member export")
		var x workspaces.Export
		e.must(ann, "workspaceExport", map[string]any{"workspaceId": ws}, &x)
		if x.Revision != 3 || len(x.Events) != 3 || len(x.Members) != 2 || len(x.Files) != 1 {
			t.Fatalf("export: revision %d, %d events, %d members, %d files", x.Revision, len(x.Events), len(x.Members), len(x.Files))
		}
		rows := x.Tables["counters"]
		if len(rows) != 2 {
			t.Fatalf("counters exported: %+v", x.Tables)
		}
		for _, r := range rows {
			if r["workspace_id"] != ws {
				t.Fatalf("foreign row exported: %+v", r)
			}
		}
		var chunk workspaces.FileChunk
		e.must(ann, "workspaceExportFile", map[string]any{"workspaceId": ws, "fileId": up.Result.FileID, "version": 1}, &chunk)
		if b, _ := base64.StdEncoding.DecodeString(chunk.Data); string(b) != "file bytes" || chunk.Next != 0 {
			t.Fatalf("chunk %+v", chunk)
		}
	})
}
