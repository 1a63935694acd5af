package capabilities

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Permission is an "action:entity:access" string such as "read:user:own".
// Use the typed constants (CreateUserOwn, ReadRoleAny, …) so that a typo
// does not compile; parse untrusted text with ParsePermission or
// Vocabulary.Parse.
type Permission string

// Action is the verb of a permission.
type Action string

// Entity is what a permission applies to.
type Entity string

// Access is the scope of a permission: the caller's own account, or any.
type Access string

// The four actions.
const (
	ActionCreate Action = "create"
	ActionRead   Action = "read"
	ActionUpdate Action = "update"
	ActionDelete Action = "delete"
)

// The built-in entities: accounts and roles.
const (
	EntityUser Entity = "user"
	EntityRole Entity = "role"
)

// The two access scopes. Own is the default for every data path; Any is
// honoured only where a capability or handler asks for it explicitly.
const (
	Own Access = "own"
	Any Access = "any"
)

// The built-in permissions.
const (
	CreateUserOwn Permission = "create:user:own"
	ReadUserOwn   Permission = "read:user:own"
	UpdateUserOwn Permission = "update:user:own"
	DeleteUserOwn Permission = "delete:user:own"
	CreateUserAny Permission = "create:user:any"
	ReadUserAny   Permission = "read:user:any"
	UpdateUserAny Permission = "update:user:any"
	DeleteUserAny Permission = "delete:user:any"
	CreateRoleOwn Permission = "create:role:own"
	ReadRoleOwn   Permission = "read:role:own"
	UpdateRoleOwn Permission = "update:role:own"
	DeleteRoleOwn Permission = "delete:role:own"
	CreateRoleAny Permission = "create:role:any"
	ReadRoleAny   Permission = "read:role:any"
	UpdateRoleAny Permission = "update:role:any"
	DeleteRoleAny Permission = "delete:role:any"
)

// The built-in role names.
const (
	RoleUser  = "user"
	RoleAdmin = "admin"
)

var (
	actions       = []Action{ActionCreate, ActionRead, ActionUpdate, ActionDelete}
	builtinEntity = []Entity{EntityUser, EntityRole}
	entityName    = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)
)

// NewPermission builds a permission from its parts.
func NewPermission(a Action, e Entity, acc Access) Permission {
	return Permission(string(a) + ":" + string(e) + ":" + string(acc))
}

// String returns p in action:entity:access form.
func (p Permission) String() string { return string(p) }

// Parts splits p into its action, entity and access. ok is false when p is
// not three non-empty colon-separated parts.
func (p Permission) Parts() (a Action, e Entity, acc Access, ok bool) {
	parts := strings.Split(string(p), ":")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return "", "", "", false
	}
	return Action(parts[0]), Entity(parts[1]), Access(parts[2]), true
}

// Vocabulary is the set of permissions a deployment knows: the built-in
// entities (user and role, with own and any access) plus the entities an
// embedder adds. Added entities get only own access: the vocabulary cannot
// express "act on any user's content", so no role can be granted it.
type Vocabulary struct {
	entities []Entity // built-ins first, then extras in the order given
}

// NewVocabulary returns the built-in vocabulary plus extra entities, each a
// lowercase name of letters, digits and underscores (at most 32 characters).
func NewVocabulary(extra ...Entity) (*Vocabulary, error) {
	v := &Vocabulary{entities: slices.Clone(builtinEntity)}
	for _, e := range extra {
		if !entityName.MatchString(string(e)) {
			return nil, fmt.Errorf("capabilities: entity %q: want a lowercase name of letters, digits and underscores", e)
		}
		if slices.Contains(v.entities, e) {
			return nil, fmt.Errorf("capabilities: entity %q defined twice", e)
		}
		v.entities = append(v.entities, e)
	}
	return v, nil
}

// Entities lists the vocabulary's entities, built-ins first.
func (v *Vocabulary) Entities() []Entity { return slices.Clone(v.entities) }

// accesses returns the access scopes entity e may carry.
func accesses(e Entity) []Access {
	if slices.Contains(builtinEntity, e) {
		return []Access{Own, Any}
	}
	return []Access{Own}
}

// All returns every permission of the vocabulary, ordered by entity, then
// access (own before any), then action.
func (v *Vocabulary) All() []Permission {
	var out []Permission
	for _, e := range v.entities {
		for _, acc := range accesses(e) {
			for _, a := range actions {
				out = append(out, NewPermission(a, e, acc))
			}
		}
	}
	return out
}

// Has reports whether p belongs to the vocabulary.
func (v *Vocabulary) Has(p Permission) bool {
	a, e, acc, ok := p.Parts()
	return ok && slices.Contains(actions, a) && slices.Contains(v.entities, e) && slices.Contains(accesses(e), acc)
}

// Parse validates s against the vocabulary.
func (v *Vocabulary) Parse(s string) (Permission, error) {
	p := Permission(s)
	if _, _, _, ok := p.Parts(); !ok {
		return "", fmt.Errorf("capabilities: permission %q: want action:entity:access", s)
	}
	if !v.Has(p) {
		return "", fmt.Errorf("capabilities: permission %q is not in the vocabulary", s)
	}
	return p, nil
}

var builtin, _ = NewVocabulary()

// ParsePermission validates s against the built-in vocabulary.
func ParsePermission(s string) (Permission, error) { return builtin.Parse(s) }

// AllPermissions returns every built-in permission.
func AllPermissions() []Permission { return builtin.All() }

// RolePermissions returns the permissions the built-in roles carry in v:
// role user has every own permission; role admin has every permission.
func (v *Vocabulary) RolePermissions(role string) []Permission {
	switch role {
	case RoleAdmin:
		return v.All()
	case RoleUser:
		var out []Permission
		for _, p := range v.All() {
			if _, _, acc, _ := p.Parts(); acc == Own {
				out = append(out, p)
			}
		}
		return out
	}
	return nil
}
