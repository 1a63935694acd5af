package codemode_test

// Security review tests (code mode). Each one fails while the weakness it
// names is present.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"gocloud.dev/blob"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/codemode"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/storage"
)

const reviewChildEnv = "ENCLAVE_REVIEW_CHILD"

// TestReviewInputSchemaRefCrashesTheProcess: any user saves a package
// whose export's inputSchema is {"type":"object","$ref":"#"}. It resolves
// (so packageSave and Registry.Compile accept it), and the first call of
// the export makes the registry's input validation recurse without end:
// a Go stack overflow is a fatal error, not a panic, so no recover() saves
// the process. One tools/call takes the whole server (every user) down.
// The crash runs in a child process; this test fails when the child dies.
func TestReviewInputSchemaRefCrashesTheProcess(t *testing.T) {
	if os.Getenv(reviewChildEnv) == t.Name() {
		s := enclavetest.Start(t, enclavetest.Options{})
		a := s.CreateUser(t, "mallory").MCP(t)
		res, err := a.Call("packageSave", map[string]any{
			"name":  "loop",
			"files": map[string]string{"main.js": `export async function f() { return 1 }`},
			"manifest": map[string]any{"exports": map[string]any{"f": map[string]any{
				"description": "d", "inputSchema": map[string]any{"type": "object", "$ref": "#"}}}},
		})
		if err != nil || res.IsError {
			t.Logf("the schema was refused at save: %v %s", err, res.Text)
			return
		}
		_, _ = a.Call(codemode.ExportCapabilityName("loop", "f"), map[string]any{})
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), reviewChildEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	if err != nil {
		text := string(out)
		if i := strings.Index(text, "fatal error"); i >= 0 {
			text = text[i:min(len(text), i+600)]
		} else if len(text) > 2000 {
			text = text[len(text)-2000:]
		}
		t.Fatalf("one tools/call of an export with inputSchema {\"type\":\"object\",\"$ref\":\"#\"} killed the server process (%v):\n%s", err, text)
	}
}

// TestReviewRecreatedPackageServesStaleExport: the compiled-export cache is
// keyed by owner/package@version/export, but a package deleted and saved
// again starts at version 1 again. The new version's export is then served
// with the old one's definition: the old description, the old annotations
// (readOnlyHint on what is now destructive: clients auto-approve it; and
// it stays callable while the account is being deleted) and the old input
// schema (the new one is not enforced).
func TestReviewRecreatedPackageServesStaleExport(t *testing.T) {
	s := enclavetest.Start(t, enclavetest.Options{})
	alice := s.CreateUser(t, "alice")
	ctx := context.Background()
	save := func(x map[string]any) {
		t.Helper()
		pkg := map[string]any{"name": "tool", "files": map[string]string{"main.js": `export async function f(a) { return "ran" }`},
			"manifest": map[string]any{"exports": map[string]any{"f": x}}}
		if res, err := s.Registry().Invoke(ctx, alice.Caller(t), "packageSave", mustJSON(pkg)); err != nil || res.IsError {
			t.Fatalf("save: %v %+v", err, res)
		}
	}
	name := codemode.ExportCapabilityName("tool", "f")
	save(map[string]any{"description": "Old: reads nothing.", "readOnly": true})
	// List once, as tools/list does, so the export is compiled and cached.
	_ = s.Registry().Visible(ctx, alice.Caller(t))
	if res, err := s.Registry().Invoke(ctx, alice.Caller(t), "packageDelete", mustJSON(map[string]any{"name": "tool"})); err != nil || res.IsError {
		t.Fatalf("delete: %v %+v", err, res)
	}
	save(map[string]any{"description": "New: deletes things.", "destructive": true,
		"inputSchema": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}})
	var got *capabilities.Capability
	for _, c := range s.Registry().Visible(ctx, alice.Caller(t)) {
		if c.Name == name {
			got = &c
		}
	}
	if got == nil {
		t.Fatalf("%s is not listed", name)
	}
	var problems []string
	if !strings.Contains(got.Description, "New:") {
		problems = append(problems, "description "+strings.SplitN(got.Description, " (", 2)[0])
	}
	if got.Annotations.ReadOnly || !got.Annotations.Destructive {
		problems = append(problems, "annotations readOnly/not destructive")
	}
	res, err := s.Registry().Invoke(ctx, alice.Caller(t), name, mustJSON(map[string]any{}))
	if err == nil {
		problems = append(problems, "the new version's input schema (city required) was not applied: "+truncate(resultText(res)))
	}
	if len(problems) > 0 {
		t.Fatalf("after delete and save again, the export is served with the deleted version's definition: %s", strings.Join(problems, "; "))
	}
}

func resultText(res capabilities.Result) string {
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(capabilities.Text); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

// TestReviewErrorMessageIsUnbounded: the result is limited to 1 MiB, but
// an uncaught error's message is returned whole, and escaped: 4 MiB of
// "\x01" in JS becomes 24 MiB of text content plus the structured copy,
// then the MCP encoding of both (20 MB of them measured ~950 MB of Go
// allocations for one call). A few concurrent runs exhaust the server's
// memory; the 1 MiB result limit is also simply bypassed.
func TestReviewErrorMessageIsUnbounded(t *testing.T) {
	s := enclavetest.Start(t, enclavetest.Options{})
	alice := s.CreateUser(t, "alice")
	res, err := s.Registry().Invoke(context.Background(), alice.Caller(t), "execute",
		mustJSON(map[string]any{"code": `throw new Error("\x01".repeat(4 << 20))`}))
	if err != nil {
		t.Fatal(err)
	}
	o, _ := res.Structured.(codemode.Output)
	if o.Error == nil {
		t.Fatalf("the run did not fail: %s", truncate(resultText(res)))
	}
	if n := len(resultText(res)); n > 2<<20 || len(o.Error.Message) > 1<<20 {
		t.Fatalf("a failed run answers with a %d-byte error message and %d bytes of text, past the 1 MiB result limit", len(o.Error.Message), n)
	}
}

// saveLoop saves a new version of a package again and again for 2.5 s.
const saveLoop = `const end = Date.now() + 2500; let n = 0, refused = 0;
for (let i = 0; Date.now() < end && i < 900; i++) {
  try { await codemode.packageSave({name: "p", files: {"main.js": "export const x = " + i + ";"}, manifest: {}}); n++ } catch (e) { refused++ }
}
return {n, refused};`

// TestReviewSuspendedAccountKeepsWritingMidRun: a run acts with the caller
// loaded when it started, for its whole wall time (30 s by default, much
// longer with TestReviewNativeLoopOutlivesTimeout between calls): after an
// admin suspends the account (or its token is revoked, or a role taken
// away), the running program's capability calls still pass Invoke as an
// active account and keep writing.
func TestReviewSuspendedAccountKeepsWritingMidRun(t *testing.T) {
	s := enclavetest.Start(t, enclavetest.Options{})
	alice := s.CreateUser(t, "alice")
	ctx := context.Background()
	done := make(chan error, 1)
	caller := alice.Caller(t)
	go func() {
		_, err := s.Registry().Invoke(ctx, caller, "execute", mustJSON(map[string]any{"code": saveLoop}))
		done <- err
	}()
	time.Sleep(700 * time.Millisecond)
	if _, err := s.Accounts().Lifecycle.Suspend(ctx, alice.ID); err != nil {
		t.Fatal(err)
	}
	suspended := time.Now().UTC()
	// A fresh call is refused, as it should be.
	if _, err := s.Registry().Invoke(ctx, alice.Caller(t), "whoami", nil); capabilities.CodeOf(err) != capabilities.CodeAccountSuspended {
		t.Fatalf("a fresh call of the suspended account: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var times []time.Time
	if err := s.Store().DB.NewSelect().Table("code_package_versions").Column("created_at").Where("user_id = ?", alice.ID).Scan(ctx, &times); err != nil {
		t.Fatal(err)
	}
	after := 0
	for _, at := range times {
		if at.After(suspended.Add(250 * time.Millisecond)) {
			after++
		}
	}
	if after > 0 {
		t.Fatalf("the suspended account's running program saved %d package versions after the suspension (of %d)", after, len(times))
	}
}

// TestReviewDeletedAccountLeavesSourcesFromRunningProgram: the same stale
// caller outlives account deletion. Deletion marks the account deleting
// (refusing writes at Invoke, for fresh callers), removes the blobs, then
// the rows; the program meanwhile keeps calling packageSave as an active
// account, and each save writes its source blob before its (failing)
// transaction: blobs under the deleted account's stable id survive the
// deletion that reported success (Invariant 9).
func TestReviewDeletedAccountLeavesSourcesFromRunningProgram(t *testing.T) {
	s := enclavetest.Start(t, enclavetest.Options{})
	alice := s.CreateUser(t, "alice")
	ctx := context.Background()
	done := make(chan error, 1)
	caller := alice.Caller(t)
	go func() {
		_, err := s.Registry().Invoke(ctx, caller, "execute", mustJSON(map[string]any{"code": saveLoop}))
		done <- err
	}()
	time.Sleep(700 * time.Millisecond)
	if _, err := s.Lifecycle().Delete(ctx, alice.Owner()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	it := s.Store().Bucket.List(&blob.ListOptions{Prefix: alice.StableID + "/"})
	var left []string
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		left = append(left, obj.Key)
	}
	if len(left) > 0 {
		t.Fatalf("%d blobs of the deleted account are left after its deletion succeeded, e.g. %s", len(left), left[0])
	}
}

// TestReviewJobWidensItsAuthorsAuthority: a job runs through
// InvokeBackground, which gives the owner every scope and no confinement.
// A credential that cannot call a capability itself (a token without the
// scope it needs, or a caller confined by Caller.Only to code mode) saves a
// package whose job calls it, and the job calls it: code running with more
// than the authority of the caller who wrote it (Invariant 16; "code can
// never do more than the agent's token could do with single calls").
func TestReviewJobWidensItsAuthorsAuthority(t *testing.T) {
	special := capabilities.Define(capabilities.Spec[struct{}, struct {
		OK bool `json:"ok"`
	}]{
		Name: "specialThing", Domain: "review", Title: "Special", Description: "Needs the token scope special.",
		Annotations: &capabilities.Annotations{},
		Requires:    capabilities.Requirement{Permissions: []capabilities.Permission{capabilities.UpdateUserOwn}, Scopes: []string{"special"}},
		Handler: func(context.Context, *capabilities.Call, struct{}) (struct {
			OK bool `json:"ok"`
		}, error) {
			return struct {
				OK bool `json:"ok"`
			}{true}, nil
		},
	})
	s := enclavetest.Start(t, enclavetest.Options{Setup: func(srv *enclave.Server) error { return srv.Registry().Register(special) }})
	ctx := context.Background()
	for _, tc := range []struct {
		name, call string
		narrow     func(c capabilities.Caller) capabilities.Caller
	}{
		{"a token without the scope", "specialThing", func(c capabilities.Caller) capabilities.Caller {
			c.AllScopes, c.Scopes = false, []string{"mcp"}
			return c
		}},
		{"a caller confined to code mode", "whoami", func(c capabilities.Caller) capabilities.Caller {
			c.Only = []string{"execute", "packageSave"}
			return c
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := s.CreateUser(t, "u"+strings.ReplaceAll(tc.name, " ", "")[:12])
			narrow := tc.narrow(u.Caller(t))
			code := `try { await codemode.` + tc.call + `({}); return "ran" } catch (e) { return e.code || String(e) }`
			res, err := s.Registry().Invoke(ctx, narrow, "execute", mustJSON(map[string]any{"code": code}))
			if o, _ := res.Structured.(codemode.Output); err != nil || string(mustJSON(o.Result)) == `"ran"` {
				t.Fatalf("precondition: the narrow caller's own code may not call %s (%v %s)", tc.call, err, truncate(resultText(res)))
			}
			pkg := map[string]any{"name": "j", "files": map[string]string{"main.js": `export async function f() { await codemode.` + tc.call + `({}); return "ran" }`},
				"manifest": map[string]any{"exports": map[string]any{"f": map[string]any{"description": "d"}},
					"jobs": map[string]any{"k": map[string]any{"schedule": "*/5 * * * *", "export": "f"}}}}
			if res, err := s.Registry().Invoke(ctx, narrow, "packageSave", mustJSON(pkg)); err != nil || res.IsError {
				t.Fatalf("the narrow caller cannot save (which would be a fix): %v %s", err, truncate(resultText(res)))
			}
			runDueJobs(t, s, time.Now().Add(10*time.Minute))
			jobs, err := s.CodeMode().ListJobs(ctx, u.Owner())
			if err != nil || len(jobs) != 1 {
				t.Fatalf("jobs %+v %v", jobs, err)
			}
			if jobs[0].LastStatus == codemode.StatusSucceeded {
				t.Fatalf("the job saved by %s called %s, which that caller's own code is refused (run %s)", tc.name, tc.call, jobs[0].LastRunID)
			}
		})
	}
}

// TestReviewPackageRunSkipsTheExportSchema: docs/codemode.md says an
// export's inputSchema is "validated by the registry before the code
// runs". It is for pkg_<p>_<e>, but packageRun (and so every job) passes
// any args straight to the code.
func TestReviewPackageRunSkipsTheExportSchema(t *testing.T) {
	s := enclavetest.Start(t, enclavetest.Options{})
	alice := s.CreateUser(t, "alice")
	ctx := context.Background()
	if res, err := s.Registry().Invoke(ctx, alice.Caller(t), "packageSave", mustJSON(weather)); err != nil || res.IsError {
		t.Fatalf("save: %v %+v", err, res)
	}
	_, err := s.Registry().Invoke(ctx, alice.Caller(t), codemode.ExportCapabilityName("weather", "forecast"), mustJSON(map[string]any{"base": 1}))
	if capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
		t.Fatalf("precondition: the export refuses args without city: %v", err)
	}
	res, err := s.Registry().Invoke(ctx, alice.Caller(t), "packageRun", mustJSON(map[string]any{"name": "weather", "export": "forecast", "args": map[string]any{"base": 1}}))
	if err == nil {
		t.Fatalf("packageRun ran the export with args its inputSchema refuses: %s", truncate(resultText(res)))
	}
}

// TestReviewGenerationIsPerReplica: Provider.Generation must change
// "whenever the set Own returns for userID may have changed" (it feeds
// VisibilityKey, by which a replica decides that a session's tool list
// is unchanged), but the service counts only the saves and deletes this
// process made. After a save on one replica, another replica's key for
// the caller is the same while the caller's visible set differs: its
// sessions are never sent notifications/tools/list_changed.
func TestReviewGenerationIsPerReplica(t *testing.T) {
	// Replicas share a bus on PostgreSQL (LISTEN/NOTIFY); two SQLite
	// servers in one process each have a local bus of their own, as a
	// single-process deployment does.
	s := enclavetest.Start(t, enclavetest.Options{Dialect: storage.Postgres})
	other := s.Replica(t)
	alice := s.CreateUser(t, "alice")
	ctx := context.Background()
	c := alice.Caller(t)
	before, ok := other.Registry().VisibilityKey(c)
	if !ok {
		t.Skip("no visibility key (feature flags): nothing to check")
	}
	names := strings.Join(other.Registry().VisibleNames(ctx, c), ",")
	if res, err := s.Registry().Invoke(ctx, c, "packageSave", mustJSON(weather)); err != nil || res.IsError {
		t.Fatalf("save: %v %+v", err, res)
	}
	after, _ := other.Registry().VisibilityKey(c)
	for deadline := time.Now().Add(5 * time.Second); after == before && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond) // the notice crosses the bus
		after, _ = other.Registry().VisibilityKey(c)
	}
	if now := strings.Join(other.Registry().VisibleNames(ctx, c), ","); now != names && after == before {
		t.Fatalf("the other replica's visibility key for alice did not change, but her visible set did (%s appeared)",
			codemode.ExportCapabilityName("weather", "forecast"))
	}
}

// TestReviewLimitsRaceOnPostgres: packageSave counts the owner's packages
// and the jobs of their other packages, then inserts, in a READ COMMITTED
// transaction with no lock: concurrent saves of different packages each
// see the others' rows missing and all pass. (SQLite serialises writers,
// so this fails on PostgreSQL only: run with ENCLAVE_TEST_POSTGRES.)
func TestReviewLimitsRaceOnPostgres(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{Config: enclave.Config{CodeMode: codemode.Options{MaxPackages: 4, MaxJobs: 10}}}, func(t *testing.T, s *enclavetest.Server) {
		ctx := context.Background()
		for round := range 5 {
			u := s.CreateUser(t, fmt.Sprintf("racer%d", round))
			c := u.Caller(t)
			const n = 8
			start := make(chan struct{})
			errs := make(chan error, n)
			for i := range n {
				jobs := map[string]any{}
				for j := range 8 {
					jobs[fmt.Sprintf("j%d", j)] = map[string]any{"schedule": fmt.Sprintf("%d * * * *", j), "export": "f"}
				}
				pkg := mustJSON(map[string]any{"name": fmt.Sprintf("p%d", i), "files": map[string]string{"main.js": `export async function f() { return 1 }`},
					"manifest": map[string]any{"exports": map[string]any{"f": map[string]any{"description": "d"}}, "jobs": jobs}})
				go func() {
					<-start
					_, err := s.Registry().Invoke(ctx, c, "packageSave", pkg)
					errs <- err
				}()
			}
			// The source blob exists before the race (a package of its own, the
			// fourth allowed): the saves differ only in SQL.
			warm := mustJSON(map[string]any{"name": "warm", "files": map[string]string{"main.js": `export async function f() { return 1 }`}, "manifest": map[string]any{}})
			if res, err := s.Registry().Invoke(ctx, c, "packageSave", warm); err != nil || res.IsError {
				t.Fatalf("save: %v %+v", err, res)
			}
			close(start)
			for range n {
				<-errs
			}
			packages, err := s.Store().DB.NewSelect().Table("code_packages").Where("user_id = ?", u.ID).Count(ctx)
			if err != nil {
				t.Fatal(err)
			}
			jobs, err := s.Store().DB.NewSelect().Table("code_package_jobs").Where("user_id = ?", u.ID).Count(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if packages > 4 || jobs > 10 {
				t.Fatalf("round %d: concurrent saves left %d packages (limit 4) and %d package jobs (limit 10)", round, packages, jobs)
			}
		}
	})
}

// runDueJobs runs the due package jobs as the job lane does. RunDueJobs
// took the invoker as an argument at the reviewed commit and may not now;
// it is called through reflection so that this file builds with either.
func runDueJobs(t *testing.T, s *enclavetest.Server, at time.Time) {
	t.Helper()
	m := reflect.ValueOf(s.CodeMode()).MethodByName("RunDueJobs")
	args := []reflect.Value{reflect.ValueOf(context.Background()), reflect.ValueOf(at)}
	if m.Type().NumIn() == 3 {
		invoke := func(ctx context.Context, userID, name string, a any) (capabilities.Result, error) {
			return s.InvokeBackground(ctx, userID, name, mustJSON(a))
		}
		args = append(args, reflect.ValueOf(invoke).Convert(m.Type().In(2)))
	}
	out := m.Call(args)
	if err, _ := out[len(out)-1].Interface().(error); err != nil {
		t.Fatal(err)
	}
}
