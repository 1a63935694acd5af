package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

func TestBuild(t *testing.T) {
	info := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/enclave-mcp/enclave", Version: "v1.2.3"},
		Deps: []*debug.Module{
			{Path: "github.com/ory/fosite", Version: "v0.49.0", Sum: "h1:abc="},
			{Path: "example.com/Old", Version: "v1.0.0", Replace: &debug.Module{Path: "example.com/new", Version: "v1.1.0", Sum: "h1:def="}},
		},
		Settings: []debug.BuildSetting{{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "arm64"}, {Key: "-tags", Value: "aws"}, {Key: "vcs.revision", Value: "0123"}},
	}
	sum := sha256.Sum256([]byte("binary"))
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	doc := build(info, "enclave", sum[:], ts)

	if doc.BOMFormat != "CycloneDX" || doc.SpecVersion != "1.5" || doc.Metadata.Timestamp != "2026-01-02T03:04:05Z" {
		t.Fatalf("header: %+v", doc)
	}
	if doc.SerialNumber != serial(sum[:]) || !strings.HasPrefix(doc.SerialNumber, "urn:uuid:") || len(doc.SerialNumber) != len("urn:uuid:")+36 {
		t.Fatalf("serial number %q", doc.SerialNumber)
	}
	m := doc.Metadata.Component
	if m.PURL != "pkg:golang/github.com/enclave-mcp/enclave@v1.2.3?type=module" || m.Hashes[0].Content != hex.EncodeToString(sum[:]) {
		t.Fatalf("main component %+v", m)
	}
	props := map[string]string{}
	for _, p := range m.Properties {
		props[p.Name] = p.Value
	}
	if props["go:build:GOARCH"] != "arm64" || props["go:build:tags"] != "aws" || props["go:build:vcs.revision"] != "0123" || props["go:toolchain"] != "go1.26.8" {
		t.Fatalf("main properties %v", props)
	}
	want := []string{"pkg:golang/std@1.26.8", "pkg:golang/github.com/ory/fosite@v0.49.0?type=module", "pkg:golang/example.com/new@v1.1.0?type=module"}
	if len(doc.Components) != len(want) {
		t.Fatalf("components %+v", doc.Components)
	}
	for i, c := range doc.Components {
		if c.PURL != want[i] || c.BOMRef != want[i] {
			t.Errorf("component %d: %+v, want purl %s", i, c, want[i])
		}
	}
	if p := doc.Components[2].Properties; len(p) != 2 || p[0].Value != "example.com/Old@v1.0.0" || p[1].Value != "h1:def=" {
		t.Errorf("replaced module properties %+v", p)
	}
	if d := doc.Dependencies; len(d) != 1 || d[0].Ref != m.BOMRef || len(d[0].DependsOn) != 3 {
		t.Errorf("dependencies %+v", d)
	}
}

// The command reads a real binary's build information: this test binary's.
func TestRunOnABinary(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{exe}, &out, &errb, func(k string) string {
		if k == "SOURCE_DATE_EPOCH" {
			return "1767225600"
		}
		return ""
	}); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var doc document
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(exe)
	sum := sha256.Sum256(data)
	if doc.Metadata.Component.Name != "github.com/enclave-mcp/enclave" || doc.Metadata.Component.Hashes[0].Content != hex.EncodeToString(sum[:]) {
		t.Fatalf("main component %+v", doc.Metadata.Component)
	}
	if doc.Metadata.Timestamp != "2026-01-01T00:00:00Z" {
		t.Fatalf("timestamp %q, want SOURCE_DATE_EPOCH's", doc.Metadata.Timestamp)
	}
	if doc.Components[0].Name != "std" {
		t.Fatalf("first component %+v", doc.Components[0])
	}
	if code := run([]string{os.DevNull}, &out, &errb, func(string) string { return "" }); code != 1 {
		t.Fatalf("a file that is no Go binary: exit %d", code)
	}
	if code := run(nil, &out, &errb, func(string) string { return "" }); code != 2 {
		t.Fatalf("no argument: exit %d", code)
	}
}
