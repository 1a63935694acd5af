package quota

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
)

// Plans live beside the meter because the meter enforces them on its hot
// path, over the same daily counters (a week's use is the sum of its days,
// and KeepDays keeps a whole Monday-to-Sunday week).

// The meters a plan limits, by the quota class that counts them.
const (
	MeterExecute     = "execute"      // code runs: execute, package exports (codemode.QuotaClass)
	MeterOutbound    = "outbound"     // outbound fetches (outbound.QuotaClass)
	MeterMailSend    = "mail_send"    // mails a user sends
	MeterMailReceive = "mail_receive" // mails a user receives
)

// Meters lists the metered classes a plan limits.
var Meters = []string{MeterExecute, MeterOutbound, MeterMailSend, MeterMailReceive}

// DefaultPlan is the plan of every account no admin put on another one.
const DefaultPlan = "default"

// Window is a meter's limits: per UTC day and per Monday-to-Sunday UTC
// week. nil is no limit.
type Window struct {
	Daily  *int64 `json:"daily,omitempty" jsonschema:"uses per UTC day (absent: no daily limit)" schema:"minimum=0"`
	Weekly *int64 `json:"weekly,omitempty" jsonschema:"uses per Monday-to-Sunday UTC week (absent: no weekly limit)" schema:"minimum=0"`
}

// Plan is a named set of limits.
type Plan struct {
	Name        string `json:"name" jsonschema:"the plan's name (lowercase letters, digits, '-')"`
	Execute     Window `json:"execute,omitempty" jsonschema:"code runs (execute and package exports)"`
	Outbound    Window `json:"outbound,omitempty" jsonschema:"outbound fetches"`
	MailSend    Window `json:"mailSend,omitempty" jsonschema:"mails sent"`
	MailReceive Window `json:"mailReceive,omitempty" jsonschema:"mails received"`
	// StorageBytes bounds the bytes the account stores (nil: the
	// server's default budget).
	StorageBytes *int64 `json:"storageBytes,omitempty" jsonschema:"bytes the account may store (absent: the server's default)" schema:"minimum=0"`
}

// Of returns the window of a meter.
func (p Plan) Of(meter string) Window {
	switch meter {
	case MeterExecute:
		return p.Execute
	case MeterOutbound:
		return p.Outbound
	case MeterMailSend:
		return p.MailSend
	case MeterMailReceive:
		return p.MailReceive
	}
	return Window{}
}

type planRow struct {
	bun.BaseModel     `bun:"table:plans"`
	ID                int64     `bun:"id,pk,autoincrement"`
	Name              string    `bun:"name"`
	ExecuteDaily      *int64    `bun:"execute_daily"`
	ExecuteWeekly     *int64    `bun:"execute_weekly"`
	OutboundDaily     *int64    `bun:"outbound_daily"`
	OutboundWeekly    *int64    `bun:"outbound_weekly"`
	MailSendDaily     *int64    `bun:"mail_send_daily"`
	MailSendWeekly    *int64    `bun:"mail_send_weekly"`
	MailReceiveDaily  *int64    `bun:"mail_receive_daily"`
	MailReceiveWeekly *int64    `bun:"mail_receive_weekly"`
	StorageBytes      *int64    `bun:"storage_bytes"`
	CreatedAt         time.Time `bun:"created_at"`
	UpdatedAt         time.Time `bun:"updated_at"`
}

func (r planRow) plan() Plan {
	return Plan{Name: r.Name,
		Execute: Window{r.ExecuteDaily, r.ExecuteWeekly}, Outbound: Window{r.OutboundDaily, r.OutboundWeekly},
		MailSend: Window{r.MailSendDaily, r.MailSendWeekly}, MailReceive: Window{r.MailReceiveDaily, r.MailReceiveWeekly},
		StorageBytes: r.StorageBytes}
}

func rowOf(p Plan) planRow {
	return planRow{Name: p.Name,
		ExecuteDaily: p.Execute.Daily, ExecuteWeekly: p.Execute.Weekly, OutboundDaily: p.Outbound.Daily, OutboundWeekly: p.Outbound.Weekly,
		MailSendDaily: p.MailSend.Daily, MailSendWeekly: p.MailSend.Weekly, MailReceiveDaily: p.MailReceive.Daily, MailReceiveWeekly: p.MailReceive.Weekly,
		StorageBytes: p.StorageBytes}
}

// Alert is a crossing of a plan limit, reported once per account, meter,
// window and threshold.
type Alert struct {
	UserID    string // the account's stable id
	Owner     int64
	Meter     string
	Window    string // "day" or "week"
	Period    string // the window's first UTC day
	Threshold int    // 80 or 100 (percent)
	Limit     int64
}

// Plans keeps plans and the accounts' plans, with a short cache the meter
// reads on its hot path (an admin's change applies within PlanCacheTTL).
type Plans struct {
	store *storage.Store
	now   func() time.Time
	// OnAlert, when set, records an alert inside tx (an admin event); it
	// runs once per alert, in the transaction that marks it sent.
	OnAlert func(ctx context.Context, tx bun.IDB, a Alert) error
	// Storage, when set, reports the bytes an account stores and the most
	// it may store (its plan's storage bytes, or the server's default
	// budget): usageGet shows them. The server sets it to the storage
	// buckets' counters, which enforce the limit.
	Storage func(ctx context.Context, owner int64) (used, limit int64, err error)

	mu    sync.Mutex
	cache map[int64]cachedPlan
}

type cachedPlan struct {
	plan    Plan
	expires time.Time
}

// PlanCacheTTL is how long the meter keeps an account's plan.
const PlanCacheTTL = 5 * time.Second

// NewPlans returns the plans of store's database.
func NewPlans(store *storage.Store) *Plans {
	return &Plans{store: store, now: time.Now, cache: map[int64]cachedPlan{}}
}

var planName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,39}$`)

func invalidPlan(format string, args ...any) error {
	return capabilities.Errorf(capabilities.CodeInvalidInput, format, args...)
}

// Save creates or replaces a plan.
func (p *Plans) Save(ctx context.Context, plan Plan) (Plan, error) {
	if !planName.MatchString(plan.Name) {
		return Plan{}, invalidPlan("plan name %q: use 1 to 40 lowercase letters, digits and '-'", plan.Name)
	}
	for _, m := range Meters {
		w := plan.Of(m)
		for _, v := range []*int64{w.Daily, w.Weekly} {
			if v != nil && *v < 0 {
				return Plan{}, invalidPlan("the limits of %s must be 0 or more", m)
			}
		}
		if w.Daily != nil && w.Weekly != nil && *w.Weekly < *w.Daily {
			return Plan{}, invalidPlan("the weekly limit of %s is below its daily limit", m)
		}
	}
	if plan.StorageBytes != nil && *plan.StorageBytes < 0 {
		return Plan{}, invalidPlan("storageBytes must be 0 or more")
	}
	now := p.now().UTC()
	row := rowOf(plan)
	row.CreatedAt, row.UpdatedAt = now, now
	_, err := p.store.DB.NewInsert().Model(&row).On("CONFLICT (name) DO UPDATE").
		Set("execute_daily = EXCLUDED.execute_daily, execute_weekly = EXCLUDED.execute_weekly").
		Set("outbound_daily = EXCLUDED.outbound_daily, outbound_weekly = EXCLUDED.outbound_weekly").
		Set("mail_send_daily = EXCLUDED.mail_send_daily, mail_send_weekly = EXCLUDED.mail_send_weekly").
		Set("mail_receive_daily = EXCLUDED.mail_receive_daily, mail_receive_weekly = EXCLUDED.mail_receive_weekly").
		Set("storage_bytes = EXCLUDED.storage_bytes, updated_at = EXCLUDED.updated_at").
		Returning("NULL").Exec(ctx)
	if err != nil {
		return Plan{}, fmt.Errorf("quota: save plan: %w", err)
	}
	p.forgetAll()
	return plan, nil
}

// List returns every plan, by name.
func (p *Plans) List(ctx context.Context) ([]Plan, error) {
	var rows []planRow
	if err := p.store.Reader.NewSelect().Model(&rows).Order("name").Limit(1000).Scan(ctx); err != nil {
		return nil, fmt.Errorf("quota: plans: %w", err)
	}
	out := make([]Plan, 0, len(rows))
	for _, r := range rows {
		out = append(out, r.plan())
	}
	return out, nil
}

// Set puts the account with users.id owner on the named plan; by is the
// admin's users.id.
func (p *Plans) Set(ctx context.Context, owner int64, plan string, by int64) error {
	err := p.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		var id int64
		err := tx.NewSelect().Model((*planRow)(nil)).Column("id").Where("name = ?", plan).Scan(ctx, &id)
		if errors.Is(err, sql.ErrNoRows) {
			return capabilities.Errorf(capabilities.CodeNotFound, "no plan named %q", plan)
		}
		if err != nil {
			return err
		}
		_, err = tx.NewRaw(`INSERT INTO user_plans (user_id, plan_id, set_by, set_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (user_id) DO UPDATE SET plan_id = EXCLUDED.plan_id, set_by = EXCLUDED.set_by, set_at = EXCLUDED.set_at`,
			owner, id, nullID(by), p.now().UTC()).Exec(ctx)
		return err
	})
	if err != nil {
		if _, ok := errors.AsType[*capabilities.Error](err); ok {
			return err
		}
		return fmt.Errorf("quota: set plan: %w", err)
	}
	p.mu.Lock()
	delete(p.cache, owner)
	p.mu.Unlock()
	return nil
}

func (p *Plans) forgetAll() {
	p.mu.Lock()
	clear(p.cache)
	p.mu.Unlock()
}

// Of returns the plan of the account with users.id owner (the default
// plan when no admin set one), through the cache.
func (p *Plans) Of(ctx context.Context, owner int64) (Plan, error) {
	now := p.now()
	p.mu.Lock()
	c, ok := p.cache[owner]
	p.mu.Unlock()
	if ok && now.Before(c.expires) {
		return c.plan, nil
	}
	var row planRow
	err := p.store.Reader.NewSelect().Model(&row).
		Where("id = COALESCE((SELECT plan_id FROM user_plans WHERE user_id = ?), (SELECT id FROM plans WHERE name = ?))", owner, DefaultPlan).
		Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		row = planRow{Name: DefaultPlan} // no default plan row: no limits
	} else if err != nil {
		return Plan{}, fmt.Errorf("quota: plan: %w", err)
	}
	plan := row.plan()
	p.mu.Lock()
	if len(p.cache) > 100000 {
		clear(p.cache)
	}
	p.cache[owner] = cachedPlan{plan: plan, expires: now.Add(PlanCacheTTL)}
	p.mu.Unlock()
	return plan, nil
}

// IsPlanLimit reports whether err is the meter's refusal by the account's
// plan (a daily or weekly window), not by a limit its caller passed: a
// caller that words its own refusal (the outbound gateway) passes these
// on as they are, so that the window and limit named are the ones that
// refused.
func IsPlanLimit(err error) bool {
	e, ok := errors.AsType[*capabilities.Error](err)
	return ok && e.Code == capabilities.CodeQuotaExceeded && strings.Contains(e.Message, planRefusalMark)
}

// planRefusalMark is in the message of every plan refusal (plan names
// are lowercase letters, digits and '-', so no other text holds it).
const planRefusalMark = " uses on plan "

// WeekStart returns the Monday (UTC) of t's week.
func WeekStart(t time.Time) time.Time {
	t = t.UTC()
	d := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	return d.AddDate(0, 0, -((int(d.Weekday()) + 6) % 7))
}

// alert records a crossing once per window and threshold: the row's
// insertion and OnAlert share a transaction.
func (p *Plans) alert(ctx context.Context, a Alert) error {
	return p.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		res, err := tx.NewRaw(`INSERT INTO quota_alerts (user_id, meter, span, period, threshold, created_at) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (user_id, meter, span, period, threshold) DO NOTHING`, a.Owner, a.Meter, a.Window, a.Period, a.Threshold, p.now().UTC()).Exec(ctx)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 || p.OnAlert == nil {
			return nil
		}
		return p.OnAlert(ctx, tx, a)
	})
}

// MeterUsage is one meter's use against the caller's plan.
type MeterUsage struct {
	Meter       string `json:"meter" schema:"enum=execute|outbound|mail_send|mail_receive"`
	Today       int64  `json:"today"`
	DailyLimit  *int64 `json:"dailyLimit,omitempty"`
	Week        int64  `json:"week"`
	WeeklyLimit *int64 `json:"weeklyLimit,omitempty"`
}

// PlanUsage is an account's use today and this week against its plan.
type PlanUsage struct {
	Plan         string       `json:"plan"`
	Day          string       `json:"day" jsonschema:"today (UTC)"`
	WeekStart    string       `json:"weekStart" jsonschema:"this week's Monday (UTC)"`
	Meters       []MeterUsage `json:"meters"`
	StorageBytes *int64       `json:"storageBytes,omitempty" jsonschema:"the plan's storage budget, if it sets one"`
	// Storage is the account's stored bytes against its limit (absent
	// when the server stores nothing for accounts: buckets are off).
	Storage *StorageUsage `json:"storage,omitempty" jsonschema:"the bytes you store (your storage buckets' keys and values) against the most you may store"`
}

// StorageUsage is an account's stored bytes against its limit.
type StorageUsage struct {
	Used  int64 `json:"used" jsonschema:"bytes stored now"`
	Limit int64 `json:"limit" jsonschema:"the most bytes you may store: your plan's storage bytes, or the server's default budget"`
}

// StorageLimit returns the storage bytes of the account's plan; ok is
// false when the plan sets none. It reads the plan through the same
// short cache as the meter.
func (p *Plans) StorageLimit(ctx context.Context, owner int64) (int64, bool, error) {
	plan, err := p.Of(ctx, owner)
	if err != nil || plan.StorageBytes == nil {
		return 0, false, err
	}
	return *plan.StorageBytes, true, nil
}

// UsageFor returns the account's use of each meter today and this week
// (SQL-reconciled: at most one flush interval behind) against its plan.
func (p *Plans) UsageFor(ctx context.Context, owner int64) (PlanUsage, error) {
	plan, err := p.Of(ctx, owner)
	if err != nil {
		return PlanUsage{}, err
	}
	now := p.now().UTC()
	today, monday := now.Format(time.DateOnly), WeekStart(now).Format(time.DateOnly)
	var rows []struct {
		Class string `bun:"class"`
		Day   string `bun:"day"`
		Calls int64  `bun:"calls"`
	}
	if err := p.store.Reader.NewSelect().Table("quota_usage").Column("class", "day", "calls").
		Where("user_id = ? AND day >= ? AND class IN (?)", owner, monday, bun.In(Meters)).Scan(ctx, &rows); err != nil {
		return PlanUsage{}, fmt.Errorf("quota: usage: %w", err)
	}
	out := PlanUsage{Plan: plan.Name, Day: today, WeekStart: monday, StorageBytes: plan.StorageBytes}
	if p.Storage != nil {
		used, limit, err := p.Storage(ctx, owner)
		if err != nil {
			return PlanUsage{}, fmt.Errorf("quota: usage: %w", err)
		}
		out.Storage = &StorageUsage{Used: used, Limit: limit}
	}
	for _, m := range Meters {
		u := MeterUsage{Meter: m, DailyLimit: plan.Of(m).Daily, WeeklyLimit: plan.Of(m).Weekly}
		for _, r := range rows {
			if r.Class != m {
				continue
			}
			u.Week += r.Calls
			if r.Day == today {
				u.Today += r.Calls
			}
		}
		out.Meters = append(out.Meters, u)
	}
	return out, nil
}

// TopAccount is one account in the admins' usage overview: its username,
// plan and this week's use per meter. Nothing else about the account.
type TopAccount struct {
	Username string           `json:"username"`
	Plan     string           `json:"plan"`
	Total    int64            `json:"total" jsonschema:"this week's uses over every meter"`
	Week     map[string]int64 `json:"week" jsonschema:"this week's uses by meter"`
}

// TopAccountFields is the pinned allowlist of a TopAccount's fields.
var TopAccountFields = []string{"username", "plan", "total", "week"}

// Top returns the n accounts with the most metered uses this week.
func (p *Plans) Top(ctx context.Context, n int) ([]TopAccount, error) {
	monday := WeekStart(p.now()).Format(time.DateOnly)
	var rows []struct {
		UserID   int64  `bun:"user_id"`
		Username string `bun:"username"`
		Total    int64  `bun:"total"`
	}
	err := p.store.Reader.NewRaw(`SELECT q.user_id AS user_id, u.username AS username, SUM(q.calls) AS total
		FROM quota_usage q JOIN users u ON u.id = q.user_id
		WHERE q.day >= ? AND q.class IN (?)
		GROUP BY q.user_id, u.username ORDER BY total DESC, u.username LIMIT ?`, monday, bun.In(Meters), n).Scan(ctx, &rows)
	if err != nil {
		return nil, fmt.Errorf("quota: top: %w", err)
	}
	out := make([]TopAccount, 0, len(rows))
	for _, r := range rows {
		u, err := p.UsageFor(ctx, r.UserID)
		if err != nil {
			return nil, err
		}
		t := TopAccount{Username: r.Username, Plan: u.Plan, Total: r.Total, Week: map[string]int64{}}
		for _, m := range u.Meters {
			t.Week[m.Meter] = m.Week
		}
		out = append(out, t)
	}
	return out, nil
}

// nullID is id, or NULL for 0 (no acting admin: the CLI, a test).
func nullID(id int64) any {
	if id == 0 {
		return nil
	}
	return id
}
