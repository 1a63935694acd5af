package codemode

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/enclave-mcp/enclave/capabilities"
)

// Provider returns the registry provider that makes each export of a
// user's saved packages (their latest versions) a capability of that user
// alone. Add it with Registry.AddProvider(ExportPrefix, …).
func (s *Service) Provider() capabilities.Provider { return provider{s} }

type provider struct{ s *Service }

// ExportCapabilityName is the capability name of a package's export.
func ExportCapabilityName(pkg, export string) string { return ExportPrefix + pkg + "_" + export }

// parseExportName splits a capability name made by ExportCapabilityName:
// package names have no "_", export names neither.
func parseExportName(name string) (pkg, export string, ok bool) {
	rest, ok := strings.CutPrefix(name, ExportPrefix)
	if !ok {
		return "", "", false
	}
	pkg, export, ok = strings.Cut(rest, "_")
	return pkg, export, ok && packageName.MatchString(pkg) && exportName.MatchString(export)
}

func (p provider) Generation(userID string) uint64 { return p.s.generation(userID) }

func (p provider) Own(ctx context.Context, caller capabilities.Caller) ([]capabilities.Capability, error) {
	o, err := p.s.owner(ctx, caller)
	if err != nil {
		return nil, err
	}
	var rows []struct {
		Name      string `bun:"name"`
		VersionID int64  `bun:"id"`
		Version   int    `bun:"version"`
		Manifest  string `bun:"manifest"`
	}
	err = p.s.store.Reader.NewSelect().TableExpr("code_packages AS p").
		Join("JOIN code_package_versions AS v ON v.package_id = p.id AND v.version = p.latest_version").
		ColumnExpr("p.name, v.id, v.version, v.manifest").
		Where("p.user_id = ? AND v.user_id = ?", o.ID, o.ID).OrderExpr("p.name").Scan(ctx, &rows)
	if err != nil {
		return nil, fmt.Errorf("codemode: exports: %w", err)
	}
	var out []capabilities.Capability
	for _, r := range rows {
		var m Manifest
		if err := json.Unmarshal([]byte(r.Manifest), &m); err != nil {
			continue
		}
		names := make([]string, 0, len(m.Exports))
		for e := range m.Exports {
			names = append(names, e)
		}
		sort.Strings(names)
		for _, e := range names {
			if c, ok := p.s.compiled(o.StableID, r.VersionID, r.Manifest, r.Name, r.Version, e, m.Exports[e]); ok {
				out = append(out, c)
			}
		}
	}
	return out, nil
}

func (p provider) LookupOwn(ctx context.Context, caller capabilities.Caller, name string) (capabilities.Capability, bool, error) {
	pkg, export, ok := parseExportName(name)
	if !ok {
		return capabilities.Capability{}, false, nil
	}
	o, err := p.s.owner(ctx, caller)
	if err != nil {
		return capabilities.Capability{}, false, err
	}
	_, v, err := p.s.lookup(ctx, p.s.store.Reader, o, pkg, 0)
	if capabilities.CodeOf(err) == capabilities.CodeNotFound {
		return capabilities.Capability{}, false, nil
	}
	if err != nil {
		return capabilities.Capability{}, false, err
	}
	m, _, err := v.decode()
	if err != nil {
		return capabilities.Capability{}, false, err
	}
	x, ok := m.Exports[export]
	if !ok {
		return capabilities.Capability{}, false, nil
	}
	c, ok := p.s.compiled(o.StableID, v.ID, v.Manifest, pkg, v.Version, export, x)
	return c, ok, nil
}

// compiled returns the export's capability, compiled once per owner,
// saved version and export. A version is known by its row id and its
// manifest's digest: a package deleted and saved again starts at version 1
// again, and SQLite may even give its row the id of the deleted one.
func (s *Service) compiled(stableID string, versionID int64, manifest, pkg string, version int, export string, x Export) (capabilities.Capability, bool) {
	sum := sha256.Sum256([]byte(manifest))
	key := fmt.Sprintf("%s/%d/%x/%s", stableID, versionID, sum[:12], export)
	if c, ok := s.exports.get(key); ok {
		return c, true
	}
	c, err := s.reg.Compile(s.exportCapability(pkg, version, export, x))
	if err != nil {
		s.log.Warn("codemode: an export cannot be offered as a capability", "package", pkg, "version", version, "export", export, "err", err)
		return capabilities.Capability{}, false
	}
	s.exports.put(key, c)
	return c, true
}

// exportCapability describes an export as its owner's capability: it runs
// that version of the package in the sandbox as the caller.
func (s *Service) exportCapability(pkg string, version int, export string, x Export) capabilities.Capability {
	input := json.RawMessage(`{"type":"object"}`)
	if len(x.InputSchema) > 0 {
		if b, err := json.Marshal(x.InputSchema); err == nil {
			input = b
		}
	}
	req := capabilities.Requirement{Permissions: []capabilities.Permission{capabilities.UpdateUserOwn}}
	if x.ReadOnly {
		req = capabilities.Requirement{Permissions: []capabilities.Permission{capabilities.ReadUserOwn}}
	}
	return capabilities.Capability{
		Name:        ExportCapabilityName(pkg, export),
		Domain:      "packages",
		Title:       pkg + "." + export,
		Description: fmt.Sprintf("%s (Your package %s, version %d; runs its code in the sandbox.)", x.Description, pkg, version),
		Annotations: &capabilities.Annotations{ReadOnly: x.ReadOnly, Destructive: x.Destructive && !x.ReadOnly, Idempotent: x.Idempotent, OpenWorld: x.OpenWorld},
		Requires:    req,
		InputSchema: input, OutputSchema: outputSchema,
		Handler: func(ctx context.Context, call *capabilities.Call, args json.RawMessage) (capabilities.Result, error) {
			out, err := s.RunExport(ctx, call.Caller, pkg, version, export, args, runKind(ctx))
			return runResult(out, err)
		},
	}
}

// exportCache keeps compiled export capabilities, bounded.
type exportCache struct {
	mu sync.Mutex
	m  map[string]capabilities.Capability
}

const exportCacheEntries = 10000

func (c *exportCache) init() { c.m = map[string]capabilities.Capability{} }

func (c *exportCache) get(key string) (capabilities.Capability, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[key]
	return v, ok
}

func (c *exportCache) put(key string, v capabilities.Capability) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= exportCacheEntries {
		c.m = map[string]capabilities.Capability{}
	}
	c.m[key] = v
}

// outputSchema is the output schema of every export: a run's Output.
var outputSchema = capabilities.Define(capabilities.Spec[struct{}, Output]{}).OutputSchema
