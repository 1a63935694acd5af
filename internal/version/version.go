// Package version reports the release this binary was built as. The
// version comes from the build (runtime/debug.ReadBuildInfo: the module
// version, or "(devel)" plus the VCS revision for a build from a work tree)
// and a release build overrides it, and the commit, at link time:
//
//	go build -ldflags "-X github.com/enclave-mcp/enclave/internal/version.version=v1.2.3 \
//	  -X github.com/enclave-mcp/enclave/internal/version.commit=$(git rev-parse HEAD)" ./cmd/enclave
package version

import (
	"runtime"
	"runtime/debug"
	"sync"
)

// version and commit are set at link time; empty means "read the build
// info".
var (
	version = ""
	commit  = ""
)

var fromBuild = sync.OnceValue(func() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	return fromInfo(info)
})

var commitFromBuild = sync.OnceValue(func() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	return commitOf(info)
})

// commitOf is the full VCS revision in info, "+dirty" when the work tree
// had changes, or "unknown" (a build outside a repository, or go test).
func commitOf(info *debug.BuildInfo) string {
	var rev string
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "unknown"
	}
	if dirty {
		rev += "+dirty"
	}
	return rev
}

func fromInfo(info *debug.BuildInfo) string {
	v := info.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev string
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if v == "(devel)" && len(rev) >= 12 {
		v += " " + rev[:12]
		if dirty {
			v += "+dirty"
		}
	}
	return v
}

// String returns the release version, or the module version and VCS
// revision the binary was built from.
func String() string {
	if version != "" {
		return version
	}
	return fromBuild()
}

// Commit returns the VCS revision the binary was built from: the value a
// release build sets at link time, or the build info's (with "+dirty" for
// a work tree with changes), or "unknown".
func Commit() string {
	if commit != "" {
		return commit
	}
	return commitFromBuild()
}

// GoVersion returns the Go release that built the binary, e.g. "go1.26.8".
func GoVersion() string { return runtime.Version() }
