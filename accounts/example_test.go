package accounts_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/storage"
)

func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "enclave-example")
	defer os.RemoveAll(dir)
	store, err := storage.Open(ctx, storage.Config{DataDir: filepath.Join(dir, "data")})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if _, err := migrations.Apply(ctx, store.DB); err != nil {
		log.Fatal(err)
	}

	svc, err := accounts.New(ctx, store, accounts.Config{})
	if err != nil {
		log.Fatal(err)
	}
	u, err := svc.Signup(ctx, accounts.SignupInput{
		Email: "Ada@Example.com", Username: "ada", Password: "analytical engine",
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(u.Email, u.StableID[:12])

	_, err = svc.Login(ctx, "ada@example.com", "difference engine")
	fmt.Println(err)

	// Roles are loaded fresh for every request.
	g, err := svc.RolesAndPermissions(ctx, u.ID)
	if err != nil {
		g = accounts.Grants{} // fail closed (and log err)
	}
	fmt.Println(g.Roles, g.Has(capabilities.ReadUserOwn), g.Has(capabilities.ReadUserAny))

	_, err = svc.RevokeAdminAsOperator(ctx, u.ID)
	fmt.Println(err) // ada never had the role: a no-op

	// Output:
	// ada@example.com b5fc85e55755
	// Invalid email or password.
	// [user] true false
	// <nil>
}
