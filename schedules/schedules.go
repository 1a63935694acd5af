// Package schedules runs an embedder's periodic work.
//
// A Schedule runs once per period across every replica: each replica runs
// the scheduler, and the one that wins the period's SQL lease runs the
// tick (a replica that dies holding it loses it when the period ends). The
// first tick comes shortly after start, after a random delay of up to a
// tenth of the period, so replicas started together spread out.
//
// A tick acts for users only through Tick.Invoke, which runs a capability
// through the registry as a non-interactive caller: roles are loaded fresh,
// suspended and deleting accounts are refused, and capabilities marked
// InteractiveOnly refuse it. Get the Set from enclave.Server.Schedules and
// add every schedule before Run.
package schedules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
)

// LanePrefix starts the lease name of every embedder schedule, keeping them
// apart from enclave's own periodic lanes.
const LanePrefix = "schedule:"

// InvokeFunc runs a capability for a user as a non-interactive caller; the
// server provides it (see enclave.Server.InvokeBackground).
type InvokeFunc func(ctx context.Context, userID, capability string, args json.RawMessage) (capabilities.Result, error)

// Schedule is one periodic job.
type Schedule struct {
	// Name identifies the schedule across replicas: a lowercase name of
	// letters, digits, '_', '-' and '.'.
	Name string
	// Every is the period, at least one second.
	Every time.Duration
	// Run does the work. Its context ends when the server stops or after
	// Every, whichever is first. An error is logged; the next period runs
	// as usual.
	Run func(ctx context.Context, t Tick) error
}

// Tick is what a schedule's Run receives.
type Tick struct {
	// Name is the schedule's name.
	Name string
	// At is when this tick started.
	At time.Time

	invoke InvokeFunc
}

// Invoke runs a capability as the user with stable id userID, through the
// registry, as a non-interactive caller. args is marshalled to JSON (nil
// means no arguments).
func (t Tick) Invoke(ctx context.Context, userID, capability string, args any) (capabilities.Result, error) {
	if t.invoke == nil {
		return capabilities.Result{}, errors.New("schedules: no invoker configured")
	}
	var raw json.RawMessage
	if args != nil {
		b, err := json.Marshal(args)
		if err != nil {
			return capabilities.Result{}, fmt.Errorf("schedules: encode arguments: %w", err)
		}
		raw = b
	}
	return t.invoke(ctx, userID, capability, raw)
}

// Lane is a schedule as the server's scheduler runs it.
type Lane struct {
	Name  string
	Every time.Duration
	Run   func(ctx context.Context) error
}

var scheduleName = regexp.MustCompile(`^[a-z][a-z0-9_.-]{0,63}$`)

// Set holds the registered schedules. It is safe for concurrent use.
type Set struct {
	invoke InvokeFunc

	mu        sync.Mutex
	schedules []Schedule
}

// New returns an empty set whose ticks invoke capabilities through invoke.
// Embedders do not call it: enclave.New builds the server's set.
func New(invoke InvokeFunc) *Set { return &Set{invoke: invoke} }

// Add registers schedules. A bad name, a period under a second, a nil Run
// or a name added twice is refused, and then none is added.
func (s *Set) Add(schedules ...Schedule) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	for _, sc := range s.schedules {
		seen[sc.Name] = true
	}
	for _, sc := range schedules {
		switch {
		case !scheduleName.MatchString(sc.Name):
			return fmt.Errorf("schedules: name %q: want a lowercase name (letters, digits, _ - .)", sc.Name)
		case sc.Every < time.Second:
			return fmt.Errorf("schedules: %s: period %v is under a second", sc.Name, sc.Every)
		case sc.Run == nil:
			return fmt.Errorf("schedules: %s: nil Run", sc.Name)
		case seen[sc.Name]:
			return fmt.Errorf("schedules: %s: added twice", sc.Name)
		}
		seen[sc.Name] = true
	}
	s.schedules = append(s.schedules, schedules...)
	return nil
}

// Lanes returns the registered schedules as the server's scheduler runs
// them, each under the lease name LanePrefix+Name.
func (s *Set) Lanes() []Lane {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Lane, 0, len(s.schedules))
	for _, sc := range s.schedules {
		out = append(out, Lane{Name: LanePrefix + sc.Name, Every: sc.Every, Run: func(ctx context.Context) error {
			return sc.Run(ctx, Tick{Name: sc.Name, At: time.Now().UTC(), invoke: s.invoke})
		}})
	}
	return out
}
