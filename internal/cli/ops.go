package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/enclave-mcp/enclave/internal/backup"
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

func backupCommand() command {
	var out string
	return command{
		name:    "backup",
		summary: "write a consistent online backup (SQLite database, local blobs, keeper key) to one archive",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&out, "out", "", "archive to write (required); written with mode 0600")
		},
		run: func(ctx context.Context, e *Env, o *options, args []string) error {
			if out == "" || len(args) > 0 {
				return fmt.Errorf("%w: enclave backup --out FILE", errUsage)
			}
			cfg := o.storageConfig().WithDefaults()
			if strings.HasPrefix(cfg.DatabaseURL, "postgres") {
				cmd, withPassword := backup.PostgresCommand(cfg.DatabaseURL, strings.TrimSuffix(out, ".tar.gz")+".pgdump")
				fmt.Fprintf(e.Stdout, "The database is PostgreSQL: back it up with pg_dump, for example\n\n  %s\n\n", cmd)
				if withPassword {
					fmt.Fprintln(e.Stdout, "(the password of the database URL is left out: give it to pg_dump in PGPASSWORD or ~/.pgpass)")
				}
				if cfg.KeeperURL == "" || cfg.KeeperURL == "base64key://" {
					fmt.Fprintf(e.Stdout, "and keep a copy of %s: without it the secrets in that dump cannot be read.\n", filepath.Join(cfg.DataDir, storage.KeeperKeyFile))
				}
				return backup.ErrPostgres
			}
			path, _, _ := strings.Cut(strings.TrimPrefix(cfg.DatabaseURL, "sqlite://"), "?")
			if _, err := os.Stat(path); err != nil {
				return fmt.Errorf("no database at %s (check --data-dir / --database-url): %w", path, err)
			}
			s, err := storage.Open(ctx, cfg)
			if err != nil {
				return err
			}
			defer s.Close()
			var m backup.Manifest
			err = writeFileAtomic(out, func(w io.Writer) error {
				var err error
				m, err = backup.Write(ctx, s, cfg, Version(), w)
				return err
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(e.Stdout, "backup written to %s (database %v, blobs %v, keeper key %v)\n", out, m.Database, m.Blobs, m.Keeper)
			for _, n := range m.Notes {
				fmt.Fprintf(e.Stdout, "note: %s\n", n)
			}
			if m.Keeper {
				fmt.Fprintln(e.Stdout, "The archive holds the keeper key: store it as carefully as the key itself.")
			}
			return nil
		},
	}
}

func restoreCommand() command {
	var from string
	return command{
		name:    "restore",
		summary: "unpack a backup into a new --data-dir (serve it with the same --data-dir)",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&from, "from", "", "archive written by enclave backup (required)")
		},
		run: func(ctx context.Context, e *Env, o *options, args []string) error {
			if from == "" || len(args) > 0 {
				return fmt.Errorf("%w: enclave restore --from FILE --data-dir DIR", errUsage)
			}
			f, err := os.Open(from)
			if err != nil {
				return err
			}
			defer f.Close()
			m, err := backup.Restore(f, o.cfg.DataDir)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.Stdout, "restored a backup of enclave %s taken %s into %s\n", m.Version, m.CreatedAt.Format(time.RFC3339), o.cfg.DataDir)
			for _, n := range m.Notes {
				fmt.Fprintf(e.Stdout, "note: %s\n", n)
			}
			fmt.Fprintf(e.Stdout, "Start it with: enclave serve --data-dir %s\n", o.cfg.DataDir)
			return nil
		},
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
