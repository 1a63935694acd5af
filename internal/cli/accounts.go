package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
)

// The operator's account commands. They are the only way to make the first
// admin: no runtime path grants it. Each runs an operator capability
// (capabilities.Requirement.Operator) through the registry's choke point
// with capabilities.OperatorCaller, so the choke point audits it with the
// operator as the actor; none of them calls a domain service directly.

// operator invokes the operator's capabilities of an assembled server.
type operator struct{ reg *capabilities.Registry }

// withOperator assembles the server's services without serving, and runs
// fn with the operator's access to its registry.
func withOperator(ctx context.Context, o *options, fn func(op operator) error) error {
	return withServer(ctx, o, func(srv *enclave.Server) error { return fn(operator{srv.Registry()}) })
}

// invoke runs the capability name with in as its arguments, as the
// operator, and decodes its structured answer into out (when not nil). A
// refusal is returned as the registry answers it (see cliError).
func (op operator) invoke(ctx context.Context, name string, in, out any) (capabilities.Result, error) {
	args, err := json.Marshal(in)
	if err != nil {
		return capabilities.Result{}, err
	}
	res, err := op.reg.Invoke(ctx, capabilities.OperatorCaller(), name, args)
	if err != nil {
		return res, err
	}
	if out != nil && res.Structured != nil {
		raw, err := json.Marshal(res.Structured)
		if err != nil {
			return res, err
		}
		if err := json.Unmarshal(raw, out); err != nil {
			return res, fmt.Errorf("%s: decode the answer: %w", name, err)
		}
	}
	return res, nil
}

// cliError is an operator capability's refusal as the command prints it:
// the domain's own error when the capability wrapped one (the words the
// command has always printed), else the capability's sentence.
func cliError(err error) error {
	e, ok := errors.AsType[*capabilities.Error](err)
	if !ok {
		return err
	}
	if e.Err != nil {
		return e.Err
	}
	return errors.New(e.Message)
}

// resultText joins the text blocks of an error result.
func resultText(res capabilities.Result) string {
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(capabilities.Text); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

// oneEmail returns the single EMAIL argument of a command.
func oneEmail(name string, args []string) (string, error) {
	if len(args) != 1 || strings.TrimSpace(args[0]) == "" {
		return "", fmt.Errorf("%w: enclave %s EMAIL", errUsage, name)
	}
	return args[0], nil
}

func describe(u accounts.OperatorUser) string { return fmt.Sprintf("%s (%s)", u.Email, u.Username) }

func runAdminGrant(ctx context.Context, e *Env, o *options, args []string) error {
	email, err := oneEmail("admin grant", args)
	if err != nil {
		return err
	}
	return withOperator(ctx, o, func(op operator) error {
		var out accounts.OperatorUserOutput
		if _, err := op.invoke(ctx, "operatorAdminGrant", accounts.OperatorUserRef{Email: email}, &out); err != nil {
			return cliError(err)
		}
		if out.Changed {
			fmt.Fprintf(e.Stdout, "granted admin to %s\n", describe(out.User))
		} else {
			fmt.Fprintf(e.Stdout, "%s already has admin; nothing changed\n", describe(out.User))
		}
		return nil
	})
}

func runAdminRevoke(ctx context.Context, e *Env, o *options, args []string) error {
	email, err := oneEmail("admin revoke", args)
	if err != nil {
		return err
	}
	return withOperator(ctx, o, func(op operator) error {
		var out accounts.OperatorUserOutput
		_, err := op.invoke(ctx, "operatorAdminRevoke", accounts.OperatorUserRef{Email: email}, &out)
		if ce, ok := errors.AsType[*capabilities.Error](err); ok && errors.Is(err, accounts.ErrLastAdmin) {
			// The capability's sentence names the account ("… is the last admin").
			return fmt.Errorf("refused: %s. Grant admin to another account first (enclave admin grant EMAIL)", ce.Message)
		}
		if err != nil {
			return cliError(err)
		}
		if out.Changed {
			fmt.Fprintf(e.Stdout, "revoked admin from %s\n", describe(out.User))
		} else {
			fmt.Fprintf(e.Stdout, "%s did not have admin; nothing changed\n", describe(out.User))
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
	return withOperator(ctx, o, func(op operator) error {
		capability, state := "operatorUserUnsuspend", "no longer suspended"
		if suspend {
			capability, state = "operatorUserSuspend", "suspended"
		}
		var out accounts.OperatorUserOutput
		if _, err := op.invoke(ctx, capability, accounts.OperatorUserRef{Email: email}, &out); err != nil {
			return cliError(err)
		}
		if out.Changed {
			fmt.Fprintf(e.Stdout, "%s is now %s\n", describe(out.User), state)
		} else {
			fmt.Fprintf(e.Stdout, "%s is already %s; nothing changed\n", describe(out.User), state)
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
			in := accounts.OperatorUserCreateInput{Email: email, Username: username, Verified: verified}
			if passwordStdin {
				pw, err := readPasswordLine(e.Stdin)
				if err != nil {
					return err
				}
				in.Password = pw
			}
			return withOperator(ctx, o, func(op operator) error {
				var out accounts.OperatorUserCreateOutput
				if _, err := op.invoke(ctx, "operatorUserCreate", in, &out); err != nil {
					return cliError(err)
				}
				fmt.Fprintf(e.Stdout, "created %s with the role user\nstable id: %s\n", describe(out.User), out.User.StableUserID)
				if out.SetupToken != "" {
					base := o.cfg.BaseURL
					if base == "" {
						base = "http://" + o.cfg.Addr
					}
					fmt.Fprintf(e.Stdout, "one-time password-setup link (give it to the person; it expires in %s):\n  %s\n",
						accounts.DefaultPasswordSetupTTL, accounts.PasswordSetupURL(base, out.SetupToken))
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
