//go:build !(nats || full)

package cluster_test

import (
	"context"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/cluster"
)

// TestNATSNotLinked: a build without the NATS client refuses a nats://
// (or tls://) bus URL with a sentence naming the build tag, before
// anything is dialled.
func TestNATSNotLinked(t *testing.T) {
	if cluster.NATSLinked {
		t.Fatal("NATSLinked in a build without the nats tag")
	}
	for _, u := range []string{"nats://127.0.0.1:4222", "tls://nats.example:4222"} {
		b, err := cluster.Open(context.Background(), cluster.OpenOptions{BusURL: u})
		if err == nil {
			b.Close()
			t.Fatalf("%s: opened a bus without the NATS client", u)
		}
		if !strings.Contains(err.Error(), "-tags nats") {
			t.Fatalf("%s: %v does not say how to link NATS", u, err)
		}
	}
}
