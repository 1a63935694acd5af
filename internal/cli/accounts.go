package cli

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities/audit"
)

// The operator's account commands. They are the only way to make the first
// admin: no runtime path grants it.

// withAccounts assembles the server's services without serving, and runs
// fn with the account service and a recorder that writes the operator's
// change to the audit log (category account, action "operator:<what>").
func withAccounts(ctx context.Context, o *options, fn func(svc *accounts.Service, record func(action string, u accounts.User)) error) error {
	return withServer(ctx, o, func(srv *enclave.Server) error {
		record := func(action string, u accounts.User) {
			_ = srv.Audit().Record(ctx, audit.Event{
				Category: audit.CategoryAccount, Action: "operator:" + action, Result: audit.ResultSuccess,
				UserHash: srv.Audit().HashUser(u.StableID),
			})
		}
		return fn(srv.Accounts(), record)
	})
}

// oneEmail returns the single EMAIL argument of a command.
func oneEmail(name string, args []string) (string, error) {
	if len(args) != 1 || strings.TrimSpace(args[0]) == "" {
		return "", fmt.Errorf("%w: enclave %s EMAIL", errUsage, name)
	}
	return args[0], nil
}

// userByEmail finds the account, with an operator-friendly error.
func userByEmail(ctx context.Context, svc *accounts.Service, email string) (accounts.User, error) {
	u, err := svc.UserByEmail(ctx, email)
	if errors.Is(err, accounts.ErrNotFound) {
		return u, fmt.Errorf("no account has the email %s", strings.ToLower(strings.TrimSpace(email)))
	}
	return u, err
}

func describe(u accounts.User) string { return fmt.Sprintf("%s (%s)", u.Email, u.Username) }

func runAdminGrant(ctx context.Context, e *Env, o *options, args []string) error {
	email, err := oneEmail("admin grant", args)
	if err != nil {
		return err
	}
	return withAccounts(ctx, o, func(svc *accounts.Service, record func(string, accounts.User)) error {
		u, err := userByEmail(ctx, svc, email)
		if err != nil {
			return err
		}
		added, err := svc.GrantAdminAsOperator(ctx, u.ID)
		if err != nil {
			return err
		}
		if added {
			record("admin_grant", u)
			fmt.Fprintf(e.Stdout, "granted admin to %s\n", describe(u))
		} else {
			fmt.Fprintf(e.Stdout, "%s already has admin; nothing changed\n", describe(u))
		}
		return nil
	})
}

func runAdminRevoke(ctx context.Context, e *Env, o *options, args []string) error {
	email, err := oneEmail("admin revoke", args)
	if err != nil {
		return err
	}
	return withAccounts(ctx, o, func(svc *accounts.Service, record func(string, accounts.User)) error {
		u, err := userByEmail(ctx, svc, email)
		if err != nil {
			return err
		}
		removed, err := svc.RevokeAdminAsOperator(ctx, u.ID)
		if errors.Is(err, accounts.ErrLastAdmin) {
			return fmt.Errorf("refused: %s is the last admin. Grant admin to another account first (enclave admin grant EMAIL)", describe(u))
		}
		if err != nil {
			return err
		}
		if removed {
			record("admin_revoke", u)
			fmt.Fprintf(e.Stdout, "revoked admin from %s\n", describe(u))
		} else {
			fmt.Fprintf(e.Stdout, "%s did not have admin; nothing changed\n", describe(u))
		}
		return nil
	})
}

func runUserSuspend(ctx context.Context, e *Env, o *options, args []string) error {
	return setSuspended(ctx, e, o, "user suspend", args, true)
}

func runUserUnsuspend(ctx context.Context, e *Env, o *options, args []string) error {
	return setSuspended(ctx, e, o, "user unsuspend", args, false)
}

func setSuspended(ctx context.Context, e *Env, o *options, name string, args []string, suspend bool) error {
	email, err := oneEmail(name, args)
	if err != nil {
		return err
	}
	return withAccounts(ctx, o, func(svc *accounts.Service, record func(string, accounts.User)) error {
		u, err := userByEmail(ctx, svc, email)
		if err != nil {
			return err
		}
		change, state, action := svc.Unsuspend, "no longer suspended", "unsuspend"
		if suspend {
			change, state, action = svc.Suspend, "suspended", "suspend"
		}
		changed, err := change(ctx, u.ID)
		if err != nil {
			return err
		}
		if changed {
			record(action, u)
			fmt.Fprintf(e.Stdout, "%s is now %s\n", describe(u), state)
		} else {
			fmt.Fprintf(e.Stdout, "%s is already %s; nothing changed\n", describe(u), state)
		}
		return nil
	})
}

// userCreate is "enclave user create".
func userCreate() command {
	var (
		email, username         string
		passwordStdin, verified bool
	)
	return command{
		name:    "user create",
		summary: "create an account with the role user (prints a password-setup link unless --password-stdin)",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&email, "email", "", "email address of the account (required)")
			fs.StringVar(&username, "username", "", "username: 3–32 lowercase letters, digits and hyphens (required)")
			fs.BoolVar(&passwordStdin, "password-stdin", false, "read the password from the first line of standard input")
			fs.BoolVar(&verified, "verified", false, "mark the email address verified")
		},
		run: func(ctx context.Context, e *Env, o *options, args []string) error {
			if len(args) > 0 || email == "" || username == "" {
				return fmt.Errorf("%w: enclave user create --email EMAIL --username USERNAME [--password-stdin] [--verified]", errUsage)
			}
			in := accounts.CreateUserInput{Email: email, Username: username, Verified: verified}
			if passwordStdin {
				pw, err := readPasswordLine(e.Stdin)
				if err != nil {
					return err
				}
				in.Password = pw
			}
			return withAccounts(ctx, o, func(svc *accounts.Service, record func(string, accounts.User)) error {
				u, token, err := svc.CreateUser(ctx, in)
				if err != nil {
					return err
				}
				record("user_create", u)
				fmt.Fprintf(e.Stdout, "created %s with the role user\nstable id: %s\n", describe(u), u.StableID)
				if token != "" {
					base := o.cfg.BaseURL
					if base == "" {
						base = "http://" + o.cfg.Addr
					}
					fmt.Fprintf(e.Stdout, "one-time password-setup link (give it to the person; it expires in %s):\n  %s\n",
						accounts.DefaultPasswordSetupTTL, accounts.PasswordSetupURL(base, token))
				}
				return nil
			})
		},
	}
}

// readPasswordLine reads the first line of r, without its line ending.
func readPasswordLine(r io.Reader) (string, error) {
	if r == nil {
		return "", fmt.Errorf("%w: --password-stdin: no standard input", errUsage)
	}
	line, err := bufio.NewReader(io.LimitReader(r, accounts.MaxPasswordBytes+2)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read password: %w", err)
	}
	line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
	if line == "" {
		return "", fmt.Errorf("%w: --password-stdin: standard input is empty", errUsage)
	}
	return line, nil
}
