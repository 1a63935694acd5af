// Package capabilitiestest has helpers for tests of code built on
// capabilities: ready-made callers and an auditor that remembers denials.
package capabilitiestest

import (
	"context"
	"sync"

	"github.com/enclave-mcp/enclave/capabilities"
)

// User returns an active, interactive caller with role user and its
// permissions, and every token scope.
func User(id string) capabilities.Caller {
	return capabilities.Caller{
		UserID: id, Username: id,
		Roles:       []string{capabilities.RoleUser},
		Permissions: roleUser(),
		AllScopes:   true, State: capabilities.AccountActive, Interactive: true,
	}
}

// Admin returns an active, interactive caller with roles user and admin.
func Admin(id string) capabilities.Caller {
	c := User(id)
	c.Roles = append(c.Roles, capabilities.RoleAdmin)
	c.Permissions = capabilities.AllPermissions()
	return c
}

func roleUser() []capabilities.Permission {
	v, _ := capabilities.NewVocabulary()
	return v.RolePermissions(capabilities.RoleUser)
}

// Auditor records denials in memory.
type Auditor struct {
	mu      sync.Mutex
	denials []capabilities.Denial
}

// RecordDenial implements capabilities.Auditor.
func (a *Auditor) RecordDenial(_ context.Context, d capabilities.Denial) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.denials = append(a.denials, d)
}

// Denials returns the denials recorded so far.
func (a *Auditor) Denials() []capabilities.Denial {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]capabilities.Denial(nil), a.denials...)
}

// Loader is a CallerLoader over a fixed map of callers.
type Loader struct {
	mu      sync.Mutex
	callers map[string]capabilities.Caller
	Err     error // returned for every load when set
}

// NewLoader returns a loader knowing callers.
func NewLoader(callers ...capabilities.Caller) *Loader {
	l := &Loader{callers: map[string]capabilities.Caller{}}
	for _, c := range callers {
		l.Set(c)
	}
	return l
}

// Set adds or replaces a caller.
func (l *Loader) Set(c capabilities.Caller) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.callers[c.UserID] = c
}

// LoadCaller implements capabilities.CallerLoader.
func (l *Loader) LoadCaller(_ context.Context, userID string) (capabilities.Caller, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.Err != nil {
		return capabilities.Caller{}, l.Err
	}
	c, ok := l.callers[userID]
	if !ok {
		return capabilities.Caller{}, capabilities.ErrUnknownUser
	}
	return c, nil
}
