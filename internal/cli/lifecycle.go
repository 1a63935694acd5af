package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/capabilities/secrets"
)

// withServer assembles the server (stores, migrations, domains, inventory)
// without serving, for commands that need the whole inventory.
func withServer(ctx context.Context, o *options, fn func(*enclave.Server) error) error {
	cfg := o.cfg
	// Production's checks guard a server that serves (https base URL, a
	// mailer); an operator command serves nothing.
	cfg.Production = false
	srv, err := enclave.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer srv.Close()
	return fn(srv)
}

func exportCommand() command {
	var user, out string
	return command{
		name:    "export",
		summary: "write an account's complete export (every registered surface) as JSON",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&user, "user", "", "email of the account to export (required)")
			fs.StringVar(&out, "out", "", "file to write (required; - for standard output); written with mode 0600")
		},
		run: func(ctx context.Context, e *Env, o *options, args []string) error {
			if user == "" || out == "" || len(args) > 0 {
				return fmt.Errorf("%w: enclave export --user EMAIL --out FILE", errUsage)
			}
			return withOperator(ctx, o, func(op operator) error {
				// The export streams to its destination (the writer in the
				// call's context), never through the answer.
				var res lifecycle.OperatorExportOutput
				export := func(w io.Writer) error {
					_, err := op.invoke(lifecycle.WithExportWriter(ctx, w), "operatorUserExport", accounts.OperatorUserRef{Email: user}, &res)
					return cliError(err)
				}
				if out == "-" {
					return export(e.Stdout)
				}
				if err := writeFileAtomic(out, export); err != nil {
					return err
				}
				fmt.Fprintf(e.Stdout, "exported %s to %s\n", describe(res.User), out)
				return nil
			})
		},
	}
}

// writeFileAtomic writes path through a temporary file in the same
// directory, so a failed export never leaves a partial file behind.
func writeFileAtomic(path string, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".enclave-export-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if err := write(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func runUserDelete(ctx context.Context, e *Env, o *options, args []string) error {
	email, err := oneEmail("user delete", args)
	if err != nil {
		return err
	}
	return withOperator(ctx, o, func(op operator) error {
		var out lifecycle.OperatorDeleteOutput
		res, err := op.invoke(ctx, "operatorUserDelete", accounts.OperatorUserRef{Email: email}, &out)
		if err != nil {
			return cliError(err)
		}
		for _, s := range slices.Sorted(maps.Keys(out.Deletion.Deleted)) {
			fmt.Fprintf(e.Stdout, "  %-28s %d removed\n", s, out.Deletion.Deleted[s])
		}
		for _, s := range slices.Sorted(maps.Keys(out.Deletion.Updated)) {
			fmt.Fprintf(e.Stdout, "  %-28s %d cleared\n", s, out.Deletion.Updated[s])
		}
		if res.IsError {
			return fmt.Errorf("%s\nthe account is kept, marked deleting (writes refused); run the command again to finish", resultText(res))
		}
		fmt.Fprintf(e.Stdout, "deleted %s\n", describe(out.User))
		return nil
	})
}

func runKeysRotate(ctx context.Context, e *Env, o *options, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%w: keys rotate takes no arguments", errUsage)
	}
	return withOperator(ctx, o, func(op operator) error {
		var res secrets.OperatorRotateOutput
		if _, err := op.invoke(ctx, "operatorSecretKeysRotate", struct{}{}, &res); err != nil {
			return cliError(err)
		}
		fmt.Fprintf(e.Stdout, "new data key %d; %d secrets re-encrypted, %d failed\n", res.KeyID, res.Reencrypted, res.Failed)
		if _, err := op.invoke(ctx, "operatorSessionKeyRotate", struct{}{}, nil); err != nil {
			return fmt.Errorf("session key: %w", cliError(err))
		}
		fmt.Fprintln(e.Stdout, "new session signing key; existing sessions stay valid until they expire")
		if _, err := op.invoke(ctx, "operatorSigningKeyRotate", struct{}{}, nil); err != nil {
			return fmt.Errorf("ID token key: %w", cliError(err))
		}
		fmt.Fprintln(e.Stdout, "new ID token signing key; it signs from a minute from now, the previous one stays published until its ID tokens expire")
		if res.Failed > 0 {
			return fmt.Errorf("%d secrets could not be decrypted and were left as they were: %s", res.Failed,
				strings.TrimSpace("check that the keeper (--keeper-url) is the one that sealed them"))
		}
		return nil
	})
}
