// Package lifecycle exports and deletes whole accounts by walking the
// ownership inventory (storage.Inventory): every SQL table with an owner
// column, every blob and KV prefix, every custom surface a domain
// registered. Nothing here knows a domain's tables by name, so a domain that
// registers its surfaces is exported and deleted with no further code.
//
// Deletion marks the account deleting first (every mutation boundary then
// refuses writes, and no call of the account gets a write lease), waits
// until the calls already running that may write (their write leases, see
// WriteLeases) have ended, runs the hooks (OAuth revocation) and cleans
// every out-of-SQL surface idempotently, and deletes the SQL rows last in
// one transaction. A critical failure keeps the marker and the data, so running
// Delete again completes the job.
package lifecycle

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/storage"
)

// Hook runs during deletion, after the account is marked deleting and
// before any data is removed (for example: revoke every OAuth grant). A
// hook must be idempotent; an error stops the deletion, keeping the data.
type Hook struct {
	Name string
	Run  func(ctx context.Context, o storage.Owner) error
}

// TxHook runs inside the transaction that deletes the account's rows,
// before they go: work that must happen exactly when the account is gone
// (an event in the outbox, clearing the account's name from other users'
// rows). An error rolls the deletion's rows back, keeping the data.
type TxHook struct {
	Name string
	// Run does the work and returns how many rows it changed without
	// deleting them (references to the account cleared from other rows).
	Run func(ctx context.Context, tx bun.Tx, o storage.Owner) (updated int64, err error)
	// Updated names the surface Run's count is reported under in
	// DeletionResult.Updated ("sql:platform_feedback.reviewed_by"); empty
	// for a hook that changes no rows.
	Updated string
}

// Options configure a Service.
type Options struct {
	// Hooks run in order at every deletion attempt.
	Hooks []Hook
	// TxHooks run in order inside the final deleting transaction.
	TxHooks []TxHook
	// Logger receives warnings. Default slog.Default().
	Logger *slog.Logger
	// Resumed, when set, is called after ResumeDeletions completed the
	// deletion of o (no one was there to ask for it: record it, as the
	// account holder's own deletion is recorded).
	Resumed func(ctx context.Context, o storage.Owner)
	// WriterWait bounds how long a deletion waits, once the account is
	// marked, for the calls that may still write its data (their write
	// leases) to end before it removes anything; when some are still live
	// after it, the deletion stops with the stage "active writers",
	// keeping the marker and the data for a retry. Default: the store's
	// WriteLeaseTTL plus storage.WriteLeaseSkew plus a second, by which
	// every lease has ended (none is renewed once the account is marked).
	WriterWait time.Duration
}

// Service exports and deletes accounts.
type Service struct {
	store    *storage.Store
	inv      *storage.Inventory
	accounts *accounts.Service
	opts     Options

	mu      sync.Mutex // guards the hooks AddHooks and AddTxHooks append
	hooks   []Hook
	txHooks []TxHook
}

// New returns a Service over the given inventory.
func New(store *storage.Store, inv *storage.Inventory, acc *accounts.Service, opts Options) *Service {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.WriterWait <= 0 {
		opts.WriterWait = store.WriteLeaseTTL() + storage.WriteLeaseSkew + time.Second
	}
	return &Service{store: store, inv: inv, accounts: acc, opts: opts,
		hooks: slices.Clone(opts.Hooks), txHooks: slices.Clone(opts.TxHooks)}
}

// AddHooks appends hooks to those every deletion attempt runs, after
// Options.Hooks and those added before, in order: a domain wired after
// the Service revokes what it granted. Add them before serving.
func (s *Service) AddHooks(hooks ...Hook) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hooks = append(s.hooks, hooks...)
}

// AddTxHooks appends hooks to those the transaction deleting an
// account's rows runs, after Options.TxHooks and those added before, in
// order: a domain wired after the Service publishes or clears what the
// account's going changes. Add them before serving.
func (s *Service) AddTxHooks(hooks ...TxHook) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.txHooks = append(s.txHooks, hooks...)
}

// deletionHooks returns the hooks of a deletion attempt.
func (s *Service) deletionHooks() ([]Hook, []TxHook) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.hooks), slices.Clone(s.txHooks)
}

// UsersTable is how the account row itself appears in the inventory:
// owned through its own id, password hash redacted. Register it first so
// deletion removes it last.
var UsersTable = storage.Table{Name: "users", OwnerColumn: "id", KeyColumn: "id", Redact: []string{"password_hash"}}

// RegisterInventory registers the account tables defined by enclave's own
// migrations that belong to no other domain: the account's row, its roles
// and its write leases.
func RegisterInventory(inv *storage.Inventory) error {
	return errors.Join(
		inv.AddTable(UsersTable),
		inv.AddTable(storage.Table{Name: "user_roles", KeyColumn: "role_name"}),
		inv.AddTable(WriteLeasesTable),
	)
}

// DeletionResult says what a deletion removed and what needs attention.
type DeletionResult struct {
	// Completed is true when the account is gone.
	Completed bool `json:"completed"`
	// Deleted counts removed items per surface ("sql:notes", "blob:notes",
	// "kv:notes", "custom:mailbox").
	Deleted map[string]int64 `json:"deleted"`
	// Updated counts rows kept but changed, per surface: references to the
	// account cleared from other accounts' rows (TxHook.Updated).
	Updated map[string]int64 `json:"updated,omitempty"`
}

// DeleteError is the error of a deletion that stopped before the account
// was gone: Stage says where ("mark deleting", "active writers", "hook
// NAME", "blob DOMAIN", "custom NAME", "kv DOMAIN", "rows"), for the audit
// log and operators; Err is the cause. "active writers" (calls that may
// write still ran after Options.WriterWait) removed nothing.
type DeleteError struct {
	Stage string
	Err   error
}

func (e *DeleteError) Error() string { return "lifecycle: delete: " + e.Stage + ": " + e.Err.Error() }
func (e *DeleteError) Unwrap() error { return e.Err }

// FailureClass names what stopped a deletion in words fit for an audit
// row: the stage and, for a deadline or cancellation, that; never the
// cause's text (which may name hosts, paths or SQL).
func FailureClass(err error) string {
	stage := "unknown"
	if de := (*DeleteError)(nil); errors.As(err, &de) {
		stage = de.Stage
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return stage + " (timed out)"
	case errors.Is(err, context.Canceled):
		return stage + " (cancelled)"
	}
	return stage + " (failed)"
}

// Delete deletes the account of o. It refuses (accounts.ErrLastAdmin) when
// o is the last active admin. On a critical failure it returns the partial result
// and an error; the account stays marked deleting with its data for a retry.
func (s *Service) Delete(ctx context.Context, o storage.Owner) (DeletionResult, error) {
	return s.delete(ctx, o, false)
}

// errNotResumable stops a resumed deletion of an account that is no longer
// one to finish: suspended (a suspension freezes the deletion), or no
// longer marked deleting.
var errNotResumable = errors.New("lifecycle: the account's deletion may not be resumed now")

// delete is Delete. When resuming (the deletion-resume lane, acting
// without the account holder), it only finishes a deletion already
// started: an account that is suspended or not marked deleting is left
// alone (errNotResumable), checked before anything is removed and again,
// with the row locked, before the SQL rows go.
func (s *Service) delete(ctx context.Context, o storage.Owner, resuming bool) (DeletionResult, error) {
	res := DeletionResult{Deleted: map[string]int64{}}
	if _, err := s.accounts.Identity.UserByID(ctx, o.ID); err != nil {
		return res, fmt.Errorf("lifecycle: delete: %w", err)
	}
	if resuming {
		// Read on the primary, not a replica that may not have the
		// suspension yet.
		if err := s.checkAccount(ctx, s.store.DB, o.ID, true, false); err != nil {
			return res, err
		}
	}
	// The last active admin keeps their account: marking it deleting is
	// refused atomically. Roles, like every other row, are removed only by
	// the final transaction, so a deletion that fails midway leaves them.
	if _, err := s.accounts.Lifecycle.MarkDeleting(ctx, o.ID); err != nil {
		return res, &DeleteError{Stage: "mark deleting", Err: err}
	}
	// Writer fencing: no call of the account gets a write lease from now
	// on, and those taken before are ended (here at once, on other
	// replicas at their next renewal). Before anything is removed, wait
	// until each has been released or has run out, so that nothing a call
	// writes lands after the clean-up (a call whose lease ended is refused
	// its writes). Nothing is removed yet: a failure here keeps the
	// account, marked, for a retry.
	if err := s.store.FenceWriters(ctx, o, s.opts.WriterWait); err != nil {
		return res, &DeleteError{Stage: "active writers", Err: err}
	}
	hooks, txHooks := s.deletionHooks()
	for _, h := range hooks {
		if err := h.Run(ctx, o); err != nil {
			return res, &DeleteError{Stage: "hook " + h.Name, Err: err}
		}
	}
	for _, p := range s.inv.BlobPrefixes() {
		n, err := storage.DeleteBlobs(ctx, s.store.Bucket, o, p)
		res.Deleted["blob:"+p.Domain] += n
		if err != nil {
			return res, &DeleteError{Stage: "blob " + p.Domain, Err: err}
		}
	}
	for _, c := range s.inv.Customs() {
		n, err := c.Delete(ctx, o)
		res.Deleted["custom:"+c.Name] += n
		if err != nil {
			return res, &DeleteError{Stage: "custom " + c.Name, Err: err}
		}
	}
	// KV entries have no expiry of their own: one left behind would
	// outlive the account, so a failure keeps the account for a retry like
	// any other surface.
	for _, p := range s.inv.KVPrefixes() {
		n, err := storage.DeleteKV(ctx, s.store.KV, o, p)
		res.Deleted["kv:"+p.Domain] += n
		if err != nil {
			return res, &DeleteError{Stage: "kv " + p.Domain, Err: err}
		}
	}
	err := s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		// The account row is locked first, so that two deletions of one
		// account (the lane and the holder's retry) queue instead of
		// deadlocking over the rows they both delete.
		if err := s.checkAccount(ctx, tx, o.ID, resuming, true); err != nil {
			return err
		}
		updated := map[string]int64{}
		for _, h := range txHooks {
			n, err := h.Run(ctx, tx, o)
			if err != nil {
				return fmt.Errorf("%s: %w", h.Name, err)
			}
			if h.Updated != "" {
				updated[h.Updated] += n
			}
		}
		if len(updated) > 0 {
			res.Updated = updated // dropped below if the transaction fails
		}
		counts, err := s.inv.DeleteRows(ctx, tx, o)
		if err != nil {
			return err
		}
		for table, n := range counts {
			res.Deleted["sql:"+table] += n
		}
		// Whatever the inventory holds, the account row goes last.
		r, err := tx.NewDelete().Table("users").Where("id = ?", o.ID).Exec(ctx)
		if err != nil {
			return err
		}
		n, _ := r.RowsAffected()
		res.Deleted["sql:users"] += n
		return nil
	})
	if err != nil {
		res.Updated = nil // rolled back with the rows
		return res, &DeleteError{Stage: "rows", Err: err}
	}
	res.Completed = true
	s.opts.Logger.InfoContext(ctx, "lifecycle: account deleted", "user_id", o.ID, "at", time.Now().UTC())
	return res, nil
}

// checkAccount reads the account's state on db and, when resuming,
// returns errNotResumable for an account that is suspended or not marked
// deleting. With lock (inside the deleting transaction) it locks the row
// (FOR UPDATE on PostgreSQL; SQLite has one writer), so that a suspension
// that landed while the other surfaces were cleaned keeps the account's
// rows.
func (s *Service) checkAccount(ctx context.Context, db bun.IDB, userID int64, resuming, lock bool) error {
	q := db.NewSelect().Table("users").Column("suspended_at", "deleting_at").Where("id = ?", userID)
	if lock && s.store.Dialect() == storage.Postgres {
		q = q.For("UPDATE")
	}
	var suspended, deleting sql.NullTime
	if err := q.Scan(ctx, &suspended, &deleting); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			if !lock {
				return accounts.ErrNotFound
			}
			return nil // a concurrent deletion finished first: nothing left to do
		}
		return err
	}
	if resuming && (suspended.Valid || !deleting.Valid) {
		return errNotResumable
	}
	return nil
}

// ResumeDeletions finishes, one by one, the deletions of accounts marked
// deleting for longer than grace (a store failure or a crash stopped
// them; Delete is idempotent). It never starts a deletion, and it leaves
// suspended accounts alone: a suspension freezes the deletion, as it
// does for the account holder. A deletion that fails does not stop the
// pass (the next pass retries it); it returns how many it completed and
// the failures. enclave's server runs it as the "deletion-resume" lane.
func (s *Service) ResumeDeletions(ctx context.Context, grace time.Duration) (int, error) {
	users, err := s.accounts.Lifecycle.DeletingAccounts(ctx, time.Now().Add(-grace), 100)
	if err != nil {
		return 0, fmt.Errorf("lifecycle: resume deletions: %w", err)
	}
	done := 0
	var errs []error
	for _, u := range users {
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
		_, err := s.delete(ctx, storage.Owner{ID: u.ID, StableID: u.StableID}, true)
		switch {
		case errors.Is(err, errNotResumable), errors.Is(err, accounts.ErrNotFound):
			continue // frozen, or finished meanwhile by its holder's retry
		case err != nil:
			errs = append(errs, fmt.Errorf("lifecycle: resume deletion of user %d: %w", u.ID, err))
			continue
		}
		s.opts.Logger.InfoContext(ctx, "lifecycle: interrupted deletion completed", "user_id", u.ID)
		if s.opts.Resumed != nil {
			s.opts.Resumed(ctx, storage.Owner{ID: u.ID, StableID: u.StableID})
		}
		done++
	}
	return done, errors.Join(errs...)
}
