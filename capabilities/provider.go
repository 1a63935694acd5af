package capabilities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
)

// Provider supplies capabilities that belong to one caller alone: a saved
// package's exports, the tools of a user's remote MCP server. They are not
// registered globally: the registry asks the provider for the caller's own
// set, and each of them then passes exactly the decision a registered
// capability passes (account state, requirement, scope, quota, input
// schema, idempotency, audit). Another caller asking for one by name gets
// the answer of an unknown name.
//
// Every name a provider answers for starts with the prefix it was added
// with (see Registry.AddProvider); the registry routes such names to it
// and refuses to register them globally.
type Provider interface {
	// Own returns the caller's own capabilities, each compiled with
	// Registry.Compile. An error hides them for this call (fail closed).
	Own(ctx context.Context, caller Caller) ([]Capability, error)
	// LookupOwn returns the caller's own capability called name, or false
	// when the caller has none of that name.
	LookupOwn(ctx context.Context, caller Caller, name string) (Capability, bool, error)
	// Generation changes whenever the set Own returns for userID may have
	// changed. It feeds VisibilityKey, so it must be cheap (no I/O).
	Generation(userID string) uint64
}

type providerEntry struct {
	prefix string
	names  *regexp.Regexp
	p      Provider
}

// providerPrefix is what a provider prefix looks like: a lowercase word
// ending in "_", a character the default capability names never contain.
var providerPrefix = regexp.MustCompile(`^[a-z][a-z0-9]{0,15}_$`)

// AddProvider adds a provider of per-caller capabilities whose names all
// start with prefix (a lowercase word ending in "_", such as "pkg_"), then
// letters, digits, "_" or "-": at most 64 characters in all. A capability
// registered under that prefix, or a prefix one of another provider's
// starts with, is refused.
func (r *Registry) AddProvider(prefix string, p Provider) error {
	if !providerPrefix.MatchString(prefix) {
		return fmt.Errorf("capabilities: provider prefix %q: want a lowercase word ending in \"_\"", prefix)
	}
	if p == nil {
		return errors.New("capabilities: provider is nil")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.providers {
		if strings.HasPrefix(e.prefix, prefix) || strings.HasPrefix(prefix, e.prefix) {
			return fmt.Errorf("capabilities: provider prefix %q overlaps %q", prefix, e.prefix)
		}
	}
	for name := range r.caps {
		if strings.HasPrefix(name, prefix) {
			return fmt.Errorf("capabilities: provider prefix %q: capability %q is registered under it", prefix, name)
		}
	}
	names := regexp.MustCompile(`^` + regexp.QuoteMeta(prefix) + `[a-zA-Z0-9_-]{1,` + fmt.Sprint(64-len(prefix)) + `}$`)
	r.providers = append(r.providers, providerEntry{prefix: prefix, names: names, p: p})
	r.version++
	return nil
}

// Compile validates a provider's capability as Register validates a
// registered one (name under the provider's prefix, description,
// annotations, handler, vocabulary, schemas) and prepares its input
// schema. Providers compile once and keep the result.
func (r *Registry) Compile(c Capability) (Capability, error) {
	e, ok := r.providerOf(c.Name)
	if !ok {
		return Capability{}, fmt.Errorf("capabilities: compile %q: no provider answers for this name", c.Name)
	}
	if err := c.validate(r.vocab, e.names); err != nil {
		return Capability{}, fmt.Errorf("capabilities: compile %q: %w", c.Name, err)
	}
	if c.Task != TaskNever {
		return Capability{}, fmt.Errorf("capabilities: compile %q: a provider's capability cannot run as a task", c.Name)
	}
	for _, schema := range []json.RawMessage{c.InputSchema, c.OutputSchema} {
		if err := withoutReferences(schema); err != nil {
			return Capability{}, fmt.Errorf("capabilities: compile %q: %w", c.Name, err)
		}
	}
	return c, nil
}

// withoutReferences refuses a schema holding a reference ($ref,
// $dynamicRef, $recursiveRef) anywhere. A provider's schemas come from its
// users (a package's manifest, a remote server's tool list), and a
// reference cycle that consumes no input ({"$ref": "#"}) makes validation
// recurse until the process dies, which no recover stops. The check reads
// the schema as validation does: decoded (encoding/json matches names
// without regard to case: "$REF" is "$ref"), then written out again in
// its canonical spelling and walked.
func withoutReferences(raw json.RawMessage) error {
	if len(raw) == 0 {
		return nil
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(raw, &s); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	canonical, err := json.Marshal(&s)
	if err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	var tree any
	if err := json.Unmarshal(canonical, &tree); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	var walk func(v any) error
	walk = func(v any) error {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				switch strings.ToLower(k) {
				case "$ref", "$dynamicref", "$recursiveref":
					return fmt.Errorf("schema: %s is not supported in a provider's schema: write the schema out in full", k)
				}
				if err := walk(x); err != nil {
					return err
				}
			}
		case []any:
			for _, x := range v {
				if err := walk(x); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk(tree)
}

// providerOf returns the provider whose prefix name starts with.
func (r *Registry) providerOf(name string) (providerEntry, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, e := range r.providers {
		if strings.HasPrefix(name, e.prefix) {
			return e, true
		}
	}
	return providerEntry{}, false
}

// reservedByProvider reports whether name is under a provider's prefix.
// The caller holds r.mu.
func (r *Registry) reservedByProvider(name string) bool {
	for _, e := range r.providers {
		if strings.HasPrefix(name, e.prefix) {
			return true
		}
	}
	return false
}

// IsOwn reports whether name is one of caller's own capabilities, from a
// provider. Transports that mirror only registered capabilities use it to
// route such a name to Invoke.
func (r *Registry) IsOwn(ctx context.Context, caller Caller, name string) bool {
	c, ok, err := r.lookupOwn(ctx, caller, name)
	return err == nil && ok && c.Handler != nil
}

// lookupOwn asks the provider of name's prefix for caller's capability.
// A capability the provider did not compile is compiled here.
func (r *Registry) lookupOwn(ctx context.Context, caller Caller, name string) (*Capability, bool, error) {
	e, ok := r.providerOf(name)
	if !ok || !caller.Authenticated() || !e.names.MatchString(name) {
		return nil, false, nil
	}
	c, ok, err := e.p.LookupOwn(ctx, caller, name)
	if err != nil || !ok {
		return nil, false, err
	}
	if c.Name != name {
		return nil, false, fmt.Errorf("capabilities: provider answered %q for %q", c.Name, name)
	}
	if c.input == nil {
		if c, err = r.Compile(c); err != nil {
			return nil, false, err
		}
	}
	return &c, true, nil
}

// own returns caller's capabilities from every provider, compiled, each
// provider's sorted by name; a provider that fails contributes none.
func (r *Registry) own(ctx context.Context, caller Caller) []Capability {
	r.mu.RLock()
	providers := r.providers
	r.mu.RUnlock()
	if len(providers) == 0 || !caller.Authenticated() {
		return nil
	}
	var out []Capability
	for _, e := range providers {
		caps, err := e.p.Own(ctx, caller)
		if err != nil {
			r.log.WarnContext(ctx, "capabilities: a provider failed; its capabilities are hidden for this call", "prefix", e.prefix, "err", err)
			continue
		}
		for _, c := range caps {
			if !strings.HasPrefix(c.Name, e.prefix) {
				continue
			}
			if c.input == nil {
				var err error
				if c, err = r.Compile(c); err != nil {
					r.log.WarnContext(ctx, "capabilities: a provider's capability is invalid and hidden", "name", c.Name, "err", err)
					continue
				}
			}
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b Capability) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// VisibleOwn returns the caller's own capabilities (from providers) that
// Visible would include, sorted by name.
func (r *Registry) VisibleOwn(ctx context.Context, caller Caller) []Capability {
	var out []Capability
	for _, c := range r.own(ctx, caller) {
		if r.listed(ctx, caller, c.Name, c.runsWhileDeleting(), c.Requires) {
			out = append(out, c)
		}
	}
	return out
}

// providerGenerations adds every provider's generation for userID to the
// visibility hash.
func (r *Registry) providerGenerations(userID string, num func(uint64)) {
	r.mu.RLock()
	providers := r.providers
	r.mu.RUnlock()
	num(uint64(len(providers)))
	for _, e := range providers {
		num(e.p.Generation(userID))
	}
}

// DescriptionFor returns the description of the named capability as
// caller is to be shown it: its Describe's answer when it has one. ok is
// false when the capability has no Describe (use Description).
func (r *Registry) DescriptionFor(ctx context.Context, caller Caller, name string) (string, bool) {
	c, ok := r.lookup(name)
	if !ok || c.Describe == nil {
		return "", false
	}
	return c.Describe(ctx, caller), true
}
