package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/storage"
)

// healthcheckCommand probes /readyz of the server on --addr (or --url):
// the container HEALTHCHECK, which has no shell or curl in a scratch image.
func healthcheckCommand() command {
	var target string
	var timeout time.Duration
	return command{
		name:    "healthcheck",
		summary: "probe the running server's /readyz; exit 0 when ready, 1 otherwise",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&target, "url", "", "readiness URL to probe (default http://<addr>/readyz, a wildcard host probed on loopback)")
			fs.DurationVar(&timeout, "timeout", 3*time.Second, "give up after this long")
		},
		run: func(ctx context.Context, e *Env, o *options, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("%w: healthcheck takes no arguments", errUsage)
			}
			if target == "" {
				target = "http://" + probeAddr(o.cfg.Addr) + "/readyz"
			}
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
			if err != nil {
				return fmt.Errorf("%w: --url %q: %v", errUsage, target, err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return fmt.Errorf("not reachable: %w", err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("not ready: %d %s", resp.StatusCode, strings.TrimSpace(string(body)))
			}
			fmt.Fprintf(e.Stdout, "ready: %s\n", strings.TrimSpace(string(body)))
			return nil
		},
	}
}

// probeAddr turns a listen address into one to connect to: a wildcard
// host (":8080", "0.0.0.0:8080", "[::]:8080") becomes loopback.
func probeAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

func (o *options) storageConfig() storage.Config {
	return storage.Config{
		DataDir: o.cfg.DataDir, DatabaseURL: o.cfg.DatabaseURL, BlobURL: o.cfg.BlobURL,
		KVURL: o.cfg.KVURL, QueueURL: o.cfg.QueueURL, KeeperURL: o.cfg.KeeperURL, Logger: o.log,
	}
}

func runMigrateStatus(ctx context.Context, e *Env, o *options, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%w: migrate status takes no arguments", errUsage)
	}
	s, err := storage.Open(ctx, o.storageConfig())
	if err != nil {
		return err
	}
	defer s.Close()
	st, err := migrations.EnclaveStatus(ctx, s.DB)
	if err != nil {
		return err
	}
	for _, m := range st.Applied {
		fmt.Fprintf(e.Stdout, "applied  %04d_%s  %s\n", m.Version, m.Name, m.AppliedAt.UTC().Format(time.RFC3339))
	}
	for _, m := range st.Pending {
		fmt.Fprintf(e.Stdout, "pending  %04d_%s\n", m.Version, m.Name)
	}
	for _, v := range st.Changed {
		fmt.Fprintf(e.Stdout, "CHANGED  %04d (the applied SQL differs from this binary's)\n", v)
	}
	for _, v := range st.Unknown {
		fmt.Fprintf(e.Stdout, "unknown  %04d (applied by a newer release)\n", v)
	}
	if !st.Current() {
		return errors.New("the schema is not current: run 'enclave migrate'")
	}
	fmt.Fprintln(e.Stdout, "the schema is current")
	return nil
}
