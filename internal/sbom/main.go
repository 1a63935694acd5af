// Command sbom writes a CycloneDX 1.5 JSON software bill of materials for a
// Go binary, from the build information the Go linker embeds in it: the
// main module and its version, every module linked in (path, version,
// go.sum checksum, replacements), the Go standard library's release, and
// the build settings (GOOS, GOARCH, tags, VCS revision). It reads nothing
// else and downloads nothing, so it lists exactly what the binary holds.
//
//	go run ./internal/sbom [-time RFC3339] BINARY > BINARY.cdx.json
//
// The release script (.ci/release.sh) runs it for every binary it builds.
// The document's serial number is derived from the binary's SHA-256, and
// -time (default: SOURCE_DATE_EPOCH, else now) fixes its timestamp, so the
// same binary gives the same document.
package main

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}

func run(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("sbom", flag.ContinueOnError)
	fs.SetOutput(stderr)
	stamp := fs.String("time", "", "the document's timestamp (RFC 3339); default SOURCE_DATE_EPOCH, else now")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: sbom [-time RFC3339] BINARY")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	ts, err := timestamp(*stamp, getenv("SOURCE_DATE_EPOCH"))
	if err != nil {
		fmt.Fprintf(stderr, "sbom: %v\n", err)
		return 2
	}
	doc, err := fromFile(fs.Arg(0), ts)
	if err != nil {
		fmt.Fprintf(stderr, "sbom: %v\n", err)
		return 1
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		fmt.Fprintf(stderr, "sbom: %v\n", err)
		return 1
	}
	return 0
}

func timestamp(flagValue, epoch string) (time.Time, error) {
	switch {
	case flagValue != "":
		t, err := time.Parse(time.RFC3339, flagValue)
		if err != nil {
			return time.Time{}, fmt.Errorf("-time: %w", err)
		}
		return t.UTC(), nil
	case epoch != "":
		sec, err := strconv.ParseInt(epoch, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH: %w", err)
		}
		return time.Unix(sec, 0).UTC(), nil
	}
	return time.Now().UTC().Truncate(time.Second), nil
}

// fromFile reads the build information of the binary at path.
func fromFile(path string, ts time.Time) (*document, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	sum := sha256.Sum256(data)
	return build(info, filepath.Base(path), sum[:], ts), nil
}

// The parts of CycloneDX 1.5 this program writes.
type (
	document struct {
		BOMFormat    string       `json:"bomFormat"`
		SpecVersion  string       `json:"specVersion"`
		SerialNumber string       `json:"serialNumber"`
		Version      int          `json:"version"`
		Metadata     metadata     `json:"metadata"`
		Components   []component  `json:"components"`
		Dependencies []dependency `json:"dependencies"`
	}
	metadata struct {
		Timestamp string    `json:"timestamp"`
		Tools     tools     `json:"tools"`
		Component component `json:"component"`
	}
	tools struct {
		Components []component `json:"components"`
	}
	component struct {
		Type       string     `json:"type"`
		BOMRef     string     `json:"bom-ref,omitempty"`
		Name       string     `json:"name"`
		Version    string     `json:"version,omitempty"`
		PURL       string     `json:"purl,omitempty"`
		Hashes     []hash     `json:"hashes,omitempty"`
		Properties []property `json:"properties,omitempty"`
	}
	hash struct {
		Alg     string `json:"alg"`
		Content string `json:"content"`
	}
	property struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	}
	dependency struct {
		Ref       string   `json:"ref"`
		DependsOn []string `json:"dependsOn"`
	}
)

// purl is the package URL of a Go module version (or of the standard
// library, "std").
func purl(path, version string) string {
	p := "pkg:golang/" + escapePath(path)
	if version != "" {
		p += "@" + url.PathEscape(version)
	}
	if path != "std" {
		p += "?type=module"
	}
	return p
}

func escapePath(path string) string {
	parts := strings.Split(path, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

func build(info *debug.BuildInfo, file string, binarySHA256 []byte, ts time.Time) *document {
	mainVersion := info.Main.Version
	if mainVersion == "" {
		mainVersion = "(devel)"
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	var props []property
	for _, k := range []string{"GOOS", "GOARCH", "CGO_ENABLED", "-tags", "-trimpath", "vcs.revision", "vcs.time", "vcs.modified"} {
		if v, ok := settings[k]; ok {
			props = append(props, property{Name: "go:build:" + strings.TrimPrefix(k, "-"), Value: v})
		}
	}
	props = append(props, property{Name: "go:toolchain", Value: info.GoVersion}, property{Name: "file", Value: file})
	mainRef := purl(info.Main.Path, mainVersion)
	doc := &document{
		BOMFormat:    "CycloneDX",
		SpecVersion:  "1.5",
		SerialNumber: serial(binarySHA256),
		Version:      1,
		Metadata: metadata{
			Timestamp: ts.Format(time.RFC3339),
			Tools:     tools{Components: []component{{Type: "application", Name: "enclave-sbom"}}},
			Component: component{
				Type: "application", BOMRef: mainRef, Name: info.Main.Path, Version: mainVersion, PURL: mainRef,
				Hashes:     []hash{{Alg: "SHA-256", Content: hex.EncodeToString(binarySHA256)}},
				Properties: props,
			},
		},
	}
	std := strings.TrimPrefix(info.GoVersion, "go")
	stdRef := purl("std", std)
	doc.Components = append(doc.Components, component{Type: "library", BOMRef: stdRef, Name: "std", Version: std, PURL: stdRef})
	deps := []string{stdRef}
	for _, m := range info.Deps {
		used := m
		var mprops []property
		if m.Replace != nil {
			used = m.Replace
			mprops = append(mprops, property{Name: "go:module:replaces", Value: m.Path + "@" + m.Version})
		}
		if used.Sum != "" {
			mprops = append(mprops, property{Name: "go:module:sum", Value: used.Sum})
		}
		ref := purl(used.Path, used.Version)
		doc.Components = append(doc.Components, component{
			Type: "library", BOMRef: ref, Name: used.Path, Version: used.Version, PURL: ref, Properties: mprops,
		})
		deps = append(deps, ref)
	}
	doc.Dependencies = []dependency{{Ref: mainRef, DependsOn: deps}}
	return doc
}

// serial is a version 4 style UUID URN made from the binary's hash: the
// same binary always gets the same serial number.
func serial(sum []byte) string {
	u := make([]byte, 16)
	copy(u, sum)
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	h := hex.EncodeToString(u)
	return "urn:uuid:" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
