package capabilities

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"maps"
	"regexp"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/enclave-mcp/enclave/internal/tracing"
)

// DenialReason says which check refused a call. It goes to the Auditor,
// never to the caller.
type DenialReason string

// The denial reasons, in the order the checks run.
const (
	ReasonUnknown         DenialReason = "unknown"
	ReasonUnauthenticated DenialReason = "unauthenticated"
	ReasonSuspended       DenialReason = "account_suspended"
	ReasonDeleting        DenialReason = "account_deleting"
	ReasonRole            DenialReason = "role"
	ReasonPermission      DenialReason = "permission"
	ReasonFeature         DenialReason = "feature"
	ReasonInteractive     DenialReason = "interactive_only"
	ReasonSession         DenialReason = "session_only"
	ReasonScope           DenialReason = "insufficient_scope"
	ReasonQuota           DenialReason = "quota"
	// ReasonRoleGate: Options.RoleGate refused the caller (for example an
	// admin without the second factor the server requires).
	ReasonRoleGate DenialReason = "role_gate"
	// ReasonOwner: a per-user resource names something the caller does
	// not own (see Resource.Allow).
	ReasonOwner DenialReason = "not_owner"
	// ReasonConfined: the caller's credential is confined to other
	// capabilities (Caller.Only).
	ReasonConfined DenialReason = "confined"
	// ReasonOperator: the capability is the operator's
	// (Requirement.Operator) and the caller is not, or the caller is the
	// operator (OperatorCaller) and the capability is not one of its own.
	ReasonOperator DenialReason = "operator_only"
)

// Denial is one refused call, as recorded for the audit log. Subject is a
// keyed hash of the user id (HashSubject): a log line can group denials by
// principal without holding the id itself. UserID is the caller's stable
// user id, for an Auditor that hashes ids with its own key (the audit log
// does, so every row it holds uses one scheme); it is never logged as is.
type Denial struct {
	At      time.Time
	UserID  string
	Subject string
	Surface string // "tool", "resource" or "prompt"
	Name    string // the capability, resource URI or prompt name asked for
	Reason  DenialReason
}

// Auditor records denials. A single denial is a routine agent turn; a burst
// from one subject is what probing looks like.
type Auditor interface {
	RecordDenial(ctx context.Context, d Denial)
}

// OperatorCall is one call of the operator (OperatorCaller) that the
// checks let run, as recorded for the audit log: the actor is the
// operator, who has no user id.
type OperatorCall struct {
	At time.Time
	// Name is the capability.
	Name string
	// Subject is the stable user id of the account the call acted on, as
	// its handler named it (Call.SetSubject); "" when it named none (the
	// account was not found, or the call is about no account).
	Subject string
	// Outcome is "ok", "tool_error" (the handler answered an error
	// result), or the error's Code.
	Outcome string
}

// OperatorAuditor records the operator's calls (Options.OperatorAudit).
type OperatorAuditor interface {
	RecordOperatorCall(ctx context.Context, c OperatorCall)
}

// Quota decides whether a caller may run a capability now. A non-nil error
// refuses the call with CodeQuotaExceeded.
type Quota interface {
	Allow(ctx context.Context, caller Caller, capability string) error
}

// Features reports whether a feature flag is enabled for a caller.
type Features interface {
	Enabled(ctx context.Context, caller Caller, flag string) bool
}

// Observer is told the outcome of every capability call: OutcomeAllowed
// when the checks let it run, or the DenialReason that refused it. It
// feeds metrics; it must be fast and must not block.
type Observer interface {
	ObserveCall(capability string, outcome string)
}

// OutcomeAllowed is the Observer outcome of a call the checks let run.
const OutcomeAllowed = "allowed"

// Options configure a Registry. Every field is optional.
type Options struct {
	// Vocabulary validates required permissions; nil means the built-in one.
	Vocabulary *Vocabulary
	// Auditor receives every denial; nil logs them with Logger.
	Auditor Auditor
	// OperatorAudit receives every call of the operator (OperatorCaller)
	// that the checks let run, with its outcome (invalid_input for one
	// refused for its arguments): the choke point's record of the command
	// line's account actions. Nil logs them with Logger.
	OperatorAudit OperatorAuditor
	// AuditKey keys the hash of user ids in denials; nil uses plain SHA-256.
	AuditKey []byte
	// Quota limits calls per caller; nil is unlimited.
	Quota Quota
	// Features enables feature flags; nil enables none, so a capability that
	// requires a flag is hidden from everyone.
	Features Features
	// Observer is told each call's outcome (metrics); nil tells no one.
	Observer Observer
	// Idempotency keeps the results of calls made with an idempotency key
	// (see MetaIdempotencyKey); nil validates keys but never replays.
	Idempotency IdempotencyStore
	// WriteLease, when set, is taken by Invoke for each call of a
	// capability that may write (neither read-only nor
	// Requirement.DuringDeletion), after every check and before the
	// handler runs. It returns the context the handler runs with
	// (cancelled if the lease ends early) and end, which Invoke calls when
	// the handler returns, to release the lease: end returns nil, or the
	// error the call answers instead of the handler's failure when the
	// lease ended early. An error refuses the call (a *Error as it is,
	// anything else as internal). enclave's server sets it to
	// lifecycle.WriteLeases, so that an account's deletion waits for, or
	// stops, every call that may still write the account's data.
	WriteLease func(ctx context.Context, caller Caller, capability string) (leased context.Context, end func() error, err error)
	// RoleGate, when set, is asked after every other check for each call of
	// a capability (resource, prompt) that requires a role: an error
	// refuses the call with that error (a *Error keeps its code and
	// message; anything else is internal). The capability stays visible:
	// the caller is told what to do, as with a missing scope. enclave uses
	// it to refuse admin capabilities to an admin without a second factor
	// when the server requires one.
	RoleGate func(ctx context.Context, caller Caller, role string) error
	// Logger logs handler panics and internal errors; nil is slog.Default().
	Logger *slog.Logger
	// NoBuiltins leaves out whoami and capabilitiesSearch.
	NoBuiltins bool
	// Names, when set, replaces the camelCase rule for capability names (a
	// server reproducing another's tool names may need snake_case).
	Names *regexp.Regexp
	// TracerProvider, when set, gives every Invoke a span "capability
	// NAME" recording the name and the outcome (ok, or the error code;
	// the denial reason when a check refused), never the arguments or the
	// result. Nil: no spans, at no cost.
	TracerProvider trace.TracerProvider
}

// Registry holds the capabilities, resources and prompts of a server and is
// the one place that decides who may use them. It is safe for concurrent
// use; registration may continue while serving.
type Registry struct {
	opts   Options
	vocab  *Vocabulary
	log    *slog.Logger
	tracer trace.Tracer // nil: tracing off

	mu        sync.RWMutex
	caps      map[string]*Capability
	sorted    []*Capability // caps by name
	resources map[string]*Resource
	templates []*Resource
	prompts   map[string]*Prompt
	version   uint64
	flagged   bool // a registered capability requires a feature flag
	providers []providerEntry
}

// NewRegistry returns a registry with the built-in capabilities registered.
func NewRegistry(opts Options) *Registry {
	r := &Registry{
		opts:      opts,
		vocab:     cmp.Or(opts.Vocabulary, builtin),
		log:       cmp.Or(opts.Logger, slog.Default()),
		caps:      map[string]*Capability{},
		resources: map[string]*Resource{},
		prompts:   map[string]*Prompt{},
		tracer:    tracing.Tracer(opts.TracerProvider),
	}
	if !opts.NoBuiltins {
		for _, c := range builtins(r) {
			if err := r.register(capabilityName, c); err != nil {
				panic(err) // a bug in this package, caught by its tests
			}
		}
	}
	return r
}

// Register adds capabilities. It refuses invalid definitions and duplicate
// names; nothing is added when any of them is refused.
func (r *Registry) Register(caps ...Capability) error {
	return r.register(cmp.Or(r.opts.Names, capabilityName), caps...)
}

func (r *Registry) register(names *regexp.Regexp, caps ...Capability) error {
	staged := make([]*Capability, 0, len(caps))
	seen := map[string]bool{}
	for _, c := range caps {
		if err := c.validate(r.vocab, names); err != nil {
			return fmt.Errorf("capabilities: register %q: %w", c.Name, err)
		}
		if seen[c.Name] {
			return fmt.Errorf("capabilities: register %q: defined twice", c.Name)
		}
		seen[c.Name] = true
		staged = append(staged, &c)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range staged {
		if _, ok := r.caps[c.Name]; ok {
			return fmt.Errorf("capabilities: register %q: already registered", c.Name)
		}
		if r.reservedByProvider(c.Name) {
			return fmt.Errorf("capabilities: register %q: the name is under a provider's prefix", c.Name)
		}
	}
	for _, c := range staged {
		r.caps[c.Name] = c
		r.flagged = r.flagged || c.Requires.Feature != ""
	}
	r.sorted = slices.SortedFunc(maps.Values(r.caps), func(a, b *Capability) int { return cmp.Compare(a.Name, b.Name) })
	r.version++
	return nil
}

// Version changes whenever something is registered. Transports that mirror
// the registry compare it to know when to refresh.
func (r *Registry) Version() uint64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.version
}

// All returns every registered capability, sorted by name, whoever may see
// it. Transports use it to mirror definitions; deciding is Visible's job.
func (r *Registry) All() []Capability {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Capability, len(r.sorted))
	for i, c := range r.sorted {
		out[i] = *c
	}
	return out
}

// Has reports whether a capability of that name is registered, whoever may
// see it. Transports use it only to route and audit, never to answer.
func (r *Registry) Has(name string) bool {
	_, ok := r.lookup(name)
	return ok
}

func (r *Registry) lookup(name string) (*Capability, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	c, ok := r.caps[name]
	return c, ok
}

// lookupFor finds name among the registered capabilities, then among
// caller's own (from a provider). An error is a provider's failure.
func (r *Registry) lookupFor(ctx context.Context, caller Caller, name string) (*Capability, bool, error) {
	if c, ok := r.lookup(name); ok {
		return c, true, nil
	}
	return r.lookupOwn(ctx, caller, name)
}

// Visible returns the capabilities caller may call, sorted by name. It makes
// the same decision as Invoke, except that a capability whose only missing
// condition is a token scope stays visible (the client can obtain the
// scope); the admin scope is the exception (see ScopeAdmin): what needs it
// is left out for a token without it.
func (r *Registry) Visible(ctx context.Context, caller Caller) []Capability {
	r.mu.RLock()
	all := r.sorted // never modified in place: Register replaces it
	r.mu.RUnlock()
	var out []Capability
	for _, c := range all {
		if r.listed(ctx, caller, c.Name, c.runsWhileDeleting(), c.Requires) {
			out = append(out, *c)
		}
	}
	if own := r.VisibleOwn(ctx, caller); len(own) > 0 {
		out = append(out, own...)
		slices.SortFunc(out, func(a, b Capability) int { return cmp.Compare(a.Name, b.Name) })
	}
	return out
}

// VisibleNames returns the names of the capabilities Visible returns.
func (r *Registry) VisibleNames(ctx context.Context, caller Caller) []string {
	r.mu.RLock()
	all := r.sorted
	r.mu.RUnlock()
	var out []string
	for _, c := range all {
		if r.listed(ctx, caller, c.Name, c.runsWhileDeleting(), c.Requires) {
			out = append(out, c.Name)
		}
	}
	if own := r.VisibleOwn(ctx, caller); len(own) > 0 {
		for _, c := range own {
			out = append(out, c.Name)
		}
		slices.Sort(out)
	}
	return out
}

// VisibilityKey returns a key that is the same for two calls only if
// VisibleNames would answer them the same: a hash, under a seed chosen at
// random per process, of the registry's version, every field of caller
// that the state and requirement checks read, and whether caller holds the
// admin scope (so two different inputs share a key with odds of 2^-64, and
// nobody can aim for it). ok is false
// when a registered capability depends on a feature flag, whose answers
// can change at any time; there is then no such key. A transport uses it
// to skip working out a caller's visible set again when nothing it
// depends on changed. It allocates nothing.
func (r *Registry) VisibilityKey(caller Caller) (key uint64, ok bool) {
	r.mu.RLock()
	version, flagged := r.version, r.flagged
	r.mu.RUnlock()
	if flagged {
		return 0, false
	}
	var h maphash.Hash
	h.SetSeed(visibilitySeed)
	var n [8]byte
	num := func(v uint64) {
		binary.LittleEndian.PutUint64(n[:], v)
		h.Write(n[:])
	}
	str := func(v string) { // length-prefixed: no two lists hash the same bytes
		num(uint64(len(v)))
		h.WriteString(v)
	}
	flag := func(b bool) {
		if b {
			num(1)
		} else {
			num(0)
		}
	}
	num(version)
	str(caller.UserID)
	num(uint64(caller.State))
	flag(caller.Interactive)
	flag(caller.Session)
	flag(caller.Only != nil)
	flag(caller.operator)
	flag(caller.HasScope(ScopeAdmin))
	num(uint64(len(caller.Roles)))
	for _, v := range caller.Roles {
		str(v)
	}
	num(uint64(len(caller.Permissions)))
	for _, v := range caller.Permissions {
		str(string(v))
	}
	num(uint64(len(caller.Only)))
	for _, v := range caller.Only {
		str(v)
	}
	r.providerGenerations(caller.UserID, num)
	return h.Sum64(), true
}

var visibilitySeed = maphash.MakeSeed()

// IsVisible reports whether Visible would include the named capability.
func (r *Registry) IsVisible(ctx context.Context, caller Caller, name string) bool {
	c, ok, err := r.lookupFor(ctx, caller, name)
	return err == nil && ok && r.listed(ctx, caller, c.Name, c.runsWhileDeleting(), c.Requires)
}

// Invoke runs a capability for caller: the only way one runs. The checks run
// in order: account state (suspended refuses everything, deleting refuses
// anything not read-only, and session-only or admin-only reads),
// requirement (role, permission, feature flag, interactive-only,
// session-only), token scope, quota, input schema, idempotency key (a
// keyed repeat gets the stored result; see MetaIdempotencyKey); for a
// capability that may write, a write lease (Options.WriteLease); then the
// handler, with panics recovered. A denial is recorded with the Auditor. A capability
// hidden from caller answers exactly like an unknown one. The operator's
// caller (OperatorCaller) runs only operator capabilities, is not metered,
// takes no write lease, and each of its calls the checks let through is
// recorded with Options.OperatorAudit, one refused for its arguments
// included.
func (r *Registry) Invoke(ctx context.Context, caller Caller, name string, args json.RawMessage) (Result, error) {
	if r.tracer == nil {
		return r.invoke(ctx, caller, name, args)
	}
	return r.invokeTraced(ctx, caller, name, args)
}

// invokeTraced is Invoke inside a span (Options.TracerProvider). The span
// holds the capability's name and the outcome, never args or the result:
// those are the caller's data.
func (r *Registry) invokeTraced(ctx context.Context, caller Caller, name string, args json.RawMessage) (Result, error) {
	// The span starts unnamed: a sampler sees no name the caller made up.
	ctx, span := r.tracer.Start(ctx, "capability")
	defer span.End()
	res, err := r.invoke(ctx, caller, name, args)
	switch e, own := r.providerOf(name); {
	case r.Has(name):
		span.SetName("capability " + name)
		span.SetAttributes(attribute.String("enclave.capability.name", name))
	case own && (err == nil || CodeOf(err) != CodeNotFound):
		// A caller's own capability (a saved package's export, a tool of
		// the caller's remote server) is named by the caller: its name is
		// the caller's data, and one per package would make span names
		// unbounded. The provider's prefix says what kind it was.
		span.SetName("capability (own)")
		span.SetAttributes(attribute.String("enclave.capability.provider", e.prefix))
	default:
		// Any string can be asked for: keep it out of the span.
		span.SetName("capability (unknown)")
	}
	switch {
	case err != nil:
		code := CodeOf(err)
		span.SetAttributes(attribute.String("enclave.capability.outcome", string(code)))
		if code == CodeInternal {
			span.SetStatus(codes.Error, "")
		}
	case res.IsError:
		span.SetAttributes(attribute.String("enclave.capability.outcome", "tool_error"))
	default:
		span.SetAttributes(attribute.String("enclave.capability.outcome", "ok"))
	}
	return res, err
}

func (r *Registry) invoke(ctx context.Context, caller Caller, name string, args json.RawMessage) (Result, error) {
	c, ok, err := r.lookupFor(ctx, caller, name)
	if err != nil {
		r.log.ErrorContext(ctx, "capabilities: looking up a caller's own capability failed", "capability", name, "err", err)
		return Result{}, &Error{Code: CodeInternal, Message: "internal error", Err: err}
	}
	if !ok {
		r.deny(ctx, caller, "tool", name, ReasonUnknown)
		return Result{}, errNotFound("capability", name)
	}
	if err := r.admit(ctx, caller, "tool", name, c.runsWhileDeleting(), c.Requires); err != nil {
		return Result{}, err
	}
	// The operator holds no account to meter: its calls are not counted.
	if q := r.opts.Quota; q != nil && !caller.operator {
		if err := q.Allow(ctx, caller, name); err != nil {
			r.deny(ctx, caller, "tool", name, ReasonQuota)
			msg := "quota exceeded"
			if e, ok := errors.AsType[*Error](err); ok && e.Message != "" {
				msg = e.Message
			}
			return Result{}, &Error{Code: CodeQuotaExceeded, Message: msg, Err: err}
		}
	}
	if o := r.opts.Observer; o != nil {
		o.ObserveCall(name, OutcomeAllowed)
	}
	call := &Call{Caller: caller, Capability: name, client: clientFrom(ctx)}
	if caller.operator {
		// Every call of the operator the checks let run is recorded with
		// its outcome, one refused for its arguments (the schema, a
		// malformed idempotency key) included: as for any caller, such a
		// refusal is the outcome of an admitted call, not a denial.
		res, err := r.invokeAdmitted(ctx, c, call, args)
		r.recordOperator(ctx, call, res, err)
		return res, err
	}
	return r.invokeAdmitted(ctx, c, call, args)
}

// invokeAdmitted runs a call the checks let through: the input schema,
// the idempotency key, the write lease (never the operator's), then the
// handler.
func (r *Registry) invokeAdmitted(ctx context.Context, c *Capability, call *Call, args json.RawMessage) (Result, error) {
	caller, name := call.Caller, call.Capability
	args, err := c.validateInput(args)
	if err != nil {
		return Result{}, err
	}
	key, err := idempotencyKeyFrom(ctx)
	if err != nil {
		return Result{}, err
	}
	// The request's _meta is this call's: a handler that invokes other
	// capabilities must not pass its idempotency key on to them.
	ctx = withoutRequestMeta(ctx)
	run := func(ctx context.Context) (Result, error) {
		// A read has no effect to run once: a key on a read-only capability is
		// checked but ignored, so a read's result (perhaps a secret, perhaps
		// since deleted) is never stored and replayed.
		if key != "" && !c.Annotations.Idempotent && !c.Annotations.ReadOnly && r.opts.Idempotency != nil {
			return r.invokeOnce(ctx, c, caller, key, args, func(ctx context.Context) (Result, error) {
				return r.run(ctx, name, func() (Result, error) { return c.Handler(ctx, call, args) })
			})
		}
		return r.run(ctx, name, func() (Result, error) { return c.Handler(ctx, call, args) })
	}
	// No write lease for the operator: a lease is taken on the caller's
	// account, and the operator has none (an operator action on an
	// account, its deletion included, is the domain's to order).
	if r.opts.WriteLease != nil && c.mayWrite() && !caller.operator {
		return r.withWriteLease(ctx, caller, name, run)
	}
	return run(ctx)
}

// recordOperator records one call of the operator that the checks let
// through (it ran, or its arguments were refused) with
// Options.OperatorAudit.
func (r *Registry) recordOperator(ctx context.Context, call *Call, res Result, err error) {
	outcome := "ok"
	switch {
	case err != nil:
		outcome = string(CodeOf(err))
	case res.IsError:
		outcome = "tool_error"
	}
	oc := OperatorCall{At: time.Now().UTC(), Name: call.Capability, Subject: call.subject, Outcome: outcome}
	if r.opts.OperatorAudit != nil {
		r.opts.OperatorAudit.RecordOperatorCall(ctx, oc)
		return
	}
	r.log.InfoContext(ctx, "operator call", "capability", oc.Name, "subject", r.HashSubject(oc.Subject), "outcome", outcome)
}

// withWriteLease runs fn under a write lease on caller's account
// (Options.WriteLease).
func (r *Registry) withWriteLease(ctx context.Context, caller Caller, name string, fn func(context.Context) (Result, error)) (res Result, err error) {
	leased, end, err := r.opts.WriteLease(ctx, caller, name)
	if err != nil {
		if e, ok := errors.AsType[*Error](err); ok {
			if e.Code == CodeAccountDeleting {
				r.deny(ctx, caller, "tool", name, ReasonDeleting)
			}
			return Result{}, e
		}
		r.log.ErrorContext(ctx, "capabilities: taking a write lease failed", "capability", name, "err", err)
		return Result{}, &Error{Code: CodeInternal, Message: "internal error", Err: err}
	}
	defer func() {
		lost := end()
		if lost == nil || err == nil {
			return // a lease that lived to the end, or a call that succeeded before it ended
		}
		if _, ok := errors.AsType[*Error](lost); !ok {
			lost = &Error{Code: CodeInternal, Message: "internal error", Err: lost}
		}
		res, err = Result{}, lost
	}()
	return fn(leased)
}

// Admit applies Invoke's account-state, requirement and scope checks to
// caller for the named capability, without running it, and returns the
// error Invoke would (a denial is recorded with the Auditor). A transport
// uses it to decide again, later, whether work it started for caller (a
// task) may go on.
func (r *Registry) Admit(ctx context.Context, caller Caller, name string) error {
	c, ok, err := r.lookupFor(ctx, caller, name)
	if err != nil {
		return &Error{Code: CodeInternal, Message: "internal error", Err: err}
	}
	if !ok {
		r.deny(ctx, caller, "tool", name, ReasonUnknown)
		return errNotFound("capability", name)
	}
	return r.admit(ctx, caller, "tool", name, c.runsWhileDeleting(), c.Requires)
}

// CheckScope reports, before a transport commits to a response, whether the
// named capability is visible to caller but needs token scopes it lacks. It
// returns nil in every other case (including unknown and hidden names, which
// Invoke answers). A scope denial is recorded with the Auditor.
func (r *Registry) CheckScope(ctx context.Context, caller Caller, name string) *Error {
	c, ok, err := r.lookupFor(ctx, caller, name)
	if err != nil || !ok || r.stateDenial(caller, c.runsWhileDeleting(), c.Requires.Public) != "" || r.hiddenBy(ctx, caller, c.Name, c.Requires) != "" {
		return nil
	}
	if missing := missingScopes(caller, c.Requires.TokenScopes()); len(missing) > 0 && caller.Authenticated() {
		r.deny(ctx, caller, "tool", name, ReasonScope)
		return scopeError(missing)
	}
	return nil
}

// admit applies the account-state, requirement and scope checks shared by
// capabilities, resources and prompts.
func (r *Registry) admit(ctx context.Context, caller Caller, surface, name string, readOnly bool, req Requirement) error {
	state := r.stateDenial(caller, readOnly, publicTool(surface, req))
	hidden := r.hiddenBy(ctx, caller, toolName(surface, name), req)
	if state != "" || hidden != "" {
		r.deny(ctx, caller, surface, name, cmp.Or(state, hidden))
		switch {
		case hidden != "" || state == ReasonUnauthenticated:
			return errNotFound(kindOf(surface), name)
		case state == ReasonSuspended:
			return Errorf(CodeAccountSuspended, "this account is suspended")
		default:
			return Errorf(CodeAccountDeleting, "this account is being deleted; only reads are allowed")
		}
	}
	if missing := missingScopes(caller, req.TokenScopes()); len(missing) > 0 && caller.Authenticated() {
		r.deny(ctx, caller, surface, name, ReasonScope)
		return scopeError(missing)
	}
	if req.Role != "" && r.opts.RoleGate != nil {
		if err := r.opts.RoleGate(ctx, caller, req.Role); err != nil {
			r.deny(ctx, caller, surface, name, ReasonRoleGate)
			if _, ok := errors.AsType[*Error](err); ok {
				return err
			}
			return &Error{Code: CodeInternal, Message: "internal error", Err: err}
		}
	}
	return nil
}

// toolName is name for the tool surface and "" for the others.
func toolName(surface, name string) string {
	if surface == "tool" {
		return name
	}
	return ""
}

func kindOf(surface string) string {
	if surface == "tool" {
		return "capability"
	}
	return surface
}

func scopeError(missing []string) *Error {
	return &Error{Code: CodeInsufficientScope, Message: "the access token lacks a required scope", Scopes: missing}
}

// run calls a handler, turning a panic into an internal error.
func (r *Registry) run(ctx context.Context, name string, f func() (Result, error)) (res Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			r.log.ErrorContext(ctx, "capability handler panicked", "capability", name, "panic", p, "stack", string(debug.Stack()))
			res, err = Result{}, &Error{Code: CodeInternal, Message: "internal error", Err: fmt.Errorf("panic: %v", p)}
		}
	}()
	res, err = f()
	return res, domainError(err)
}

// runsWhileDeleting reports whether c runs for an account being deleted:
// read-only capabilities, and those that finish the deletion itself. Two
// kinds of read are not among them: a session-only read (a credential or
// secret shown to the person), and an admin-only read (other people's
// accounts): an account on its way out reveals nothing more than its own
// data and holds no administrative power.
func (c Capability) runsWhileDeleting() bool {
	if c.Requires.DuringDeletion {
		return true
	}
	return c.Annotations.ReadOnly && !c.Requires.SessionOnly && c.Requires.Role != RoleAdmin
}

// mayWrite reports whether a call of c may write, and so runs under a
// write lease (Options.WriteLease): not a read-only capability, nor one
// that runs during the account's deletion (accountDelete waits for the
// account's leases; it must not hold one).
func (c Capability) mayWrite() bool {
	return !c.Annotations.ReadOnly && !c.Requires.DuringDeletion
}

// publicTool reports whether req opens a tool to unauthenticated callers
// (Requirement.Public; resources and prompts are never public).
func publicTool(surface string, req Requirement) bool { return surface == "tool" && req.Public }

// stateDenial is the account-state check. An unauthenticated caller is
// refused everything but a public capability (Requirement.Public, which
// Register keeps to read-only ones).
func (r *Registry) stateDenial(caller Caller, readOnly, public bool) DenialReason {
	switch {
	case caller.operator:
		return "" // no account: which capabilities it runs is hiddenBy's
	case !caller.Authenticated():
		if public && readOnly {
			return ""
		}
		return ReasonUnauthenticated
	case caller.State == AccountSuspended:
		return ReasonSuspended
	case caller.State == AccountActive, readOnly:
		return ""
	default: // deleting, or unknown because loading failed
		return ReasonDeleting
	}
}

// hiddenBy is the requirement check: the first condition caller fails, or "".
// tool is the capability's name, or "" for a resource or prompt.
func (r *Registry) hiddenBy(ctx context.Context, caller Caller, tool string, req Requirement) DenialReason {
	// The operator's capabilities are for the operator's caller alone, and
	// that caller runs nothing else (no account behind it for another
	// capability to act as).
	if caller.operator != req.Operator {
		return ReasonOperator
	}
	if caller.Only != nil && (tool == "" || !slices.Contains(caller.Only, tool)) {
		return ReasonConfined
	}
	if req.Role != "" && !caller.HasRole(req.Role) {
		return ReasonRole
	}
	// A public capability asks no permission of an unauthenticated caller
	// (it has no account to hold one); tool is "" for resources and
	// prompts, which are never public.
	anonymousPublic := tool != "" && req.Public && !caller.Authenticated()
	for _, p := range req.Permissions {
		if anonymousPublic {
			break
		}
		if !caller.HasPermission(p) {
			return ReasonPermission
		}
	}
	if req.Feature != "" && (r.opts.Features == nil || !r.opts.Features.Enabled(ctx, caller, req.Feature)) {
		return ReasonFeature
	}
	if req.InteractiveOnly && !caller.Interactive {
		return ReasonInteractive
	}
	if req.SessionOnly && !caller.Session {
		return ReasonSession
	}
	return ""
}

func missingScopes(caller Caller, scopes []string) []string {
	var missing []string
	for _, s := range scopes {
		if !caller.HasScope(s) {
			missing = append(missing, s)
		}
	}
	return missing
}

// deny records a denial.
func (r *Registry) deny(ctx context.Context, caller Caller, surface, name string, reason DenialReason) {
	if len(name) > 128 {
		name = name[:128]
	}
	if o := r.opts.Observer; o != nil && surface == "tool" {
		label := name
		if reason == ReasonUnknown {
			label = "" // any string can be asked for: keep it out of metric labels
		}
		o.ObserveCall(label, string(reason))
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attribute.String("enclave.denial.reason", string(reason)))
	}
	d := Denial{At: time.Now().UTC(), UserID: caller.UserID, Subject: r.HashSubject(caller.UserID), Surface: surface, Name: name, Reason: reason}
	if r.opts.Auditor != nil {
		r.opts.Auditor.RecordDenial(ctx, d)
		return
	}
	r.log.InfoContext(ctx, "capability denied", "subject", d.Subject, "surface", surface, "name", name, "reason", string(reason))
}

// HashSubject returns the identifier recorded for a user id in denials: a
// hex HMAC-SHA256 of "user:"+id under Options.AuditKey (plain SHA-256
// without one), truncated to 128 bits; under the same key it equals the
// audit log's HashUser. An empty user id stays empty.
func (r *Registry) HashSubject(userID string) string {
	if userID == "" {
		return ""
	}
	var sum []byte
	if len(r.opts.AuditKey) > 0 {
		m := hmac.New(sha256.New, r.opts.AuditKey)
		m.Write([]byte("user:" + userID))
		sum = m.Sum(nil)
	} else {
		s := sha256.Sum256([]byte(userID))
		sum = s[:]
	}
	return hex.EncodeToString(sum[:16])
}

// Screen reports whether Invoke would answer the named capability with "not
// found" for caller (it is unknown, or its requirement hides it), recording
// that denial with the Auditor. Transports that answer unknown names
// themselves use it to keep hidden and unknown identical; everything Screen
// lets through is still decided (and audited) by Invoke.
func (r *Registry) Screen(ctx context.Context, caller Caller, name string) bool {
	c, ok, err := r.lookupFor(ctx, caller, name)
	if err != nil || !ok {
		r.deny(ctx, caller, "tool", name, ReasonUnknown)
		return true
	}
	return r.screen(ctx, caller, "tool", name, c.runsWhileDeleting(), c.Requires)
}

func (r *Registry) screen(ctx context.Context, caller Caller, surface, name string, readOnly bool, req Requirement) bool {
	state := r.stateDenial(caller, readOnly, publicTool(surface, req))
	hidden := r.hiddenBy(ctx, caller, toolName(surface, name), req)
	if hidden == "" && state != ReasonUnauthenticated {
		return false
	}
	r.deny(ctx, caller, surface, name, cmp.Or(state, hidden))
	return true
}
