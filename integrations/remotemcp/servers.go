package remotemcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"strings"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/storage"
)

// Added is the answer of Add and Refresh.
type Added struct {
	Server
	Skipped int `json:"skippedTools" jsonschema:"tools of the server not offered: a name or schema enclave cannot offer, or more than 128 tools"`
}

// Add adds a remote MCP server by URL under name (derived from the host
// when empty). A server that answers without authorization is active at
// once, its tools listed; one that asks for a token is kept with status
// consent_required and a consentUrl where the person finishes consent.
func (s *Service) Add(ctx context.Context, o storage.Owner, rawURL, name string) (Added, error) {
	u, err := s.checkURL(strings.TrimSpace(rawURL))
	if err != nil {
		return Added{}, invalid("The server URL is not usable: %s.", err)
	}
	if name == "" {
		name = defaultName(u)
	}
	if !serverName.MatchString(name) {
		return Added{}, invalid("A server name is 1-16 lowercase letters or digits, starting with a letter (it prefixes the server's tools: mcp_<name>__<tool>).")
	}
	if _, err := s.get(ctx, s.store.Reader, o, name); err == nil {
		return Added{}, &capabilities.Error{Code: capabilities.CodeConflict, Message: fmt.Sprintf("You already have a server named %q; remove it first or pick another name.", name)}
	} else if !errors.Is(err, ErrNotFound) {
		return Added{}, err
	}
	n, err := s.store.Reader.NewSelect().Model((*serverRow)(nil)).Where("user_id = ?", o.ID).Count(ctx)
	if err != nil {
		return Added{}, fmt.Errorf("remotemcp: add: %w", err)
	}
	if n >= MaxServers {
		return Added{}, invalid("You have %d remote servers, the most one account may keep; remove one first.", MaxServers)
	}
	now := s.now().UTC()
	row := serverRow{UserID: o.ID, PublicID: "rms_" + randomToken(15), Name: name, URL: u.String(), Auth: AuthNone, Tools: "[]", CreatedAt: now, UpdatedAt: now}
	skipped := 0
	err = s.probe(ctx, row.URL)
	var ua *errUnauthorized
	switch {
	case err == nil:
		tools, sk, err := s.listTools(ctx, row.URL, name, "")
		if err != nil {
			return Added{}, unavailable("The server at %s did not list its tools: %s. Nothing was added.", row.URL, describeFailure(err))
		}
		skipped = sk
		b, _ := json.Marshal(tools)
		row.Status, row.Tools, row.ToolsAt = StatusActive, string(b), &now
	case errors.As(err, &ua):
		secret, err := s.discover(ctx, &row, ua.challenge)
		if err != nil {
			return Added{}, err
		}
		row.Auth, row.Status = AuthOAuth, StatusConsentRequired
		if secret != "" {
			// A dynamic registration's client secret, sealed; the
			// tokens join it at consent.
			if err := s.seal(o, &row, tokenSet{ClientSecret: secret}); err != nil {
				return Added{}, err
			}
		}
	default:
		return Added{}, unavailable("The server at %s cannot be used: %s. Nothing was added.", row.URL, describeFailure(err))
	}
	if _, err := s.store.DB.NewInsert().Model(&row).Exec(ctx); err != nil {
		if _, e := s.get(ctx, s.store.Reader, o, name); e == nil {
			return Added{}, &capabilities.Error{Code: capabilities.CodeConflict, Message: fmt.Sprintf("You already have a server named %q.", name)}
		}
		return Added{}, fmt.Errorf("remotemcp: add: %w", err)
	}
	// Counted again once written: Adds racing each other all passed the
	// first count while they probed their remotes. Each keeps its row only
	// if the rows written so far, its own included, are within the limit.
	if n, err := s.store.DB.NewSelect().Model((*serverRow)(nil)).Where("user_id = ?", o.ID).Count(ctx); err != nil || n > MaxServers {
		if _, derr := s.store.DB.NewDelete().Model((*serverRow)(nil)).Where("id = ? AND user_id = ?", row.ID, o.ID).Exec(ctx); derr != nil {
			return Added{}, fmt.Errorf("remotemcp: add: %w", derr)
		}
		if err != nil {
			return Added{}, fmt.Errorf("remotemcp: add: %w", err)
		}
		return Added{}, invalid("You have %d remote servers, the most one account may keep; remove one first.", MaxServers)
	}
	s.changed(o.StableID)
	s.record(ctx, o, "mcp_server_add", audit.ResultSuccess, "server="+name+" auth="+row.Auth)
	return Added{Server: s.meta(row), Skipped: skipped}, nil
}

// Refresh reads the server's tool list again.
func (s *Service) Refresh(ctx context.Context, o storage.Owner, name string) (Added, error) {
	r, err := s.get(ctx, s.store.Reader, o, name)
	if err != nil {
		return Added{}, err
	}
	if r.Status == StatusConsentRequired {
		return Added{}, invalid("Server %s waits for consent: finish it at %s first.", name, s.meta(r).ConsentAt)
	}
	token, err := s.accessToken(ctx, o, &r)
	if err != nil {
		return Added{}, err
	}
	b := s.breakerOf(r.PublicID)
	if !b.allow(s.now()) {
		return Added{}, unavailable("Server %s failed repeatedly; enclave waits before calling it again. Try later.", name)
	}
	tools, skipped, err := s.listTools(ctx, r.URL, r.Name, token)
	b.done(s.now(), err == nil)
	now := s.now().UTC()
	if err != nil {
		r.LastError, r.UpdatedAt = "The tool list could not be read: "+describeFailure(err)+".", now
		// Column alone: a Set of a listed column would name it twice,
		// which PostgreSQL refuses.
		if _, err := s.store.DB.NewUpdate().Model(&r).Column("last_error", "updated_at").Where("id = ? AND user_id = ?", r.ID, o.ID).Exec(ctx); err != nil {
			s.log.WarnContext(ctx, "remotemcp: recording a failed refresh", "err", err)
		}
		return Added{}, unavailable("Server %s did not list its tools: %s.", name, describeFailure(err))
	}
	tb, _ := json.Marshal(tools)
	r.Tools, r.ToolsAt, r.LastError, r.UpdatedAt = string(tb), &now, "", now
	if _, err := s.store.DB.NewUpdate().Model(&r).Column("tools", "tools_at", "last_error", "updated_at").Where("id = ? AND user_id = ?", r.ID, o.ID).Exec(ctx); err != nil {
		return Added{}, fmt.Errorf("remotemcp: refresh: %w", err)
	}
	s.changed(o.StableID)
	return Added{Server: s.meta(r), Skipped: skipped}, nil
}

// Call runs the owner's server's tool with args and answers its result.
// The registry has checked the caller already (Registry.Invoke).
func (s *Service) Call(ctx context.Context, o storage.Owner, server, tool string, args json.RawMessage) (capabilities.Result, error) {
	r, err := s.get(ctx, s.store.Reader, o, server)
	if errors.Is(err, ErrNotFound) {
		return capabilities.Result{}, capabilities.Errorf(capabilities.CodeNotFound, "You have no remote MCP server named %q.", server)
	}
	if err != nil {
		return capabilities.Result{}, err
	}
	if r.Status != StatusActive {
		return capabilities.Result{}, unavailable("Server %s is not usable now (%s); see the MCP servers page.", server, r.Status)
	}
	token, err := s.accessToken(ctx, o, &r)
	if err != nil {
		return capabilities.Result{}, err
	}
	b := s.breakerOf(r.PublicID)
	if !b.allow(s.now()) {
		return capabilities.Result{}, unavailable("Server %s failed repeatedly; enclave waits %s before calling it again.", server, BreakerCooldown)
	}
	res, listChanged, err := s.callTool(ctx, r.URL, token, tool, args)
	b.done(s.now(), err == nil)
	if listChanged {
		s.refreshSoon(o, server)
	}
	if err != nil {
		if ctx.Err() != nil {
			return capabilities.Result{}, ctx.Err()
		}
		s.log.WarnContext(ctx, "remotemcp: a call failed", "server", server, "tool", tool, "err", describeFailure(err))
		return capabilities.Result{}, unavailable("Remote MCP server %s failed: %s.", server, describeFailure(err))
	}
	return scrub(toResult(server, res), token), nil
}

// scrub removes the token from a result, should the remote echo it.
func scrub(r capabilities.Result, token string) capabilities.Result {
	if token == "" {
		return r
	}
	for i, c := range r.Content {
		if t, ok := c.(capabilities.Text); ok && strings.Contains(t.Text, token) {
			r.Content[i] = capabilities.Text{Text: strings.ReplaceAll(t.Text, token, "[token removed]")}
		}
	}
	return r
}

// Provider returns the registry provider offering each active server's
// tools as capabilities of its owner alone. Add it with
// Registry.AddProvider(Prefix, s.Provider()).
func (s *Service) Provider() capabilities.Provider { return provider{s} }

type provider struct{ s *Service }

func (p provider) Generation(userID string) uint64 { return p.s.generation(userID) }

func (p provider) Own(ctx context.Context, caller capabilities.Caller) ([]capabilities.Capability, error) {
	o, err := p.s.owner(ctx, caller)
	if err != nil {
		return nil, err
	}
	var rows []serverRow
	if err := p.s.store.Reader.NewSelect().Model(&rows).Column("id", "public_id", "name", "tools", "tools_at").
		Where("user_id = ? AND status = ?", o.ID, StatusActive).Order("name").Scan(ctx); err != nil {
		return nil, fmt.Errorf("remotemcp: tools: %w", err)
	}
	var out []capabilities.Capability
	for _, r := range rows {
		out = append(out, p.s.compiled(o.StableID, r)...)
	}
	return out, nil
}

func (p provider) LookupOwn(ctx context.Context, caller capabilities.Caller, name string) (capabilities.Capability, bool, error) {
	server, _, ok := parseName(name)
	if !ok {
		return capabilities.Capability{}, false, nil
	}
	o, err := p.s.owner(ctx, caller)
	if err != nil {
		return capabilities.Capability{}, false, err
	}
	r, err := p.s.get(ctx, p.s.store.Reader, o, server)
	if errors.Is(err, ErrNotFound) || (err == nil && r.Status != StatusActive) {
		return capabilities.Capability{}, false, nil
	}
	if err != nil {
		return capabilities.Capability{}, false, err
	}
	for _, c := range p.s.compiled(o.StableID, r) {
		if c.Name == name {
			return c, true, nil
		}
	}
	return capabilities.Capability{}, false, nil
}

// compiled returns the capabilities of the server row's tools, parsed and
// compiled once per owner, server and tool list. The tool list (up to
// MaxTools tools of MaxSchemaBytes each) is hashed once per row with a
// per-process seed, not once per tool, and not parsed again while it is
// the same: each tools/list and each call reads every row.
func (s *Service) compiled(stableID string, r serverRow) []capabilities.Capability {
	key := fmt.Sprintf("%s/%s/%x", stableID, r.PublicID, maphash.String(s.seed, r.Tools))
	s.mu.Lock()
	caps, ok := s.cache[key]
	s.mu.Unlock()
	if ok {
		return caps
	}
	caps = []capabilities.Capability{}
	for _, t := range r.tools() {
		c, err := s.reg.Compile(s.toolCapability(r.Name, t))
		if err != nil {
			s.log.Warn("remotemcp: a remote tool cannot be offered as a capability", "server", r.Name, "tool", t.Name, "err", err)
			continue
		}
		caps = append(caps, c)
	}
	s.mu.Lock()
	if len(s.cache) >= 2000 {
		s.cache = map[string][]capabilities.Capability{}
	}
	s.cache[key] = caps
	s.mu.Unlock()
	return caps
}

// toolCapability describes a remote tool as its owner's capability.
func (s *Service) toolCapability(server string, t remoteTool) capabilities.Capability {
	desc := strings.TrimSpace(t.Description)
	if desc == "" {
		desc = "(no description)"
	}
	title := t.Title
	if title == "" {
		title = server + " " + t.Name
	}
	input := t.InputSchema
	if len(input) == 0 || string(input) == "null" {
		input = json.RawMessage(`{"type":"object"}`)
	}
	req := capabilities.Requirement{Permissions: []capabilities.Permission{capabilities.UpdateUserOwn}}
	return capabilities.Capability{
		Name:   CapabilityName(server, t.Name),
		Domain: "remote",
		Title:  clip(title, 128),
		Description: fmt.Sprintf("[Tool %q of your remote MCP server %s; the description below is the remote server's, not enclave's.] %s",
			t.Name, server, desc),
		// Never read-only to the registry, whatever the remote hints: the
		// call spends the person's token at the remote and may write
		// there, so it takes a write lease, is refused once the account is
		// being deleted and keeps idempotency replay protection.
		Annotations: &capabilities.Annotations{OpenWorld: true},
		Requires:    req,
		InputSchema: input,
		Handler: func(ctx context.Context, call *capabilities.Call, args json.RawMessage) (capabilities.Result, error) {
			o, err := s.owner(ctx, call.Caller)
			if err != nil {
				return capabilities.Result{}, err
			}
			return s.Call(ctx, o, server, t.Name, args)
		},
	}
}

// refreshSoon reads the server's tool list again in the background (once
// at a time per server), after the remote said it changed.
func (s *Service) refreshSoon(o storage.Owner, server string) {
	key := o.StableID + "/" + server
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock() // the read, once over, takes mu to clear refreshing
	// At most once per MinRefreshInterval: a remote announcing a change
	// at every call would otherwise have its list read (and up to
	// MaxTools schemas compiled, and every session of its owner told)
	// once per call.
	if s.refreshing[key] || now.Before(s.listChangedAt[key].Add(MinRefreshInterval)) {
		return
	}
	s.refreshing[key] = true
	if len(s.listChangedAt) >= 100000 {
		s.listChangedAt = map[string]time.Time{}
	}
	s.listChangedAt[key] = now
	started := s.background.Go(func() {
		defer func() {
			s.mu.Lock()
			delete(s.refreshing, key)
			s.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(s.stop, 2*s.timeout)
		defer cancel()
		if _, err := s.Refresh(ctx, o, server); err != nil {
			s.log.Warn("remotemcp: refreshing a changed tool list failed", "server", server, "err", err)
		}
	})
	if !started { // Close has begun: nothing is read
		delete(s.refreshing, key)
	}
}
