package workspaces

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/jobs"
)

// Op is a named operation on one workspace, defined by an embedder and
// exposed as a capability by Register. Its input is In (a struct, as for
// capabilities.Define) plus the fields every op takes:
//
//   - workspaceId (required): the workspace to act on;
//   - expectedRevision (optional): refuse with a conflict unless the
//     workspace is at this revision (optimistic concurrency);
//   - idempotencyKey (optional): a retry with the same key and the same
//     arguments returns the first call's result without running again; the
//     same key with other arguments, or from another member, is a
//     conflict.
//
// A write op (ReadOnly false) runs in a transaction of the workspace store
// that no other op of the same workspace runs beside; when it commits, the
// workspace's revision goes up by one and an event (op name, actor,
// revision, time) is appended. Its output is OpResult[Out].
type Op[In, Out any] struct {
	// Name is the capability name (camelCase, unique in the registry).
	Name        string
	Title       string
	Description string // required: what a model reads
	// MinRole is the least workspace role that may run the op. Default:
	// RoleViewer for a read-only op, RoleAdmin otherwise.
	MinRole Role
	// ReadOnly marks a query: it reads the workspace's state, commits
	// nothing, and takes neither expectedRevision nor idempotencyKey.
	ReadOnly bool
	// Destructive marks an op that deletes or overwrites.
	Destructive bool
	// System keeps the op to the server itself: it is not a capability and
	// runs only through Service.RunSystem (a job confirming cleanup).
	System bool
	// Handler does the work inside tx. Every query filters by
	// tx.WorkspaceID. Its error rolls everything back; return a
	// *capabilities.Error to tell the caller why.
	Handler func(ctx context.Context, tx *Tx, in In) (Out, error)
}

// OpResult is what a workspace op's capability returns.
type OpResult[Out any] struct {
	WorkspaceID string `json:"workspaceId"`
	// Revision is the workspace's revision after the op (the one it
	// committed, for a write op).
	Revision int64 `json:"revision" jsonschema:"the workspace revision after this operation"`
	// Replayed is true when an idempotency key matched an earlier call
	// whose result this is.
	Replayed bool `json:"replayed,omitempty" jsonschema:"true when this is the stored result of an earlier call with the same idempotency key"`
	Result   Out  `json:"result"`
}

// Tx is the transaction an op handler runs in, scoped to one workspace.
type Tx struct {
	// Tx is the transaction on the workspace store. On SQLite it is a
	// transaction on the workspace's own file; on PostgreSQL one on the
	// main database holding the workspace's lock. Filter every query by
	// WorkspaceID.
	bun.Tx
	WorkspaceID string
	// Actor is who runs the op.
	Actor Actor
	// Revision is, for a write op, the revision this op commits; for a
	// read-only op, the current one.
	Revision int64
	// Op is the op's name.
	Op string

	svc  *Service
	jobs []pendingJob
}

type pendingJob struct {
	Kind    string
	Payload json.RawMessage
}

// Enqueue records a job of kind (registered with the server's job queue)
// to run after the op commits, and never if it rolls back. The job
// concerns no user: put the workspace id in the payload. On PostgreSQL the
// job is written to the outbox in the op's own transaction; on SQLite it
// is written to the workspace file in the op's transaction and moved to the
// main database's outbox right after the commit (and again, until that
// succeeds, after every later op of the workspace): at least once, as every
// job.
func (t *Tx) Enqueue(ctx context.Context, kind string, payload any) error {
	if t.svc.jobs == nil {
		return errors.New("workspaces: no job queue configured")
	}
	raw, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("workspaces: encode job payload: %w", err)
	}
	if t.svc.sharedDB() {
		return t.svc.jobs.Enqueue(ctx, t.Tx, kind, "", json.RawMessage(raw))
	}
	t.jobs = append(t.jobs, pendingJob{Kind: kind, Payload: raw})
	return nil
}

// Event is one committed op in a workspace's log.
type Event struct {
	Revision int64     `json:"revision"`
	Op       string    `json:"op"`
	Actor    string    `json:"actor" jsonschema:"stable user id of who ran it, or \"system\""`
	At       time.Time `json:"at"`
}

type eventRow struct {
	bun.BaseModel `bun:"table:workspace_events"`
	ID            int64     `bun:"id,pk,autoincrement"`
	WorkspaceID   string    `bun:"workspace_id,notnull"`
	Revision      int64     `bun:"revision,notnull"`
	Op            string    `bun:"op,notnull"`
	Actor         string    `bun:"actor,notnull"`
	At            time.Time `bun:"at,notnull"`
}

type idemRow struct {
	bun.BaseModel `bun:"table:workspace_idempotency"`
	WorkspaceID   string    `bun:"workspace_id,pk"`
	Key           string    `bun:"idem_key,pk"`
	Op            string    `bun:"op,notnull"`
	ArgsHash      string    `bun:"args_hash,notnull"`
	Result        string    `bun:"result,notnull"`
	Revision      int64     `bun:"revision,notnull"`
	CreatedAt     time.Time `bun:"created_at,notnull"`
}

type pendingJobRow struct {
	bun.BaseModel `bun:"table:workspace_pending_jobs"`
	ID            int64  `bun:"id,pk,autoincrement"`
	WorkspaceID   string `bun:"workspace_id,notnull"`
	Kind          string `bun:"kind,notnull"`
	Subject       string `bun:"subject,notnull"`
	Payload       string `bun:"payload,notnull"`
}

// opInfo is what the service keeps of a registered op.
type opInfo struct {
	name   string
	system bool
	run    func(ctx context.Context, a Actor, id string, args json.RawMessage) (any, error)
}

// reserved are the input fields every op takes; an op's In cannot use them.
var reserved = []string{"workspaceId", "expectedRevision", "idempotencyKey"}

// pruneEvery is how many revisions pass between prunes of a workspace's
// expired idempotency results.
const pruneEvery = 100

var idemKey = regexp.MustCompile(`^[\x21-\x7e]{1,128}$`)

// Register exposes op as a capability of s's registry (or, for a System
// op, records it for RunSystem). Register every op before serving.
func Register[In, Out any](s *Service, op Op[In, Out]) error {
	if op.Handler == nil {
		return fmt.Errorf("workspaces: op %q: handler is required", op.Name)
	}
	if op.MinRole == "" {
		op.MinRole = RoleAdmin
		if op.ReadOnly {
			op.MinRole = RoleViewer
		}
	}
	if !op.MinRole.Valid() {
		return fmt.Errorf("workspaces: op %q: MinRole must be owner, admin or viewer", op.Name)
	}
	in, err := opInputSchema[In](op.ReadOnly)
	if err != nil {
		return fmt.Errorf("workspaces: op %q: input schema: %w", op.Name, err)
	}
	outSchema, err := capabilities.OutputSchema[OpResult[Out]]()
	if err != nil {
		return fmt.Errorf("workspaces: op %q: output schema: %w", op.Name, err)
	}
	out, err := json.Marshal(outSchema)
	if err != nil {
		return err
	}
	info := opInfo{name: op.Name, system: op.System, run: func(ctx context.Context, a Actor, id string, args json.RawMessage) (any, error) {
		return runOp(ctx, s, op, a, id, args)
	}}
	s.mu.Lock()
	if _, dup := s.ops[op.Name]; dup {
		s.mu.Unlock()
		return fmt.Errorf("workspaces: op %q registered twice", op.Name)
	}
	s.ops[op.Name] = info
	s.mu.Unlock()
	if op.System {
		return nil
	}
	capability := capabilities.Capability{
		Name: op.Name, Domain: "workspace", Title: op.Title, Description: op.Description,
		Annotations: &capabilities.Annotations{ReadOnly: op.ReadOnly, Destructive: op.Destructive && !op.ReadOnly, Idempotent: op.ReadOnly},
		InputSchema: in, OutputSchema: out,
		Handler: func(ctx context.Context, call *capabilities.Call, args json.RawMessage) (capabilities.Result, error) {
			var env struct {
				WorkspaceID string `json:"workspaceId"`
			}
			if err := json.Unmarshal(args, &env); err != nil {
				return capabilities.Result{}, capabilities.Errorf(capabilities.CodeInvalidInput, "arguments do not match the input schema")
			}
			a, err := s.Access(ctx, call.Caller, env.WorkspaceID)
			if err != nil {
				return capabilities.Result{}, err
			}
			if !a.Role.AtLeast(op.MinRole) {
				return capabilities.Result{}, errRole(a.Role, "operation "+op.Name)
			}
			res, err := runOp(ctx, s, op, a, env.WorkspaceID, args)
			if err != nil {
				return capabilities.Result{}, err
			}
			// Nil slices go out as [], as the output schema says.
			res = capabilities.NormalizeOutput(res)
			text, err := json.Marshal(res)
			if err != nil {
				return capabilities.Result{}, fmt.Errorf("workspaces: %s: encode output: %w", op.Name, err)
			}
			return capabilities.Result{Content: []capabilities.Content{capabilities.Text{Text: string(text)}}, Structured: res}, nil
		},
	}
	if err := s.reg.Register(capability); err != nil {
		s.mu.Lock()
		delete(s.ops, op.Name)
		s.mu.Unlock()
		return fmt.Errorf("workspaces: %w", err)
	}
	return nil
}

// RunSystem runs a registered op as the server itself (a job confirming
// work done outside the workspace transaction): no membership check, the
// actor "system". input is marshalled to JSON and must carry no
// workspaceId (id is used).
func (s *Service) RunSystem(ctx context.Context, name, id string, input any) (json.RawMessage, error) {
	s.mu.RLock()
	info, ok := s.ops[name]
	s.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("workspaces: unknown op %q", name)
	}
	raw, err := json.Marshal(input)
	if err != nil {
		return nil, fmt.Errorf("workspaces: encode input: %w", err)
	}
	if err := s.exists(ctx, id); err != nil {
		return nil, err
	}
	res, err := info.run(ctx, Actor{Role: RoleOwner, System: true, StableID: "system"}, id, raw)
	if err != nil {
		return nil, err
	}
	return json.Marshal(res)
}

func (s *Service) exists(ctx context.Context, id string) error {
	if validID(id) != nil {
		return errNotFound
	}
	n, err := s.main.Reader.NewSelect().Model((*workspaceRow)(nil)).Where("id = ?", id).Count(ctx)
	if err != nil {
		return fmt.Errorf("workspaces: find workspace: %w", err)
	}
	if n == 0 {
		return errNotFound
	}
	return nil
}

// opInputSchema is In's object schema with the op fields added.
func opInputSchema[In any](readOnly bool) (json.RawMessage, error) {
	sch, err := capabilities.InputSchema[In]()
	if err != nil {
		return nil, err
	}
	if sch.Properties == nil {
		sch.Properties = map[string]*jsonschema.Schema{}
	}
	for _, r := range reserved {
		if _, ok := sch.Properties[r]; ok {
			return nil, fmt.Errorf("field %q is reserved for every op", r)
		}
	}
	sch.Properties["workspaceId"] = &jsonschema.Schema{Type: "string", Description: "the workspace to act on"}
	if !readOnly {
		sch.Properties["expectedRevision"] = &jsonschema.Schema{Type: "integer", Description: "refuse unless the workspace is at this revision (optimistic concurrency)"}
		sch.Properties["idempotencyKey"] = &jsonschema.Schema{Type: "string", Description: "retrying with the same key and arguments returns the first result instead of running again"}
	}
	sch.Required = append([]string{"workspaceId"}, sch.Required...)
	return json.Marshal(sch)
}

// opArgs splits raw op arguments into the op fields and the rest, whose
// canonical JSON is hashed for idempotency.
func opArgs(args json.RawMessage) (exp *int64, key, hash string, err error) {
	var m map[string]json.RawMessage
	if len(bytes.TrimSpace(args)) > 0 && string(bytes.TrimSpace(args)) != "null" {
		if err := json.Unmarshal(args, &m); err != nil {
			return nil, "", "", capabilities.Errorf(capabilities.CodeInvalidInput, "arguments must be a JSON object")
		}
	}
	if raw, ok := m["expectedRevision"]; ok && string(raw) != "null" {
		var v int64
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, "", "", capabilities.Errorf(capabilities.CodeInvalidInput, "expectedRevision must be an integer")
		}
		exp = &v
	}
	if raw, ok := m["idempotencyKey"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &key); err != nil || !idemKey.MatchString(key) {
			return nil, "", "", capabilities.Errorf(capabilities.CodeInvalidInput, "idempotencyKey must be 1 to 128 printable ASCII characters")
		}
	}
	for _, r := range reserved {
		delete(m, r)
	}
	// Re-encoding a map of decoded values sorts keys and drops spacing.
	var canon map[string]any
	b, _ := json.Marshal(m)
	_ = json.Unmarshal(b, &canon)
	c, _ := json.Marshal(canon)
	sum := sha256.Sum256(c)
	return exp, key, hex.EncodeToString(sum[:]), nil
}

func (s *Service) sharedDB() bool {
	_, ok := s.ws.(*PostgresStore)
	return ok
}

// runOp runs op for actor a in workspace id with raw arguments.
func runOp[In, Out any](ctx context.Context, s *Service, op Op[In, Out], a Actor, id string, args json.RawMessage) (OpResult[Out], error) {
	var in In
	if t := bytes.TrimSpace(args); len(t) > 0 && string(t) != "null" {
		if err := json.Unmarshal(args, &in); err != nil {
			return OpResult[Out]{}, capabilities.Errorf(capabilities.CodeInvalidInput, "arguments do not match the input schema")
		}
	}
	res := OpResult[Out]{WorkspaceID: id}
	if op.ReadOnly {
		err := s.ws.View(ctx, id, func(ctx context.Context, btx bun.Tx) error {
			rev, err := readRevision(ctx, btx, id)
			if err != nil {
				return err
			}
			tx := &Tx{Tx: btx, WorkspaceID: id, Actor: a, Revision: rev, Op: op.Name, svc: s}
			out, err := op.Handler(ctx, tx, in)
			if err != nil {
				return err
			}
			res.Revision, res.Result = rev, out
			return nil
		})
		return res, err
	}
	exp, key, hash, err := opArgs(args)
	if err != nil {
		return res, err
	}
	actor := a.StableID
	if a.System {
		actor = "system"
	}
	if key != "" {
		// A key belongs to the member who used it first: another member
		// sending the same key and arguments is refused, never handed the
		// first member's result (nor their op taken for done).
		sum := sha256.Sum256([]byte(actor + "\x00" + hash))
		hash = hex.EncodeToString(sum[:])
	}
	leftover := false
	var tx *Tx
	err = s.ws.Update(ctx, id, func(ctx context.Context, btx bun.Tx) error {
		if key != "" {
			var prev idemRow
			err := btx.NewSelect().Model(&prev).Where("workspace_id = ?", id).Where("idem_key = ?", key).Scan(ctx)
			switch {
			case err == nil && !s.now().Before(prev.CreatedAt.Add(s.cfg.IdempotencyTTL)):
				// Expired: the key is free again.
				if _, err := btx.NewDelete().Model((*idemRow)(nil)).Where("workspace_id = ?", id).Where("idem_key = ?", key).Exec(ctx); err != nil {
					return fmt.Errorf("workspaces: expire idempotency key: %w", err)
				}
			case err == nil:
				if prev.Op != op.Name || prev.ArgsHash != hash {
					return errConflict("idempotency key %q was used with other arguments or by another member", key)
				}
				if err := json.Unmarshal([]byte(prev.Result), &res); err != nil {
					return fmt.Errorf("workspaces: decode stored result: %w", err)
				}
				res.Replayed = true
				return nil
			case !errors.Is(err, sql.ErrNoRows):
				return fmt.Errorf("workspaces: read idempotency key: %w", err)
			}
		}
		rev, err := readRevision(ctx, btx, id)
		if err != nil {
			return err
		}
		if exp != nil && *exp != rev {
			return errConflict("the workspace is at revision %d, not %d: read it again and retry", rev, *exp)
		}
		tx = &Tx{Tx: btx, WorkspaceID: id, Actor: a, Revision: rev + 1, Op: op.Name, svc: s}
		out, err := op.Handler(ctx, tx, in)
		if err != nil {
			return err
		}
		res.Revision, res.Result = rev+1, out
		now := s.now()
		if _, err := btx.NewRaw(`INSERT INTO workspace_state (workspace_id, revision) VALUES (?, ?)
			ON CONFLICT (workspace_id) DO UPDATE SET revision = excluded.revision`, id, rev+1).Exec(ctx); err != nil {
			return fmt.Errorf("workspaces: record revision: %w", err)
		}
		ev := eventRow{WorkspaceID: id, Revision: rev + 1, Op: op.Name, Actor: actor, At: now}
		if _, err := btx.NewInsert().Model(&ev).Returning("NULL").Exec(ctx); err != nil {
			return fmt.Errorf("workspaces: append event: %w", err)
		}
		if key != "" {
			stored, err := json.Marshal(res)
			if err != nil {
				return fmt.Errorf("workspaces: encode result: %w", err)
			}
			row := idemRow{WorkspaceID: id, Key: key, Op: op.Name, ArgsHash: hash, Result: string(stored), Revision: rev + 1, CreatedAt: now}
			if _, err := btx.NewInsert().Model(&row).Exec(ctx); err != nil {
				return fmt.Errorf("workspaces: record idempotency key: %w", err)
			}
		}
		if (rev+1)%pruneEvery == 0 {
			// Now and then, forget the results of expired keys.
			if _, err := btx.NewDelete().Model((*idemRow)(nil)).Where("workspace_id = ?", id).
				Where("created_at < ?", now.Add(-s.cfg.IdempotencyTTL)).Exec(ctx); err != nil {
				return fmt.Errorf("workspaces: prune idempotency keys: %w", err)
			}
		}
		if len(tx.jobs) > 0 && !s.sharedDB() {
			// Mark the workspace before its jobs commit in its own file:
			// the sweep moves them if the move after the commit never
			// happens (a crash, a failure).
			if err := s.markJobsPending(ctx, id); err != nil {
				return err
			}
		}
		for _, j := range tx.jobs {
			row := pendingJobRow{WorkspaceID: id, Kind: j.Kind, Payload: string(j.Payload)}
			if _, err := btx.NewInsert().Model(&row).Returning("NULL").Exec(ctx); err != nil {
				return fmt.Errorf("workspaces: record job: %w", err)
			}
		}
		if !s.sharedDB() {
			n, err := btx.NewSelect().Model((*pendingJobRow)(nil)).Where("workspace_id = ?", id).Count(ctx)
			if err != nil {
				return fmt.Errorf("workspaces: count pending jobs: %w", err)
			}
			leftover = n > 0
		}
		return nil
	})
	if err != nil {
		return OpResult[Out]{}, err
	}
	if leftover {
		if err := s.FlushJobs(ctx, id); err != nil {
			// The op committed; the jobs wait in the workspace file for the
			// next op or flush.
			s.log.WarnContext(ctx, "workspaces: jobs not yet moved to the outbox", "workspace", id, "err", err)
		}
	}
	return res, nil
}

// markJobsPending notes in the main database that workspace id holds jobs
// not yet moved to the outbox.
func (s *Service) markJobsPending(ctx context.Context, id string) error {
	_, err := s.main.DB.NewUpdate().Table("workspaces").Set("jobs_pending_at = ?", s.now()).
		Where("id = ?", id).Where("jobs_pending_at IS NULL").Exec(ctx)
	if err != nil {
		return fmt.Errorf("workspaces: mark pending jobs: %w", err)
	}
	return nil
}

// flushFault, when set (tests), fails FlushJobs before it moves anything.
var flushFault func(id string) error

// FlushJobs moves the jobs that ops of workspace id recorded in its own
// file (SQLite) into the main database's outbox. It runs after every op
// that left jobs; a failure leaves them for SweepPendingJobs. A job can be
// delivered twice if the process dies between the two commits (jobs are
// at least once anyway). On PostgreSQL there is nothing to move.
func (s *Service) FlushJobs(ctx context.Context, id string) error {
	if s.sharedDB() || s.jobs == nil {
		return nil
	}
	if flushFault != nil {
		if err := flushFault(id); err != nil {
			return err
		}
	}
	return s.ws.Update(ctx, id, func(ctx context.Context, btx bun.Tx) error {
		var rows []pendingJobRow
		if err := btx.NewSelect().Model(&rows).Where("workspace_id = ?", id).Order("id").Limit(500).Scan(ctx); err != nil {
			return fmt.Errorf("workspaces: read pending jobs: %w", err)
		}
		if len(rows) == 0 {
			// Nothing left (an op's mark whose commit failed, or a
			// flush that already ran): clear the mark. Ops of this
			// workspace wait for this transaction, so none can mark it
			// in between.
			_, err := s.main.DB.NewUpdate().Table("workspaces").Set("jobs_pending_at = NULL").Where("id = ?", id).Exec(ctx)
			return err
		}
		err := s.main.RunInTx(ctx, func(ctx context.Context, mtx bun.Tx) error {
			for _, r := range rows {
				err := s.jobs.Enqueue(ctx, mtx, r.Kind, r.Subject, json.RawMessage(r.Payload))
				if errors.Is(err, jobs.ErrUnknownKind) {
					s.log.ErrorContext(ctx, "workspaces: dropping a job of an unregistered kind", "workspace", id, "kind", r.Kind)
					continue
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		ids := make([]int64, len(rows))
		for i, r := range rows {
			ids[i] = r.ID
		}
		if _, err = btx.NewDelete().Model((*pendingJobRow)(nil)).Where("id IN (?)", bun.In(ids)).Exec(ctx); err != nil {
			return err
		}
		if len(rows) < 500 {
			_, err = s.main.DB.NewUpdate().Table("workspaces").Set("jobs_pending_at = NULL").Where("id = ?", id).Exec(ctx)
		}
		return err
	})
}

// SweepPendingJobs moves the jobs of workspaces marked as holding some for
// longer than grace (their op's own move failed or never ran), at most
// limit workspaces per call. It returns how many it flushed. On PostgreSQL
// there is nothing to move. The server runs it every minute.
func (s *Service) SweepPendingJobs(ctx context.Context, grace time.Duration, limit int) (int, error) {
	if s.sharedDB() || s.jobs == nil {
		return 0, nil
	}
	var ids []string
	if err := s.main.Reader.NewSelect().Table("workspaces").Column("id").
		Where("jobs_pending_at IS NOT NULL").Where("jobs_pending_at < ?", s.now().Add(-grace)).
		Order("jobs_pending_at").Limit(int64(limit)).Scan(ctx, &ids); err != nil {
		return 0, fmt.Errorf("workspaces: find pending jobs: %w", err)
	}
	var errs []error
	n := 0
	for _, id := range ids {
		if err := s.FlushJobs(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("workspace %s: %w", id, err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// Events returns the workspace's events after revision `after`, oldest
// first, at most limit (default and maximum 500). It does not check
// membership.
func (s *Service) Events(ctx context.Context, id string, after int64, limit int) ([]Event, error) {
	if limit <= 0 || limit > 500 {
		limit = 500
	}
	var rows []eventRow
	err := s.ws.View(ctx, id, func(ctx context.Context, tx bun.Tx) error {
		return tx.NewSelect().Model(&rows).Where("workspace_id = ?", id).Where("revision > ?", after).
			Order("revision").Limit(int64(limit)).Scan(ctx)
	})
	if err != nil {
		return nil, err
	}
	out := make([]Event, len(rows))
	for i, r := range rows {
		out[i] = Event{Revision: r.Revision, Op: r.Op, Actor: r.Actor, At: r.At}
	}
	return out, nil
}
