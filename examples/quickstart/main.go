// Command quickstart is the smallest enclave embedder: one custom
// capability, served over MCP at http://127.0.0.1:8080/mcp to signed-in
// users, next to the built-in account pages and capabilities.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/capabilities"
)

type greetIn struct {
	Name string `json:"name" jsonschema:"who to greet"`
}

type greetOut struct {
	Greeting string `json:"greeting"`
}

var greet = capabilities.Define(capabilities.Spec[greetIn, greetOut]{
	Name:        "greet",
	Domain:      "hello",
	Title:       "Greet",
	Description: "Greets someone by name on behalf of the signed-in user.",
	Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
	Handler: func(_ context.Context, call *capabilities.Call, in greetIn) (greetOut, error) {
		return greetOut{Greeting: fmt.Sprintf("Hello, %s, from %s!", in.Name, call.Caller.Username)}, nil
	},
})

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	srv, err := enclave.New(ctx, enclave.Config{DataDir: "quickstart-data"})
	if err != nil {
		return err
	}
	defer srv.Close()
	if err := srv.Registry().Register(greet); err != nil {
		return err
	}
	return srv.Run(ctx)
}
