package accounts

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
)

// Every domain error has a code of its own that survives wrapping, and
// errors.Is with the sentinels keeps working; the capabilities transport
// maps by code, with the message (or the policy's reason) kept.
func TestErrorCodes(t *testing.T) {
	sentinels := []error{ErrInvalidCredentials, ErrEmailTaken, ErrEmailClaimed, ErrInvalidEmail, ErrUsernameTaken,
		ErrUsernameReserved, ErrInvalidUsername, ErrWeakPassword, ErrNotFound, ErrSuspended, ErrDeleting, ErrLastAdmin,
		ErrAdminRoleReserved, ErrSuspendSelf, ErrUnknownRole, ErrNoSession, ErrInvalidToken, ErrEmailUnverified,
		ErrSignupClosed, ErrInviteInvalid, ErrUsernameCooldown}
	seen := map[Code]error{}
	for _, s := range sentinels {
		code := CodeOf(s)
		if code == "" {
			t.Fatalf("%q has no code", s)
		}
		if other, dup := seen[code]; dup {
			t.Fatalf("%q and %q share code %s", s, other, code)
		}
		seen[code] = s
		wrapped := fmt.Errorf("accounts: update user 7: %w", s)
		if !errors.Is(wrapped, s) || CodeOf(wrapped) != code || MessageOf(wrapped) != s.Error() {
			t.Fatalf("wrapped %q: Is %v, code %q, message %q", s, errors.Is(wrapped, s), CodeOf(wrapped), MessageOf(wrapped))
		}
		for _, o := range sentinels {
			if o != s && errors.Is(wrapped, o) {
				t.Fatalf("%q matches %q", s, o)
			}
		}
	}
	if CodeOf(errors.New("disk full")) != "" || MessageOf(errors.New("disk full")) != "" || CodeOf(nil) != "" {
		t.Fatal("a foreign error has an accounts code or message")
	}
	policy := fmt.Errorf("set password: %w", &PasswordPolicyError{Reason: "Use at least 12 characters."})
	if CodeOf(policy) != CodeWeakPassword || MessageOf(policy) != "Use at least 12 characters." || !errors.Is(policy, ErrWeakPassword) {
		t.Fatalf("policy error: code %q message %q", CodeOf(policy), MessageOf(policy))
	}
	var ce *capabilities.Error
	if !errors.As(capabilityError(policy), &ce) || ce.Code != capabilities.CodeInvalidInput || ce.Message != "Use at least 12 characters." {
		t.Fatalf("policy over capabilities: %+v", ce)
	}
	if !errors.As(capabilityError(fmt.Errorf("x: %w", ErrLastAdmin)), &ce) || ce.Code != capabilities.CodeConflict || ce.Message != ErrLastAdmin.Error() || !errors.Is(ce, ErrLastAdmin) {
		t.Fatalf("last admin over capabilities: %+v", ce)
	}
	if err := capabilityError(ErrNoSession); errors.As(err, &ce) {
		t.Fatalf("an unmapped accounts error became %+v", ce)
	}
}

// Every declared Code but CodeNoSession reaches capabilities' status
// tables through CapabilityCode, and the mapping names declared codes
// only. The codes are read from the source, so a new Code without its
// mapping fails here.
func TestEveryCodeHasACapabilityCode(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	declared := map[Code]string{}
	for _, f := range pkgs["accounts"].Files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Code" {
					continue
				}
				for i, name := range vs.Names {
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok {
						t.Fatalf("%s: a Code that is not a string literal", name.Name)
					}
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					declared[Code(v)] = name.Name
				}
			}
		}
	}
	if _, ok := declared[CodeFactorProofRequired]; !ok || len(declared) < 20 {
		t.Fatalf("the source scan found %d codes: %v", len(declared), declared)
	}
	for code, name := range declared {
		c, ok := CapabilityCode(code)
		if ok == (code == CodeNoSession) {
			t.Errorf("%s: CapabilityCode = %q, %v", name, c, ok)
		}
		if ok && capabilities.HTTPStatus(c) >= 500 {
			t.Errorf("%s maps to %s, an internal error", name, c)
		}
	}
	for code := range capabilityCodes {
		if _, ok := declared[code]; !ok {
			t.Errorf("capabilityCodes maps %q, which no constant declares", code)
		}
	}
}
