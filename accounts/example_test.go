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
	u, err := svc.Identity.Signup(ctx, accounts.SignupInput{
		Email: "Ada@Example.com", Username: "ada", Password: "analytical engine",
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(u.Email, u.StableID[:12])

	_, err = svc.Credentials.Login(ctx, "ada@example.com", "difference engine")
	fmt.Println(err)

	// Roles are loaded fresh for every request.
	g, err := svc.Roles.RolesAndPermissions(ctx, u.ID)
	if err != nil {
		g = accounts.Grants{} // fail closed (and log err)
	}
	fmt.Println(g.Roles, g.Has(capabilities.ReadUserOwn), g.Has(capabilities.ReadUserAny))

	_, err = svc.Roles.RevokeAdminAsOperator(ctx, u.ID)
	fmt.Println(err) // ada never had the role: a no-op

	// Output:
	// ada@example.com b5fc85e55755
	// Invalid email or password.
	// [user] true false
	// <nil>
}

// A person changes their own username: the name given up stays held for
// them, so another account cannot take it, and the next change waits.
func ExampleIdentity_ChangeOwnUsername() {
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
	svc, err := accounts.New(ctx, store, accounts.Config{Argon2: accounts.Argon2Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1}})
	if err != nil {
		log.Fatal(err)
	}
	ada, _ := svc.Identity.Signup(ctx, accounts.SignupInput{Email: "ada@example.com", Username: "ada", Password: "analytical engine"})
	bob, _ := svc.Identity.Signup(ctx, accounts.SignupInput{Email: "bob@example.com", Username: "bob", Password: "difference engine"})

	c, err := svc.Identity.ChangeOwnUsername(ctx, ada.ID, "Ada-Lovelace", nil)
	fmt.Println(c.Previous, "->", c.User.Username, err, c.HeldUntil != nil)

	_, err = svc.Identity.ChangeOwnUsername(ctx, bob.ID, "ada", nil)
	fmt.Println(err)
	_, err = svc.Identity.ChangeOwnUsername(ctx, ada.ID, "ada-again", nil)
	fmt.Println(err)

	// Output:
	// ada -> ada-lovelace <nil> true
	// accounts: change own username: This username is taken.
	// accounts: change own username: You changed your username recently. You can change it again later.
}
