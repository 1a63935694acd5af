// Package quota is enclave's default capability quota: per-user daily call
// limits per capability class, shared by every replica through SQL.
//
// Each replica counts calls in memory and flushes the counts to the
// quota_usage table every Limits.Flush (default one second), in one
// transaction per flush; each flush also reads back the totals every
// replica has written (the UPSERT returns them). A call is refused when the
// reconciled total plus this replica's unflushed count reaches the limit.
// The hot path is a map lookup; SQL is read synchronously only the first
// time a replica sees a user's class on a given day.
//
// Accuracy: a replica learns of other replicas' calls at its next flush,
// and they write theirs at their next flush, so a user spreading calls over
// R replicas can exceed a limit by at most the calls they make in about two
// flush intervals on the other R-1 replicas. With one replica the limit is
// exact. Counts not yet flushed when a process dies are lost (at most one
// flush interval of calls), in the user's favour.
//
// Days are UTC; a refusal says when the next day starts (the
// capabilities.Error carries it in RetryAfter). Counters are kept for
// seven days (Purge), listed in the user's export and deleted with the
// account.
package quota

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/internal/background"
	"github.com/enclave-mcp/enclave/storage"
)

// DefaultClass is the class of every capability Limits.Classes does not
// name.
const DefaultClass = "default"

// KeepDays is how many daily counters (today included) Purge keeps.
const KeepDays = 7

// Limits configures the quota. The zero value limits nothing.
type Limits struct {
	// Daily maps a class to the calls a user may make per UTC day to the
	// capabilities of that class. A class not listed is unlimited.
	Daily map[string]int64
	// Classes maps a capability name to its class (a name ending in "*"
	// is a prefix: "pkg_*"); every other capability is in DefaultClass.
	Classes map[string]string
	// Flush is how often counts go to SQL and totals come back. Default 1 s.
	Flush time.Duration
}

// WithDefaultClass returns a copy of l in which each capability name (a
// name ending in "*" is a prefix) not already given a class is in class,
// and class is limited to daily calls a day unless l already sets its
// limit: how a domain declares the quota its capabilities fall under
// while an operator's --quota settings still win. l is not changed.
func (l Limits) WithDefaultClass(class string, daily int64, names ...string) Limits {
	classes := maps.Clone(l.Classes)
	if classes == nil {
		classes = map[string]string{}
	}
	for _, name := range names {
		if _, set := classes[name]; !set {
			classes[name] = class
		}
	}
	limits := maps.Clone(l.Daily)
	if limits == nil {
		limits = map[string]int64{}
	}
	if _, set := limits[class]; !set {
		limits[class] = daily
	}
	l.Classes, l.Daily = classes, limits
	return l
}

// Enabled reports whether any class has a limit.
func (l Limits) Enabled() bool { return len(l.Daily) > 0 }

// ClassOf returns the class of a capability: its entry in Classes, else
// the class of the longest entry ending in "*" that prefixes its name
// ("pkg_*" names every package export), else DefaultClass.
func (l Limits) ClassOf(capability string) string {
	if c, ok := l.Classes[capability]; ok {
		return c
	}
	class, best := DefaultClass, 0
	for pattern, c := range l.Classes {
		prefix, wild := strings.CutSuffix(pattern, "*")
		if wild && len(prefix) >= best && strings.HasPrefix(capability, prefix) {
			class, best = c, len(prefix)
		}
	}
	return class
}

// Meter counts calls and refuses those over the limit. It implements
// capabilities.Quota. Run must be running for counts to reach SQL.
type Meter struct {
	store *storage.Store
	lim   Limits
	log   *slog.Logger
	now   func() time.Time

	flushMu sync.Mutex // one flush at a time
	mu      sync.Mutex
	entries map[key]*entry
	plans   *Plans // nil: no plans

	// alerting runs the plan alerts being recorded in the background;
	// Close waits for them, so none writes after its server closed the
	// store, and none starts after it.
	alerting background.Group
}

// SetPlans makes the meter enforce the accounts' plans as well (call it
// before the meter is used): each of Meters is refused once the day's or
// the week's use reaches the plan's limit, whichever comes first, and
// crossings of 80 % and 100 % of a limit are reported through plans'
// OnAlert once per window.
func (m *Meter) SetPlans(p *Plans) {
	m.plans = p
	if p != nil {
		p.now = func() time.Time { return m.now() }
	}
}

var _ capabilities.Quota = (*Meter)(nil)

type key struct{ user, class, day string }

type entry struct {
	mu      sync.Mutex
	loaded  bool
	gone    bool  // the user no longer exists
	owner   int64 // users.id
	base    int64 // total in SQL at the last reconciliation
	week    int64 // the earlier days of this week, in SQL (with plans)
	pending int64 // counted here, not yet flushed
	flying  int64 // taken by a flush that has not finished
	touched bool  // used since the last flush
	evicted bool  // removed from the map: look again
}

// New returns a meter over store's database.
func New(store *storage.Store, lim Limits, log *slog.Logger) *Meter {
	if lim.Flush <= 0 {
		lim.Flush = time.Second
	}
	if log == nil {
		log = slog.Default()
	}
	return &Meter{store: store, lim: lim, log: log, now: func() time.Time { return time.Now().UTC() }, entries: map[key]*entry{}}
}

// Allow counts a call of capability by caller, or refuses it with a
// CodeQuotaExceeded error saying when the quota resets.
func (m *Meter) Allow(ctx context.Context, caller capabilities.Caller, capability string) error {
	class := m.lim.ClassOf(capability)
	limit, ok := m.lim.Daily[class]
	if !ok && (m.plans == nil || !slices.Contains(Meters, class)) {
		return nil
	}
	return m.allow(ctx, caller, class, limit, ok)
}

// AllowClass counts one use of class by caller against limit uses per UTC
// day, or refuses it like Allow. It is for meters that are not capability
// calls (the outbound gateway counts each request it sends under its own
// class). A limit of zero refuses every use.
func (m *Meter) AllowClass(ctx context.Context, caller capabilities.Caller, class string, limit int64) error {
	return m.allow(ctx, caller, class, limit, true)
}

func (m *Meter) allow(ctx context.Context, caller capabilities.Caller, class string, limit int64, limited bool) error {
	if caller.UserID == "" {
		return nil
	}
	now := m.now()
	k := key{caller.UserID, class, now.Format(time.DateOnly)}
	var e *entry
	for {
		m.mu.Lock()
		e = m.entries[k]
		if e == nil {
			e = &entry{}
			m.entries[k] = e
		}
		m.mu.Unlock()
		e.mu.Lock()
		if !e.evicted {
			break
		}
		e.mu.Unlock()
	}
	defer e.mu.Unlock()
	if !e.loaded {
		if err := m.load(ctx, k, e); err != nil {
			// Fail open on a storage error: the quota protects capacity,
			// and the call still passes every authorization check.
			m.log.ErrorContext(ctx, "quota: reading the counter failed; allowing the call", "err", err)
			return nil
		}
	}
	e.touched = true
	used := e.base + e.flying + e.pending
	tomorrow := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC)
	if limited && used >= limit {
		return &capabilities.Error{
			Code:       capabilities.CodeQuotaExceeded,
			Message:    fmt.Sprintf("daily limit of %d calls to %s capabilities reached; retry after %s", limit, class, tomorrow.Format(time.RFC3339)),
			RetryAfter: tomorrow,
		}
	}
	var plan *Plan
	if m.plans != nil && !e.gone && slices.Contains(Meters, class) {
		p, err := m.plans.Of(ctx, e.owner)
		if err != nil {
			m.log.ErrorContext(ctx, "quota: reading the account's plan failed; allowing the call", "err", err)
		} else {
			plan = &p
		}
	}
	if plan != nil {
		w := plan.Of(class)
		// The week first: when both are used up, waiting for tomorrow
		// would not help.
		if w.Weekly != nil && e.week+used >= *w.Weekly {
			next := WeekStart(now).AddDate(0, 0, 7)
			return &capabilities.Error{
				Code: capabilities.CodeQuotaExceeded,
				Message: fmt.Sprintf("weekly limit of %d %s uses on plan %q reached (the week runs Monday to Sunday, UTC); retry after %s",
					*w.Weekly, class, plan.Name, next.Format(time.RFC3339)),
				RetryAfter: next,
			}
		}
		if w.Daily != nil && used >= *w.Daily {
			return &capabilities.Error{
				Code: capabilities.CodeQuotaExceeded,
				Message: fmt.Sprintf("daily limit of %d %s uses on plan %q reached (UTC day); retry after %s",
					*w.Daily, class, plan.Name, tomorrow.Format(time.RFC3339)),
				RetryAfter: tomorrow,
			}
		}
	}
	e.pending++
	if plan != nil {
		w := plan.Of(class)
		m.crossings(ctx, caller.UserID, e.owner, class, "day", k.day, w.Daily, used)
		m.crossings(ctx, caller.UserID, e.owner, class, "week", WeekStart(now).Format(time.DateOnly), w.Weekly, e.week+used)
	}
	return nil
}

// crossings reports the thresholds (80 % and 100 %) of limit that one
// more use after before crosses, in the background; Plans.alert records
// each once per window.
func (m *Meter) crossings(ctx context.Context, userID string, owner int64, class, window, period string, limit *int64, before int64) {
	if limit == nil || *limit <= 0 {
		return
	}
	for _, pct := range []int64{80, 100} {
		if before*100 < pct**limit && (before+1)*100 >= pct**limit {
			a := Alert{UserID: userID, Owner: owner, Meter: class, Window: window, Period: period, Threshold: int(pct), Limit: *limit}
			m.alerting.Go(func() { // not after Close: the alert is not recorded
				actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				defer cancel()
				if err := m.plans.alert(actx, a); err != nil {
					m.log.WarnContext(actx, "quota: recording a plan alert failed", "err", err)
				}
			})
		}
	}
}

func (m *Meter) load(ctx context.Context, k key, e *entry) error {
	var row struct {
		ID    int64 `bun:"id"`
		Calls int64 `bun:"calls"`
	}
	err := m.store.Reader.NewRaw(`SELECT u.id AS id, COALESCE(q.calls, 0) AS calls FROM users u
		LEFT JOIN quota_usage q ON q.user_id = u.id AND q.class = ? AND q.day = ?
		WHERE u.stable_user_id = ?`, k.class, k.day, k.user).Scan(ctx, &row)
	if errors.Is(err, sql.ErrNoRows) {
		e.loaded, e.gone = true, true
		return nil
	}
	if err != nil {
		return err
	}
	e.loaded, e.owner, e.base = true, row.ID, row.Calls
	if m.plans != nil && slices.Contains(Meters, k.class) {
		day, err := time.Parse(time.DateOnly, k.day)
		if err != nil {
			return err
		}
		var week int64
		if err := m.store.Reader.NewSelect().Table("quota_usage").ColumnExpr("COALESCE(SUM(calls), 0)").
			Where("user_id = ? AND class = ? AND day >= ? AND day < ?", row.ID, k.class, WeekStart(day).Format(time.DateOnly), k.day).
			Scan(ctx, &week); err != nil {
			return err
		}
		e.week = week
	}
	return nil
}

// Run flushes every Limits.Flush until ctx ends, then flushes once more.
func (m *Meter) Run(ctx context.Context) {
	t := time.NewTicker(m.lim.Flush)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := m.Flush(fctx); err != nil {
				m.log.Warn("quota: final flush", "err", err)
			}
			cancel()
			return
		case <-t.C:
		}
		if err := m.Flush(ctx); err != nil && ctx.Err() == nil {
			m.log.WarnContext(ctx, "quota: flush", "err", err)
		}
	}
}

// Close waits for the plan alerts being recorded and starts no more: call
// it before the store closes (after Run has made its last flush). A nil
// meter has none.
func (m *Meter) Close() {
	if m == nil {
		return
	}
	m.alerting.Close()
}

type flushItem struct {
	k     key
	e     *entry
	owner int64
	add   int64
}

// Flush writes the unflushed counts to SQL in one transaction and reads
// back the totals of every counter used since the last flush. Counters
// unused since the last flush, or of a past day, are forgotten.
func (m *Meter) Flush(ctx context.Context) error {
	m.flushMu.Lock()
	defer m.flushMu.Unlock()
	today := m.now().Format(time.DateOnly)
	var items []flushItem
	m.mu.Lock()
	for k, e := range m.entries {
		e.mu.Lock()
		switch {
		case e.loaded && !e.gone && (e.pending > 0 || e.touched):
			items = append(items, flushItem{k: k, e: e, owner: e.owner, add: e.pending})
			e.flying, e.pending, e.touched = e.pending, 0, false
		case e.loaded:
			// idle since the last flush (or its user is gone): forget it
			delete(m.entries, k)
			e.evicted = true
		}
		if k.day != today {
			delete(m.entries, k)
			e.evicted = true
		}
		e.mu.Unlock()
	}
	m.mu.Unlock()
	if len(items) == 0 {
		return nil
	}
	totals := make([]int64, len(items))
	found := make([]bool, len(items))
	err := m.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		for i, it := range items {
			var calls int64
			var err error
			if it.add > 0 {
				err = tx.NewRaw(`INSERT INTO quota_usage (user_id, class, day, calls)
					SELECT id, ?, ?, ? FROM users WHERE id = ?
					ON CONFLICT (user_id, class, day) DO UPDATE SET calls = quota_usage.calls + EXCLUDED.calls
					RETURNING calls`, it.k.class, it.k.day, it.add, it.owner).Scan(ctx, &calls)
			} else {
				err = tx.NewRaw(`SELECT calls FROM quota_usage WHERE user_id = ? AND class = ? AND day = ?`,
					it.owner, it.k.class, it.k.day).Scan(ctx, &calls)
			}
			switch {
			case errors.Is(err, sql.ErrNoRows):
			case err != nil:
				return err
			default:
				totals[i], found[i] = calls, true
			}
		}
		return nil
	})
	for i, it := range items {
		it.e.mu.Lock()
		it.e.flying = 0
		switch {
		case err != nil:
			it.e.pending += it.add // try again next time
			it.e.touched = true
		case found[i]:
			it.e.base = totals[i]
		case it.add > 0:
			it.e.gone = true // the account was deleted
		}
		it.e.mu.Unlock()
	}
	if err != nil {
		return fmt.Errorf("quota: flush: %w", err)
	}
	return nil
}

// Purge removes counters older than KeepDays days and returns how many.
func Purge(ctx context.Context, db bun.IDB, now time.Time) (int64, error) {
	cutoff := now.UTC().AddDate(0, 0, -(KeepDays - 1)).Format(time.DateOnly)
	res, err := db.NewDelete().Table("quota_usage").Where("day < ?", cutoff).Exec(ctx)
	if err != nil {
		return 0, fmt.Errorf("quota: purge: %w", err)
	}
	return res.RowsAffected()
}

// Usage is one daily counter.
type Usage struct {
	Class string `json:"class"`
	Day   string `json:"day"`
	Calls int64  `json:"calls"`
}

// UsageOf returns the SQL-reconciled counters of the user with users.id
// owner, newest day first.
func UsageOf(ctx context.Context, db bun.IDB, owner int64) ([]Usage, error) {
	var out []Usage
	err := db.NewSelect().Table("quota_usage").Column("class", "day", "calls").
		Where("user_id = ?", owner).Order("day DESC", "class").Scan(ctx, &out)
	if err != nil {
		return nil, fmt.Errorf("quota: usage: %w", err)
	}
	return out, nil
}
