//go:build !(nats || full)

package cluster

import (
	"context"
	"errors"
)

// openNATS refuses a nats:// bus in a build without the NATS client: the
// default build leaves it out (about 1 MB), as it leaves out the cloud
// drivers. The error says how to get it.
func openNATS(context.Context, OpenOptions) (Bus, error) {
	return nil, errors.New("cluster: the NATS bus is not linked into this build: build enclave with -tags nats (or -tags full), or use --bus-url postgres")
}

// NATSLinked reports whether this build carries the NATS bus.
const NATSLinked = false
