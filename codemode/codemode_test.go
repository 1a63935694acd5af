package codemode_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/codemode"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/storage"
	"gocloud.dev/blob"
)

// out is the answer of execute, packageRun and exports.
type out struct {
	Result     json.RawMessage `json:"result"`
	Logs       []struct{ Level, Message string }
	RunID      string `json:"runId"`
	DurationMs int64  `json:"durationMs"`
	Error      *struct{ Kind, Limit, Message string }
}

func call(t *testing.T, c *enclavetest.Client, name string, args any) (enclavetest.ToolResult, out) {
	t.Helper()
	res, err := c.Call(name, args)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var o out
	if len(res.Structured) > 0 {
		_ = res.Decode(&o)
	}
	return res, o
}

func execute(t *testing.T, c *enclavetest.Client, code string) out {
	t.Helper()
	res, o := call(t, c, "execute", map[string]any{"code": code})
	if res.IsError && o.Error == nil {
		t.Fatalf("execute refused: %s", res.Text)
	}
	return o
}

func mustSucceed(t *testing.T, o out) {
	t.Helper()
	if o.Error != nil {
		t.Fatalf("run failed: %+v", *o.Error)
	}
}

var weather = map[string]any{
	"name": "weather",
	"files": map[string]string{
		"main.js": `import {double} from "./lib/math.js";
export async function forecast(args) {
  const me = await codemode.whoami({});
  console.log("forecast for", args.city);
  return {city: args.city, user: me.username, high: double(args.base ?? 10)};
}`,
		"lib/math.js": `export const double = (x) => 2 * x;`,
	},
	"manifest": map[string]any{
		"description": "Weather tools",
		"exports": map[string]any{
			"forecast": map[string]any{
				"description": "Tomorrow's forecast for a city.",
				"inputSchema": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}, "base": map[string]any{"type": "number"}}, "required": []string{"city"}},
				"readOnly":    true,
			},
		},
	},
}

func TestExecuteAndPackages(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		alice, bob := s.CreateUser(t, "alice"), s.CreateUser(t, "bob")
		a, b := alice.MCP(t), bob.MCP(t)

		t.Run("execute calls two capabilities and returns a filtered result", func(t *testing.T) {
			o := execute(t, a, `
				const me = await codemode.whoami({});
				const found = await codemode.capabilitiesSearch({query: "package"});
				const names = found.matches.map(m => m.name).filter(n => n.startsWith("package"));
				console.log("found", names.length);
				return {user: me.username, names};`)
			mustSucceed(t, o)
			var r struct {
				User  string
				Names []string
			}
			if err := json.Unmarshal(o.Result, &r); err != nil || r.User != "alice" || !slices.Contains(r.Names, "packageSave") {
				t.Fatalf("result %s (%v)", o.Result, err)
			}
			if len(o.Logs) != 1 || o.Logs[0].Message != "found "+fmt.Sprint(len(r.Names)) || o.RunID == "" {
				t.Fatalf("logs %+v, run %q", o.Logs, o.RunID)
			}
		})

		t.Run("a failed program is an error result naming the failure", func(t *testing.T) {
			res, o := call(t, a, "execute", map[string]any{"code": `throw new Error("boom")`})
			if !res.IsError || o.Error == nil || o.Error.Kind != "exception" || !strings.Contains(o.Error.Message, "boom") {
				t.Fatalf("got %+v %s", o.Error, res.Text)
			}
		})

		t.Run("globals never survive a run", func(t *testing.T) {
			mustSucceed(t, execute(t, a, `globalThis.leak = "alice's"; return 1`))
			o := execute(t, a, `return typeof globalThis.leak`)
			if string(o.Result) != `"undefined"` {
				t.Fatalf("leak visible in the next run: %s", o.Result)
			}
			var wg sync.WaitGroup
			results := make([]string, 8)
			for i := range results {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c := a
					if i%2 == 1 {
						c = b
					}
					o := execute(t, c, fmt.Sprintf(`const before = typeof globalThis.mark; globalThis.mark = %d; let x = 0; for (let i = 0; i < 1e5; i++) x += i; return before + ":" + globalThis.mark`, i))
					results[i] = string(o.Result)
				}()
			}
			wg.Wait()
			for i, r := range results {
				if r != fmt.Sprintf(`"undefined:%d"`, i) {
					t.Fatalf("run %d saw %s", i, r)
				}
			}
		})

		t.Run("an interactive-only capability is refused inside code", func(t *testing.T) {
			o := execute(t, a, `try { await codemode.feedbackSubmit({category: "bug", message: "x"}); return "ran" } catch (e) { return e.code }`)
			mustSucceed(t, o)
			if string(o.Result) == `"ran"` {
				t.Fatal("an interactive-only capability ran inside code")
			}
			o = execute(t, a, `return typeof codemode.feedbackSubmit + "," + typeof codemode.execute`)
			if string(o.Result) != `"undefined,undefined"` {
				t.Fatalf("bound: %s", o.Result)
			}
		})

		t.Run("save, list, get, history", func(t *testing.T) {
			res, err := a.Call("packageSave", weather)
			if err != nil || res.IsError {
				t.Fatalf("save: %v %s", err, res.Text)
			}
			res, _ = a.Call("packageSave", weather)
			var v codemode.Version
			_ = res.Decode(&v)
			if v.Version != 2 {
				t.Fatalf("second save is version %d", v.Version)
			}
			res, _ = a.Call("packageHistory", map[string]any{"name": "weather"})
			var h codemode.HistoryOutput
			_ = res.Decode(&h)
			if len(h.Versions) != 2 || h.Versions[0].Version != 2 {
				t.Fatalf("history %s", res.Text)
			}
			res, _ = a.Call("packageGet", map[string]any{"name": "weather", "version": 1})
			_ = res.Decode(&v)
			if v.Files["lib/math.js"] == "" || v.Manifest.Main != "main.js" {
				t.Fatalf("get %s", res.Text)
			}
			res, _ = b.Call("packageGet", map[string]any{"name": "weather"})
			if !res.IsError || !strings.Contains(res.Text, "not found") {
				t.Fatalf("bob read alice's package: %s", res.Text)
			}
		})

		t.Run("an export is its owner's tool alone", func(t *testing.T) {
			tool := codemode.ExportCapabilityName("weather", "forecast")
			if names, _ := a.Tools(); !slices.Contains(names, tool) {
				t.Fatalf("alice's tools lack %s: %v", tool, names)
			}
			if names, _ := b.Tools(); slices.Contains(names, tool) {
				t.Fatalf("bob's tools list alice's export")
			}
			res, o := call(t, a, tool, map[string]any{"city": "Oslo", "base": 4})
			if res.IsError {
				t.Fatalf("export: %s", res.Text)
			}
			if string(o.Result) != `{"city":"Oslo","user":"alice","high":8}` {
				t.Fatalf("export result %s", o.Result)
			}
			res, _ = call(t, a, tool, map[string]any{"base": 4})
			if !res.IsError || !strings.Contains(res.Text, "city") {
				t.Fatalf("the export's input schema was not applied: %s", res.Text)
			}
			res, err := b.Call(tool, map[string]any{"city": "Oslo"})
			unknown, _ := b.Call(codemode.ExportCapabilityName("weather", "nothing"), map[string]any{})
			if err == nil && !res.IsError {
				t.Fatalf("bob ran alice's export: %s", res.Text)
			}
			if res.Text != strings.ReplaceAll(unknown.Text, "nothing", "forecast") {
				t.Fatalf("bob's refusal %q differs from an unknown name's %q", res.Text, unknown.Text)
			}
			o2 := execute(t, a, `import {forecast} from "pkg:weather"; return (await forecast({city: "Rome"})).high`)
			if string(o2.Result) != "20" {
				t.Fatalf("import result %s %+v", o2.Result, o2.Error)
			}
			o3 := execute(t, b, `import {forecast} from "pkg:weather"; return 1`)
			if o3.Error == nil || !strings.Contains(o3.Error.Message, "not found") {
				t.Fatalf("bob imported alice's package: %+v %s", o3.Error, o3.Result)
			}
			_, o4 := call(t, a, "packageRun", map[string]any{"name": "weather", "export": "forecast", "args": map[string]any{"city": "Lima"}})
			mustSucceed(t, o4)
		})

		t.Run("runs are recorded and owner-scoped", func(t *testing.T) {
			res, _ := a.Call("runList", map[string]any{"packageName": "weather"})
			var l codemode.RunListOutput
			_ = res.Decode(&l)
			if len(l.Runs) < 2 || l.Runs[0].PackageName != "weather" {
				t.Fatalf("runs %s", res.Text)
			}
			res, _ = a.Call("runGet", map[string]any{"runId": l.Runs[len(l.Runs)-1].ID})
			var r codemode.Run
			_ = res.Decode(&r)
			if r.Calls["whoami"] != 1 || len(r.Logs) != 1 {
				t.Fatalf("run %s", res.Text)
			}
			res, _ = b.Call("runGet", map[string]any{"runId": r.ID})
			if !res.IsError || !strings.Contains(res.Text, "not found") {
				t.Fatalf("bob read alice's run: %s", res.Text)
			}
		})

		t.Run("delete removes the export", func(t *testing.T) {
			res, _ := a.Call("packageDelete", map[string]any{"name": "weather"})
			if res.IsError {
				t.Fatal(res.Text)
			}
			tool := codemode.ExportCapabilityName("weather", "forecast")
			if names, _ := a.Tools(); slices.Contains(names, tool) {
				t.Fatal("a deleted package's export is still listed")
			}
			res, err := a.Call(tool, map[string]any{"city": "x"})
			if err == nil && !res.IsError {
				t.Fatal("a deleted package's export still runs")
			}
		})
	})
}

func TestSaveRefusals(t *testing.T) {
	s := enclavetest.Start(t, enclavetest.Options{})
	a := s.CreateUser(t, "alice").MCP(t)
	for _, tc := range []struct {
		name  string
		files map[string]string
		man   map[string]any
		want  string
	}{
		{"dynamic import", map[string]string{"main.js": `export const f = async () => (await import("pkg:x")).y`}, nil, "dynamic import"},
		{"bare import", map[string]string{"main.js": `import fs from "fs"; export const f = 1`}, nil, "may import"},
		{"missing relative file", map[string]string{"main.js": `import {a} from "./nope.js"; export const f = 1`}, nil, "not a file"},
		{"no main", map[string]string{"lib.js": `export const f = 1`}, nil, "main module"},
		{"path escape", map[string]string{"../main.js": `x`}, nil, "file path"},
		{"export without description", map[string]string{"main.js": `export const f = 1`}, map[string]any{"exports": map[string]any{"f": map[string]any{}}}, "description"},
		{"bad schedule", map[string]string{"main.js": `export const f = 1`}, map[string]any{"exports": map[string]any{"f": map[string]any{"description": "d"}}, "jobs": map[string]any{"j": map[string]any{"schedule": "* * * * *", "export": "f"}}}, "every"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			man := tc.man
			if man == nil {
				man = map[string]any{}
			}
			res, err := a.Call("packageSave", map[string]any{"name": "p", "files": tc.files, "manifest": man})
			if err != nil || !res.IsError || !strings.Contains(res.Text, tc.want) {
				t.Fatalf("got %v %q, want an error saying %q", err, res.Text, tc.want)
			}
		})
	}
}

// TestLimitsEndTheRunNotTheServer runs each kind of runaway program and
// checks that it ends with the limit named while the server, and another
// user's calls, keep answering.
func TestLimitsEndTheRunNotTheServer(t *testing.T) {
	s := enclavetest.Start(t, enclavetest.Options{Config: enclave.Config{CodeMode: codemode.Options{}}})
	s.CodeMode() // on by default
	a, b := s.CreateUser(t, "alice").MCP(t), s.CreateUser(t, "bob").MCP(t)
	stop := make(chan struct{})
	var healthy sync.WaitGroup
	healthy.Add(1)
	failures := make(chan string, 100)
	go func() {
		defer healthy.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			resp, err := http.Get(s.URL + "/readyz")
			if err != nil || resp.StatusCode != http.StatusOK {
				failures <- fmt.Sprintf("readyz: %v %v", err, resp)
			}
			if resp != nil {
				resp.Body.Close()
			}
			if res, err := b.Call("whoami", map[string]any{}); err != nil || res.IsError {
				failures <- fmt.Sprintf("bob's whoami: %v %s", err, res.Text)
			}
		}
	}()
	for _, tc := range []struct{ name, code, limit string }{
		{"memory bomb", `const a = []; for (;;) a.push(new Array(1e5).fill(1))`, "memory"},
		{"infinite loop", `while (true) {}`, "timeout"},
		{"deep recursion", `const f = (n) => f(n + 1) + 1; return f(0)`, "stack"},
		{"huge string", `return "x".repeat(1e9).length`, "memory"},
		{"huge string by doubling", `let s = "x"; for (;;) s += s`, "any"},
		{"huge result", `return "x".repeat(2 << 20)`, "result"},
		{"host call flood", `for (;;) { try { await codemode.whoami({}) } catch (e) {} }`, "hostCalls"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := map[string]any{"code": tc.code}
			if tc.limit == "timeout" {
				args["timeoutMs"] = 500
			}
			res, o := call(t, a, "execute", args)
			if !res.IsError || o.Error == nil || (o.Error.Limit != tc.limit && tc.limit != "any") {
				t.Fatalf("got %+v (%s), want the %s limit", o.Error, truncate(res.Text), tc.limit)
			}
		})
	}
	t.Run("huge output is kept within the limit", func(t *testing.T) {
		o := execute(t, a, `for (let i = 0; i < 1e5; i++) console.log("line", i); return "done"`)
		mustSucceed(t, o)
		total := 0
		for _, l := range o.Logs {
			total += len(l.Message)
		}
		if total > 64<<10 || string(o.Result) != `"done"` {
			t.Fatalf("kept %d bytes of logs, result %s", total, o.Result)
		}
	})
	close(stop)
	healthy.Wait()
	close(failures)
	for f := range failures {
		t.Error(f)
	}
}

func truncate(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}

func TestPackageJobs(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		alice := s.CreateUser(t, "alice")
		ctx := context.Background()
		pkg := map[string]any{
			"name":  "daily",
			"files": map[string]string{"main.js": `export async function report(a) { const me = await codemode.whoami({}); return me.username + ":" + a.n }`},
			"manifest": map[string]any{
				"exports": map[string]any{"report": map[string]any{"description": "A report."}},
				"jobs":    map[string]any{"morning": map[string]any{"schedule": "0 7 * * *", "export": "report", "args": map[string]any{"n": 3}}},
			},
		}
		res, err := s.Registry().Invoke(ctx, alice.Caller(t), "packageSave", mustJSON(pkg))
		if err != nil || res.IsError {
			t.Fatalf("save: %v %+v", err, res)
		}
		// Not due yet: nothing runs.
		now := time.Now().UTC()
		next := now.Truncate(24 * time.Hour).Add(7 * time.Hour)
		if !next.After(now) {
			next = next.Add(24 * time.Hour)
		}
		if n, err := s.CodeMode().RunDueJobs(ctx, next.Add(-time.Minute)); err != nil || n != 0 {
			t.Fatalf("ran %d before due (%v)", n, err)
		}
		// Due: two ticks at once run it once.
		var wg sync.WaitGroup
		ran := make([]int, 2)
		for i := range ran {
			wg.Add(1)
			go func() { defer wg.Done(); ran[i], _ = s.CodeMode().RunDueJobs(ctx, next) }()
		}
		wg.Wait()
		if ran[0]+ran[1] != 1 {
			t.Fatalf("a due job ran %d times", ran[0]+ran[1])
		}
		page, err := s.CodeMode().ListRuns(ctx, alice.Owner(), codemode.RunFilter{PackageName: "daily"}, storage.PageRequest{})
		if err != nil || len(page.Items) != 1 || page.Items[0].Kind != codemode.KindJob || page.Items[0].Status != codemode.StatusSucceeded {
			t.Fatalf("runs %+v %v", page.Items, err)
		}
		jobs, err := s.CodeMode().ListJobs(ctx, alice.Owner())
		if err != nil || len(jobs) != 1 || jobs[0].Running || jobs[0].LastStatus != codemode.StatusSucceeded || !jobs[0].NextRunAt.After(next) {
			t.Fatalf("jobs %+v %v", jobs, err)
		}
	})
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func TestExportAndDeletion(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		alice, bob := s.CreateUser(t, "alice"), s.CreateUser(t, "bob")
		ctx := context.Background()
		for _, u := range []*enclavetest.User{alice, bob} {
			if res, err := s.Registry().Invoke(ctx, u.Caller(t), "packageSave", mustJSON(weather)); err != nil || res.IsError {
				t.Fatalf("save: %v %+v", err, res)
			}
			if res, err := s.Registry().Invoke(ctx, u.Caller(t), "execute", mustJSON(map[string]any{"code": "return 1"})); err != nil || res.IsError {
				t.Fatalf("execute: %v %+v", err, res)
			}
		}
		// Each run's record is committed before its answer: no Flush needed.
		var buf bytes.Buffer
		if err := s.Lifecycle().WriteExport(ctx, alice.Owner(), &buf); err != nil {
			t.Fatal(err)
		}
		export := buf.String()
		sum := sha256.Sum256([]byte(weather["files"].(map[string]string)["lib/math.js"]))
		for _, want := range []string{"code_packages", "code_package_versions", "code_runs", hex.EncodeToString(sum[:])} {
			if !strings.Contains(export, want) {
				t.Errorf("the export lacks %q", want)
			}
		}
		if _, err := s.Lifecycle().Delete(ctx, alice.Owner()); err != nil {
			t.Fatal(err)
		}
		for _, table := range []string{"code_packages", "code_package_versions", "code_runs"} {
			n, err := s.Store().DB.NewSelect().Table(table).Where("user_id = ?", alice.ID).Count(ctx)
			if err != nil || n != 0 {
				t.Errorf("%s: %d rows of alice left (%v)", table, n, err)
			}
			n, _ = s.Store().DB.NewSelect().Table(table).Where("user_id = ?", bob.ID).Count(ctx)
			if n == 0 {
				t.Errorf("%s: bob's rows went with alice's", table)
			}
		}
		if _, err := s.Store().Bucket.List(&blob.ListOptions{Prefix: alice.StableID + "/"}).Next(ctx); err != io.EOF {
			t.Errorf("alice's blobs are left: %v", err)
		}
		if _, err := s.Store().Bucket.List(&blob.ListOptions{Prefix: bob.StableID + "/" + codemode.BlobDomain + "/"}).Next(ctx); err != nil {
			t.Errorf("bob's sources went with alice's: %v", err)
		}
	})
}

// TestExecuteDeclaresTheCallersCapabilities checks that execute's
// description, as tools/list shows it, declares the capabilities that
// caller's programs may call, and only those: as TypeScript while the
// declarations fit the description's budget, else as a list of names
// pointing to codemodeTypes (the whole server, with mail, connections and
// the community, is past it for a plain user).
func TestExecuteDeclaresTheCallersCapabilities(t *testing.T) {
	var small enclave.Config
	small.Mail.Disabled, small.Integrations.Disabled, small.Community.Disabled, small.Memory.Disabled = true, true, true, true
	s := enclavetest.Start(t, enclavetest.Options{Config: small})
	full := enclavetest.Start(t, enclavetest.Options{})
	describe := func(c *enclavetest.Client) string {
		raw, err := c.Request("tools/list", map[string]any{})
		if err != nil {
			t.Fatal(err)
		}
		var res struct {
			Tools []struct{ Name, Description string }
		}
		_ = json.Unmarshal(raw, &res)
		for _, tl := range res.Tools {
			if tl.Name == "execute" {
				return tl.Description
			}
		}
		t.Fatal("execute is not listed")
		return ""
	}
	user := describe(s.CreateUser(t, "alice").MCP(t))
	for _, want := range []string{"declare const codemode", "whoami(", "secretList(", "declare function fetch"} {
		if !strings.Contains(user, want) {
			t.Errorf("a user's execute description lacks %q:\n%s", want, user)
		}
	}
	for _, not := range []string{"adminUserList", "execute(", "feedbackSubmit("} {
		if strings.Contains(user, not) {
			t.Errorf("a user's execute description declares %q", not)
		}
	}
	t.Logf("a user's execute description: %d bytes", len(user))
	names := describe(full.CreateUser(t, "erin").MCP(t))
	for _, want := range []string{"codemode has: ", "whoami", "secretList", "mailList", "codemodeTypes for their TypeScript declarations"} {
		if !strings.Contains(names, want) {
			t.Errorf("the whole server's execute description lacks %q:\n%s", want, names)
		}
	}
	for _, not := range []string{"adminUserList", "execute,", "feedbackSubmit", "declare const codemode"} {
		if strings.Contains(names, not) {
			t.Errorf("the whole server's execute description for a user has %q:\n%s", not, names)
		}
	}
	admin := describe(s.CreateUser(t, "dana", capabilities.RoleAdmin).MCP(t))
	t.Logf("an admin's execute description: %d bytes", len(admin))
	if !strings.Contains(admin, "adminUserList") {
		t.Errorf("an admin's execute description does not mention adminUserList:\n%s", admin)
	}
	// codemodeTypes always has the whole declaration.
	res, err := s.Registry().Invoke(context.Background(), s.CreateUser(t, "carol").Caller(t), "codemodeTypes", nil)
	if err != nil || !strings.Contains(res.Structured.(codemode.TypesOutput).Declarations, "whoami(") {
		t.Fatalf("codemodeTypes: %v %+v", err, res)
	}
}
