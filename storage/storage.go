package storage

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/uptrace/bun"
	"gocloud.dev/blob"
	"gocloud.dev/docstore"
	"gocloud.dev/pubsub"
	"gocloud.dev/secrets"
)

// Config says where each store lives. Every zero value is an embedded default
// under DataDir.
type Config struct {
	// DataDir holds the default SQLite file, blob directory and keeper key.
	// Default "enclave-data" (relative to the working directory).
	DataDir string

	// DatabaseURL is sqlite://PATH or postgres://USER:PASS@HOST/DB?….
	// Default sqlite://<DataDir>/enclave.db.
	DatabaseURL string

	// BlobURL is any gocloud.dev/blob URL. Default file://<DataDir>/blobs.
	// For file:// URLs the directory is created and temporary files are kept
	// beside the objects (no_tmp_dir), so renames never cross filesystems.
	BlobURL string

	// KVURL is a gocloud.dev/docstore collection URL whose key field is
	// "key" (for example mem://NAME/key, or a cloud collection). Default: a
	// private in-memory collection. A file:///PATH URL is an in-memory
	// collection saved to PATH on Close, without fsync: a cache that survives
	// clean restarts, nothing more. Authoritative state lives in SQL.
	KVURL string

	// QueueURL is a gocloud.dev/pubsub topic URL. Default: an in-process
	// queue private to this Store (mem://enclave-<random>). In-memory queues
	// lose undelivered messages on exit and do not reach other replicas; the
	// SQL outbox that feeds the queue is what makes delivery durable.
	QueueURL string
	// QueueSubscriptionURL is the subscription to receive from. Default: QueueURL,
	// which is right for mem:// and for drivers whose topic and subscription
	// share a URL.
	QueueSubscriptionURL string

	// KeeperURL is a gocloud.dev/secrets keeper URL. Default: a local
	// AES-256 key generated on first start into <DataDir>/keeper.key (mode
	// 0600) and reused afterwards. "base64key://" with no key means the same.
	KeeperURL string

	// WriteLeaseTTL is how long an account write lease lasts between
	// renewals (see Store.WriteLease): an account's deletion waits at most
	// this long, plus WriteLeaseSkew, for a call that does not stop.
	// Default DefaultWriteLeaseTTL.
	WriteLeaseTTL time.Duration

	// Logger receives warnings from opening and closing. Default slog.Default().
	Logger *slog.Logger
}

// DefaultDataDir is the data directory used when Config.DataDir is empty.
const DefaultDataDir = "enclave-data"

// KVKeyField is the name of the key field in every KV document.
const KVKeyField = "key"

// WithDefaults returns c with every empty field set to its documented default.
func (c Config) WithDefaults() Config {
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir
	}
	if c.DatabaseURL == "" {
		c.DatabaseURL = "sqlite://" + filepath.Join(c.DataDir, "enclave.db")
	}
	if c.BlobURL == "" {
		c.BlobURL = fileURL(filepath.Join(c.DataDir, "blobs"))
	}
	if c.QueueURL == "" {
		c.QueueURL = "mem://enclave-" + rand.Text()
	}
	if c.QueueSubscriptionURL == "" {
		c.QueueSubscriptionURL = c.QueueURL
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Store holds the open stores. Its fields are safe for concurrent use.
type Store struct {
	// DB is the primary SQL handle: use it for writes and transactions.
	// On SQLite it is a single connection that takes the write lock at BEGIN,
	// so write transactions queue instead of failing with "database is
	// locked". Never use DB from inside a transaction on DB (use the tx).
	DB *bun.DB
	// Reader is a read-only pool. On SQLite it is a separate pool of
	// connections that read concurrently with the writer (WAL); on PostgreSQL
	// it is the same handle as DB.
	Reader *bun.DB

	Bucket       *blob.Bucket
	KV           *docstore.Collection
	Topic        *pubsub.Topic
	Subscription *pubsub.Subscription
	Keeper       *secrets.Keeper

	dialect Dialect
	closers []func() error
	// readSlots admits hot-path reads to the read pool first come, first
	// served (see ReadSlot); its capacity is the pool's size.
	readSlots chan struct{}
	// leaseTTL is Config.WriteLeaseTTL (see WriteLeaseTTL).
	leaseTTL time.Duration
	// leases are the write leases this process holds (see WriteLease).
	leases leaseSet
}

// Dialect names the SQL database in use.
type Dialect string

const (
	SQLite   Dialect = "sqlite"
	Postgres Dialect = "postgres"
)

// Open opens every store named by cfg. On error nothing stays open.
func Open(ctx context.Context, cfg Config) (_ *Store, err error) {
	cfg = cfg.WithDefaults()
	if err := cfg.checkDrivers(); err != nil {
		return nil, err
	}
	s := &Store{leaseTTL: cfg.WriteLeaseTTL}
	defer func() {
		if err != nil {
			_ = s.Close()
		}
	}()

	if err := s.openSQL(ctx, cfg); err != nil {
		return nil, err
	}
	s.onClose(s.dropWriteLeases) // before the database closes
	if s.Bucket, err = openBucket(ctx, cfg.BlobURL); err != nil {
		return nil, err
	}
	s.onClose(s.Bucket.Close)
	if s.KV, err = openKV(ctx, cfg.KVURL); err != nil {
		return nil, err
	}
	s.onClose(s.KV.Close)
	// The subscription opens right after the topic, before anything can be
	// sent: the in-memory driver drops messages sent while no subscription
	// exists.
	if s.Topic, err = pubsub.OpenTopic(ctx, cfg.QueueURL); err != nil {
		return nil, fmt.Errorf("storage: open queue topic %s: %w", redactURL(cfg.QueueURL), err)
	}
	topic := s.Topic
	s.onClose(func() error { return topic.Shutdown(context.Background()) })
	if s.Subscription, err = pubsub.OpenSubscription(ctx, cfg.QueueSubscriptionURL); err != nil {
		return nil, fmt.Errorf("storage: open queue subscription %s: %w", redactURL(cfg.QueueSubscriptionURL), err)
	}
	sub := s.Subscription
	s.onClose(func() error { return sub.Shutdown(context.Background()) })
	if s.Keeper, err = openKeeper(ctx, cfg.KeeperURL, cfg.DataDir, cfg.Logger); err != nil {
		return nil, err
	}
	s.onClose(s.Keeper.Close)
	return s, nil
}

func (s *Store) onClose(f func() error) { s.closers = append(s.closers, f) }

// Dialect reports which SQL database the store uses.
func (s *Store) Dialect() Dialect { return s.dialect }

// Ping reports whether the SQL database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.DB.PingContext(ctx); err != nil {
		return fmt.Errorf("storage: ping: %w", err)
	}
	return nil
}

// Close closes every store, newest first, and reports every failure.
func (s *Store) Close() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		if err := s.closers[i](); err != nil {
			errs = append(errs, err)
		}
	}
	s.closers = nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("storage: close: %w", err)
	}
	return nil
}
