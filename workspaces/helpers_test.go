package workspaces_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/internal/envelope"
	"github.com/enclave-mcp/enclave/internal/outbox"
	"github.com/enclave-mcp/enclave/jobs"
	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/workspaces"
)

// counterSchema is a test embedder's workspace table.
var counterSchema = migrations.Source{Name: "counters", FS: fstest.MapFS{
	"sqlite/0001_counters.up.sql": {Data: []byte(`CREATE TABLE counters (
		workspace_id TEXT NOT NULL, name TEXT NOT NULL, value BIGINT NOT NULL,
		PRIMARY KEY (workspace_id, name));`)},
	"postgres/0001_counters.up.sql": {Data: []byte(`CREATE TABLE counters (
		workspace_id TEXT NOT NULL, name TEXT NOT NULL, value BIGINT NOT NULL,
		PRIMARY KEY (workspace_id, name));`)},
}}

type env struct {
	t     testing.TB
	st    *storage.Store
	reg   *capabilities.Registry
	svc   *workspaces.Service
	queue *jobs.Queue
	clock *clock
	// dataDir holds the workspace files (under workspaces/).
	dataDir string

	mu       sync.Mutex
	mails    []workspaces.InvitationMail
	keyMails []workspaces.KeyMail
	n        int
}

// keyPassword is every test account's password, as the env's
// Reauthenticate checks it before a key is made.
const keyPassword = "correct horse battery staple"

// envMailer records the env's invitations and key notices.
type envMailer struct{ e *env }

func (m envMailer) MailWorkspaceInvitation(_ context.Context, _ bun.IDB, inv workspaces.InvitationMail) error {
	m.e.mu.Lock()
	m.e.mails = append(m.e.mails, inv)
	m.e.mu.Unlock()
	return nil
}

func (m envMailer) MailWorkspaceKeyCreated(_ context.Context, _ bun.IDB, km workspaces.KeyMail) error {
	m.e.mu.Lock()
	m.e.keyMails = append(m.e.keyMails, km)
	m.e.mu.Unlock()
	return nil
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type addIn struct {
	Counter string `json:"counter"`
	By      int64  `json:"by"`
	Job     bool   `json:"job,omitempty"`
}

type addOut struct {
	Value int64 `json:"value"`
}

type getIn struct {
	Counter string `json:"counter"`
}

// counterAdd reads, pauses and writes: without serialization two of them
// lose an update.
func counterAdd(ctx context.Context, tx *workspaces.Tx, in addIn) (addOut, error) {
	var v int64
	err := tx.NewSelect().Table("counters").Column("value").
		Where("workspace_id = ?", tx.WorkspaceID).Where("name = ?", in.Counter).Scan(ctx, &v)
	if err != nil && err.Error() != "sql: no rows in result set" {
		return addOut{}, err
	}
	time.Sleep(time.Millisecond)
	v += in.By
	if _, err := tx.NewRaw(`INSERT INTO counters (workspace_id, name, value) VALUES (?, ?, ?)
		ON CONFLICT (workspace_id, name) DO UPDATE SET value = excluded.value`, tx.WorkspaceID, in.Counter, v).Exec(ctx); err != nil {
		return addOut{}, err
	}
	if in.Job {
		if err := tx.Enqueue(ctx, "counter.changed", map[string]any{"workspaceId": tx.WorkspaceID, "value": v}); err != nil {
			return addOut{}, err
		}
	}
	return addOut{Value: v}, nil
}

func counterGet(ctx context.Context, tx *workspaces.Tx, in getIn) (addOut, error) {
	var v int64
	err := tx.NewSelect().Table("counters").Column("value").
		Where("workspace_id = ?", tx.WorkspaceID).Where("name = ?", in.Counter).Scan(ctx, &v)
	if err != nil && err.Error() != "sql: no rows in result set" {
		return addOut{}, err
	}
	return addOut{Value: v}, nil
}

func newEnv(t testing.TB, st *storage.Store, maxOpen int) *env {
	t.Helper()
	ctx := context.Background()
	e := &env{t: t, st: st, clock: &clock{t: time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)}, dataDir: t.TempDir()}
	ring, err := envelope.Open(ctx, st.DB, st.Keeper)
	if err != nil {
		t.Fatal(err)
	}
	e.queue = jobs.New(outbox.New(ring), nil)
	if err := e.queue.Register("counter.changed", func(context.Context, jobs.Job) error { return nil }); err != nil {
		t.Fatal(err)
	}
	e.reg = capabilities.NewRegistry(capabilities.Options{})
	e.svc, err = workspaces.New(ctx, workspaces.Config{
		Store: st, Registry: e.reg, Jobs: e.queue, DataDir: e.dataDir, MaxOpen: maxOpen, MaxFileSize: 64 << 10,
		Schema: []migrations.Source{counterSchema}, BaseURL: "https://example.test",
		Mailer: envMailer{e},
		Reauthenticate: func(_ context.Context, _ capabilities.Caller, p workspaces.KeyProof) error {
			if p.Password != keyPassword {
				return capabilities.Errorf(capabilities.CodeInvalidInput, "Your current password is not correct.")
			}
			return nil
		},
		Now: e.clock.now,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.svc.Close() })
	if err := errorsJoin(
		workspaces.Register(e.svc, workspaces.Op[addIn, addOut]{Name: "counterAdd", Description: "adds to a counter", Handler: counterAdd}),
		workspaces.Register(e.svc, workspaces.Op[getIn, addOut]{Name: "counterGet", Description: "reads a counter", ReadOnly: true, Handler: counterGet}),
	); err != nil {
		t.Fatal(err)
	}
	return e
}

func errorsJoin(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// unverifiedUser creates an account whose address is not verified.
func (e *env) unverifiedUser(name string) capabilities.Caller {
	e.t.Helper()
	c := e.user(name)
	if _, err := e.st.DB.NewRaw("UPDATE users SET email_verified_at = NULL WHERE stable_user_id = ?", c.UserID).Exec(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	return c
}

// user creates an account and returns it as an interactive caller.
func (e *env) user(name string) capabilities.Caller {
	e.t.Helper()
	e.mu.Lock()
	e.n++
	e.mu.Unlock()
	sum := sha256.Sum256([]byte(name + "@example.test"))
	sid := hex.EncodeToString(sum[:])
	now := time.Now().UTC()
	if _, err := e.st.DB.NewRaw(`INSERT INTO users (stable_user_id, email, username, email_verified_at, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)`,
		sid, name+"@example.test", name, now, now, now).Exec(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	return capabilities.Caller{UserID: sid, Username: name, State: capabilities.AccountActive, Interactive: true, AllScopes: true}
}

// call invokes a capability through the registry and decodes its
// structured result into out (when non-nil).
func (e *env) call(c capabilities.Caller, name string, args any, out any) error {
	e.t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		e.t.Fatal(err)
	}
	res, err := e.reg.Invoke(context.Background(), c, name, raw)
	if err != nil {
		return err
	}
	if out != nil {
		b, err := json.Marshal(res.Structured)
		if err != nil {
			e.t.Fatal(err)
		}
		if err := json.Unmarshal(b, out); err != nil {
			e.t.Fatalf("decode %s: %v (%s)", name, err, b)
		}
	}
	return nil
}

func (e *env) must(c capabilities.Caller, name string, args any, out any) {
	e.t.Helper()
	if err := e.call(c, name, args, out); err != nil {
		e.t.Fatalf("%s: %v", name, err)
	}
}

func (e *env) create(c capabilities.Caller, name string) string {
	e.t.Helper()
	var w workspaces.Workspace
	e.must(c, "workspaceCreate", map[string]any{"name": name}, &w)
	return w.ID
}

// lastToken returns the token of the last invitation mailed to email.
func (e *env) lastToken(email string) string {
	e.t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := len(e.mails) - 1; i >= 0; i-- {
		if e.mails[i].To == email {
			u, err := url.Parse(e.mails[i].URL)
			if err != nil {
				e.t.Fatal(err)
			}
			return u.Query().Get("token")
		}
	}
	e.t.Fatalf("no invitation mailed to %s", email)
	return ""
}

// join invites member to ws with role (as inviter) and accepts.
func (e *env) join(inviter, member capabilities.Caller, ws string, role workspaces.Role) {
	e.t.Helper()
	email := member.Username + "@example.test"
	e.must(inviter, "workspaceMemberInvite", map[string]any{"workspaceId": ws, "email": email, "role": role}, nil)
	e.must(member, "workspaceInvitationAccept", map[string]any{"token": e.lastToken(email)}, nil)
}

func codeOf(err error) capabilities.Code { return capabilities.CodeOf(err) }

func wantCode(t testing.TB, err error, code capabilities.Code, what string) {
	t.Helper()
	if codeOf(err) != code {
		t.Fatalf("%s: got %v (code %s), want code %s", what, err, codeOf(err), code)
	}
}

var _ = fmt.Sprintf
