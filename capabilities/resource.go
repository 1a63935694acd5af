package capabilities

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Resource is a readable resource: either one fixed URI, or a URI template
// with {name} placeholders (each matching one path segment) such as
// "notes://{id}/body". Resources are read-only, so a deleting account may
// still read them; the requirement applies as for capabilities.
type Resource struct {
	URI         string // a fixed URI, or
	Template    string // a URI template
	Name        string
	Title       string
	Description string
	MIMEType    string
	Requires    Requirement
	// Read returns the contents; params holds the template's placeholders.
	Read func(ctx context.Context, call *Call, uri string, params map[string]string) ([]ResourceContents, error)
	// Allow, optional, decides whether the caller may read this particular
	// URI beyond Requires: for a per-user resource, whether the caller owns
	// what the URI names. It runs before Read and before a subscriber is
	// told that the URI changed; false answers exactly like an unknown
	// resource. nil lets every caller who meets Requires read every URI
	// the resource matches.
	Allow func(ctx context.Context, call *Call, uri string, params map[string]string) (bool, error)
	// Complete, optional, suggests values for a template placeholder.
	Complete func(ctx context.Context, call *Call, param, prefix string) ([]string, error)

	pattern *regexp.Regexp
	params  []string
}

var placeholder = regexp.MustCompile(`\{([A-Za-z_][A-Za-z0-9_]*)\}`)

func (res *Resource) compile() error {
	switch {
	case (res.URI == "") == (res.Template == ""):
		return errors.New("set exactly one of URI and Template")
	case res.Name == "":
		return errors.New("name is required")
	case res.Read == nil:
		return errors.New("read is required")
	case res.URI != "":
		return nil
	}
	var b strings.Builder
	b.WriteString("^")
	rest := res.Template
	for _, m := range placeholder.FindAllStringSubmatchIndex(res.Template, -1) {
		start := m[0] - (len(res.Template) - len(rest))
		b.WriteString(regexp.QuoteMeta(rest[:start]))
		b.WriteString(`([^/?#]+)`)
		res.params = append(res.params, res.Template[m[2]:m[3]])
		rest = res.Template[m[1]:]
	}
	b.WriteString(regexp.QuoteMeta(rest))
	b.WriteString("$")
	if len(res.params) == 0 {
		return errors.New("template has no {placeholder}")
	}
	res.pattern = regexp.MustCompile(b.String())
	return nil
}

func (res *Resource) match(uri string) (map[string]string, bool) {
	if res.URI != "" {
		return nil, res.URI == uri
	}
	m := res.pattern.FindStringSubmatch(uri)
	if m == nil {
		return nil, false
	}
	params := make(map[string]string, len(res.params))
	for i, p := range res.params {
		params[p] = m[i+1]
	}
	return params, true
}

// RegisterResource adds resources and resource templates. It refuses
// invalid definitions and duplicates; nothing is added when any of them is
// refused.
func (r *Registry) RegisterResource(resources ...Resource) error {
	staged := make([]*Resource, 0, len(resources))
	seen := map[string]bool{}
	for _, res := range resources {
		key := cmp.Or(res.URI, res.Template)
		if err := res.compile(); err != nil {
			return fmt.Errorf("capabilities: register resource %q: %w", key, err)
		}
		if seen[key] {
			return fmt.Errorf("capabilities: register resource %q: defined twice", key)
		}
		seen[key] = true
		staged = append(staged, &res)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, res := range staged {
		_, fixed := r.resources[res.URI]
		if fixed || slices.ContainsFunc(r.templates, func(t *Resource) bool { return res.Template != "" && t.Template == res.Template }) {
			return fmt.Errorf("capabilities: register resource %q: already registered", cmp.Or(res.URI, res.Template))
		}
	}
	for _, res := range staged {
		if res.URI != "" {
			r.resources[res.URI] = res
		} else {
			r.templates = append(r.templates, res)
		}
	}
	r.version++
	return nil
}

// VisibleResources returns the fixed resources caller may read, by URI.
func (r *Registry) VisibleResources(ctx context.Context, caller Caller) []Resource {
	r.mu.RLock()
	all := make([]*Resource, 0, len(r.resources))
	for _, res := range r.resources {
		all = append(all, res)
	}
	r.mu.RUnlock()
	slices.SortFunc(all, func(a, b *Resource) int { return cmp.Compare(a.URI, b.URI) })
	return r.visibleResources(ctx, caller, all)
}

// VisibleResourceTemplates returns the resource templates caller may read.
func (r *Registry) VisibleResourceTemplates(ctx context.Context, caller Caller) []Resource {
	r.mu.RLock()
	all := slices.Clone(r.templates)
	r.mu.RUnlock()
	return r.visibleResources(ctx, caller, all)
}

func (r *Registry) visibleResources(ctx context.Context, caller Caller, all []*Resource) []Resource {
	var out []Resource
	for _, res := range all {
		if r.listed(ctx, caller, "", true, res.Requires) {
			out = append(out, *res)
		}
	}
	return out
}

// findResource returns the fixed resource or first matching template.
func (r *Registry) findResource(uri string) (*Resource, map[string]string) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if res, ok := r.resources[uri]; ok {
		return res, nil
	}
	for _, t := range r.templates {
		if params, ok := t.match(uri); ok {
			return t, params
		}
	}
	return nil, nil
}

// CanRead reports whether caller may read uri now, deciding as
// ReadResource does (account state, requirement, the token's scopes, the
// role gate, and the resource's Allow, such as ownership), without
// recording anything: transports use it to decide whom to tell that a
// resource changed. A token lacking a scope the resource needs (the admin
// scope for an admin resource) is not told.
func (r *Registry) CanRead(ctx context.Context, caller Caller, uri string) bool {
	res, params := r.findResource(uri)
	if res == nil || r.stateDenial(caller, true, false) != "" || r.hiddenBy(ctx, caller, "", res.Requires) != "" {
		return false
	}
	if len(missingScopes(caller, res.Requires.TokenScopes())) > 0 {
		return false
	}
	if res.Requires.Role != "" && r.opts.RoleGate != nil && r.opts.RoleGate(ctx, caller, res.Requires.Role) != nil {
		return false
	}
	return r.allows(ctx, caller, res, uri, params) == nil
}

// errNotAllowed is what allows returns when Allow said no.
var errNotAllowed = errors.New("capabilities: resource not allowed")

// allows runs the resource's Allow, if any.
func (r *Registry) allows(ctx context.Context, caller Caller, res *Resource, uri string, params map[string]string) error {
	if res.Allow == nil {
		return nil
	}
	ok, err := res.Allow(ctx, &Call{Caller: caller, Capability: uri, client: clientFrom(ctx)}, uri, params)
	switch {
	case err != nil:
		return fmt.Errorf("capabilities: resource %q: allow: %w", uri, err)
	case !ok:
		return errNotAllowed
	}
	return nil
}

// ReadResource reads a resource through the same guard as Invoke.
func (r *Registry) ReadResource(ctx context.Context, caller Caller, uri string) ([]ResourceContents, error) {
	res, params := r.findResource(uri)
	if res == nil {
		r.deny(ctx, caller, "resource", uri, ReasonUnknown)
		return nil, errNotFound("resource", uri)
	}
	if err := r.admit(ctx, caller, "resource", uri, true, res.Requires); err != nil {
		return nil, err
	}
	if err := r.allows(ctx, caller, res, uri, params); errors.Is(err, errNotAllowed) {
		r.deny(ctx, caller, "resource", uri, ReasonOwner)
		return nil, errNotFound("resource", uri)
	} else if err != nil {
		return nil, err
	}
	call := &Call{Caller: caller, Capability: uri, client: clientFrom(ctx)}
	var contents []ResourceContents
	_, err := r.run(ctx, uri, func() (Result, error) {
		var err error
		contents, err = res.Read(ctx, call, uri, params)
		return Result{}, err
	})
	return contents, err
}

// CompleteResource suggests values for a placeholder of a visible template.
func (r *Registry) CompleteResource(ctx context.Context, caller Caller, template, param, prefix string) ([]string, error) {
	r.mu.RLock()
	i := slices.IndexFunc(r.templates, func(t *Resource) bool { return t.Template == template })
	var res *Resource
	if i >= 0 {
		res = r.templates[i]
	}
	r.mu.RUnlock()
	if res == nil {
		r.deny(ctx, caller, "resource", template, ReasonUnknown)
		return nil, errNotFound("resource", template)
	}
	if err := r.admit(ctx, caller, "resource", template, true, res.Requires); err != nil {
		return nil, err
	}
	if res.Complete == nil {
		return nil, nil
	}
	call := &Call{Caller: caller, Capability: template, client: clientFrom(ctx)}
	var values []string
	_, err := r.run(ctx, template, func() (Result, error) {
		var err error
		values, err = res.Complete(ctx, call, param, prefix)
		return Result{}, err
	})
	return values, err
}
