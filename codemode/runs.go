package codemode

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/codemode/sandbox"
	"github.com/enclave-mcp/enclave/storage"
)

// Run kinds and statuses.
const (
	KindExecute = "execute"
	KindExport  = "export"
	KindJob     = "job"

	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
)

// storedLogBytes bounds the logs a run record keeps; maxErrorBytes a run
// error's message, in the answer and in the record.
const (
	storedLogBytes = 16 << 10
	maxErrorBytes  = 4 << 10
)

// Run is the record of one run.
type Run struct {
	ID             string         `json:"runId"`
	Kind           string         `json:"kind" jsonschema:"what started the run: execute, a call of an export, or a scheduled job" schema:"enum=execute|export|job"`
	PackageName    string         `json:"packageName,omitempty"`
	PackageVersion int            `json:"packageVersion,omitempty"`
	ExportName     string         `json:"exportName,omitempty"`
	Status         string         `json:"status" jsonschema:"how the run ended" schema:"enum=succeeded|failed"`
	StartedAt      time.Time      `json:"startedAt"`
	DurationMs     int64          `json:"durationMs"`
	Error          *RunFailure    `json:"error,omitempty"`
	Logs           []sandbox.Log  `json:"logs,omitempty" jsonschema:"console output (runGet only), truncated"`
	LogsTruncated  bool           `json:"logsTruncated,omitempty"`
	Calls          map[string]int `json:"calls,omitempty" jsonschema:"the capabilities the run called, with how often (runGet only)"`
	HostCalls      int            `json:"hostCalls"`
}

// RunFailure says why a run failed.
type RunFailure struct {
	Kind    string `json:"kind" jsonschema:"a limit ended the run, the program threw, it does not parse, it was cancelled, the server was too busy, or the sandbox failed" schema:"enum=limit|exception|syntax|cancelled|busy|internal"`
	Limit   string `json:"limit,omitempty" jsonschema:"the limit hit, when kind is limit" schema:"enum=memory|timeout|stack|result|hostCalls"`
	Message string `json:"message"`
}

type runRow struct {
	bun.BaseModel  `bun:"table:code_runs"`
	ID             string    `bun:"id,pk"`
	UserID         int64     `bun:"user_id"`
	Kind           string    `bun:"kind"`
	PackageName    string    `bun:"package_name"`
	PackageVersion int       `bun:"package_version"`
	ExportName     string    `bun:"export_name"`
	Status         string    `bun:"status"`
	StartedAt      time.Time `bun:"started_at"`
	DurationMs     int64     `bun:"duration_ms"`
	ErrorKind      string    `bun:"error_kind"`
	ErrorLimit     string    `bun:"error_limit"`
	Error          string    `bun:"error"`
	Logs           string    `bun:"logs"`
	LogsTruncated  bool      `bun:"logs_truncated"`
	Calls          string    `bun:"calls"`
	HostCalls      int       `bun:"host_calls"`
}

func (r runRow) public(full bool) Run {
	out := Run{ID: r.ID, Kind: r.Kind, PackageName: r.PackageName, PackageVersion: r.PackageVersion, ExportName: r.ExportName,
		Status: r.Status, StartedAt: r.StartedAt, DurationMs: r.DurationMs, HostCalls: r.HostCalls, LogsTruncated: r.LogsTruncated}
	if r.ErrorKind != "" {
		out.Error = &RunFailure{Kind: r.ErrorKind, Limit: r.ErrorLimit, Message: r.Error}
	}
	if full {
		_ = json.Unmarshal([]byte(r.Logs), &out.Logs)
		_ = json.Unmarshal([]byte(r.Calls), &out.Calls)
	}
	return out
}

var runIDPattern = regexp.MustCompile(`^run_[0-9a-f]{28}$`)

// newRunID returns "run_" and 28 hex digits: the start time in
// nanoseconds (so ids sort by start) and 48 random bits.
func newRunID(at time.Time) string {
	var b [14]byte
	binary.BigEndian.PutUint64(b[:8], uint64(at.UnixNano()))
	_, _ = rand.Read(b[8:])
	return "run_" + hex.EncodeToString(b[:])
}

// runInfo is what a run is, besides its outcome.
type runInfo struct {
	id, kind, pkg, export string
	version               int
	started               time.Time
}

// record writes a finished run and returns once it is committed, so that
// the run's answer goes back only when its record can no longer be lost to
// a crash or a restart. A failure to record is logged: the run itself
// already happened and its answer goes back to the caller.
func (s *Service) record(ctx context.Context, o storage.Owner, info runInfo, out sandbox.Outcome, calls map[string]int) {
	r := runRow{ID: info.id, UserID: o.ID, Kind: info.kind, PackageName: info.pkg, PackageVersion: info.version, ExportName: info.export,
		Status: StatusSucceeded, StartedAt: info.started, DurationMs: out.Duration.Milliseconds(), HostCalls: out.HostCalls,
		Logs: "[]", Calls: "{}", LogsTruncated: out.LogsTruncated}
	if out.Err != nil {
		r.Status, r.ErrorKind, r.ErrorLimit, r.Error = StatusFailed, out.Err.Kind, out.Err.Limit, truncate(out.Err.Message, maxErrorBytes)
	}
	logs, truncated := boundLogs(out.Logs, storedLogBytes)
	r.LogsTruncated = r.LogsTruncated || truncated
	if b, err := json.Marshal(logs); err == nil {
		r.Logs = string(b)
	}
	if len(calls) > 0 {
		if b, err := json.Marshal(calls); err == nil {
			r.Calls = string(b)
		}
	}
	s.recorder.add(r)
}

// recorder writes run records by group commit: every caller waits for the
// write that carries its record, so a record is in SQL before its run's
// answer is sent and no record is lost to a crash or a restart. A record
// that arrives while no write is in flight starts one; records that arrive
// meanwhile join the next. Before it writes, a write waits for the runs
// still going to end and join it, at most recordGather: on a busy server
// several runs then share one INSERT and one commit (the commit, not the
// row, is what costs), and a run that ends alone is written at once.
type recorder struct {
	s       *Service
	mu      sync.Mutex
	running int          // runs begun whose record is not added yet
	writing *recordBatch // being gathered or written, nil when none
	next    *recordBatch // open for records: the one gathering, or the one after the write in flight
	arrived chan struct{}

	stmtMu sync.Mutex
	stmts  [preparedRecordBatch + 1]*sql.Stmt // by batch size (see insert)
}

// recordBatch is one write: its rows, and done, closed once they are in
// SQL (or the write failed, which is logged).
type recordBatch struct {
	rows []runRow
	done chan struct{}
}

const (
	// maxRecordBatch bounds the rows of one INSERT (SQLite allows 32,766
	// bound values a statement; a run row has fewer than 20 columns).
	maxRecordBatch = 256
	// recordGather bounds how long a write waits for runs still going.
	recordGather = 2 * time.Millisecond
)

// begin counts a run whose record will be added (or abandoned).
func (rc *recorder) begin() {
	rc.mu.Lock()
	rc.running++
	rc.mu.Unlock()
}

// abandon uncounts a run begun that has no record.
func (rc *recorder) abandon() {
	rc.mu.Lock()
	rc.running--
	rc.mu.Unlock()
	rc.signal()
}

// add records r, a run begun, and returns once it is in SQL.
func (rc *recorder) add(r runRow) {
	rc.mu.Lock()
	rc.running = max(0, rc.running-1)
	if rc.next == nil {
		rc.next = &recordBatch{done: make(chan struct{})}
	}
	b := rc.next
	b.rows = append(b.rows, r)
	if rc.writing == nil {
		rc.writing = b
		go rc.write(b)
	}
	rc.mu.Unlock()
	rc.signal()
	<-b.done
}

func (rc *recorder) signal() {
	select {
	case rc.arrived <- struct{}{}:
	default:
	}
}

// write gathers b (rc.next until it closes), writes it, then the batch
// that opened meanwhile, if any.
func (rc *recorder) write(b *recordBatch) {
	deadline := time.Now().Add(recordGather)
	var timer *time.Timer
	for {
		rc.mu.Lock()
		wait := rc.running > 0 && len(b.rows) < maxRecordBatch
		if !wait {
			rc.next = nil // b closes: records from now on open the next batch
		}
		rc.mu.Unlock()
		left := time.Until(deadline)
		if !wait || left <= 0 {
			break
		}
		if timer == nil {
			timer = time.NewTimer(left)
			defer timer.Stop()
		}
		select {
		case <-rc.arrived:
		case <-timer.C:
			deadline = time.Now() // the next round closes b
		}
	}
	rc.mu.Lock()
	if rc.next == b {
		rc.next = nil
	}
	rc.mu.Unlock()

	// The records go in even when their callers have gone.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for rows := b.rows; len(rows) > 0; {
		chunk := rows[:min(len(rows), maxRecordBatch)]
		rows = rows[len(chunk):]
		if err := rc.insert(ctx, chunk); err != nil {
			rc.s.log.WarnContext(ctx, "codemode: recording runs failed", "runs", len(chunk), "err", err)
		}
	}
	close(b.done)
	rc.mu.Lock()
	rc.writing = nil
	if next := rc.next; next != nil {
		rc.writing = next
		go rc.write(next)
	}
	rc.mu.Unlock()
}

// insert writes rows in one INSERT. On SQLite, where parsing the
// statement is a good part of what writing a run costs the server's CPU, a
// batch of up to preparedRecordBatch rows goes through a statement prepared
// once per batch size; anything else is built by bun. A prepared statement
// bypasses bun's query hooks, so no tracing span covers it.
func (rc *recorder) insert(ctx context.Context, rows []runRow) error {
	if rc.s.store.Dialect() != storage.SQLite || len(rows) > preparedRecordBatch {
		_, err := rc.s.store.DB.NewInsert().Model(&rows).Returning("NULL").Exec(ctx)
		return err
	}
	stmt, err := rc.prepared(ctx, len(rows))
	if err != nil {
		return err
	}
	args := make([]any, 0, len(rows)*len(runColumns))
	for _, r := range rows {
		args = append(args, r.ID, r.UserID, r.Kind, r.PackageName, r.PackageVersion, r.ExportName, r.Status,
			sqliteTime(r.StartedAt), r.DurationMs, r.ErrorKind, r.ErrorLimit, r.Error, r.Logs, r.LogsTruncated,
			r.Calls, r.HostCalls)
	}
	_, err = stmt.ExecContext(ctx, args...)
	return err
}

// runColumns are the columns of code_runs in the order insert binds them.
var runColumns = []string{"id", "user_id", "kind", "package_name", "package_version", "export_name", "status",
	"started_at", "duration_ms", "error_kind", "error_limit", "error", "logs", "logs_truncated", "calls", "host_calls"}

// preparedRecordBatch is the largest batch insert writes through a
// prepared statement: one statement is kept per batch size.
const preparedRecordBatch = 32

// sqliteTime is t as bun writes a time into SQLite, so that a prepared
// insert stores started_at exactly as bun would (and bun reads it back).
func sqliteTime(t time.Time) string {
	return t.UTC().Format("2006-01-02 15:04:05.999999-07:00")
}

// prepared returns the statement inserting n rows, preparing it the first
// time.
func (rc *recorder) prepared(ctx context.Context, n int) (*sql.Stmt, error) {
	rc.stmtMu.Lock()
	defer rc.stmtMu.Unlock()
	if stmt := rc.stmts[n]; stmt != nil {
		return stmt, nil
	}
	var q strings.Builder
	q.WriteString("INSERT INTO code_runs (" + strings.Join(runColumns, ", ") + ") VALUES ")
	row := "(?" + strings.Repeat(", ?", len(runColumns)-1) + ")"
	for i := range n {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString(row)
	}
	stmt, err := rc.s.store.DB.DB.PrepareContext(ctx, q.String())
	if err != nil {
		return nil, err
	}
	rc.stmts[n] = stmt
	return stmt, nil
}

// closeStatements closes the prepared statements.
func (rc *recorder) closeStatements() {
	rc.stmtMu.Lock()
	defer rc.stmtMu.Unlock()
	for i, stmt := range rc.stmts {
		if stmt != nil {
			_ = stmt.Close()
			rc.stmts[i] = nil
		}
	}
}

// flush waits for every record added before it to be in SQL.
func (rc *recorder) flush(ctx context.Context) {
	rc.mu.Lock()
	var wait []chan struct{}
	for _, b := range []*recordBatch{rc.writing, rc.next} {
		if b != nil {
			wait = append(wait, b.done)
		}
	}
	rc.mu.Unlock()
	for _, done := range wait {
		select {
		case <-done:
		case <-ctx.Done():
			return
		}
	}
}

// Flush waits for the run records being written: every run's record is
// committed before its answer is sent, so Flush matters only for runs
// still ending (a test, or a reader that must see them).
func (s *Service) Flush(ctx context.Context) { s.recorder.flush(ctx) }

// Close waits for the run records being written. The server calls it when
// it stops.
func (s *Service) Close() {
	if s.unfollow != nil {
		s.unfollow()
	}
	s.recorder.flush(context.Background())
	s.recorder.closeStatements()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && (s[n]&0xC0) == 0x80 {
		n--
	}
	return s[:n] + "…"
}

// boundLogs keeps the first log lines that fit in max bytes of messages.
func boundLogs(logs []sandbox.Log, max int) ([]sandbox.Log, bool) {
	total := 0
	for i, l := range logs {
		total += len(l.Message)
		if total > max {
			return logs[:i], true
		}
	}
	return logs, false
}

// RunFilter narrows ListRuns.
type RunFilter struct {
	PackageName string
	Status      string
}

// ListRuns pages through the owner's runs, newest first.
func (s *Service) ListRuns(ctx context.Context, o storage.Owner, f RunFilter, req storage.PageRequest) (storage.Page[Run], error) {
	s.recorder.flush(ctx)
	q := s.store.Reader.NewSelect().Model((*runRow)(nil)).
		ExcludeColumn("logs", "calls").Where("user_id = ?", o.ID)
	if f.PackageName != "" {
		q = q.Where("package_name = ?", f.PackageName)
	}
	if f.Status != "" {
		q = q.Where("status = ?", f.Status)
	}
	page, err := storage.Paginate(ctx, q, storage.Keyset[runRow]{Kind: "runs", Column: "id", Desc: true, Key: func(r *runRow) any { return r.ID }}, req)
	if err != nil {
		return storage.Page[Run]{}, err
	}
	out := storage.Page[Run]{Next: page.Next, Items: make([]Run, len(page.Items))}
	for i, r := range page.Items {
		out.Items[i] = r.public(false)
	}
	return out, nil
}

// GetRun returns one of the owner's runs with its logs and calls.
func (s *Service) GetRun(ctx context.Context, o storage.Owner, id string) (Run, error) {
	missing := capabilities.Errorf(capabilities.CodeNotFound, "run %q not found", id)
	if !runIDPattern.MatchString(id) {
		return Run{}, missing
	}
	s.recorder.flush(ctx)
	var r runRow
	err := s.store.Reader.NewSelect().Model(&r).Where("user_id = ? AND id = ?", o.ID, id).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return Run{}, missing
	}
	if err != nil {
		return Run{}, fmt.Errorf("codemode: run %s: %w", id, err)
	}
	return r.public(true), nil
}
