// Package features is enclave's default feature-flag store: flags live in
// SQL (table feature_flags), admins manage them through the capabilities
// adminFeatureList and adminFeatureSet (role admin), and every decision
// reads the table afresh, like roles, so a change holds on every replica
// from the next request on. A flag is either off, on for everyone, or on
// only for holders of one role. An unknown flag is off, and so is every
// flag when the table cannot be read (fail closed).
//
// A capability asks for a flag with capabilities.Requirement.Feature; until
// the flag is on for a caller the capability is hidden from them and
// answers like an unknown one.
package features

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
)

// Flag is one feature flag.
type Flag struct {
	Name    string `json:"name" jsonschema:"the flag's name"`
	Enabled bool   `json:"enabled" jsonschema:"whether the flag is on"`
	// Role, when set, limits an enabled flag to holders of that role.
	Role        string    `json:"role,omitempty" jsonschema:"when set, the flag is on only for holders of this role"`
	Description string    `json:"description,omitempty" jsonschema:"what the flag turns on"`
	UpdatedAt   time.Time `json:"updatedAt,omitzero" jsonschema:"when the flag last changed"`
}

type flagRow struct {
	bun.BaseModel `bun:"table:feature_flags"`
	Name          string    `bun:"name,pk"`
	Enabled       bool      `bun:"enabled,notnull"`
	Role          string    `bun:"role_name,notnull"`
	Description   string    `bun:"description,notnull"`
	UpdatedAt     time.Time `bun:"updated_at,notnull"`
}

// NameRule is what a flag name must match.
var NameRule = regexp.MustCompile(`^[a-z][a-z0-9_.-]{0,63}$`)

// Store reads and writes flags. It implements capabilities.Features.
type Store struct {
	store *storage.Store
	log   *slog.Logger
}

var _ capabilities.Features = (*Store)(nil)

// New returns the flag store of store's database.
func New(store *storage.Store, log *slog.Logger) *Store {
	if log == nil {
		log = slog.Default()
	}
	return &Store{store: store, log: log}
}

// Enabled reports whether flag is on for caller, reading it afresh.
func (s *Store) Enabled(ctx context.Context, caller capabilities.Caller, flag string) bool {
	var r flagRow
	err := s.store.Reader.NewSelect().Model(&r).Where("name = ?", flag).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return false
	}
	if err != nil {
		s.log.ErrorContext(ctx, "features: reading a flag failed; treating it as off", "flag", flag, "err", err)
		return false
	}
	return r.Enabled && (r.Role == "" || caller.HasRole(r.Role))
}

// List returns every flag, by name.
func (s *Store) List(ctx context.Context) ([]Flag, error) {
	var rows []flagRow
	if err := s.store.Reader.NewSelect().Model(&rows).Order("name").Scan(ctx); err != nil {
		return nil, fmt.Errorf("features: list: %w", err)
	}
	out := make([]Flag, 0, len(rows))
	for _, r := range rows {
		out = append(out, Flag{Name: r.Name, Enabled: r.Enabled, Role: r.Role, Description: r.Description, UpdatedAt: r.UpdatedAt.UTC()})
	}
	return out, nil
}

// Set creates or replaces a flag and returns it as stored.
func (s *Store) Set(ctx context.Context, f Flag) (Flag, error) {
	if !NameRule.MatchString(f.Name) {
		return Flag{}, capabilities.Errorf(capabilities.CodeInvalidInput, "flag name %q: want a lowercase name of letters, digits, _ - . (at most 64)", f.Name)
	}
	if len(f.Description) > 500 {
		return Flag{}, capabilities.Errorf(capabilities.CodeInvalidInput, "description: at most 500 characters")
	}
	if f.Role != "" {
		n, err := s.store.DB.NewSelect().Table("roles").Where("name = ?", f.Role).Count(ctx)
		if err != nil {
			return Flag{}, fmt.Errorf("features: set: %w", err)
		}
		if n == 0 {
			return Flag{}, capabilities.Errorf(capabilities.CodeInvalidInput, "no role named %q", f.Role)
		}
	}
	r := flagRow{Name: f.Name, Enabled: f.Enabled, Role: f.Role, Description: f.Description, UpdatedAt: time.Now().UTC().Truncate(time.Microsecond)}
	_, err := s.store.DB.NewInsert().Model(&r).
		On("CONFLICT (name) DO UPDATE").
		Set("enabled = EXCLUDED.enabled, role_name = EXCLUDED.role_name, description = EXCLUDED.description, updated_at = EXCLUDED.updated_at").
		Returning("NULL").Exec(ctx)
	if err != nil {
		return Flag{}, fmt.Errorf("features: set: %w", err)
	}
	s.log.InfoContext(ctx, "feature flag set", "flag", r.Name, "enabled", r.Enabled, "role", r.Role)
	return Flag{Name: r.Name, Enabled: r.Enabled, Role: r.Role, Description: r.Description, UpdatedAt: r.UpdatedAt}, nil
}

type setIn struct {
	Name        string `json:"name" jsonschema:"the flag's name: a lowercase letter, then up to 63 lowercase letters, digits, _ - ." schema:"pattern=^[a-z][a-z0-9_.-]{0,63}$"`
	Enabled     bool   `json:"enabled" jsonschema:"whether the flag is on"`
	Role        string `json:"role,omitempty" jsonschema:"when set, the flag is on only for holders of this role"`
	Description string `json:"description,omitempty" jsonschema:"what the flag turns on"`
}

type listOut struct {
	Flags []Flag `json:"flags" jsonschema:"every feature flag, by name"`
}

// Capabilities returns adminFeatureList and adminFeatureSet, both for the
// admin role only.
func (s *Store) Capabilities() []capabilities.Capability {
	return []capabilities.Capability{
		capabilities.Define(capabilities.Spec[struct{}, listOut]{
			Name: "adminFeatureList", Domain: "admin", Title: "List feature flags",
			Description: "List every feature flag with whether it is on and for which role.",
			Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
			Requires:    capabilities.Requirement{Role: capabilities.RoleAdmin},
			Handler: func(ctx context.Context, _ *capabilities.Call, _ struct{}) (listOut, error) {
				flags, err := s.List(ctx)
				return listOut{Flags: flags}, err
			},
		}),
		capabilities.Define(capabilities.Spec[setIn, Flag]{
			Name: "adminFeatureSet", Domain: "admin", Title: "Set a feature flag",
			Description: "Create or change a feature flag: turn it on or off, optionally only for holders of one role. Takes effect on the next request.",
			Annotations: &capabilities.Annotations{Idempotent: true},
			Requires:    capabilities.Requirement{Role: capabilities.RoleAdmin},
			Handler: func(ctx context.Context, _ *capabilities.Call, in setIn) (Flag, error) {
				return s.Set(ctx, Flag{Name: in.Name, Enabled: in.Enabled, Role: in.Role, Description: in.Description})
			},
		}),
	}
}
