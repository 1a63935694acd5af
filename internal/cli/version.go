package cli

import (
	"fmt"
	"io"
	"runtime"
	"strings"

	"github.com/enclave-mcp/enclave/internal/version"
	"github.com/enclave-mcp/enclave/storage"
)

// printVersion writes what "enclave version" (and --version) shows: the
// release, the commit, the Go release and platform, and which cloud
// drivers the binary links.
func printVersion(w io.Writer) {
	drivers := "none (build with -tags aws, gcp, azure or full to link them)"
	if p := storage.CloudProviders(); len(p) > 0 {
		drivers = strings.Join(p, ", ")
	}
	fmt.Fprintf(w, "enclave %s\n  commit:        %s\n  go:            %s %s/%s\n  cloud drivers: %s\n",
		Version(), version.Commit(), version.GoVersion(), runtime.GOOS, runtime.GOARCH, drivers)
}
