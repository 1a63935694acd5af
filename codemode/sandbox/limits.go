package sandbox

import (
	"fmt"
	"time"
)

// Limits bound one run. Zero (or negative) fields take the defaults of
// DefaultLimits.
type Limits struct {
	// Memory is the most memory, in bytes, the VM may allocate; default
	// 64 MiB. The engine refuses an allocation past it with an "out of
	// memory" error; uncaught, it ends the run with the "memory" limit.
	// It also bounds the length Array methods accept (Memory/16, the most
	// elements a dense array can have), see doc.go.
	Memory int64
	// Timeout is the wall time of the whole run, host calls included;
	// default 30 s.
	Timeout time.Duration
	// Stack is the deepest the JS stack may grow, in engine stack slots:
	// about one per plain JS call, 3 to 9 per call through a built-in
	// (forEach, a getter, sort, JSON.parse's reviver). Default 5000, which
	// keeps the goroutine stack under about 16 MiB; values above MaxStack
	// are lowered to it, because Go kills the process, with no recovery,
	// when a goroutine stack passes 1 GB.
	Stack int
	// Result is the most bytes the JSON-encoded result may have; default 1 MiB.
	Result int
	// Logs is the most bytes of console output kept, counting each entry as
	// its message plus a newline; default 64 KiB. Output past it is dropped
	// and Outcome.LogsTruncated is set; it never fails the run.
	Logs int
	// HostCalls is the most host calls (capability calls, fetch and storage
	// operations together, and the Resolver's lookups and loads, once per
	// distinct import) a run may make; default 1000.
	HostCalls int
}

// Default limits, see Limits.
const (
	DefaultMemory    = 64 << 20
	DefaultTimeout   = 30 * time.Second
	DefaultStack     = 5000
	DefaultResult    = 1 << 20
	DefaultLogs      = 64 << 10
	DefaultHostCalls = 1000

	// MaxStack is the highest Stack a run gets. The goroutine stack grows
	// by about 2-3 KiB per slot, and Go aborts the process past 1 GB, at
	// about 40000 slots on arm64 (measured by modernc.org/libquickjs).
	MaxStack = 20000
)

// DefaultLimits returns the limits a run gets for the fields left zero.
func DefaultLimits() Limits {
	return Limits{
		Memory:    DefaultMemory,
		Timeout:   DefaultTimeout,
		Stack:     DefaultStack,
		Result:    DefaultResult,
		Logs:      DefaultLogs,
		HostCalls: DefaultHostCalls,
	}
}

// WithDefaults returns l with every zero or negative field set to its
// default, and Stack lowered to MaxStack.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits()
	if l.Memory <= 0 {
		l.Memory = d.Memory
	}
	if l.Timeout <= 0 {
		l.Timeout = d.Timeout
	}
	if l.Stack <= 0 {
		l.Stack = d.Stack
	}
	l.Stack = min(l.Stack, MaxStack)
	if l.Result <= 0 {
		l.Result = d.Result
	}
	if l.Logs <= 0 {
		l.Logs = d.Logs
	}
	if l.HostCalls <= 0 {
		l.HostCalls = d.HostCalls
	}
	return l
}

// byteSize formats n bytes for a message meant for people: "64 MiB",
// "1.5 KiB", "12 bytes".
func byteSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d bytes", n)
	}
	units := []string{"KiB", "MiB", "GiB", "TiB"}
	v, i := float64(n)/unit, 0
	for v >= unit && i < len(units)-1 {
		v /= unit
		i++
	}
	if v == float64(int64(v)) {
		return fmt.Sprintf("%d %s", int64(v), units[i])
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}
