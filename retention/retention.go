// Package retention declares how long every SQL table keeps its rows, and
// purges what has outlived its window.
//
// Each table has exactly one Policy:
//
//   - Age: rows whose timestamp column is older than a window (optionally
//     only those matching an extra condition) are purged;
//   - UntilAccountDeleted: rows live as long as the owner's account, and go
//     with it (the ownership inventory deletes them);
//   - Kept: rows are kept, for a stated reason (reference data, keys,
//     bookkeeping);
//   - Custom: a purge of its own (for example unverified accounts, which
//     are deleted through the account lifecycle, never with a raw DELETE).
//
// Set.Check compares the declarations with a migrated database and names
// every table without a policy and every policy without a table; enclave's
// tests run it on SQLite and PostgreSQL. Set.Markdown renders the table of
// policies that docs/data.md carries.
//
// A Runner purges in small batches, round-robin over the tables (every
// table gets one batch before any gets a second), until every table is
// drained or the run's time budget is spent; the first pass always
// completes, so one huge table cannot starve the others. enclave's server
// runs it as the hourly "retention" lane, on one replica at a time.
package retention

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect"
)

// Kind is the sort of a policy.
type Kind string

// The policy kinds.
const (
	KindAge     Kind = "age"
	KindAccount Kind = "account"
	KindKept    Kind = "kept"
	KindCustom  Kind = "custom"
)

// Unit is how an Age policy's column holds time.
type Unit int

// The column units.
const (
	// Timestamp: a TIMESTAMP / TIMESTAMPTZ column (the default).
	Timestamp Unit = iota
	// UnixMillis: an integer of milliseconds since the Unix epoch.
	UnixMillis
	// Day: a text column holding a UTC date, YYYY-MM-DD.
	Day
)

// PurgeFunc removes at most limit rows past their policy at now and
// returns how many it removed. Fewer than limit means the table is drained.
type PurgeFunc func(ctx context.Context, db bun.IDB, now time.Time, limit int) (int64, error)

// Policy is the retention rule of one table. Build it with Age,
// UntilAccountDeleted, Kept or Custom.
type Policy struct {
	Table string
	Kind  Kind
	// Column, Window, Unit and Where define an Age policy: rows whose
	// Column is before now-Window (and that match Where, a constant SQL
	// condition, when set) are purged.
	Column string
	Window time.Duration
	Unit   Unit
	Where  string
	// Note says why (Kept), or what (Custom, or an addition to any kind).
	Note string
	// Purge is a Custom policy's purge.
	Purge PurgeFunc
}

// Age purges rows of table whose timestamp column is older than window.
func Age(table, column string, window time.Duration) Policy {
	return Policy{Table: table, Kind: KindAge, Column: column, Window: window}
}

// UntilAccountDeleted keeps rows of table until their owner's account is
// deleted (the ownership inventory removes them then).
func UntilAccountDeleted(table string) Policy {
	return Policy{Table: table, Kind: KindAccount}
}

// Kept keeps the rows of table; reason says why.
func Kept(table, reason string) Policy {
	return Policy{Table: table, Kind: KindKept, Note: reason}
}

// Custom purges table with purge; note describes the rule for the docs.
func Custom(table, note string, purge PurgeFunc) Policy {
	return Policy{Table: table, Kind: KindCustom, Note: note, Purge: purge}
}

// If narrows an Age policy to rows matching where (a constant SQL condition
// on the table's columns, such as "dead_at IS NOT NULL").
func (p Policy) If(where string) Policy { p.Where = where; return p }

// In sets the unit of an Age policy's column.
func (p Policy) In(u Unit) Policy { p.Unit = u; return p }

// Because adds a note shown in the docs.
func (p Policy) Because(note string) Policy { p.Note = note; return p }

// Purges reports whether the runner has anything to do for p.
func (p Policy) Purges() bool {
	return p.Kind == KindAge || (p.Kind == KindCustom && p.Purge != nil)
}

// Describe is p in words, as docs/data.md shows it.
func (p Policy) Describe() string {
	var s string
	switch p.Kind {
	case KindAge:
		if p.Window == 0 {
			s = fmt.Sprintf("purged once `%s` has passed", p.Column)
		} else {
			s = fmt.Sprintf("purged %s after `%s`", window(p.Window), p.Column)
		}
		if p.Where != "" {
			s += fmt.Sprintf(", where `%s`", p.Where)
		}
	case KindAccount:
		s = "kept until the owner's account is deleted"
	case KindKept:
		s = "kept"
	case KindCustom:
		s = "purged by its own rule"
	}
	if p.Note != "" {
		s += ": " + p.Note
	}
	return s
}

func window(d time.Duration) string {
	switch {
	case d%(24*time.Hour) == 0:
		if n := d / (24 * time.Hour); n != 1 {
			return fmt.Sprintf("%d days", n)
		}
		return "1 day"
	case d%time.Hour == 0:
		if n := d / time.Hour; n != 1 {
			return fmt.Sprintf("%d hours", n)
		}
		return "1 hour"
	}
	return d.String()
}

var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

func (p Policy) validate() error {
	if !identifier.MatchString(p.Table) {
		return fmt.Errorf("retention: table %q: want a lowercase SQL name", p.Table)
	}
	switch p.Kind {
	case KindAge:
		if !identifier.MatchString(p.Column) {
			return fmt.Errorf("retention: %s: column %q: want a lowercase SQL name", p.Table, p.Column)
		}
		if p.Window < 0 {
			return fmt.Errorf("retention: %s: negative window", p.Table)
		}
		if strings.ContainsAny(p.Where, ";?") {
			return fmt.Errorf("retention: %s: the condition must be one constant SQL expression", p.Table)
		}
	case KindKept:
		if p.Note == "" {
			return fmt.Errorf("retention: %s: a kept table needs a reason", p.Table)
		}
	case KindCustom:
		if p.Purge == nil || p.Note == "" {
			return fmt.Errorf("retention: %s: a custom policy needs a purge and a description", p.Table)
		}
	case KindAccount:
	default:
		return fmt.Errorf("retention: %s: unknown kind %q", p.Table, p.Kind)
	}
	return nil
}

// Set holds one policy per table. It is safe for concurrent use.
type Set struct {
	mu       sync.RWMutex
	policies map[string]Policy
	order    []string // tables in the order they were declared
}

// NewSet returns an empty set.
func NewSet() *Set { return &Set{policies: map[string]Policy{}} }

// Add declares policies. A malformed policy or a table declared twice is
// refused, and then none is added.
func (s *Set) Add(policies ...Policy) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	for _, p := range policies {
		if err := p.validate(); err != nil {
			return err
		}
		if _, dup := s.policies[p.Table]; dup || seen[p.Table] {
			return fmt.Errorf("retention: %s: declared twice", p.Table)
		}
		seen[p.Table] = true
	}
	for _, p := range policies {
		s.policies[p.Table] = p
		s.order = append(s.order, p.Table)
	}
	return nil
}

// Policy returns the policy of table.
func (s *Set) Policy(table string) (Policy, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.policies[table]
	return p, ok
}

// Policies returns every policy in the order they were declared, which is
// the order a run purges them in (declare a table whose purge depends on
// another's after it: OAuth grants after their tokens).
func (s *Set) Policies() []Policy {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Policy, 0, len(s.order))
	for _, t := range s.order {
		out = append(out, s.policies[t])
	}
	return out
}

// Check compares the declarations with the live schema of db and reports
// every problem at once: a table without a policy, a policy naming a table
// that does not exist, and an Age policy naming a missing column.
func (s *Set) Check(ctx context.Context, db bun.IDB) error {
	cols, err := liveColumns(ctx, db)
	if err != nil {
		return err
	}
	var problems []string
	for table := range cols {
		if _, ok := s.Policy(table); !ok {
			problems = append(problems, fmt.Sprintf("table %s has no retention policy (declare one: Age, UntilAccountDeleted, Kept or Custom)", table))
		}
	}
	for _, p := range s.Policies() {
		have, ok := cols[p.Table]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("retention policy for %s names a table that does not exist", p.Table))
		case p.Kind == KindAge && !slices.Contains(have, p.Column):
			problems = append(problems, fmt.Sprintf("retention policy for %s names column %s, which does not exist", p.Table, p.Column))
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return fmt.Errorf("retention: declarations do not match the schema:\n  %s", strings.Join(problems, "\n  "))
	}
	return nil
}

// liveColumns returns table → column names of the current schema.
func liveColumns(ctx context.Context, db bun.IDB) (map[string][]string, error) {
	var rows []struct {
		Table  string `bun:"table_name"`
		Column string `bun:"column_name"`
	}
	q := `SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema()`
	if db.Dialect().Name() == dialect.SQLite {
		// Ordinary tables only: a full-text index (an FTS5 virtual table
		// and its shadow tables) is an index, like PostgreSQL's GIN.
		q = `SELECT l.name AS table_name, p.name AS column_name
			FROM pragma_table_list l JOIN pragma_table_info(l.name) p
			WHERE l.schema = 'main' AND l.type = 'table' AND l.name NOT LIKE 'sqlite_%'`
	}
	if err := db.NewRaw(q).Scan(ctx, &rows); err != nil {
		return nil, fmt.Errorf("retention: read schema: %w", err)
	}
	out := map[string][]string{}
	for _, r := range rows {
		out[r.Table] = append(out[r.Table], r.Column)
	}
	return out, nil
}

// Markdown renders the policies as a Markdown table, one row per table.
func (s *Set) Markdown() string {
	var b strings.Builder
	b.WriteString("| table | retention |\n|---|---|\n")
	all := s.Policies()
	sort.Slice(all, func(i, j int) bool { return all[i].Table < all[j].Table })
	for _, p := range all {
		fmt.Fprintf(&b, "| `%s` | %s |\n", p.Table, strings.ReplaceAll(p.Describe(), "|", `\|`))
	}
	return b.String()
}

// PurgeAge removes at most limit rows of p's table past its window at now,
// oldest first. The condition is checked again by the DELETE itself, so a
// row changed meanwhile is left alone.
func PurgeAge(ctx context.Context, db bun.IDB, p Policy, now time.Time, limit int) (int64, error) {
	if p.Kind != KindAge {
		return 0, errors.New("retention: not an age policy")
	}
	var cutoff any
	at := now.UTC().Add(-p.Window)
	switch p.Unit {
	case UnixMillis:
		cutoff = at.UnixMilli()
	case Day:
		cutoff = at.Format(time.DateOnly)
	default:
		cutoff = at
	}
	cond := "? < ?"
	args := []any{bun.Ident(p.Column), cutoff}
	if p.Where != "" {
		cond += " AND (" + p.Where + ")"
	}
	row := "rowid"
	in := "? IN (SELECT ? FROM ? WHERE " + cond + " ORDER BY ? LIMIT ?)"
	if db.Dialect().Name() == dialect.PG {
		// ctid = ANY(ARRAY(...)) is a TID scan; IN (SELECT ...) would scan
		// the whole table once per batch.
		row = "ctid"
		in = "? = ANY(ARRAY(SELECT ? FROM ? WHERE " + cond + " ORDER BY ? LIMIT ?))"
	}
	q := "DELETE FROM ? WHERE " + in + " AND " + cond
	all := []any{bun.Ident(p.Table), bun.Safe(row), bun.Safe(row), bun.Ident(p.Table)}
	all = append(all, args...)
	all = append(all, bun.Ident(p.Column), limit)
	all = append(all, args...)
	res, err := db.ExecContext(ctx, q, all...)
	if err != nil {
		return 0, fmt.Errorf("retention: purge %s: %w", p.Table, err)
	}
	return res.RowsAffected()
}
