package cli

import (
	"context"
	"fmt"
	"net"

	"github.com/enclave-mcp/enclave"
)

func runServe(ctx context.Context, e *Env, o *options, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%w: serve takes no arguments", errUsage)
	}
	cfg := o.cfg
	// Listen before assembling so that --addr with port 0 yields the real
	// address in the default base URL.
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()
	cfg.Addr = ln.Addr().String()
	if !cfg.Production && !loopbackOnly(ln.Addr()) {
		o.log.Warn("serving in development mode on a non-loopback address: development defaults (plain HTTP, "+
			"mail kept in memory instead of sent) are reachable from other machines; use --production for a public server, "+
			"or --addr 127.0.0.1:PORT", "addr", cfg.Addr)
	}
	srv, err := enclave.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer srv.Close()
	base := srv.Config().BaseURL
	fmt.Fprintf(e.Stdout, `enclave %s is serving on %s
  web shell:    %s/
  MCP endpoint: %s/mcp
  health:       %s/healthz
  readiness:    %s/readyz
  data:         %s

Next step: create the first admin (in another terminal, with the same --data-dir, --database-url and --base-url):
  enclave user create --email you@example.com --username you
  enclave admin grant you@example.com

Stop with Ctrl-C.
`, Version(), cfg.Addr, base, base, base, base, srv.Config().DataDir)
	return srv.Serve(ctx, ln)
}

// loopbackOnly reports whether a listener on addr is reachable only from
// this machine. An unspecified address (":8080", "0.0.0.0", "::") listens
// on every interface.
func loopbackOnly(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}
