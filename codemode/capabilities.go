package codemode

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/codemode/sandbox"
	"github.com/enclave-mcp/enclave/codemode/tsdecl"
	"github.com/enclave-mcp/enclave/storage"
)

// ExecuteInput is the input of execute.
type ExecuteInput struct {
	Code      string `json:"code" jsonschema:"the body of an async JavaScript function: call capabilities as await codemode.<name>(args), use fetch(url, init) and storage, log with console.log, and return the result (JSON)"`
	TimeoutMs int    `json:"timeoutMs,omitempty" jsonschema:"a wall-time limit in milliseconds, lower than the server's (default: the server's limit, 30000)" schema:"minimum=1"`
}

// TypesOutput is the output of codemodeTypes.
type TypesOutput struct {
	Declarations string `json:"declarations" jsonschema:"TypeScript declarations of the codemode object (every capability a program of yours may call) and of fetch, storage and console"`
}

// SaveInput is the input of packageSave.
type SaveInput struct {
	Name     string            `json:"name" jsonschema:"the package name: a lowercase letter, then up to 39 lowercase letters, digits and '-'" schema:"pattern=^[a-z][a-z0-9-]{0,39}$"`
	Files    map[string]string `json:"files" jsonschema:"the package's ES modules by path (e.g. main.js, lib/util.js); a module imports its package's files as './util.js' and your other packages as 'pkg:name' or 'pkg:name@3'"`
	Manifest Manifest          `json:"manifest" jsonschema:"the main module, the exports offered as your own tools, and scheduled jobs"`
}

// NameInput names a package.
type NameInput struct {
	Name string `json:"name" jsonschema:"the package name"`
}

// GetInput is the input of packageGet.
type GetInput struct {
	Name    string `json:"name" jsonschema:"the package name"`
	Version int    `json:"version,omitempty" jsonschema:"the version (default: the latest)" schema:"minimum=1"`
}

// RunInput is the input of packageRun.
type RunInput struct {
	Name   string         `json:"name" jsonschema:"the package name"`
	Export string         `json:"export" jsonschema:"the export (a function of the main module named in the manifest) to call"`
	Args   map[string]any `json:"args,omitempty" jsonschema:"the argument passed to the export (a JSON object)"`
}

// ListInput is the input of packageList.
type ListInput struct {
	Cursor string `json:"cursor,omitempty" jsonschema:"the nextCursor of the previous page"`
	Limit  int    `json:"limit,omitempty" jsonschema:"page size, 1 to 1000 (default 50)" schema:"minimum=1,maximum=1000,default=50"`
}

// PackageListOutput is the output of packageList.
type PackageListOutput struct {
	Packages   []Package `json:"packages"`
	NextCursor string    `json:"nextCursor,omitempty"`
}

// HistoryOutput is the output of packageHistory.
type HistoryOutput struct {
	Versions []Version `json:"versions"`
}

// DeleteOutput is the output of packageDelete.
type DeleteOutput struct {
	Deleted bool `json:"deleted"`
}

// RunListInput is the input of runList.
type RunListInput struct {
	Cursor      string `json:"cursor,omitempty" jsonschema:"the nextCursor of the previous page"`
	PackageName string `json:"packageName,omitempty" jsonschema:"only runs of this package"`
	Status      string `json:"status,omitempty" jsonschema:"only runs that ended so" schema:"enum=succeeded|failed"`
	Limit       int    `json:"limit,omitempty" jsonschema:"page size, 1 to 1000 (default 50)" schema:"minimum=1,maximum=1000,default=50"`
}

// RunListOutput is the output of runList.
type RunListOutput struct {
	Runs       []Run  `json:"runs"`
	NextCursor string `json:"nextCursor,omitempty"`
}

// RunGetInput is the input of runGet.
type RunGetInput struct {
	RunID string `json:"runId" jsonschema:"the run's id (run_…)"`
}

var (
	readOwn  = capabilities.Requirement{Permissions: []capabilities.Permission{capabilities.ReadUserOwn}}
	writeOwn = capabilities.Requirement{Permissions: []capabilities.Permission{capabilities.UpdateUserOwn}}
)

// runResult answers a run: its Output as structured content, an error
// result (isError) when the program failed, so a model sees it failed and
// still gets the logs and the run id.
func runResult(out Output, err error) (capabilities.Result, error) {
	if err != nil {
		return capabilities.Result{}, err
	}
	text, err := json.Marshal(out)
	if err != nil {
		return capabilities.Result{}, fmt.Errorf("codemode: encode output: %w", err)
	}
	return capabilities.Result{Content: []capabilities.Content{capabilities.Text{Text: string(text)}}, Structured: out, IsError: out.Failed()}, nil
}

// Capabilities returns code mode's capabilities: execute, codemodeTypes,
// the package capabilities and the run records.
func (s *Service) Capabilities() []capabilities.Capability {
	lim := s.cfg.Limits
	execute := capabilities.Define(capabilities.Spec[ExecuteInput, Output]{
		Name: "execute", Domain: "codemode", Title: "Run JavaScript",
		Description: executeDescription(lim, ""),
		Annotations: &capabilities.Annotations{Destructive: true, OpenWorld: true},
		Requires:    writeOwn,
		Handler: func(ctx context.Context, call *capabilities.Call, in ExecuteInput) (Output, error) {
			if in.TimeoutMs < 0 {
				return Output{}, invalid("timeoutMs must be positive")
			}
			return s.Execute(ctx, call.Caller, in.Code, time.Duration(in.TimeoutMs)*time.Millisecond)
		},
	})
	execute.Handler = failedAsError(execute.Handler)
	execute.Describe = func(ctx context.Context, caller capabilities.Caller) string {
		return executeDescription(lim, s.declarations(ctx, caller, maxDescribedDeclarations))
	}
	run := capabilities.Define(capabilities.Spec[RunInput, Output]{
		Name: "packageRun", Domain: "codemode", Title: "Run a package export",
		Description: "Calls one export of one of your saved packages with args, in the sandbox, and returns its result, logs and run id (a run record, like execute).",
		Annotations: &capabilities.Annotations{Destructive: true, OpenWorld: true},
		Requires:    writeOwn,
		Handler: func(ctx context.Context, call *capabilities.Call, in RunInput) (Output, error) {
			args, err := json.Marshal(in.Args)
			if err != nil {
				return Output{}, invalid("args must be a JSON object")
			}
			return s.runPackage(ctx, call.Caller, in.Name, in.Export, args)
		},
	})
	run.Handler = failedAsError(run.Handler)
	return []capabilities.Capability{
		execute, run,
		capabilities.Define(capabilities.Spec[struct{}, TypesOutput]{
			Name: "codemodeTypes", Domain: "codemode", Title: "TypeScript declarations for code mode",
			Description: "Returns the TypeScript declarations of everything a program sent to execute can use: the codemode object (one function per capability you may call), fetch, storage and console.",
			Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
			Requires:    readOwn,
			Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (TypesOutput, error) {
				return TypesOutput{Declarations: s.declarations(ctx, call.Caller, 0)}, nil
			},
		}),
		capabilities.Define(capabilities.Spec[SaveInput, Version]{
			Name: "packageSave", Domain: "codemode", Title: "Save a package",
			Description: "Saves JavaScript modules as a new version of one of your packages (created on first save). " +
				"Each export the manifest declares becomes your own tool, pkg_<package>_<export>; each job runs an export on a cron schedule (UTC). " +
				"The main module's named exports are the functions; each gets one argument (the tool's input) and may call capabilities through codemode, like execute.",
			Annotations: &capabilities.Annotations{},
			Requires:    writeOwn,
			Handler: func(ctx context.Context, call *capabilities.Call, in SaveInput) (Version, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return Version{}, err
				}
				return s.Save(ctx, call.Caller, o, in.Name, in.Files, in.Manifest)
			},
		}),
		capabilities.Define(capabilities.Spec[ListInput, PackageListOutput]{
			Name: "packageList", Domain: "codemode", Title: "List your packages",
			Description: "Lists your saved packages by name, with their latest version.",
			Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
			Requires:    readOwn,
			Handler: func(ctx context.Context, call *capabilities.Call, in ListInput) (PackageListOutput, error) {
				o, req, err := s.paged(ctx, call.Caller, in.Cursor, in.Limit)
				if err != nil {
					return PackageListOutput{}, err
				}
				page, err := s.List(ctx, o, req)
				if err != nil {
					return PackageListOutput{}, err
				}
				return PackageListOutput{Packages: nonNil(page.Items), NextCursor: page.Next}, nil
			},
		}),
		capabilities.Define(capabilities.Spec[GetInput, Version]{
			Name: "packageGet", Domain: "codemode", Title: "Get a package",
			Description: "Returns one version of one of your packages (default: the latest) with its manifest and sources.",
			Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
			Requires:    readOwn,
			Handler: func(ctx context.Context, call *capabilities.Call, in GetInput) (Version, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return Version{}, err
				}
				return s.Get(ctx, o, in.Name, in.Version)
			},
		}),
		capabilities.Define(capabilities.Spec[NameInput, HistoryOutput]{
			Name: "packageHistory", Domain: "codemode", Title: "A package's versions",
			Description: "Lists the versions of one of your packages, newest first (manifests, no sources).",
			Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
			Requires:    readOwn,
			Handler: func(ctx context.Context, call *capabilities.Call, in NameInput) (HistoryOutput, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return HistoryOutput{}, err
				}
				vs, err := s.History(ctx, o, in.Name)
				return HistoryOutput{Versions: nonNil(vs)}, err
			},
		}),
		capabilities.Define(capabilities.Spec[NameInput, DeleteOutput]{
			Name: "packageDelete", Domain: "codemode", Title: "Delete a package",
			Description: "Deletes one of your packages: every version, its exports (tools) and its jobs. Run records stay until they expire.",
			Annotations: &capabilities.Annotations{Destructive: true, Idempotent: true},
			Requires:    writeOwn,
			Handler: func(ctx context.Context, call *capabilities.Call, in NameInput) (DeleteOutput, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return DeleteOutput{}, err
				}
				ok, err := s.Delete(ctx, o, in.Name)
				return DeleteOutput{Deleted: ok}, err
			},
		}),
		capabilities.Define(capabilities.Spec[RunListInput, RunListOutput]{
			Name: "runList", Domain: "codemode", Title: "List your code runs",
			Description: "Lists your code runs (execute, package exports and jobs), newest first: status, start, duration and error. Runs are kept 30 days.",
			Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
			Requires:    readOwn,
			Handler: func(ctx context.Context, call *capabilities.Call, in RunListInput) (RunListOutput, error) {
				if in.Status != "" && in.Status != StatusSucceeded && in.Status != StatusFailed {
					return RunListOutput{}, invalid("status is %q or %q", StatusSucceeded, StatusFailed)
				}
				o, req, err := s.paged(ctx, call.Caller, in.Cursor, in.Limit)
				if err != nil {
					return RunListOutput{}, err
				}
				page, err := s.ListRuns(ctx, o, RunFilter{PackageName: in.PackageName, Status: in.Status}, req)
				if err != nil {
					return RunListOutput{}, err
				}
				return RunListOutput{Runs: nonNil(page.Items), NextCursor: page.Next}, nil
			},
		}),
		capabilities.Define(capabilities.Spec[RunGetInput, Run]{
			Name: "runGet", Domain: "codemode", Title: "Get a code run",
			Description: "Returns one of your code runs with its logs (truncated) and the capabilities it called.",
			Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
			Requires:    readOwn,
			Handler: func(ctx context.Context, call *capabilities.Call, in RunGetInput) (Run, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return Run{}, err
				}
				return s.GetRun(ctx, o, in.RunID)
			},
		}),
	}
}

// runKind is the kind a packageRun is recorded as: a job when the job
// lane runs it (through Registry.Invoke, as the owner, non-interactive).
func runKind(ctx context.Context) string {
	if ctx.Value(jobKey{}) != nil {
		return KindJob
	}
	return KindExport
}

// failedAsError marks a failed run's answer as an error result.
func failedAsError(h capabilities.Handler) capabilities.Handler {
	return func(ctx context.Context, call *capabilities.Call, args json.RawMessage) (capabilities.Result, error) {
		res, err := h(ctx, call, args)
		if out, ok := res.Structured.(Output); ok && err == nil {
			res.IsError = out.Failed()
		}
		return res, err
	}
}

func (s *Service) paged(ctx context.Context, c capabilities.Caller, cursor string, limit int) (storage.Owner, storage.PageRequest, error) {
	req, err := storage.PageInput(cursor, limit)
	if err != nil {
		return storage.Owner{}, req, err
	}
	o, err := s.owner(ctx, c)
	return o, req, err
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// maxDescribedDeclarations bounds the declarations execute's description
// carries; past it the description lists names and points to
// codemodeTypes.
const maxDescribedDeclarations = 12 << 10

func executeDescription(lim sandbox.Limits, decls string) string {
	var b strings.Builder
	b.WriteString("Runs a JavaScript program (ES2023, the body of an async function) in a sandbox with your authority, and returns what it returns. ")
	b.WriteString("Use it to call several capabilities in one step, loop, filter and return only what matters: `const me = await codemode.whoami({}); return me.username;`. ")
	b.WriteString("Each call goes through the same checks as a direct call; capabilities that need a person (confirmations, session-only pages) are refused inside code. ")
	b.WriteString("fetch(url, init) sends an https request through the outbound gateway (your secrets as {{secret:NAME}}); storage.get/set/delete/list keep JSON values in a storage bucket (this run's own, exec:<runId>, which you can read afterwards with storageGet; a package's exports and jobs share package:<name>); console.log output is returned. ")
	b.WriteString("Limits: " + describeLimits(lim) + ". Import your saved packages with `import {f} from \"pkg:name\"` at the top. ")
	if decls == "" {
		b.WriteString("Call codemodeTypes for the TypeScript declarations of every function you may call.")
		return b.String()
	}
	b.WriteString("Declarations:\n")
	b.WriteString(decls)
	return b.String()
}

// declarations renders the TypeScript declarations of what caller's
// programs may call. With max > 0 and a longer result, only the
// signatures' names are listed, with a pointer to codemodeTypes.
func (s *Service) declarations(ctx context.Context, caller capabilities.Caller, max int) string {
	var funcs []tsdecl.Func
	var names []string
	for _, c := range s.reg.Visible(ctx, inner(caller)) {
		if bindingExcluded(c.Name) {
			continue
		}
		f := tsdecl.Func{Name: c.Name, Input: c.InputSchema, Output: c.OutputSchema}
		if max == 0 { // in execute's description, each tool's own description is listed beside it already
			f.Description = c.Description
		}
		funcs = append(funcs, f)
		names = append(names, c.Name)
	}
	out := tsdecl.Declare("codemode", funcs) + "\n" + tsdecl.Globals
	if max > 0 {
		out = withoutCommentLines(out)
	}
	if max > 0 && len(out) > max {
		return "codemode has: " + strings.Join(names, ", ") + ". (Call codemodeTypes for their TypeScript declarations.)"
	}
	return out
}

// describeLimits says a run's limits in a few words.
func describeLimits(l sandbox.Limits) string {
	return fmt.Sprintf("%s wall time, %d MiB memory, %d capability/fetch/storage calls, a %d KiB result, %d KiB of console output",
		l.Timeout, l.Memory>>20, l.HostCalls, l.Result>>10, l.Logs>>10)
}

// withoutCommentLines drops the lines that hold nothing but a /** … */
// comment: execute's description lists signatures only.
func withoutCommentLines(decl string) string {
	lines := strings.Split(decl, "\n")
	kept := lines[:0]
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "/**") && strings.HasSuffix(t, "*/") {
			continue
		}
		kept = append(kept, l)
	}
	return strings.Join(kept, "\n")
}

// runPackage is packageRun: the export's own capability, called through
// the registry as the same caller, so its input schema, annotations and
// requirement apply exactly as when it is called by name.
func (s *Service) runPackage(ctx context.Context, caller capabilities.Caller, pkg, export string, args json.RawMessage) (Output, error) {
	if !packageName.MatchString(pkg) || !exportName.MatchString(export) {
		return Output{}, capabilities.Errorf(capabilities.CodeNotFound, "package %q has no export %q", pkg, export)
	}
	res, err := s.reg.Invoke(ctx, caller, ExportCapabilityName(pkg, export), args)
	if capabilities.CodeOf(err) == capabilities.CodeNotFound {
		return Output{}, capabilities.Errorf(capabilities.CodeNotFound, "package %q has no export %q", pkg, export)
	}
	if err != nil {
		return Output{}, err
	}
	if out, ok := res.Structured.(Output); ok {
		return out, nil
	}
	return Output{}, fmt.Errorf("codemode: packageRun: the export answered %T", res.Structured)
}
