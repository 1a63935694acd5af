package codemode_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/buckets"
	"github.com/enclave-mcp/enclave/codemode"
	"github.com/enclave-mcp/enclave/enclavetest"
)

// counterPackage counts its own calls in its package bucket.
var counterPackage = map[string]any{
	"name": "counter",
	"files": map[string]string{
		"main.js": `export async function bump() {
  const n = (await storage.get("n")) ?? 0;
  await storage.set("n", n + 1);
  return n + 1;
}`,
	},
	"manifest": map[string]any{
		"exports": map[string]any{
			"bump": map[string]any{"description": "Counts its calls.", "inputSchema": map[string]any{"type": "object"}},
		},
	},
}

// The storage binding is a storage bucket reached through the storage
// capabilities as the program's caller: an execute run's own bucket, a
// package's bucket shared by its runs, another user's never.
func TestStorageBinding(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		alice, bob := s.CreateUser(t, "alice"), s.CreateUser(t, "bob")
		a, b := alice.MCP(t), bob.MCP(t)

		o := execute(t, a, `
			await storage.set("greeting", {text: "hello", n: 42});
			await storage.set("list/1", 1);
			await storage.set("list/2", 2);
			const page = await storage.list({prefix: "list/", limit: 1});
			const next = await storage.list({prefix: "list/", cursor: page.cursor});
			const gone = await storage.delete("list/2");
			const again = await storage.delete("list/2");
			return {
				greeting: await storage.get("greeting"),
				missing: await storage.get("missing"),
				first: page.keys, second: next.keys, more: next.cursor === undefined,
				gone, again,
			};`)
		mustSucceed(t, o)
		var r struct {
			Greeting      map[string]any
			Missing       any
			First, Second []string
			More          bool
			Gone, Again   bool
		}
		if err := json.Unmarshal(o.Result, &r); err != nil {
			t.Fatal(err)
		}
		if r.Greeting["text"] != "hello" || r.Missing != nil || strings.Join(r.First, ",") != "list/1" || strings.Join(r.Second, ",") != "list/2" ||
			!r.More || !r.Gone || r.Again {
			t.Fatalf("result %s", o.Result)
		}

		// The run's bucket outlives it, readable by its owner alone.
		id := buckets.ExecStorageID(o.RunID)
		res, err := a.Call("storageGet", map[string]any{"storageId": id, "key": "greeting"})
		if err != nil || res.IsError || !strings.Contains(res.Text, `"value":{"text":"hello","n":42}`) {
			t.Fatalf("alice reads her run's bucket: %v %s", err, res.Text)
		}
		res, err = b.Call("storageGet", map[string]any{"storageId": id, "key": "greeting"})
		if err != nil || res.IsError || !strings.Contains(res.Text, `"found":false`) {
			t.Fatalf("bob reads alice's run bucket: %v %s", err, res.Text)
		}
		// A program of bob's naming alice's bucket reads his own.
		ob := execute(t, b, `return await codemode.storageGet({storageId: "`+id+`", key: "greeting"})`)
		mustSucceed(t, ob)
		if !strings.Contains(string(ob.Result), `"found":false`) {
			t.Fatalf("bob's program read alice's bucket: %s", ob.Result)
		}

		// Another execute run starts with an empty bucket of its own.
		o = execute(t, a, `return await storage.get("greeting")`)
		mustSucceed(t, o)
		if string(o.Result) != "null" {
			t.Fatalf("a second run sees %s", o.Result)
		}

		// A package's runs share its bucket.
		if res, err := a.Call("packageSave", counterPackage); err != nil || res.IsError {
			t.Fatalf("save: %v %s", err, res.Text)
		}
		tool := codemode.ExportCapabilityName("counter", "bump")
		for want := 1; want <= 3; want++ {
			_, o := call(t, a, tool, map[string]any{})
			mustSucceed(t, o)
			if string(o.Result) != strconv.Itoa(want) {
				t.Fatalf("call %d counted %s", want, o.Result)
			}
		}
		res, _ = a.Call("storageGet", map[string]any{"storageId": buckets.PackageStorageID("counter"), "key": "n"})
		if !strings.Contains(res.Text, `"value":3`) {
			t.Fatalf("package bucket: %s", res.Text)
		}
		// Bob's package of the same name has a bucket of its own.
		if res, err := b.Call("packageSave", counterPackage); err != nil || res.IsError {
			t.Fatalf("bob's save: %v %s", err, res.Text)
		}
		_, o = call(t, b, tool, map[string]any{})
		mustSucceed(t, o)
		if string(o.Result) != "1" {
			t.Fatalf("bob's package counted %s", o.Result)
		}

		// Storage limits end in an error the program may catch.
		o = execute(t, a, `try { await storage.set("big", "x".repeat(1100000)); return "stored" } catch (e) { return e.code + ": " + e.message }`)
		mustSucceed(t, o)
		if !strings.HasPrefix(string(o.Result), `"invalid_input: a value is at most 1024 KiB`) {
			t.Fatalf("an oversized value: %s", o.Result)
		}

		// The account's buckets are exported and deleted with it.
		ctx := context.Background()
		m, err := s.Lifecycle().Manifest(ctx, alice.Owner())
		if err != nil {
			t.Fatal(err)
		}
		counts := map[string]int64{}
		for _, sec := range m.Sections {
			counts[sec.Name] = sec.Count
		}
		if counts["sql:storage_entries"] != 3 || counts["sql:storage_buckets"] != 2 || counts["sql:storage_usage"] != 1 {
			t.Fatalf("export manifest counts %v", counts)
		}
		page, err := s.Lifecycle().Section(ctx, alice.Owner(), "sql:storage_entries", "", 10)
		if err != nil || len(page.Rows) != 3 {
			t.Fatalf("export section %+v (%v)", page, err)
		}
		res2, err := s.Lifecycle().Delete(ctx, alice.Owner())
		if err != nil || !res2.Completed || res2.Deleted["sql:storage_entries"] != 3 {
			t.Fatalf("delete %+v (%v)", res2, err)
		}
		for _, table := range []string{"storage_entries", "storage_buckets", "storage_usage"} {
			for who, o := range map[string]int64{"alice": alice.ID, "bob": bob.ID} {
				n, err := s.Store().DB.NewSelect().Table(table).Where("user_id = ?", o).Count(ctx)
				if err != nil || (who == "alice") != (n == 0) {
					t.Fatalf("%s: %d rows of %s after alice's deletion (%v)", table, n, who, err)
				}
			}
		}
	})
}

func TestStorageBindingWithBucketsOff(t *testing.T) {
	s := enclavetest.Start(t, enclavetest.Options{Config: enclave.Config{Buckets: buckets.Options{Disabled: true}}})
	a := s.CreateUser(t, "alice").MCP(t)
	o := execute(t, a, `try { await storage.get("k"); return "read" } catch (e) { return e.code + ": " + e.message }`)
	mustSucceed(t, o)
	if string(o.Result) != `"unsupported: storage: storage buckets are turned off on this server"` {
		t.Fatalf("got %s", o.Result)
	}
	if names, _ := a.Tools(); strings.Contains(strings.Join(names, ","), "storageGet") {
		t.Fatal("storageGet listed with buckets off")
	}
}
