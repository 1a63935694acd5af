package cli

import (
	"fmt"
	"io"
	"runtime"
	"strings"

	"github.com/enclave-mcp/enclave/cluster"
	"github.com/enclave-mcp/enclave/internal/version"
	"github.com/enclave-mcp/enclave/storage"
)

// printVersion writes what "enclave version" (and --version) shows: the
// release, the commit, the Go release and platform, and which cloud
// drivers and cluster buses the binary links.
func printVersion(w io.Writer) {
	drivers := "none (build with -tags aws, gcp, azure or full to link them)"
	if p := storage.CloudProviders(); len(p) > 0 {
		drivers = strings.Join(p, ", ")
	}
	buses := "local, postgres (build with -tags nats for nats://)"
	if cluster.NATSLinked {
		buses = "local, postgres, nats"
	}
	fmt.Fprintf(w, "enclave %s\n  commit:        %s\n  go:            %s %s/%s\n  cloud drivers: %s\n  cluster buses: %s\n",
		Version(), version.Commit(), version.GoVersion(), runtime.GOOS, runtime.GOARCH, drivers, buses)
}
