package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/enclave-mcp/enclave/internal/backup"
	"github.com/enclave-mcp/enclave/storage"
)

// scryptWorkFactor is the backup key encryption's scrypt work factor:
// 0 is age's default (about a second of work on a modern machine); the
// tests lower it.
var scryptWorkFactor int

// maxPassphrase bounds a passphrase file (a passphrase, not a document).
const maxPassphrase = 4096

// readPassphrase reads a passphrase file: its content without the final
// line break. An empty passphrase is refused.
func readPassphrase(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("--passphrase-file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxPassphrase+1))
	if err != nil {
		return "", fmt.Errorf("--passphrase-file: %w", err)
	}
	if len(b) > maxPassphrase {
		return "", fmt.Errorf("%w: --passphrase-file %s holds more than %d bytes", errUsage, path, maxPassphrase)
	}
	p := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if p == "" {
		return "", fmt.Errorf("%w: --passphrase-file %s is empty", errUsage, path)
	}
	return p, nil
}

// plaintextKeyWarning is printed on stderr when the keeper key goes into
// an archive in clear (--include-key without --passphrase-file).
const plaintextKeyWarning = `WARNING: the archive holds the keeper key IN CLEAR (--include-key without --passphrase-file).
WARNING: whoever reads this archive can decrypt every secret stored on this server.
WARNING: give --passphrase-file FILE to encrypt the key, or leave --include-key out and keep the key apart.
`

func backupCommand() command {
	var out, passphraseFile string
	var includeKey bool
	return command{
		name:    "backup",
		summary: "write a consistent online backup (SQLite database, workspace files, local blobs; the keeper key only with --include-key, encrypted with --passphrase-file) to one archive",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&out, "out", "", "archive to write (required); written with mode 0600")
			fs.BoolVar(&includeKey, "include-key", false, "put the keeper key (<data-dir>/keeper.key) in the archive: encrypted with --passphrase-file, else in clear (with a warning)")
			fs.StringVar(&passphraseFile, "passphrase-file", "", "file holding the passphrase that encrypts the keeper key in the archive (age, scrypt); implies --include-key")
		},
		run: func(ctx context.Context, e *Env, o *options, args []string) error {
			if out == "" || len(args) > 0 {
				return fmt.Errorf("%w: enclave backup --out FILE [--include-key] [--passphrase-file FILE]", errUsage)
			}
			opts := backup.Options{Version: Version(), IncludeKey: includeKey, ScryptWorkFactor: scryptWorkFactor}
			if passphraseFile != "" {
				p, err := readPassphrase(passphraseFile)
				if err != nil {
					return err
				}
				opts.Passphrase, opts.IncludeKey = p, true
			}
			cfg := o.storageConfig().WithDefaults()
			localKey := cfg.KeeperURL == "" || cfg.KeeperURL == "base64key://"
			keyPath := filepath.Join(cfg.DataDir, storage.KeeperKeyFile)
			if strings.HasPrefix(cfg.DatabaseURL, "postgres") {
				cmd, withPassword := backup.PostgresCommand(cfg.DatabaseURL, strings.TrimSuffix(out, ".tar.gz")+".pgdump")
				fmt.Fprintf(e.Stdout, "The database is PostgreSQL: back it up with pg_dump, for example\n\n  %s\n\n", cmd)
				if withPassword {
					fmt.Fprintln(e.Stdout, "(the password of the database URL is left out: give it to pg_dump in PGPASSWORD or ~/.pgpass)")
				}
				if localKey {
					fmt.Fprintf(e.Stdout, "and keep a copy of %s: without it the secrets in that dump cannot be read.\n", keyPath)
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
				m, err = backup.Write(ctx, s, cfg, opts, w)
				return err
			})
			if err != nil {
				return err
			}
			key := "left out"
			switch {
			case m.KeeperEncrypted:
				key = "encrypted"
			case m.Keeper:
				key = "IN CLEAR"
			case !localKey:
				key = "with the keeper service"
			}
			fmt.Fprintf(e.Stdout, "backup written to %s (database %v, workspaces %d, blobs %v, keeper key %s)\n", out, m.Database, m.Workspaces, m.Blobs, key)
			for _, n := range m.Notes {
				fmt.Fprintf(e.Stdout, "note: %s\n", n)
			}
			switch {
			case m.KeeperEncrypted:
				fmt.Fprintln(e.Stdout, "The keeper key is encrypted with your passphrase: a restore needs the same --passphrase-file. Lose the passphrase and the key in this archive is lost.")
			case m.Keeper:
				fmt.Fprint(e.Stderr, plaintextKeyWarning)
			case m.KeeperLeftOut:
				fmt.Fprintf(e.Stdout, "The keeper key is not in the archive: keep a copy of %s apart from it (or back up again with --include-key --passphrase-file FILE).\n", keyPath)
			}
			return nil
		},
	}
}

func restoreCommand() command {
	var from, passphraseFile string
	return command{
		name:    "restore",
		summary: "unpack a backup into a new --data-dir (serve it with the same --data-dir)",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&from, "from", "", "archive written by enclave backup (required)")
			fs.StringVar(&passphraseFile, "passphrase-file", "", "file holding the backup's passphrase, to decrypt the keeper key in the archive")
		},
		run: func(ctx context.Context, e *Env, o *options, args []string) error {
			if from == "" || len(args) > 0 {
				return fmt.Errorf("%w: enclave restore --from FILE --data-dir DIR [--passphrase-file FILE]", errUsage)
			}
			var opts backup.RestoreOptions
			if passphraseFile != "" {
				p, err := readPassphrase(passphraseFile)
				if err != nil {
					return err
				}
				opts.Passphrase = p
			}
			f, err := os.Open(from)
			if err != nil {
				return err
			}
			defer f.Close()
			m, err := backup.Restore(f, o.cfg.DataDir, opts)
			if errors.Is(err, backup.ErrPassphraseRequired) || errors.Is(err, backup.ErrWrongPassphrase) {
				return fmt.Errorf("%w; nothing was restored", err)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(e.Stdout, "restored a backup of enclave %s taken %s into %s (workspaces %d)\n", m.Version, m.CreatedAt.Format(time.RFC3339), o.cfg.DataDir, m.Workspaces)
			for _, n := range m.Notes {
				fmt.Fprintf(e.Stdout, "note: %s\n", n)
			}
			if opts.Passphrase != "" && !m.KeeperEncrypted {
				fmt.Fprintln(e.Stdout, "note: the archive holds no encrypted keeper key; the passphrase was not used")
			}
			keyPath := filepath.Join(o.cfg.DataDir, storage.KeeperKeyFile)
			if m.KeeperLeftOut && !m.Keeper {
				fmt.Fprintf(e.Stderr, `IMPORTANT: this backup does not hold the keeper key.
IMPORTANT: copy the keeper key of the server the backup was taken from (its <data-dir>/%s)
IMPORTANT: to %s (mode 0600), replacing the placeholder written there.
IMPORTANT: the server refuses to start until then; without that key no secret in the restored database can be read.
`, storage.KeeperKeyFile, keyPath)
				fmt.Fprintf(e.Stdout, "Put the keeper key at %s, then start it with: enclave serve --data-dir %s\n", keyPath, o.cfg.DataDir)
				return nil
			}
			fmt.Fprintf(e.Stdout, "Start it with: enclave serve --data-dir %s\n", o.cfg.DataDir)
			return nil
		},
	}
}
