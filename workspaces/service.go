package workspaces

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/mail"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/jobs"
	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/storage"
)

// Role is a member's role in one workspace.
type Role string

// The workspace roles, from least to most powerful. A viewer reads; an
// admin also writes and manages viewers and admins; an owner also manages
// owners, API keys and deletes the workspace. A workspace always has at
// least one owner.
const (
	RoleViewer Role = "viewer"
	RoleAdmin  Role = "admin"
	RoleOwner  Role = "owner"
)

func (r Role) rank() int {
	switch r {
	case RoleViewer:
		return 1
	case RoleAdmin:
		return 2
	case RoleOwner:
		return 3
	}
	return 0
}

// AtLeast reports whether r is min or more powerful.
func (r Role) AtLeast(min Role) bool { return r.rank() > 0 && r.rank() >= min.rank() }

// Valid reports whether r is one of the three roles.
func (r Role) Valid() bool { return r.rank() > 0 }

// errNotFound is the one answer for an unknown workspace and for one the
// caller is not a member of.
var errNotFound = capabilities.Errorf(capabilities.CodeNotFound, "workspace not found")

// ErrNotFound is the error every capability returns for a workspace that
// does not exist or that the caller is not a member of (test with
// capabilities.CodeOf(err) == capabilities.CodeNotFound).
var ErrNotFound error = errNotFound

func errRole(have Role, what string) error {
	return capabilities.Errorf(capabilities.CodeNotFound, "%s is not available to a workspace %s", what, have)
}

func errConflict(format string, args ...any) error {
	return capabilities.Errorf(capabilities.CodeConflict, format, args...)
}

// InvitationMail is one invitation to send.
type InvitationMail struct {
	To            string
	WorkspaceName string
	InvitedBy     string // the inviting member's username
	Role          Role
	URL           string // the single-use link
	ExpiresAt     time.Time
}

// Mailer sends invitation mail. It is called inside the transaction that
// records the invitation, so that a mailer writing to the outbox sends the
// message exactly when the invitation exists (enclave's mail.AccountMail does).
type Mailer interface {
	MailWorkspaceInvitation(ctx context.Context, tx bun.IDB, m InvitationMail) error
}

// KeyMail tells an account that a workspace API key was made with it.
type KeyMail struct {
	To            string // the account's address
	Username      string
	WorkspaceName string
	KeyName       string
	MaxRole       Role
	CreatedAt     time.Time
}

// KeyMailer is implemented by a Mailer that also tells owners of the keys
// made with their accounts. It is called inside the transaction that
// records the key (a mailer writing to the outbox sends the message
// exactly when the key exists); its error refuses the key. enclave's web
// shell implements it.
type KeyMailer interface {
	MailWorkspaceKeyCreated(ctx context.Context, tx bun.IDB, m KeyMail) error
}

// MailerFunc adapts a function to Mailer.
type MailerFunc func(ctx context.Context, tx bun.IDB, m InvitationMail) error

// MailWorkspaceInvitation calls f.
func (f MailerFunc) MailWorkspaceInvitation(ctx context.Context, tx bun.IDB, m InvitationMail) error {
	return f(ctx, tx, m)
}

// Config configures the workspaces service. Store and Registry are
// required; every other zero value is a documented default.
type Config struct {
	// Store is the main store: the workspace directory, membership and
	// invitations live in its database.
	Store *storage.Store
	// Registry receives the workspace capabilities and every Op.
	Registry *capabilities.Registry
	// Jobs is the server's job queue: ops enqueue jobs through Tx.Enqueue.
	// Nil refuses Tx.Enqueue.
	Jobs *jobs.Queue
	// Mailer sends invitations. Nil refuses workspaceMemberInvite.
	Mailer Mailer
	// BaseURL is the server's public URL, the start of invitation links.
	BaseURL string
	// Dir holds the per-workspace SQLite files. Default
	// <DataDir>/workspaces, with DataDir "enclave-data" when empty.
	Dir     string
	DataDir string
	// MaxOpen bounds the workspace files open at once on SQLite. Default
	// DefaultMaxOpen.
	MaxOpen int
	// Schema holds the embedder's workspace tables (every table with a
	// workspace_id column), applied to each workspace store.
	Schema []migrations.Source
	// WorkspaceStore replaces the store NewStore would pick.
	WorkspaceStore Store
	// InvitationTTL is how long an invitation link works. Default 7 days.
	InvitationTTL time.Duration
	// InvitationLimit, when set, is asked before each invitation is
	// recorded and mailed; its error refuses it. Every account may create
	// workspaces and so invite any address: enclave counts invitations per
	// inviter per UTC day (InvitationQuotaClass), so that the server's
	// mail cannot be turned on strangers in bulk.
	InvitationLimit func(ctx context.Context, c capabilities.Caller) error
	// Logger logs failures that no caller sees. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// IdempotencyTTL is how long an op's result is kept for its
	// idempotency key. Default DefaultIdempotencyTTL.
	IdempotencyTTL time.Duration
	// MaxFileSize bounds an uploaded file. Default DefaultMaxFileSize.
	MaxFileSize int64
	// FileTypes lists the accepted content types. Default DefaultFileTypes.
	FileTypes []string
	// Audit records workspace key creation and revocation (action, the
	// acting user's stable id, a detail naming workspace and key). Nil
	// records nothing.
	Audit func(ctx context.Context, action, userID, detail string)
	// Reauthenticate is asked before a workspace API key is made: it
	// checks that the person making it knows the account's current
	// password and, when the account has a second factor, has just proved
	// one (KeyProof); its error refuses the key and is shown to them. A key
	// is a credential of the account: a borrowed session alone must not
	// mint one. Nil refuses workspaceKeyCreate. An enclave server checks
	// both with its accounts service.
	Reauthenticate func(ctx context.Context, c capabilities.Caller, p KeyProof) error
}

// InvitationQuotaClass is the quota class an enclave server counts
// invitations under, per inviter and UTC day.
const InvitationQuotaClass = "workspace_invitation"

// DefaultInvitationsPerDay is how many invitations one account may send
// per UTC day on an enclave server by default (Options.InvitationsPerDay).
const DefaultInvitationsPerDay = 50

// InvitationRecordKeep is how long the record of an expired invitation is
// kept (pruned when the workspace next invites someone).
const InvitationRecordKeep = 30 * 24 * time.Hour

// DefaultInvitationTTL is how long an invitation link works by default.
const DefaultInvitationTTL = 7 * 24 * time.Hour

// DefaultIdempotencyTTL is how long an idempotency key's result is kept
// by default.
const DefaultIdempotencyTTL = 7 * 24 * time.Hour

// DeleteConfirmationTTL is how long a workspaceDelete confirmation token
// works.
const DeleteConfirmationTTL = 10 * time.Minute

// Service is the workspaces domain: the directory, membership, invitations
// and named operations. Build it with New.
type Service struct {
	cfg   Config
	main  *storage.Store
	ws    Store
	reg   *capabilities.Registry
	jobs  *jobs.Queue
	log   *slog.Logger
	now   func() time.Time
	mu    sync.RWMutex
	ops   map[string]opInfo
	hooks []func(ctx context.Context, id string) error
}

// New builds the service, opens the workspace store and registers the
// workspace capabilities with cfg.Registry.
func New(ctx context.Context, cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Registry == nil {
		return nil, errors.New("workspaces: Config.Store and Config.Registry are required")
	}
	if cfg.IdempotencyTTL <= 0 {
		cfg.IdempotencyTTL = DefaultIdempotencyTTL
	}
	if cfg.InvitationTTL <= 0 {
		cfg.InvitationTTL = DefaultInvitationTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Dir == "" {
		dd := cfg.DataDir
		if dd == "" {
			dd = storage.DefaultDataDir
		}
		cfg.Dir = filepath.Join(dd, "workspaces")
	}
	s := &Service{cfg: cfg, main: cfg.Store, reg: cfg.Registry, jobs: cfg.Jobs, log: cfg.Logger,
		now: func() time.Time { return cfg.Now().UTC().Truncate(time.Microsecond) }, ops: map[string]opInfo{}}
	s.ws = cfg.WorkspaceStore
	if s.ws == nil {
		st, err := NewStore(ctx, cfg.Store, cfg.Dir, cfg.MaxOpen, cfg.Schema...)
		if err != nil {
			return nil, err
		}
		if sq, ok := st.(*SQLiteStore); ok && sq.Known == nil {
			sq.Known = func(ctx context.Context, id string) (bool, error) {
				if err := s.exists(ctx, id); errors.Is(err, errNotFound) {
					return false, nil
				} else if err != nil {
					return false, err
				}
				return true, nil
			}
		}
		s.ws = st
	}
	if err := s.reg.Register(s.capabilities()...); err != nil {
		return nil, fmt.Errorf("workspaces: %w", err)
	}
	if err := s.registerFiles(); err != nil {
		return nil, err
	}
	if s.jobs != nil {
		if err := s.jobs.Register(DropJob, s.dropJob); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// WorkspaceStore returns the store holding the workspaces' state.
func (s *Service) WorkspaceStore() Store { return s.ws }

// Close closes the workspace store.
func (s *Service) Close() error { return s.ws.Close() }

// newID returns a fresh workspace id: "w_" and 26 base32 characters.
func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "w_" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b))
}

func hashToken(t string) string {
	sum := sha256.Sum256([]byte(t))
	return hex.EncodeToString(sum[:])
}

// Directory rows.

type workspaceRow struct {
	bun.BaseModel        `bun:"table:workspaces"`
	ID                   string     `bun:"id,pk"`
	Name                 string     `bun:"name,notnull"`
	CreatedAt            time.Time  `bun:"created_at,notnull"`
	DeleteTokenHash      string     `bun:"delete_token_hash,notnull"`
	DeleteTokenExpiresAt *time.Time `bun:"delete_token_expires_at"`
}

type memberRow struct {
	bun.BaseModel `bun:"table:workspace_members"`
	ID            int64     `bun:"id,pk,autoincrement"`
	WorkspaceID   string    `bun:"workspace_id,notnull"`
	UserID        int64     `bun:"user_id,notnull"`
	Role          Role      `bun:"role,notnull"`
	CreatedAt     time.Time `bun:"created_at,notnull"`
}

type invitationRow struct {
	bun.BaseModel `bun:"table:workspace_invitations"`
	ID            int64      `bun:"id,pk,autoincrement"`
	WorkspaceID   string     `bun:"workspace_id,notnull"`
	UserID        int64      `bun:"user_id,notnull"`
	Email         string     `bun:"email,notnull"`
	Role          Role       `bun:"role,notnull"`
	TokenHash     string     `bun:"token_hash,notnull"`
	CreatedAt     time.Time  `bun:"created_at,notnull"`
	ExpiresAt     time.Time  `bun:"expires_at,notnull"`
	AcceptedAt    *time.Time `bun:"accepted_at"`
}

// Actor is who runs a workspace call: an account, its role in the
// workspace (capped by the API key it used, if any) and its stable id.
type Actor struct {
	UserID   int64
	StableID string
	Role     Role
	// KeyID is the workspace API key the call came with, or 0.
	KeyID int64
	// System is true for operations run by the server itself (jobs).
	System bool
}

// userOf returns the caller's users.id.
func (s *Service) userOf(ctx context.Context, db bun.IDB, c capabilities.Caller) (int64, error) {
	if c.OwnerID != 0 {
		return c.OwnerID, nil
	}
	if c.UserID == "" {
		return 0, errNotFound
	}
	var id int64
	err := db.NewSelect().Table("users").Column("id").Where("stable_user_id = ?", c.UserID).Scan(ctx, &id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, errNotFound
	}
	if err != nil {
		return 0, fmt.Errorf("workspaces: find caller: %w", err)
	}
	return id, nil
}

// roleIn returns userID's role in workspace id, or errNotFound.
func roleIn(ctx context.Context, db bun.IDB, id string, userID int64) (Role, error) {
	if validID(id) != nil {
		return "", errNotFound
	}
	var role Role
	err := db.NewSelect().Model((*memberRow)(nil)).Column("role").
		Where("workspace_id = ?", id).Where("user_id = ?", userID).Scan(ctx, &role)
	if errors.Is(err, sql.ErrNoRows) {
		return "", errNotFound
	}
	if err != nil {
		return "", fmt.Errorf("workspaces: read membership: %w", err)
	}
	return role, nil
}

// Access decides, fresh for each call, who the caller is in workspace id:
// its role (capped by the workspace API key it came with). An unknown
// workspace, one the caller is not a member of, and one a workspace key
// does not cover all get ErrNotFound.
func (s *Service) Access(ctx context.Context, c capabilities.Caller, id string) (Actor, error) {
	if validID(id) != nil {
		return Actor{}, errNotFound
	}
	uid, err := s.userOf(ctx, s.main.Reader, c)
	if err != nil {
		return Actor{}, err
	}
	role, err := roleIn(ctx, s.main.Reader, id, uid)
	if err != nil {
		return Actor{}, err
	}
	a := Actor{UserID: uid, StableID: c.UserID, Role: role}
	if keyID, ok := keyOf(c); ok {
		k, err := s.loadKey(ctx, keyID)
		if err != nil || k.WorkspaceID != id || k.UserID != uid {
			return Actor{}, errNotFound
		}
		a.KeyID = k.ID
		if a.Role.AtLeast(k.MaxRole) {
			a.Role = k.MaxRole
		}
	} else if confined(c) {
		return Actor{}, errNotFound
	}
	return a, nil
}

// Workspace is a workspace as a member sees it.
type Workspace struct {
	ID        string    `json:"workspaceId"`
	Name      string    `json:"name"`
	Role      Role      `json:"role" jsonschema:"the caller's role" schema:"enum=owner|admin|viewer"`
	CreatedAt time.Time `json:"createdAt"`
}

// Create makes a workspace with the caller as its owner.
func (s *Service) Create(ctx context.Context, c capabilities.Caller, name string) (Workspace, error) {
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 200 || !oneLine(name) {
		return Workspace{}, capabilities.Errorf(capabilities.CodeInvalidInput, "a workspace name has 1 to 200 characters on one line, with no control characters")
	}
	if confined(c) {
		return Workspace{}, capabilities.Errorf(capabilities.CodeNotFound, "workspaces cannot be created with this credential")
	}
	now := s.now()
	w := workspaceRow{ID: newID(), Name: name, CreatedAt: now}
	err := s.main.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		uid, err := s.userOf(ctx, tx, c)
		if err != nil {
			return err
		}
		if _, err := tx.NewInsert().Model(&w).Exec(ctx); err != nil {
			return fmt.Errorf("workspaces: create: %w", err)
		}
		m := memberRow{WorkspaceID: w.ID, UserID: uid, Role: RoleOwner, CreatedAt: now}
		if _, err := tx.NewInsert().Model(&m).Returning("NULL").Exec(ctx); err != nil {
			return fmt.Errorf("workspaces: add owner: %w", err)
		}
		return nil
	})
	if err != nil {
		return Workspace{}, err
	}
	return Workspace{ID: w.ID, Name: w.Name, Role: RoleOwner, CreatedAt: w.CreatedAt}, nil
}

// oneLine reports whether name is one line of printable text: no control
// characters (a line break would put text of the creator's choosing into
// the body of the invitation mails the server sends, and no mail subject
// may hold one) and no bidirectional overrides (which disguise text).
func oneLine(name string) bool {
	for _, r := range name {
		if unicode.IsControl(r) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) || r == utf8.RuneError {
			return false
		}
	}
	return true
}

// List returns the workspaces the caller belongs to, oldest first.
func (s *Service) List(ctx context.Context, c capabilities.Caller) ([]Workspace, error) {
	uid, err := s.userOf(ctx, s.main.Reader, c)
	if err != nil {
		return nil, err
	}
	var out []Workspace
	q := s.main.Reader.NewSelect().TableExpr("workspaces AS w").
		ColumnExpr("w.id, w.name, w.created_at, m.role").
		Join("JOIN workspace_members AS m ON m.workspace_id = w.id").
		Where("m.user_id = ?", uid).OrderExpr("w.created_at, w.id")
	if keyID, ok := keyOf(c); ok {
		q = q.Where("w.id IN (SELECT k.workspace_id FROM workspace_api_keys AS k WHERE k.id = ? AND k.revoked_at IS NULL AND k.user_id = ?)", keyID, uid)
	} else if confined(c) {
		return nil, nil
	}
	var rows []struct {
		ID        string    `bun:"id"`
		Name      string    `bun:"name"`
		CreatedAt time.Time `bun:"created_at"`
		Role      Role      `bun:"role"`
	}
	if err := q.Scan(ctx, &rows); err != nil {
		return nil, fmt.Errorf("workspaces: list: %w", err)
	}
	for _, r := range rows {
		out = append(out, Workspace{ID: r.ID, Name: r.Name, Role: r.Role, CreatedAt: r.CreatedAt})
	}
	return out, nil
}

// Details is workspaceGet's answer.
type Details struct {
	Workspace
	Revision int64 `json:"revision" jsonschema:"the number of operations committed so far"`
	Members  int   `json:"members"`
}

// Get returns a workspace the caller belongs to.
func (s *Service) Get(ctx context.Context, c capabilities.Caller, id string) (Details, error) {
	a, err := s.Access(ctx, c, id)
	if err != nil {
		return Details{}, err
	}
	var w workspaceRow
	if err := s.main.Reader.NewSelect().Model(&w).Where("id = ?", id).Scan(ctx); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return Details{}, errNotFound
		}
		return Details{}, fmt.Errorf("workspaces: get: %w", err)
	}
	n, err := s.main.Reader.NewSelect().Model((*memberRow)(nil)).Where("workspace_id = ?", id).Count(ctx)
	if err != nil {
		return Details{}, fmt.Errorf("workspaces: count members: %w", err)
	}
	rev, err := s.Revision(ctx, id)
	if err != nil {
		return Details{}, err
	}
	return Details{Workspace: Workspace{ID: w.ID, Name: w.Name, Role: a.Role, CreatedAt: w.CreatedAt}, Revision: rev, Members: int(n)}, nil
}

// Revision returns the workspace's current revision (0 before any op).
// It does not check membership.
func (s *Service) Revision(ctx context.Context, id string) (int64, error) {
	var rev int64
	err := s.ws.View(ctx, id, func(ctx context.Context, tx bun.Tx) error {
		var err error
		rev, err = readRevision(ctx, tx, id)
		return err
	})
	return rev, err
}

func readRevision(ctx context.Context, db bun.IDB, id string) (int64, error) {
	var rev int64
	err := db.NewSelect().Table("workspace_state").Column("revision").Where("workspace_id = ?", id).Scan(ctx, &rev)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("workspaces: read revision: %w", err)
	}
	return rev, nil
}

// lockWorkspace serializes directory changes of one workspace inside tx:
// on PostgreSQL it locks the workspace's row; on SQLite the transaction
// already holds the database's write lock. It returns errNotFound when
// the workspace is gone.
func (s *Service) lockWorkspace(ctx context.Context, tx bun.Tx, id string) (workspaceRow, error) {
	var w workspaceRow
	q := tx.NewSelect().Model(&w).Where("id = ?", id)
	if s.main.Dialect() == storage.Postgres {
		q = q.For("UPDATE")
	}
	if err := q.Scan(ctx); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return w, errNotFound
		}
		return w, fmt.Errorf("workspaces: lock workspace: %w", err)
	}
	return w, nil
}

// lockActor is lockWorkspace plus the actor's role read again under the
// lock: Access read it before the transaction, and a demotion or removal
// that committed meanwhile must not let the call act with the old role.
// A key still caps the role.
func (s *Service) lockActor(ctx context.Context, tx bun.Tx, id string, a Actor) (workspaceRow, Actor, error) {
	w, err := s.lockWorkspace(ctx, tx, id)
	if err != nil {
		return w, a, err
	}
	role, err := roleIn(ctx, tx, id, a.UserID)
	if err != nil {
		return w, a, err
	}
	if a.KeyID == 0 || role.rank() < a.Role.rank() {
		a.Role = role
	}
	return w, a, nil
}

// ownerGuard is the SQL condition that keeps the last owner: a row that is
// not an owner, or an owner with another owner beside it.
const ownerGuard = `(role <> 'owner' OR (SELECT count(*) FROM workspace_members AS o WHERE o.workspace_id = ? AND o.role = 'owner') > 1)`

// Member is one member as members see it.
type Member struct {
	UserID   string    `json:"userId" jsonschema:"the member's stable user id"`
	Username string    `json:"username"`
	Role     Role      `json:"role" schema:"enum=owner|admin|viewer"`
	Since    time.Time `json:"since"`
}

// Invitation is a pending invitation as admins see it (never its link).
type Invitation struct {
	ID        int64     `json:"invitationId"`
	Email     string    `json:"email"`
	Role      Role      `json:"role" schema:"enum=owner|admin|viewer"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// Members lists the members of a workspace, and its pending invitations
// when the caller is an admin or owner.
func (s *Service) Members(ctx context.Context, c capabilities.Caller, id string) ([]Member, []Invitation, error) {
	a, err := s.Access(ctx, c, id)
	if err != nil {
		return nil, nil, err
	}
	var rows []struct {
		StableID  string    `bun:"stable_user_id"`
		Username  string    `bun:"username"`
		Role      Role      `bun:"role"`
		CreatedAt time.Time `bun:"created_at"`
	}
	if err := s.main.Reader.NewSelect().TableExpr("workspace_members AS m").
		ColumnExpr("u.stable_user_id, u.username, m.role, m.created_at").
		Join("JOIN users AS u ON u.id = m.user_id").
		Where("m.workspace_id = ?", id).OrderExpr("m.created_at, m.id").Scan(ctx, &rows); err != nil {
		return nil, nil, fmt.Errorf("workspaces: list members: %w", err)
	}
	members := make([]Member, 0, len(rows))
	for _, r := range rows {
		members = append(members, Member{UserID: r.StableID, Username: r.Username, Role: r.Role, Since: r.CreatedAt})
	}
	invs := []Invitation{}
	if a.Role.AtLeast(RoleAdmin) {
		var irows []invitationRow
		if err := s.main.Reader.NewSelect().Model(&irows).Where("workspace_id = ?", id).
			Where("accepted_at IS NULL").Where("expires_at > ?", s.now()).Order("id").Scan(ctx); err != nil {
			return nil, nil, fmt.Errorf("workspaces: list invitations: %w", err)
		}
		for _, r := range irows {
			invs = append(invs, Invitation{ID: r.ID, Email: r.Email, Role: r.Role, ExpiresAt: r.ExpiresAt})
		}
	}
	return members, invs, nil
}

// mayAssign reports whether a member of role actor may give role to
// someone, or take away a member's current role: owners manage everyone;
// admins manage admins and viewers.
func mayAssign(actor, role Role) bool {
	switch actor {
	case RoleOwner:
		return true
	case RoleAdmin:
		return role == RoleAdmin || role == RoleViewer
	}
	return false
}

// Invite records an invitation of email to workspace id with role and
// mails its single-use link. It returns the invitation.
func (s *Service) Invite(ctx context.Context, c capabilities.Caller, id, email string, role Role) (Invitation, error) {
	a, err := s.Access(ctx, c, id)
	if err != nil {
		return Invitation{}, err
	}
	if !role.Valid() {
		return Invitation{}, capabilities.Errorf(capabilities.CodeInvalidInput, "role must be owner, admin or viewer")
	}
	if !a.Role.AtLeast(RoleAdmin) || !mayAssign(a.Role, role) {
		return Invitation{}, errRole(a.Role, "inviting a member as "+string(role))
	}
	email, err = normalizeEmail(email)
	if err != nil {
		return Invitation{}, err
	}
	if s.cfg.Mailer == nil {
		return Invitation{}, capabilities.Errorf(capabilities.CodeUnsupported, "this server cannot send invitations: no mailer is configured")
	}
	if s.cfg.InvitationLimit != nil {
		if err := s.cfg.InvitationLimit(ctx, c); err != nil {
			return Invitation{}, err
		}
	}
	token := rand.Text()
	now := s.now()
	inv := invitationRow{WorkspaceID: id, UserID: a.UserID, Email: email, Role: role, TokenHash: hashToken(token), CreatedAt: now, ExpiresAt: now.Add(s.cfg.InvitationTTL)}
	err = s.main.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		w, a, err := s.lockActor(ctx, tx, id, a)
		if err != nil {
			return err
		}
		if !a.Role.AtLeast(RoleAdmin) || !mayAssign(a.Role, role) {
			return errRole(a.Role, "inviting a member as "+string(role))
		}
		n, err := tx.NewSelect().TableExpr("workspace_members AS m").Join("JOIN users AS u ON u.id = m.user_id").
			Where("m.workspace_id = ?", id).Where("u.email = ?", email).Count(ctx)
		if err != nil {
			return fmt.Errorf("workspaces: check membership: %w", err)
		}
		if n > 0 {
			return errConflict("%s is already a member of this workspace", email)
		}
		// Records of used or expired invitations go after InvitationRecordKeep.
		if _, err := tx.NewDelete().Model((*invitationRow)(nil)).Where("workspace_id = ?", id).
			Where("expires_at < ?", now.Add(-InvitationRecordKeep)).Exec(ctx); err != nil {
			return fmt.Errorf("workspaces: prune invitations: %w", err)
		}
		if _, err := tx.NewInsert().Model(&inv).Exec(ctx); err != nil {
			return fmt.Errorf("workspaces: record invitation: %w", err)
		}
		var inviter string
		if err := tx.NewSelect().Table("users").Column("username").Where("id = ?", a.UserID).Scan(ctx, &inviter); err != nil {
			return fmt.Errorf("workspaces: find inviter: %w", err)
		}
		return s.cfg.Mailer.MailWorkspaceInvitation(ctx, tx, InvitationMail{
			To: email, WorkspaceName: w.Name, InvitedBy: inviter, Role: role,
			URL: InvitationURL(s.cfg.BaseURL, token), ExpiresAt: inv.ExpiresAt,
		})
	})
	if err != nil {
		return Invitation{}, err
	}
	return Invitation{ID: inv.ID, Email: email, Role: role, ExpiresAt: inv.ExpiresAt}, nil
}

// InvitationPath is the web path of an invitation link; the token follows
// in the "token" query parameter.
const InvitationPath = "/workspaces/join"

// InvitationURL is the link an invitation mail carries.
func InvitationURL(baseURL, token string) string {
	return strings.TrimRight(baseURL, "/") + InvitationPath + "?token=" + token
}

func normalizeEmail(e string) (string, error) {
	e = strings.ToLower(strings.TrimSpace(e))
	at := strings.LastIndexByte(e, '@')
	if at < 1 || at == len(e)-1 || len(e) > 254 || strings.ContainsAny(e, " \t\r\n<>,;\x00") {
		return "", capabilities.Errorf(capabilities.CodeInvalidInput, "email must be an address like name@example.com")
	}
	// An address no mail can go to is the caller's mistake, not a failure
	// of the mailer inside the transaction.
	if a, err := mail.ParseAddress(e); err != nil || a.Address != e {
		return "", capabilities.Errorf(capabilities.CodeInvalidInput, "email must be an address like name@example.com")
	}
	return e, nil
}

// errInvitation is the one answer for an invitation link that is unknown,
// used, expired, or meant for another address.
var errInvitation = capabilities.Errorf(capabilities.CodeNotFound, "this invitation is unknown, used or expired, or was sent to another address")

// Accept uses up an invitation link: the caller, whose account email must
// be the invited address, becomes a member with the invited role (a
// member already keeps their role). The link works only while its sender
// is still an admin or owner who may give that role, and joining uses up
// every other link sent to the address for the workspace.
func (s *Service) Accept(ctx context.Context, c capabilities.Caller, token string) (Workspace, error) {
	if confined(c) {
		return Workspace{}, errInvitation
	}
	token = strings.TrimSpace(token)
	if token == "" || len(token) > 200 {
		return Workspace{}, errInvitation
	}
	var out Workspace
	err := s.main.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		uid, err := s.userOf(ctx, tx, c)
		if err != nil {
			return err
		}
		var me struct {
			Email    string     `bun:"email"`
			Verified *time.Time `bun:"email_verified_at"`
		}
		if err := tx.NewSelect().Table("users").Column("email", "email_verified_at").Where("id = ?", uid).Scan(ctx, &me); err != nil {
			return fmt.Errorf("workspaces: find caller email: %w", err)
		}
		if me.Verified == nil {
			// Whoever signs up with an address has not shown they read its
			// mail: an invitation waits for the address to be verified.
			return capabilities.Errorf(capabilities.CodeConflict, "verify your email address first, then open the invitation link again")
		}
		email := me.Email
		var inv invitationRow
		err = tx.NewSelect().Model(&inv).Where("token_hash = ?", hashToken(token)).Scan(ctx)
		if errors.Is(err, sql.ErrNoRows) {
			return errInvitation
		}
		if err != nil {
			return fmt.Errorf("workspaces: read invitation: %w", err)
		}
		now := s.now()
		if inv.AcceptedAt != nil || !now.Before(inv.ExpiresAt) || !strings.EqualFold(inv.Email, email) {
			return errInvitation
		}
		// The workspace first, then its invitation rows: every change of a
		// workspace's directory locks in that order, so two links accepted
		// at once queue instead of deadlocking.
		w, err := s.lockWorkspace(ctx, tx, inv.WorkspaceID)
		if errors.Is(err, errNotFound) {
			return errInvitation
		}
		if err != nil {
			return err
		}
		res, err := tx.NewUpdate().Model((*invitationRow)(nil)).Set("accepted_at = ?", now).
			Where("id = ?", inv.ID).Where("accepted_at IS NULL").Exec(ctx)
		if err != nil {
			return fmt.Errorf("workspaces: use invitation: %w", err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return errInvitation
		}
		// The link carries no more power than its sender has now: one who
		// was removed, or demoted below the invited role, sent a dead link.
		inviter, err := roleIn(ctx, tx, w.ID, inv.UserID)
		if errors.Is(err, errNotFound) || (err == nil && (!inviter.AtLeast(RoleAdmin) || !mayAssign(inviter, inv.Role))) {
			return errInvitation
		}
		if err != nil {
			return err
		}
		// Joining uses up every other link sent to the address for this
		// workspace: a second link (a resent mail) must not let a member
		// who was later demoted or removed take a role back.
		if _, err := tx.NewUpdate().Model((*invitationRow)(nil)).Set("accepted_at = ?", now).
			Where("workspace_id = ?", w.ID).Where("email = ?", strings.ToLower(inv.Email)).
			Where("accepted_at IS NULL").Exec(ctx); err != nil {
			return fmt.Errorf("workspaces: use invitations: %w", err)
		}
		role := inv.Role
		have, err := roleIn(ctx, tx, w.ID, uid)
		switch {
		case err == nil:
			// A member keeps the role they have: roles change through
			// workspaceMemberRoleSet, never through an old link.
			role = have
		case errors.Is(err, errNotFound):
			m := memberRow{WorkspaceID: w.ID, UserID: uid, Role: role, CreatedAt: now}
			if _, err := tx.NewInsert().Model(&m).Returning("NULL").Exec(ctx); err != nil {
				return fmt.Errorf("workspaces: add member: %w", err)
			}
		default:
			return err
		}
		out = Workspace{ID: w.ID, Name: w.Name, Role: role, CreatedAt: w.CreatedAt}
		return nil
	})
	return out, err
}

// targetOf returns the users.id of the member with stable id target.
func targetOf(ctx context.Context, db bun.IDB, id, target string) (int64, Role, error) {
	var row struct {
		UserID int64 `bun:"user_id"`
		Role   Role  `bun:"role"`
	}
	err := db.NewSelect().TableExpr("workspace_members AS m").ColumnExpr("m.user_id, m.role").
		Join("JOIN users AS u ON u.id = m.user_id").
		Where("m.workspace_id = ?", id).Where("u.stable_user_id = ?", target).Scan(ctx, &row)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, "", capabilities.Errorf(capabilities.CodeNotFound, "no such member in this workspace")
	}
	if err != nil {
		return 0, "", fmt.Errorf("workspaces: find member: %w", err)
	}
	return row.UserID, row.Role, nil
}

var errLastOwner = errConflict("a workspace keeps at least one owner: make another member owner first")

// SetRole changes a member's role. Owners change anyone's; admins change
// admins and viewers between admin and viewer. The last owner cannot be
// demoted.
func (s *Service) SetRole(ctx context.Context, c capabilities.Caller, id, target string, role Role) (Member, error) {
	a, err := s.Access(ctx, c, id)
	if err != nil {
		return Member{}, err
	}
	if !role.Valid() {
		return Member{}, capabilities.Errorf(capabilities.CodeInvalidInput, "role must be owner, admin or viewer")
	}
	if !a.Role.AtLeast(RoleAdmin) {
		return Member{}, errRole(a.Role, "changing roles")
	}
	var out Member
	err = s.main.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		_, a, err := s.lockActor(ctx, tx, id, a)
		if err != nil {
			return err
		}
		if !a.Role.AtLeast(RoleAdmin) {
			return errRole(a.Role, "changing roles")
		}
		uid, have, err := targetOf(ctx, tx, id, target)
		if err != nil {
			return err
		}
		if !mayAssign(a.Role, have) || !mayAssign(a.Role, role) {
			return errRole(a.Role, "changing a "+string(have)+" to "+string(role))
		}
		res, err := tx.NewUpdate().Model((*memberRow)(nil)).Set("role = ?", role).
			Where("workspace_id = ?", id).Where("user_id = ?", uid).
			Where("(? = 'owner' OR "+ownerGuard+")", string(role), id).Exec(ctx)
		if err != nil {
			return fmt.Errorf("workspaces: set role: %w", err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return errLastOwner
		}
		out, err = memberOut(ctx, tx, id, uid)
		return err
	})
	return out, err
}

func memberOut(ctx context.Context, db bun.IDB, id string, uid int64) (Member, error) {
	var row struct {
		StableID  string    `bun:"stable_user_id"`
		Username  string    `bun:"username"`
		Role      Role      `bun:"role"`
		CreatedAt time.Time `bun:"created_at"`
	}
	if err := db.NewSelect().TableExpr("workspace_members AS m").
		ColumnExpr("u.stable_user_id, u.username, m.role, m.created_at").
		Join("JOIN users AS u ON u.id = m.user_id").
		Where("m.workspace_id = ?", id).Where("m.user_id = ?", uid).Scan(ctx, &row); err != nil {
		return Member{}, fmt.Errorf("workspaces: read member: %w", err)
	}
	return Member{UserID: row.StableID, Username: row.Username, Role: row.Role, Since: row.CreatedAt}, nil
}

// Remove takes a member out of the workspace (owners remove anyone,
// admins remove admins and viewers); the last owner cannot be removed.
// Removing oneself is Leave.
func (s *Service) Remove(ctx context.Context, c capabilities.Caller, id, target string) error {
	a, err := s.Access(ctx, c, id)
	if err != nil {
		return err
	}
	if !a.Role.AtLeast(RoleAdmin) && target != c.UserID {
		return errRole(a.Role, "removing members")
	}
	return s.main.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		_, a, err := s.lockActor(ctx, tx, id, a)
		if err != nil {
			return err
		}
		uid, have, err := targetOf(ctx, tx, id, target)
		if err != nil {
			return err
		}
		if uid != a.UserID && !mayAssign(a.Role, have) {
			return errRole(a.Role, "removing a "+string(have))
		}
		return removeMember(ctx, tx, id, uid, s.now())
	})
}

// removeMember deletes one membership inside tx, refusing the last owner
// in the same statement, and revokes the workspace keys the member made.
func removeMember(ctx context.Context, tx bun.IDB, id string, uid int64, now time.Time) error {
	res, err := tx.NewDelete().Model((*memberRow)(nil)).
		Where("workspace_id = ?", id).Where("user_id = ?", uid).
		Where(ownerGuard, id).Exec(ctx)
	if err != nil {
		return fmt.Errorf("workspaces: remove member: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return errLastOwner
	}
	// The keys the member made go with them: rejoining later must not
	// bring a key back to life.
	if _, err := tx.NewUpdate().Model((*keyRow)(nil)).Set("revoked_at = ?", now).
		Where("workspace_id = ?", id).Where("user_id = ?", uid).Where("revoked_at IS NULL").Exec(ctx); err != nil {
		return fmt.Errorf("workspaces: revoke the member's keys: %w", err)
	}
	return nil
}

// Leave takes the caller out of the workspace; the last owner cannot
// leave (delete the workspace or make someone else owner first).
func (s *Service) Leave(ctx context.Context, c capabilities.Caller, id string) error {
	if _, err := s.Access(ctx, c, id); err != nil {
		return err
	}
	return s.Remove(ctx, c, id, c.UserID)
}

// DeleteRequest is the first step of workspaceDelete.
type DeleteRequest struct {
	Token     string
	ExpiresAt time.Time
	Name      string
}

// RequestDelete starts deleting a workspace: it returns a confirmation
// token that Delete takes within DeleteConfirmationTTL. Owners only.
func (s *Service) RequestDelete(ctx context.Context, c capabilities.Caller, id string) (DeleteRequest, error) {
	a, err := s.Access(ctx, c, id)
	if err != nil {
		return DeleteRequest{}, err
	}
	if a.Role != RoleOwner {
		return DeleteRequest{}, errRole(a.Role, "deleting the workspace")
	}
	token := rand.Text()
	exp := s.now().Add(DeleteConfirmationTTL)
	var name string
	err = s.main.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		w, a, err := s.lockActor(ctx, tx, id, a)
		if err != nil {
			return err
		}
		if a.Role != RoleOwner {
			return errRole(a.Role, "deleting the workspace")
		}
		name = w.Name
		_, err = tx.NewUpdate().Model((*workspaceRow)(nil)).Set("delete_token_hash = ?", hashToken(token)).
			Set("delete_token_expires_at = ?", exp).Where("id = ?", id).Exec(ctx)
		return err
	})
	if err != nil {
		return DeleteRequest{}, err
	}
	return DeleteRequest{Token: token, ExpiresAt: exp, Name: name}, nil
}

var errConfirmation = errConflict("the confirmation token is wrong or expired: call workspaceDelete without it to get a new one")

// Delete deletes a workspace for good, given the token RequestDelete
// returned: its directory entry, memberships and invitations at once, then
// its state. Owners only.
func (s *Service) Delete(ctx context.Context, c capabilities.Caller, id, token string) error {
	a, err := s.Access(ctx, c, id)
	if err != nil {
		return err
	}
	if a.Role != RoleOwner {
		return errRole(a.Role, "deleting the workspace")
	}
	err = s.main.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		w, a, err := s.lockActor(ctx, tx, id, a)
		if err != nil {
			return err
		}
		if a.Role != RoleOwner {
			return errRole(a.Role, "deleting the workspace")
		}
		if w.DeleteTokenHash == "" || w.DeleteTokenExpiresAt == nil || !s.now().Before(*w.DeleteTokenExpiresAt) ||
			w.DeleteTokenHash != hashToken(strings.TrimSpace(token)) {
			return errConfirmation
		}
		return s.deleteDirectory(ctx, tx, id)
	})
	if err != nil {
		return err
	}
	return s.dropState(ctx, id)
}

// DropJob is the job kind that removes a deleted workspace's state and
// blobs. It is queued with the directory's deletion, so a failure or a
// crash after that commit is retried; removing what is already gone is
// fine.
const DropJob = "workspace.drop"

type dropPayload struct {
	WorkspaceID string `json:"workspaceId"`
}

// deleteDirectory deletes a workspace's directory rows inside tx and
// queues DropJob in the same transaction. The caller runs dropState after
// the commit (the fast path); the job repeats it if that fails.
func (s *Service) deleteDirectory(ctx context.Context, tx bun.IDB, id string) error {
	if err := deleteDirectory(ctx, tx, id); err != nil {
		return err
	}
	if s.jobs != nil {
		if err := s.jobs.Enqueue(ctx, tx, DropJob, "", dropPayload{WorkspaceID: id}); err != nil {
			return fmt.Errorf("workspaces: queue state removal: %w", err)
		}
	}
	return nil
}

func (s *Service) dropJob(ctx context.Context, job jobs.Job) error {
	var p dropPayload
	if err := job.Decode(&p); err != nil {
		return err
	}
	return s.DropDeleted(ctx, p.WorkspaceID)
}

// DropDeleted removes the state and blobs of workspace id if its directory
// entry is gone (what DropJob does); a live workspace is left alone.
func (s *Service) DropDeleted(ctx context.Context, id string) error {
	if validID(id) != nil {
		return nil // nothing this service made
	}
	n, err := s.main.DB.NewSelect().Model((*workspaceRow)(nil)).Where("id = ?", id).Count(ctx)
	if err != nil {
		return err
	}
	if n > 0 {
		return nil // the workspace exists: never drop a live one
	}
	return s.dropState(ctx, id)
}

func deleteDirectory(ctx context.Context, tx bun.IDB, id string) error {
	for _, t := range []string{"workspace_invitations", "workspace_api_keys", "workspace_members"} {
		if _, err := tx.NewDelete().Table(t).Where("workspace_id = ?", id).Exec(ctx); err != nil {
			return fmt.Errorf("workspaces: delete %s: %w", t, err)
		}
	}
	if _, err := tx.NewDelete().Model((*workspaceRow)(nil)).Where("id = ?", id).Exec(ctx); err != nil {
		return fmt.Errorf("workspaces: delete workspace: %w", err)
	}
	return nil
}

// dropState removes the state of a workspace whose directory entry is
// gone, after the deletion hooks (file blobs) ran.
func (s *Service) dropState(ctx context.Context, id string) error {
	s.mu.RLock()
	hooks := s.hooks
	s.mu.RUnlock()
	for _, h := range hooks {
		if err := h(ctx, id); err != nil {
			s.log.ErrorContext(ctx, "workspaces: deletion hook failed", "workspace", id, "err", err)
			return fmt.Errorf("workspaces: delete %s: %w", id, err)
		}
	}
	if err := s.ws.Drop(ctx, id); err != nil {
		s.log.ErrorContext(ctx, "workspaces: drop state failed", "workspace", id, "err", err)
		return err
	}
	return nil
}

// OnDelete adds a function run for each deleted workspace before its state
// is dropped (for data kept outside the workspace store, such as blobs).
func (s *Service) OnDelete(fn func(ctx context.Context, id string) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hooks = append(s.hooks, fn)
}

// Options are what a server's configuration says about workspaces
// (enclave.Config.Workspaces); the server fills in the rest of Config.
type Options struct {
	// MaxOpen bounds the workspace files open at once on SQLite. Default
	// DefaultMaxOpen.
	MaxOpen int
	// Schema holds the embedder's workspace tables.
	Schema []migrations.Source
	// InvitationTTL is how long an invitation link works. Default 7 days.
	InvitationTTL time.Duration
	// InvitationsPerDay bounds the invitations one account sends per UTC
	// day. 0 means DefaultInvitationsPerDay; negative, no bound.
	InvitationsPerDay int
	// Dir holds the per-workspace SQLite files. Default <DataDir>/workspaces.
	Dir string
	// MaxFileSize and FileTypes limit uploads (see Config).
	MaxFileSize int64
	FileTypes   []string
	// IdempotencyTTL is how long ops keep results for idempotency keys.
	// Default 7 days.
	IdempotencyTTL time.Duration
}

// RegisterInventory records the directory's user-owned tables: a member's
// memberships and the invitations they sent are exported with their
// account and deleted with it.
func RegisterInventory(inv *storage.Inventory) error {
	return errors.Join(
		inv.AddTable(storage.Table{Name: "workspace_members"}),
		inv.AddTable(storage.Table{Name: "workspace_invitations", Redact: []string{"token_hash"}}),
		inv.AddTable(storage.Table{Name: "workspace_api_keys", Redact: []string{"key_hash"}}),
	)
}
