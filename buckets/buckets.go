package buckets

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
)

// Defaults of Options, and the fixed bounds of one entry.
const (
	DefaultMaxBytes = 100 << 20
	DefaultMaxKeys  = 100_000
	// MaxValueBytes bounds one value (its JSON text).
	MaxValueBytes = 1 << 20
	// MaxKeyBytes bounds one key.
	MaxKeyBytes = 512
	// MaxStorageIDBytes bounds a storage id.
	MaxStorageIDBytes = 128
	// MaxTransactOps bounds the operations of one storageTransact.
	MaxTransactOps = 100
	// MaxTransactBytes bounds the values of one storageTransact together
	// (each is at most MaxValueBytes): the server holds them all at once.
	MaxTransactBytes = 8 << 20
)

// Options tune storage buckets. Every zero value is a documented default.
type Options struct {
	// Disabled turns storage buckets off (enclave.Config.Buckets): none of
	// their capabilities is registered, and code mode's storage binding
	// answers that storage is off.
	Disabled bool
	// MaxBytes is each user's budget of key and value bytes across all
	// their buckets. Default DefaultMaxBytes (100 MiB).
	MaxBytes int64
	// MaxKeys is each user's most keys across all their buckets. Default
	// DefaultMaxKeys (100,000).
	MaxKeys int64
}

// WithDefaults returns o with every zero field set to its default.
func (o Options) WithDefaults() Options {
	o.MaxBytes = cmp.Or(o.MaxBytes, DefaultMaxBytes)
	o.MaxKeys = cmp.Or(o.MaxKeys, DefaultMaxKeys)
	return o
}

// Config configures the service: Options, plus what the server provides.
// Store, Registry and Owners are required.
type Config struct {
	Options
	Store    *storage.Store
	Registry *capabilities.Registry
	Owners   capabilities.OwnerOf
	Logger   *slog.Logger
}

// Service is storage buckets. Every method takes the owner whose buckets
// it touches; capability handlers pass the caller's.
type Service struct {
	cfg    Config
	store  *storage.Store
	owners capabilities.OwnerOf
	log    *slog.Logger

	// limit is the account's plan's byte budget (SetStorageLimit).
	limit StorageLimit

	// reconcileAfter is the users.id the next Reconcile sweep starts
	// after (0: from the start).
	reconcileMu    sync.Mutex
	reconcileAfter int64
}

// New returns the service. Register its capabilities with
// Registry.Register(s.Capabilities()...) and its schedule with
// schedules.Set.Add(s.Schedule()).
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Registry == nil || cfg.Owners == nil {
		return nil, errors.New("buckets: Store, Registry and Owners are required")
	}
	if cfg.MaxBytes < 0 || cfg.MaxKeys < 0 {
		return nil, errors.New("buckets: MaxBytes and MaxKeys cannot be negative")
	}
	cfg.Options = cfg.Options.WithDefaults()
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Service{cfg: cfg, store: cfg.Store, owners: cfg.Owners, log: cfg.Logger}, nil
}

// StorageLimit returns the bytes an account may store by its plan; ok is
// false when the plan sets none (Options.MaxBytes applies).
// *quota.Plans' StorageLimit is one.
type StorageLimit func(ctx context.Context, userID int64) (limit int64, ok bool, err error)

// SetStorageLimit makes each account's budget of bytes its plan's (f),
// in place of Options.MaxBytes where the plan sets one. Call it before
// serving.
func (s *Service) SetStorageLimit(f StorageLimit) { s.limit = f }

// maxBytes is the account's budget of bytes, and whether its plan set it.
func (s *Service) maxBytes(ctx context.Context, userID int64) (int64, bool, error) {
	if s.limit == nil {
		return s.cfg.MaxBytes, false, nil
	}
	n, ok, err := s.limit(ctx, userID)
	if err != nil {
		return 0, false, fmt.Errorf("buckets: storage limit: %w", err)
	}
	if !ok {
		return s.cfg.MaxBytes, false, nil
	}
	return n, true, nil
}

func (s *Service) owner(ctx context.Context, c capabilities.Caller) (storage.Owner, error) {
	o, err := s.owners(ctx, c)
	return storage.Owner(o), err
}

// Kinds of storage ids.
const (
	KindExec    = "exec"
	KindPackage = "package"
	KindJob     = "job"
	KindNamed   = "named"
)

var (
	runIDPattern   = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	packagePattern = regexp.MustCompile(`^[a-z][a-z0-9-]{0,39}$`)
	namedPattern   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
)

// ID is a parsed storage id.
type ID struct {
	// Kind is KindExec, KindPackage, KindJob or KindNamed.
	Kind string
	// Bound is what the bucket is bound to: the run id (exec), the package
	// name (package, job); empty for a named bucket.
	Bound string
	raw   string
}

// String returns the storage id.
func (id ID) String() string { return id.raw }

// ExecStorageID returns the storage id of a code run's bucket.
func ExecStorageID(runID string) string { return "exec:" + runID }

// PackageStorageID returns the storage id of a package's bucket.
func PackageStorageID(pkg string) string { return "package:" + pkg }

// JobStorageID returns the storage id of a package job's bucket.
func JobStorageID(pkg, job string) string { return "job:" + pkg + ":" + job }

const idForms = "exec:<runId>, package:<name>, job:<package>:<job>, or a name of 1 to 64 letters, digits, '.', '_' and '-' starting with a letter or digit"

// ParseID checks a storage id against the forms of the package doc. Its
// error is a CodeInvalidInput error.
func ParseID(s string) (ID, error) {
	bad := func() (ID, error) {
		return ID{}, invalid("storageId %s is not a storage id: use %s", quote(s), idForms)
	}
	if s == "" || len(s) > MaxStorageIDBytes {
		return bad()
	}
	kind, rest, scoped := strings.Cut(s, ":")
	if !scoped {
		if !namedPattern.MatchString(s) {
			return bad()
		}
		return ID{Kind: KindNamed, raw: s}, nil
	}
	switch kind {
	case KindExec:
		if runIDPattern.MatchString(rest) {
			return ID{Kind: KindExec, Bound: rest, raw: s}, nil
		}
	case KindPackage:
		if packagePattern.MatchString(rest) {
			return ID{Kind: KindPackage, Bound: rest, raw: s}, nil
		}
	case KindJob:
		pkg, job, ok := strings.Cut(rest, ":")
		if ok && packagePattern.MatchString(pkg) && packagePattern.MatchString(job) {
			return ID{Kind: KindJob, Bound: pkg, raw: s}, nil
		}
	}
	return bad()
}

// checkKey refuses a key that is empty, longer than MaxKeyBytes, not UTF-8
// or holds NUL.
func checkKey(k string) error {
	if k == "" || len(k) > MaxKeyBytes {
		return invalid("a key is 1 to %d bytes", MaxKeyBytes)
	}
	if !utf8.ValidString(k) || strings.ContainsRune(k, 0) {
		return invalid("a key is UTF-8 text without NUL characters")
	}
	return nil
}

// checkPrefix is checkKey for a listing's prefix, which may be empty.
func checkPrefix(p string) error {
	if p == "" {
		return nil
	}
	if len(p) > MaxKeyBytes || !utf8.ValidString(p) || strings.ContainsRune(p, 0) {
		return invalid("a prefix is at most %d bytes of UTF-8 text without NUL characters", MaxKeyBytes)
	}
	return nil
}

// checkValue refuses a value that is missing, not JSON or too large.
func checkValue(v json.RawMessage) error {
	if len(v) == 0 {
		return invalid("value is required (any JSON value; null to store null)")
	}
	if len(v) > MaxValueBytes {
		return invalid("a value is at most %d KiB of JSON (this one is %d bytes)", MaxValueBytes>>10, len(v))
	}
	if !json.Valid(v) || !utf8.Valid(v) {
		return invalid("value is not valid JSON (UTF-8 text)")
	}
	return nil
}

func invalid(format string, args ...any) error {
	return capabilities.Errorf(capabilities.CodeInvalidInput, format, args...)
}

// quote quotes s for a message, shortened so that an error never echoes
// a huge input back.
func quote(s string) string {
	const max = 80
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return fmt.Sprintf("%q…", s[:cut])
	}
	return fmt.Sprintf("%q", s)
}
