package accounts

import (
	"context"
	"fmt"
	"slices"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
)

// Grants are the roles of an account and the union of their permissions.
// The zero value grants nothing.
type Grants struct {
	Roles       []string                  // sorted
	Permissions []capabilities.Permission // sorted, without duplicates
}

// HasRole reports whether g includes role.
func (g Grants) HasRole(role string) bool {
	_, ok := slices.BinarySearch(g.Roles, role)
	return ok
}

// Has reports whether g includes permission p.
func (g Grants) Has(p capabilities.Permission) bool {
	_, ok := slices.BinarySearch(g.Permissions, p)
	return ok
}

// RolesAndPermissions loads the roles of userID and the union of their
// permissions in one query. Call it for every request: roles are never
// carried in cookies or tokens, so a revocation takes effect at once.
//
// On error it returns the zero Grants with the error: callers must treat the
// caller as holding no roles (fail closed) and log the error.
func (s *Roles) RolesAndPermissions(ctx context.Context, userID int64) (Grants, error) {
	var rows []struct {
		Role       string  `bun:"role_name"`
		Permission *string `bun:"permission_name"`
	}
	err := s.store.Reader.NewSelect().TableExpr("user_roles AS ur").
		ColumnExpr("ur.role_name, rp.permission_name").
		Join("LEFT JOIN role_permissions AS rp ON rp.role_name = ur.role_name").
		Where("ur.user_id = ?", userID).Scan(ctx, &rows)
	if err != nil {
		return Grants{}, fmt.Errorf("accounts: roles and permissions: %w", err)
	}
	var g Grants
	for _, r := range rows {
		g.Roles = append(g.Roles, r.Role)
		if r.Permission != nil {
			g.Permissions = append(g.Permissions, capabilities.Permission(*r.Permission))
		}
	}
	slices.Sort(g.Roles)
	g.Roles = slices.Compact(g.Roles)
	slices.Sort(g.Permissions)
	g.Permissions = slices.Compact(g.Permissions)
	return g, nil
}

// AssignRole gives userID the role and reports whether it was added (false
// when the account already had it). Errors: ErrAdminRoleReserved for the
// admin role (no runtime path grants admin; see GrantAdminAsOperator),
// ErrUnknownRole, ErrNotFound, ErrDeleting.
func (s *Roles) AssignRole(ctx context.Context, userID int64, role string) (bool, error) {
	if role == capabilities.RoleAdmin {
		return false, fmt.Errorf("accounts: assign role %s: %w", role, ErrAdminRoleReserved)
	}
	return s.assignRole(ctx, userID, role)
}

// GrantAdminAsOperator gives userID the admin role and reports whether it
// was added. It is the operator's path: the operatorAdminGrant capability
// (OperatorCapabilities), which only capabilities.OperatorCaller runs, and
// so only the command line (internal/cli) run by whoever operates the
// server. The web shell, MCP and other capabilities never call it (a test
// in this package enforces that), so no runtime path grants admin.
// Errors: ErrNotFound, ErrDeleting.
func (s *Roles) GrantAdminAsOperator(ctx context.Context, userID int64) (bool, error) {
	return s.assignRole(ctx, userID, capabilities.RoleAdmin)
}

// testHookRoleInserted, when set (tests), runs inside assignRole's
// transaction right after the role is inserted.
var testHookRoleInserted func(userID int64)

func (s *Roles) assignRole(ctx context.Context, userID int64, role string) (bool, error) {
	defer s.callerChanged(ctx, userID)
	var added bool
	err := s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if role == capabilities.RoleAdmin {
			// Serialized with ClaimUnverified, which spares admins: the
			// grant either lands first (and the claim sees it) or finds
			// the account being deleted.
			if err := lockAdmins(ctx, tx, s.store.Dialect()); err != nil {
				return err
			}
		}
		u, err := writableUser(ctx, tx, userID)
		if err != nil {
			return err
		}
		if ok, err := tx.NewSelect().Table("roles").Where("name = ?", role).Exists(ctx); err != nil {
			return err
		} else if !ok {
			return ErrUnknownRole
		}
		res, err := tx.NewRaw("INSERT INTO user_roles (user_id, role_name, granted_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
			userID, role, s.now()).Exec(ctx)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		added = n > 0
		if testHookRoleInserted != nil {
			testHookRoleInserted(userID)
		}
		if !added {
			return nil
		}
		return s.changed(ctx, tx, Change{Kind: ChangeRoleAssigned, UserID: userID, StableID: u.StableID, Role: role})
	})
	if err != nil {
		return false, fmt.Errorf("accounts: assign role %s: %w", role, err)
	}
	if added {
		s.cfg.Logger.InfoContext(ctx, "accounts: role assigned", "user_id", userID, "role", role)
	}
	return added, nil
}

// RemoveRole takes the role from userID and reports whether it was removed
// (false, nil when the account did not have it). The admin role is the
// operator's to take (RevokeAdminAsOperator): for it RemoveRole returns
// ErrAdminRoleReserved.
func (s *Roles) RemoveRole(ctx context.Context, userID int64, role string) (bool, error) {
	if role == capabilities.RoleAdmin {
		return false, fmt.Errorf("accounts: remove role %s: %w", role, ErrAdminRoleReserved)
	}
	return s.removeRole(ctx, userID, role)
}

// RevokeAdminAsOperator takes the admin role from userID and reports
// whether it was removed (false, nil when the account did not have it). It
// is the operator's path (operatorAdminRevoke), like GrantAdminAsOperator. When no other active (not suspended, not deleting)
// admin remains it returns ErrLastAdmin: the refusal is decided inside the
// DELETE statement itself, so concurrent removals, suspensions and
// deletions can never leave zero active admins.
func (s *Roles) RevokeAdminAsOperator(ctx context.Context, userID int64) (bool, error) {
	return s.removeRole(ctx, userID, capabilities.RoleAdmin)
}

func (s *Roles) removeRole(ctx context.Context, userID int64, role string) (bool, error) {
	defer s.callerChanged(ctx, userID)
	var removed bool
	err := s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if role != capabilities.RoleAdmin {
			res, err := tx.NewDelete().Table("user_roles").Where("user_id = ? AND role_name = ?", userID, role).Exec(ctx)
			if err != nil {
				return err
			}
			n, _ := res.RowsAffected()
			removed = n > 0
			if !removed {
				return nil
			}
			return s.roleRemoved(ctx, tx, userID, role)
		}
		// Removals, suspensions and deletions of admins queue on one lock
		// (see lockAdmins); each DELETE then sees the admins that remain.
		if err := lockAdmins(ctx, tx, s.store.Dialect()); err != nil {
			return err
		}
		res, err := tx.NewRaw(`DELETE FROM user_roles
			WHERE user_id = ? AND role_name = ?
			  AND EXISTS (SELECT 1 FROM user_roles AS other JOIN users AS o ON o.id = other.user_id
				WHERE other.role_name = ? AND other.user_id <> ? AND o.suspended_at IS NULL AND o.deleting_at IS NULL)`,
			userID, role, role, userID).Exec(ctx)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n > 0 {
			removed = true
			return s.roleRemoved(ctx, tx, userID, role)
		}
		has, err := tx.NewSelect().Table("user_roles").Where("user_id = ? AND role_name = ?", userID, role).Exists(ctx)
		if err != nil {
			return err
		}
		if has {
			return ErrLastAdmin
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("accounts: remove role %s: %w", role, err)
	}
	if removed {
		s.cfg.Logger.InfoContext(ctx, "accounts: role removed", "user_id", userID, "role", role)
	}
	return removed, nil
}

// roleRemoved reports a removed role to the change hooks.
func (s *Roles) roleRemoved(ctx context.Context, tx bun.Tx, userID int64, role string) error {
	var sid string
	if err := tx.NewSelect().Table("users").Column("stable_user_id").Where("id = ?", userID).Scan(ctx, &sid); err != nil {
		return err
	}
	return s.changed(ctx, tx, Change{Kind: ChangeRoleRemoved, UserID: userID, StableID: sid, Role: role})
}

// lockAdmins serializes the changes that can take away the last active
// admin. On PostgreSQL they queue on the admin role's row, so each
// statement that follows starts after the previous change committed and
// sees the admins that remain; on SQLite the transaction already holds the
// database's write lock.
func lockAdmins(ctx context.Context, tx bun.Tx, d storage.Dialect) error {
	if d != storage.Postgres {
		return nil
	}
	_, err := tx.ExecContext(ctx, "SELECT name FROM roles WHERE name = ? FOR NO KEY UPDATE", capabilities.RoleAdmin)
	return err
}

// Roles lists the names of every defined role.
func (s *Roles) Roles(ctx context.Context) ([]string, error) {
	var names []string
	if err := s.store.Reader.NewSelect().Table("roles").Column("name").Order("name").Scan(ctx, &names); err != nil {
		return nil, fmt.Errorf("accounts: roles: %w", err)
	}
	return names, nil
}

// HasAdmin reports whether any account holds the admin role.
func (s *Roles) HasAdmin(ctx context.Context) (bool, error) {
	ok, err := s.store.Reader.NewSelect().Table("user_roles").Where("role_name = ?", capabilities.RoleAdmin).Exists(ctx)
	if err != nil {
		return false, fmt.Errorf("accounts: has admin: %w", err)
	}
	return ok, nil
}
