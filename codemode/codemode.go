package codemode

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/cluster"
	"github.com/enclave-mcp/enclave/codemode/sandbox"
	"github.com/enclave-mcp/enclave/storage"
)

// Defaults of Config.
const (
	DefaultMaxPackages  = 100
	DefaultMaxJobs      = 10
	DefaultKeepVersions = 20
	DefaultMaxRuns      = 2000
	DefaultRunRetention = 30 * 24 * time.Hour
	// QuotaClass is the quota class of execute, packageRun and every
	// package export (the daily limit of code runs per user).
	QuotaClass = "execute"
	// DefaultDailyRuns is the daily limit of QuotaClass the server applies
	// when the operator sets none.
	DefaultDailyRuns = 1000
	// ExportPrefix starts the name of every package export's capability.
	ExportPrefix = "pkg_"
)

// Options tune code mode. Every zero value is a documented default.
type Options struct {
	// Disabled turns code mode off (enclave.Config.CodeMode; the binary's
	// --code-mode=false): none of its capabilities is registered.
	Disabled bool
	// Limits bound each run; zero fields take sandbox.DefaultLimits.
	Limits sandbox.Limits
	// PerUser and Total bound concurrent runs per user and per process;
	// further runs wait up to QueueWait, first come first served, then
	// are refused as busy. Defaults: 4, 4×GOMAXPROCS (at least 4), 10 s.
	// Runs mostly compute, but a run waiting on a host call (a fetch, a
	// slow capability) holds its slot without using a core.
	PerUser, Total int
	QueueWait      time.Duration
	// MaxPackages and MaxJobs bound a user's packages and the jobs of all
	// their packages together. Defaults 100 and 10.
	MaxPackages, MaxJobs int
	// KeepVersions is how many versions of each package retention keeps
	// (the newest; older ones and their unreferenced sources are purged).
	// Default 20.
	KeepVersions int
	// RunRetention and MaxRuns bound the run records kept per user.
	// Defaults 30 days and 2,000.
	RunRetention time.Duration
	MaxRuns      int
}

// Config configures the code mode service: Options, plus what the server
// provides. Store, Registry and Owners are required.
type Config struct {
	Options
	Store    *storage.Store
	Registry *capabilities.Registry
	Owners   capabilities.OwnerOf
	// Loader loads a caller afresh: a run re-reads its caller's account
	// state, roles and permissions as it goes (a suspension or deletion
	// stops its writes within refreshEvery), and package jobs load their
	// owner. Nil: runs keep the caller they started with, and jobs fail.
	Loader capabilities.CallerLoader
	// Bus, when set, tells the other replicas that a user's exports
	// changed, so their tools/list_changed notices and visibility keys
	// follow at once. Nil: this process only.
	Bus    cluster.Bus
	Logger *slog.Logger
}

// Retention returns the retention windows of these options.
func (o Options) Retention() RetentionOptions {
	return RetentionOptions{KeepVersions: o.KeepVersions, MaxRuns: o.MaxRuns, RunAge: o.RunRetention}
}

// Service is code mode: execute, packages, their exports and jobs, runs.
type Service struct {
	cfg    Config
	store  *storage.Store
	reg    *capabilities.Registry
	owners capabilities.OwnerOf
	gate   *sandbox.Gate
	log    *slog.Logger

	// generations counts, per stable user id, the changes to that user's
	// set of exports seen by this process (see Provider.Generation).
	generations sync.Map      // string → *atomic.Uint64
	epoch       atomic.Uint64 // bus gaps seen
	unfollow    func()
	exports     exportCache
	sources     sourceCache
	recorder    recorder
	bindings    bindingCache
}

// New returns the service. Register its capabilities with Capabilities and
// its provider with Registry.AddProvider(ExportPrefix, s.Provider()).
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Registry == nil || cfg.Owners == nil {
		return nil, errors.New("codemode: Store, Registry and Owners are required")
	}
	cfg.Limits = cfg.Limits.WithDefaults()
	cfg.MaxPackages = cmp.Or(cfg.MaxPackages, DefaultMaxPackages)
	cfg.MaxJobs = cmp.Or(cfg.MaxJobs, DefaultMaxJobs)
	cfg.KeepVersions = cmp.Or(cfg.KeepVersions, DefaultKeepVersions)
	cfg.MaxRuns = cmp.Or(cfg.MaxRuns, DefaultMaxRuns)
	cfg.RunRetention = cmp.Or(cfg.RunRetention, DefaultRunRetention)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Service{
		cfg: cfg, store: cfg.Store, reg: cfg.Registry, owners: cfg.Owners, log: cfg.Logger,
		gate: sandbox.NewGate(cfg.PerUser, cmp.Or(cfg.Total, max(4, 4*runtime.GOMAXPROCS(0))), cfg.QueueWait),
	}
	s.exports.init()
	s.sources.init()
	s.recorder.s = s
	s.recorder.arrived = make(chan struct{}, 1)
	s.bindings.m = map[uint64][]string{}
	s.follow()
	return s, nil
}

// Limits returns the limits each run has.
func (s *Service) Limits() sandbox.Limits { return s.cfg.Limits }

// exportsTopic carries, on the cluster bus, the stable id of a user whose
// exports changed.
const exportsTopic = "codemode.exports"

// changed records that userID's set of exports changed, here and, through
// the bus, on every replica.
func (s *Service) changed(ctx context.Context, userID string) {
	if s.cfg.Bus == nil {
		s.bump(userID)
		return
	}
	// The bus delivers to this replica's subscriber too, even when it fails.
	if err := s.cfg.Bus.Publish(ctx, exportsTopic, []byte(userID)); err != nil {
		s.epoch.Add(1) // the others may not hear of it: treat it as a gap here too
		s.log.WarnContext(ctx, "codemode: telling the other replicas of changed exports failed", "err", err)
	}
}

func (s *Service) bump(userID string) {
	g, _ := s.generations.LoadOrStore(userID, new(atomic.Uint64))
	g.(*atomic.Uint64).Add(1)
}

// generation is userID's count of changes seen here, plus the count of bus
// gaps (after a gap, any user's exports may have changed unseen).
func (s *Service) generation(userID string) uint64 {
	n := s.epoch.Load()
	if g, ok := s.generations.Load(userID); ok {
		n += g.(*atomic.Uint64).Load()
	}
	return n
}

// follow listens to the other replicas' export changes until Close.
func (s *Service) follow() {
	if s.cfg.Bus == nil {
		return
	}
	stopSub := s.cfg.Bus.Subscribe(exportsTopic, func(_ string, payload []byte) { s.bump(string(payload)) })
	stopGap := s.cfg.Bus.OnGap(func() { s.epoch.Add(1) })
	s.unfollow = func() { stopSub(); stopGap() }
}

// inRunKey marks a context inside a run: code cannot start another run.
type inRunKey struct{}

func inRun(ctx context.Context) bool { return ctx.Value(inRunKey{}) != nil }

var errNested = capabilities.Errorf(capabilities.CodeUnsupported,
	"code cannot start another run: import the package (import {f} from \"pkg:name\") instead of calling execute, packageRun or an export")
