// Command enclave runs an enclave server and its operator tasks.
//
//	enclave serve            run the server on the embedded defaults
//	enclave migrate          apply database migrations
//	enclave version          print the version
//
// Every flag is also read from an ENCLAVE_* environment variable; run
// "enclave COMMAND -h" for a command's flags.
//
// The default build links no cloud drivers: only file://, mem:// and the
// local key. Build with -tags aws, gcp, azure (comma-separated) or -tags
// full to accept s3://, gs://, azblob://, the cloud queues and KMS keepers
// (see storage/clouddrivers).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/enclave-mcp/enclave/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], &cli.Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv})
	stop()
	os.Exit(code)
}
