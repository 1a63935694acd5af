// Command bench measures what enclave's authentication, roles, quota and
// isolation cost on the MCP hot path, against bare mcp-go and the official
// TypeScript SDK, and how account export and deletion scale with rows.
//
// Run everything (under five minutes on two cores):
//
//	go run ./bench
//
// See bench/README.md for the flags and docs/performance.md for the latest
// figures. The same binary is re-executed for its parts:
//
//	bench serve  -kind a|b|c   one server under test (a process of its own)
//	bench load                 the load generator (a process of its own)
//	bench scale-one            one export+deletion measurement at one size
//	bench soak                 the soak: long mixed load, figures at start and end
//	bench soak-serve           the soak's server (a process of its own)
//	bench memory-search        memorySearch latency over a corpus of memories
//	bench bucket-export        the account export of one bucket, its peak heap
//	bench mail                 inbound SMTP deliveries/s and mailList latency
//
// Every process it starts is stopped when it returns, also on error or
// interrupt, and each child also exits by itself after -max-lifetime.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) > 1 {
		var err error
		switch os.Args[1] {
		case "serve":
			err = serveMain(os.Args[2:])
		case "load":
			err = loadMain(os.Args[2:])
		case "scale-one":
			err = scaleOneMain(os.Args[2:])
		case "soak":
			err = soakMain(os.Args[2:])
		case "soak-serve":
			err = soakServeMain(os.Args[2:])
		case "memory-search":
			err = memorySearchMain(os.Args[2:])
		case "bucket-export":
			err = bucketExportMain(os.Args[2:])
		case "mail":
			err = mailMain(os.Args[2:])
		default:
			err = runMain(os.Args[1:])
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if err := runMain(nil); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}
