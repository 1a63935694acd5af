package accounts_test

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// No runtime path grants admin: AssignRole and RemoveRole refuse the admin
// role with a typed error and change nothing.
func TestRoleMethodsRefuseAdmin(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, _ := newService(t, s, accounts.Config{})
		a, b := signup(t, svc, "amy"), signup(t, svc, "ben")
		if added, err := svc.Roles.AssignRole(ctx, a.ID, capabilities.RoleAdmin); !errors.Is(err, accounts.ErrAdminRoleReserved) || added {
			t.Fatalf("AssignRole(admin) = %v, %v, want ErrAdminRoleReserved", added, err)
		}
		if ok, err := svc.Roles.HasAdmin(ctx); err != nil || ok {
			t.Fatalf("has admin after a refused assignment = %v, %v", ok, err)
		}
		for _, u := range []accounts.User{a, b} {
			if _, err := svc.Roles.GrantAdminAsOperator(ctx, u.ID); err != nil {
				t.Fatal(err)
			}
		}
		if removed, err := svc.Roles.RemoveRole(ctx, a.ID, capabilities.RoleAdmin); !errors.Is(err, accounts.ErrAdminRoleReserved) || removed {
			t.Fatalf("RemoveRole(admin) = %v, %v, want ErrAdminRoleReserved", removed, err)
		}
		if g, err := svc.Roles.RolesAndPermissions(ctx, a.ID); err != nil || !g.HasRole(capabilities.RoleAdmin) {
			t.Fatalf("admin lost after a refused removal: %+v, %v", g, err)
		}
	})
}

// The operator's functions are reachable only through the operator's
// capabilities (OperatorCapabilities, in this package), which only the
// command line's caller runs, and from the embedder test kit: no transport,
// other capability package, nor the command line itself may name them.
func TestOperatorFunctionsOnlyFromCLI(t *testing.T) {
	t.Parallel()
	allowed := []string{"accounts/", "enclavetest/"}
	operator := map[string]bool{"GrantAdminAsOperator": true, "RevokeAdminAsOperator": true}
	root := ".."
	fset := token.NewFileSet()
	var checked int
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		for _, a := range allowed {
			if strings.HasPrefix(rel, a) {
				return nil
			}
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && operator[sel.Sel.Name] {
				t.Errorf("%s: %s calls %s: only the operator's command line may grant or revoke admin", fset.Position(sel.Pos()), rel, sel.Sel.Name)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked only %d files: is the walk rooted at the module?", checked)
	}
}
