package outbound_test

import (
	"context"
	"fmt"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/outbound"
)

// An embedder's capability handler sends a request with its caller's
// secret: the gateway fills {{secret:github}} in only if the caller
// approved api.github.com for it, and scrubs the answer.
func ExampleGateway_Do() {
	handler := func(g *outbound.Gateway) func(ctx context.Context, call *capabilities.Call, repo string) (string, error) {
		return func(ctx context.Context, call *capabilities.Call, repo string) (string, error) {
			resp, err := g.Do(ctx, call.Caller, outbound.Request{
				URL:     "https://api.github.com/repos/" + repo,
				Headers: map[string]string{"Authorization": "Bearer {{secret:github}}"},
			})
			if err != nil {
				return "", err // refused or failed; never holds the value
			}
			return fmt.Sprintf("%d: %s", resp.Status, resp.Body), nil
		}
	}
	_ = handler // registered with capabilities.Define in a real embedder
}
