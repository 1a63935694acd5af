package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/internal/tracing/otlpexport"
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
	if o.otlpEndpoint != "" {
		tp, err := newTracerProvider(ctx, o)
		if err != nil {
			return err
		}
		// Deferred before srv.Close, so it runs after it: the spans of the
		// shutdown are exported too.
		defer shutdownTracing(tp, o.log)
		cfg.TracerProvider = tp
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

// newTracerProvider builds the OTLP/HTTP exporting tracer provider of
// --otlp-endpoint and --otlp-header.
func newTracerProvider(ctx context.Context, o *options) (*sdktrace.TracerProvider, error) {
	headers, err := otlpexport.ParseHeaders(o.otlpHeader)
	if err != nil {
		return nil, fmt.Errorf("--otlp-header: %w", err)
	}
	tp, err := otlpexport.New(ctx, otlpexport.Options{Endpoint: o.otlpEndpoint, Headers: headers, Version: Version()})
	if err != nil {
		return nil, fmt.Errorf("--otlp-endpoint: %w", err)
	}
	o.log.Info("tracing: exporting spans with OTLP/HTTP", "endpoint", redactEndpoint(o.otlpEndpoint))
	return tp, nil
}

// shutdownTracing flushes the spans still batched, for at most 10 seconds.
func shutdownTracing(tp *sdktrace.TracerProvider, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		log.Warn("tracing: flushing spans at exit failed", "err", err)
	}
}

// redactEndpoint is the endpoint's scheme, host and path, for the log.
func redactEndpoint(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil {
		return ""
	}
	return u.Scheme + "://" + u.Host + u.Path
}

// loopbackOnly reports whether a listener on addr is reachable only from
// this machine. An unspecified address (":8080", "0.0.0.0", "::") listens
// on every interface.
func loopbackOnly(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}
