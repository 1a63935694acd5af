package accounts

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
)

type permissionRow struct {
	bun.BaseModel `bun:"table:permissions"`
	Name          string `bun:"name,pk"`
	Action        string `bun:"action,notnull"`
	Entity        string `bun:"entity,notnull"`
	Access        string `bun:"access,notnull"`
}

type rolePermissionRow struct {
	bun.BaseModel `bun:"table:role_permissions"`
	Role          string `bun:"role_name,pk"`
	Permission    string `bun:"permission_name,pk"`
}

// SyncVocabulary makes the SQL permissions match v: it adds the permissions
// of entities an embedder registered (capabilities.NewVocabulary) and
// attaches them to the built-in roles by the usual rule (user: every :own
// permission; admin: all). The migrations already seed the built-in
// entities. It only adds rows, in one transaction, and is idempotent: call
// it at start-up.
func (s *Roles) SyncVocabulary(ctx context.Context, v *capabilities.Vocabulary) error {
	defer s.callerChanged(ctx, 0) // roles' permissions may change
	var perms []permissionRow
	for _, p := range v.All() {
		a, e, acc, _ := p.Parts()
		perms = append(perms, permissionRow{Name: string(p), Action: string(a), Entity: string(e), Access: string(acc)})
	}
	var links []rolePermissionRow
	for _, role := range []string{capabilities.RoleUser, capabilities.RoleAdmin} {
		for _, p := range v.RolePermissions(role) {
			links = append(links, rolePermissionRow{Role: role, Permission: string(p)})
		}
	}
	err := s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if len(perms) > 0 {
			if _, err := tx.NewInsert().Model(&perms).On("CONFLICT DO NOTHING").Returning("NULL").Exec(ctx); err != nil {
				return err
			}
		}
		if len(links) > 0 {
			if _, err := tx.NewInsert().Model(&links).On("CONFLICT DO NOTHING").Returning("NULL").Exec(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("accounts: sync permission vocabulary: %w", err)
	}
	return nil
}
