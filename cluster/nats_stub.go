package cluster

import (
	"context"
	"fmt"
)

func openNATS(ctx context.Context, o OpenOptions) (Bus, error) {
	return nil, fmt.Errorf("cluster: the NATS bus is not available in this build")
}
