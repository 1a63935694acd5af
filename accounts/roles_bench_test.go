package accounts_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

func benchAccounts(b *testing.B, fn func(b *testing.B, svc *accounts.Service, u accounts.User)) {
	for _, d := range storagetest.Dialects() {
		b.Run(string(d), func(b *testing.B) {
			ctx := context.Background()
			st := storagetest.Open(b, d)
			svc, err := accounts.New(ctx, st, accounts.Config{
				Argon2: accounts.Argon2Params{MemoryKiB: 64, Iterations: 1},
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			})
			if err != nil {
				b.Fatal(err)
			}
			u, _, err := svc.Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "bench@example.test", Username: "benchuser", Password: "bench-password-0123456789", Verified: true})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := svc.Roles.GrantAdminAsOperator(ctx, u.ID); err != nil {
				b.Fatal(err)
			}
			fn(b, svc, u)
		})
	}
}

// BenchmarkRolesAndPermissions is the fresh role load of every request (a
// user holding both built-in roles: every permission).
func BenchmarkRolesAndPermissions(b *testing.B) {
	benchAccounts(b, func(b *testing.B, svc *accounts.Service, u accounts.User) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			g, err := svc.Roles.RolesAndPermissions(ctx, u.ID)
			if err != nil || len(g.Roles) != 2 {
				b.Fatal(g, err)
			}
		}
	})
}

// BenchmarkLoadCaller is what the MCP transport runs after the bearer
// check: the account by stable id, then its roles and permissions.
func BenchmarkLoadCaller(b *testing.B) {
	benchAccounts(b, func(b *testing.B, svc *accounts.Service, u accounts.User) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := svc.LoadCaller(ctx, u.StableID); err != nil {
				b.Fatal(err)
			}
		}
	})
}
