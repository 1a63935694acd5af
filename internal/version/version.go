// Package version reports the release this binary was built as. The
// version comes from the build (runtime/debug.ReadBuildInfo: the module
// version, or "(devel)" plus the VCS revision for a build from a work tree)
// and a release build overrides it at link time:
//
//	go build -ldflags "-X github.com/enclave-mcp/enclave/internal/version.version=v1.2.3" ./cmd/enclave
package version

import (
	"runtime/debug"
	"sync"
)

// version is set at link time; empty means "read the build info".
var version = ""

var fromBuild = sync.OnceValue(func() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	return fromInfo(info)
})

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
