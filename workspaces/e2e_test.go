package workspaces_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"gocloud.dev/blob"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/workspaces"
)

func workspaceServer() enclavetest.Options {
	return enclavetest.Options{
		Config: enclave.Config{Workspaces: &workspaces.Options{Schema: []migrations.Source{counterSchema}}},
		Setup: func(srv *enclave.Server) error {
			if srv.Store().Dialect() == storage.Postgres {
				if err := srv.Retention().Add(retention.Kept("counters", "test data")); err != nil {
					return err
				}
			}
			return errorsJoin(
				workspaces.Register(srv.Workspaces(), workspaces.Op[addIn, addOut]{Name: "counterAdd", Description: "adds to a counter", Handler: counterAdd}),
				workspaces.Register(srv.Workspaces(), workspaces.Op[getIn, addOut]{Name: "counterGet", Description: "reads a counter", ReadOnly: true, Handler: counterGet}),
			)
		},
	}
}

// TestWorkspacesOverMCP: workspace capabilities and ops with real OAuth
// tokens, and a workspace API key as a bearer token that reaches its
// workspace's ops only, until revoked.
func TestWorkspacesOverMCP(t *testing.T) {
	enclavetest.Each(t, workspaceServer(), func(t *testing.T, s *enclavetest.Server) {
		ctx := context.Background()
		if err := s.Inventory().Check(ctx, s.Store().DB); err != nil {
			t.Fatal(err)
		}
		if err := s.Retention().Check(ctx, s.Store().DB); err != nil {
			t.Fatal(err)
		}
		annU, bobU := s.CreateUser(t, "ann"), s.CreateUser(t, "bob")
		ann, bob := annU.MCP(t), bobU.MCP(t)
		call := func(c *enclavetest.Client, name string, args any, out any) enclavetest.ToolResult {
			t.Helper()
			res, err := c.Call(name, args)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if out != nil && !res.IsError {
				if err := res.Decode(out); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
			}
			return res
		}
		refused := func(c *enclavetest.Client, name string, args any) bool {
			res, err := c.Call(name, args)
			return err != nil || res.IsError
		}
		var w workspaces.Workspace
		if res := call(ann, "workspaceCreate", map[string]any{"name": "Shared"}, &w); res.IsError {
			t.Fatalf("create: %+v", res)
		}
		other := ""
		var w2 workspaces.Workspace
		call(ann, "workspaceCreate", map[string]any{"name": "Other"}, &w2)
		other = w2.ID
		var r addResult
		if res := call(ann, "counterAdd", map[string]any{"workspaceId": w.ID, "counter": "a", "by": 7}, &r); res.IsError || r.Revision != 1 {
			t.Fatalf("add: %+v %+v", res, r)
		}
		// Cross-user denial: bob is no member.
		if res := call(bob, "counterGet", map[string]any{"workspaceId": w.ID, "counter": "a"}, nil); !res.IsError || !strings.Contains(res.Text, "workspace not found") {
			t.Fatalf("bob reads ann's workspace: %+v", res)
		}

		// A file: undownloadable right after fileDelete, its bytes gone
		// once the server's job ran.
		var up workspaces.OpResult[workspaces.FileInfo]
		if res := call(ann, "fileUpload", map[string]any{"workspaceId": w.ID, "name": "a.txt", "contentType": "text/plain",
			"contentBase64": base64.StdEncoding.EncodeToString([]byte("hello"))}, &up); res.IsError {
			t.Fatalf("upload: %+v", res)
		}
		if res := call(ann, "fileDelete", map[string]any{"workspaceId": w.ID, "fileId": up.Result.FileID, "version": 1}, nil); res.IsError {
			t.Fatalf("delete: %+v", res)
		}
		if !refused(ann, "fileDownload", map[string]any{"workspaceId": w.ID, "fileId": up.Result.FileID, "version": 1}) {
			t.Fatal("downloaded a deleted file")
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			var list workspaces.OpResult[workspaces.FileListOutput]
			call(ann, "fileList", map[string]any{"workspaceId": w.ID, "includeDeleted": true}, &list)
			if len(list.Result.Files) == 1 && list.Result.Files[0].PurgedAt != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the purge job did not confirm: %+v", list.Result.Files)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if ok, err := s.Store().Bucket.Exists(ctx, workspaces.BlobPrefix(w.ID)); err != nil || ok {
			t.Fatalf("exists: %v %v", ok, err)
		}
		it := s.Store().Bucket.List(&blob.ListOptions{Prefix: workspaces.BlobPrefix(w.ID)})
		if obj, err := it.Next(ctx); err == nil {
			t.Fatalf("blob %s left after the purge", obj.Key)
		}

		// A key, made from a web session (the secret goes to its owner only).
		sess := annU.Caller(t)
		sess.Session = true
		raw, _ := json.Marshal(map[string]any{"workspaceId": w.ID, "name": "agent", "maxRole": "admin", "currentPassword": annU.Password})
		res, err := s.Registry().Invoke(ctx, sess, "workspaceKeyCreate", raw)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(res.Structured)
		var key workspaces.NewKey
		if err := json.Unmarshal(b, &key); err != nil || key.Key == "" {
			t.Fatalf("key: %s %v", b, err)
		}
		if !refused(ann, "workspaceKeyCreate", map[string]any{"workspaceId": w.ID, "name": "x", "maxRole": "admin", "currentPassword": annU.Password}) {
			t.Fatal("an access token created a workspace key")
		}

		agent := s.MCP(t, key.Key)
		tools, err := agent.Tools()
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"counterAdd", "counterGet", "fileCleanupRetry", "fileDelete", "fileDownload", "fileList", "fileUpload", "workspaceGet", "workspaceList", "workspaceMemberList"}
		if !slices.Equal(tools, want) {
			t.Fatalf("a key sees %v, want %v", tools, want)
		}
		if res := call(agent, "counterAdd", map[string]any{"workspaceId": w.ID, "counter": "a", "by": 1}, &r); res.IsError || r.Result.Value != 8 {
			t.Fatalf("add with key: %+v %+v", res, r)
		}
		for name, args := range map[string]any{
			"whoami":          nil,
			"accountExport":   nil,
			"workspaceCreate": map[string]any{"name": "x"},
			"counterGet":      map[string]any{"workspaceId": other, "counter": "a"},
		} {
			if !refused(agent, name, args) {
				t.Fatalf("%s with a key was not refused", name)
			}
		}
		// Revoked: the next request is refused at the door.
		raw, _ = json.Marshal(map[string]any{"workspaceId": w.ID, "keyId": key.ID})
		if _, err := s.Registry().Invoke(ctx, annU.Caller(t), "workspaceKeyRevoke", raw); err != nil {
			t.Fatal(err)
		}
		_, err = agent.Call("counterGet", map[string]any{"workspaceId": w.ID, "counter": "a"})
		if err == nil {
			t.Fatal("a revoked key still works")
		}
		if e, ok := err.(*enclavetest.RPCError); ok && e.Status != 401 {
			t.Fatalf("revoked key: %v (status %d)", err, e.Status)
		}
	})
}

// TestInvitationsPerDayBounded: any account can create a workspace and
// invite any address, each invitation a mail from the server; an inviter
// gets a bounded number per day, which deleting the workspace and making
// another does not reset.
func TestInvitationsPerDayBounded(t *testing.T) {
	opts := workspaceServer()
	opts.Config.Workspaces.InvitationsPerDay = 3
	enclavetest.Each(t, opts, func(t *testing.T, s *enclavetest.Server) {
		ctx := context.Background()
		ann := s.CreateUser(t, "ann").Caller(t)
		invoke := func(name string, args any, out any) error {
			t.Helper()
			raw, _ := json.Marshal(args)
			res, err := s.Registry().Invoke(ctx, ann, name, raw)
			if err == nil && out != nil {
				b, _ := json.Marshal(res.Structured)
				if err := json.Unmarshal(b, out); err != nil {
					t.Fatal(err)
				}
			}
			return err
		}
		var w workspaces.Workspace
		if err := invoke("workspaceCreate", map[string]any{"name": "Spam"}, &w); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if err := invoke("workspaceMemberInvite", map[string]any{"workspaceId": w.ID, "email": fmt.Sprintf("x%d@example.test", i), "role": "viewer"}, nil); err != nil {
				t.Fatalf("invitation %d: %v", i, err)
			}
		}
		err := invoke("workspaceMemberInvite", map[string]any{"workspaceId": w.ID, "email": "x9@example.test", "role": "viewer"}, nil)
		if capabilities.CodeOf(err) != capabilities.CodeQuotaExceeded {
			t.Fatalf("fourth invitation of the day: %v", err)
		}
		var del workspaces.DeleteOutput
		if err := invoke("workspaceDelete", map[string]any{"workspaceId": w.ID}, &del); err != nil {
			t.Fatal(err)
		}
		if err := invoke("workspaceDelete", map[string]any{"workspaceId": w.ID, "confirmationToken": del.ConfirmationToken}, nil); err != nil {
			t.Fatal(err)
		}
		if err := invoke("workspaceCreate", map[string]any{"name": "Spam again"}, &w); err != nil {
			t.Fatal(err)
		}
		err = invoke("workspaceMemberInvite", map[string]any{"workspaceId": w.ID, "email": "x8@example.test", "role": "viewer"}, nil)
		if capabilities.CodeOf(err) != capabilities.CodeQuotaExceeded {
			t.Fatalf("invitation from a fresh workspace after the day's bound: %v", err)
		}
	})
}
