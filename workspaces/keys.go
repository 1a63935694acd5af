package workspaces

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
)

// KeyPrefix starts every workspace API key, so that a transport can tell
// one from an OAuth access token.
const KeyPrefix = "ewk_"

// credentialPrefix starts Caller.Credential for a workspace key.
const credentialPrefix = "wk:"

// ErrInvalidKey is returned by VerifyKey for a key that is unknown,
// revoked, or whose workspace or maker is gone.
var ErrInvalidKey = errors.New("workspaces: invalid workspace key")

type keyRow struct {
	bun.BaseModel `bun:"table:workspace_api_keys"`
	ID            int64      `bun:"id,pk,autoincrement"`
	WorkspaceID   string     `bun:"workspace_id,notnull"`
	UserID        int64      `bun:"user_id,notnull"`
	Name          string     `bun:"name,notnull"`
	MaxRole       Role       `bun:"max_role,notnull"`
	KeyHash       string     `bun:"key_hash,notnull"`
	CreatedAt     time.Time  `bun:"created_at,notnull"`
	LastUsedAt    *time.Time `bun:"last_used_at"`
	RevokedAt     *time.Time `bun:"revoked_at"`
}

// APIKey is a workspace API key as its workspace's owners see it (never
// the key itself, which only its creation returns).
type APIKey struct {
	ID         int64      `json:"keyId"`
	Name       string     `json:"name"`
	MaxRole    Role       `json:"maxRole" schema:"enum=owner|admin|viewer"`
	CreatedAt  time.Time  `json:"createdAt"`
	LastUsedAt *time.Time `json:"lastUsedAt,omitempty"`
	RevokedAt  *time.Time `json:"revokedAt,omitempty"`
}

// OwnKey is one of the live keys an account made, as workspaceKeyListOwn
// shows it to that account.
type OwnKey struct {
	APIKey
	WorkspaceID   string `json:"workspaceId"`
	WorkspaceName string `json:"workspaceName"`
}

// KeyProof is what the person making a workspace API key proves besides
// their session (see Config.Reauthenticate): the account's current
// password and, when it has a second factor, a fresh proof of one, a code
// (authenticator app or recovery code) or a passkey assertion.
type KeyProof struct {
	Password          string
	Code              string
	PasskeyToken      string
	PasskeyCredential json.RawMessage
}

// NewKey is workspaceKeyCreate's answer: the key, shown this once.
type NewKey struct {
	APIKey
	Key string `json:"key" jsonschema:"the key, shown only now: send it as a Bearer token to the MCP endpoint"`
}

// KeyGrant is what a verified workspace key stands for.
type KeyGrant struct {
	// UserID is the stable id of the account the key acts as.
	UserID string
	// Credential goes to Caller.Credential.
	Credential string
	// Only goes to Caller.Only: the capabilities a key may use.
	Only []string
	// WorkspaceID is the one workspace the key reaches.
	WorkspaceID string
}

// keyOf parses a caller's workspace-key credential.
func keyOf(c capabilities.Caller) (int64, bool) {
	rest, ok := strings.CutPrefix(c.Credential, credentialPrefix)
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(rest, 10, 64)
	return id, err == nil && id > 0
}

// confined reports whether the caller came with a credential narrower
// than its account (any, not only a workspace key).
func confined(c capabilities.Caller) bool { return c.Credential != "" || c.Only != nil }

// loadKey returns a live key by id.
func (s *Service) loadKey(ctx context.Context, id int64) (keyRow, error) {
	var k keyRow
	err := s.main.Reader.NewSelect().Model(&k).Where("id = ?", id).Where("revoked_at IS NULL").Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return k, errNotFound
	}
	if err != nil {
		return k, fmt.Errorf("workspaces: read key: %w", err)
	}
	return k, nil
}

// KeyCapabilities names the capabilities a workspace key may call: every
// registered (non-system) op, workspaceGet, workspaceList and
// workspaceMemberList.
func (s *Service) KeyCapabilities() []string {
	out := []string{"workspaceGet", "workspaceList", "workspaceMemberList"}
	s.mu.RLock()
	for name, op := range s.ops {
		if !op.system {
			out = append(out, name)
		}
	}
	s.mu.RUnlock()
	slices.Sort(out)
	return out
}

// VerifyKey checks a workspace API key presented as a bearer token. It
// returns ErrInvalidKey for a key that does not work (any other error is
// an outage).
func (s *Service) VerifyKey(ctx context.Context, key string) (KeyGrant, error) {
	if !strings.HasPrefix(key, KeyPrefix) || len(key) > 200 {
		return KeyGrant{}, ErrInvalidKey
	}
	var row struct {
		ID          int64      `bun:"id"`
		WorkspaceID string     `bun:"workspace_id"`
		StableID    string     `bun:"stable_user_id"`
		LastUsedAt  *time.Time `bun:"last_used_at"`
	}
	err := s.main.Reader.NewSelect().TableExpr("workspace_api_keys AS k").
		ColumnExpr("k.id, k.workspace_id, u.stable_user_id, k.last_used_at").
		Join("JOIN users AS u ON u.id = k.user_id").
		Where("k.key_hash = ?", hashToken(key)).Where("k.revoked_at IS NULL").Scan(ctx, &row)
	if errors.Is(err, sql.ErrNoRows) {
		return KeyGrant{}, ErrInvalidKey
	}
	if err != nil {
		return KeyGrant{}, fmt.Errorf("workspaces: verify key: %w", err)
	}
	now := s.now()
	if row.LastUsedAt == nil || now.Sub(*row.LastUsedAt) > time.Minute {
		// At most one write a minute per key: when it was last used.
		if _, err := s.main.DB.NewUpdate().Model((*keyRow)(nil)).Set("last_used_at = ?", now).Where("id = ?", row.ID).Exec(ctx); err != nil {
			s.log.WarnContext(ctx, "workspaces: record key use", "err", err)
		}
	}
	return KeyGrant{UserID: row.StableID, Credential: credentialPrefix + strconv.FormatInt(row.ID, 10),
		Only: s.KeyCapabilities(), WorkspaceID: row.WorkspaceID}, nil
}

// CreateKey makes a workspace API key with at most maxRole. Owners only,
// from the web shell (the key is a secret shown once, to its owner), after
// Config.Reauthenticate accepted proof; the account is told by mail
// (KeyMailer) in the same transaction.
func (s *Service) CreateKey(ctx context.Context, c capabilities.Caller, id, name string, maxRole Role, proof KeyProof) (NewKey, error) {
	a, err := s.Access(ctx, c, id)
	if err != nil {
		return NewKey{}, err
	}
	if a.Role != RoleOwner || a.KeyID != 0 {
		return NewKey{}, errRole(a.Role, "managing API keys")
	}
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 100 || !oneLine(name) {
		// One line: the name goes into the mail that tells the owner.
		return NewKey{}, capabilities.Errorf(capabilities.CodeInvalidInput, "a key name has 1 to 100 characters on one line, with no control characters")
	}
	if !maxRole.Valid() {
		return NewKey{}, capabilities.Errorf(capabilities.CodeInvalidInput, "maxRole must be owner, admin or viewer")
	}
	// Checked last, once the request is otherwise good: a code is spent.
	if s.cfg.Reauthenticate == nil {
		return NewKey{}, capabilities.Errorf(capabilities.CodeUnsupported, "workspace API keys cannot be made on this server")
	}
	if err := s.cfg.Reauthenticate(ctx, c, proof); err != nil {
		return NewKey{}, err
	}
	key := KeyPrefix + rand.Text()
	k := keyRow{WorkspaceID: id, UserID: a.UserID, Name: name, MaxRole: maxRole, KeyHash: hashToken(key), CreatedAt: s.now()}
	err = s.main.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewInsert().Model(&k).Exec(ctx); err != nil {
			return fmt.Errorf("workspaces: create key: %w", err)
		}
		km, ok := s.cfg.Mailer.(KeyMailer)
		if !ok {
			return nil
		}
		m := KeyMail{KeyName: k.Name, MaxRole: k.MaxRole, CreatedAt: k.CreatedAt}
		err := tx.NewSelect().TableExpr("users AS u").ColumnExpr("u.email, u.username, w.name").
			Join("JOIN workspaces AS w ON w.id = ?", id).Where("u.id = ?", a.UserID).
			Scan(ctx, &m.To, &m.Username, &m.WorkspaceName)
		if err != nil {
			return fmt.Errorf("workspaces: create key: read owner: %w", err)
		}
		return km.MailWorkspaceKeyCreated(ctx, tx, m)
	})
	if err != nil {
		return NewKey{}, err
	}
	s.audit(ctx, "workspace_key_create", c.UserID, id+" key "+strconv.FormatInt(k.ID, 10)+" "+string(maxRole))
	return NewKey{APIKey: APIKey{ID: k.ID, Name: k.Name, MaxRole: k.MaxRole, CreatedAt: k.CreatedAt}, Key: key}, nil
}

// Keys lists a workspace's API keys, revoked ones included. Owners only.
func (s *Service) Keys(ctx context.Context, c capabilities.Caller, id string) ([]APIKey, error) {
	a, err := s.Access(ctx, c, id)
	if err != nil {
		return nil, err
	}
	if a.Role != RoleOwner || a.KeyID != 0 {
		return nil, errRole(a.Role, "managing API keys")
	}
	var rows []keyRow
	if err := s.main.Reader.NewSelect().Model(&rows).Where("workspace_id = ?", id).Order("id").Scan(ctx); err != nil {
		return nil, fmt.Errorf("workspaces: list keys: %w", err)
	}
	out := make([]APIKey, len(rows))
	for i, r := range rows {
		out[i] = APIKey{ID: r.ID, Name: r.Name, MaxRole: r.MaxRole, CreatedAt: r.CreatedAt, LastUsedAt: r.LastUsedAt, RevokedAt: r.RevokedAt}
	}
	return out, nil
}

// RevokeKey revokes a workspace API key at once. Owners revoke any key of
// the workspace; any member revokes the keys they made (an owner since
// demoted still can: their keys work with what role they have left).
func (s *Service) RevokeKey(ctx context.Context, c capabilities.Caller, id string, keyID int64) error {
	a, err := s.Access(ctx, c, id)
	if err != nil {
		return err
	}
	if a.KeyID != 0 {
		return errRole(a.Role, "managing API keys")
	}
	q := s.main.DB.NewUpdate().Model((*keyRow)(nil)).Set("revoked_at = ?", s.now()).
		Where("id = ?", keyID).Where("workspace_id = ?", id).Where("revoked_at IS NULL")
	if a.Role != RoleOwner {
		q = q.Where("user_id = ?", a.UserID)
	}
	res, err := q.Exec(ctx)
	if err != nil {
		return fmt.Errorf("workspaces: revoke key: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return capabilities.Errorf(capabilities.CodeNotFound, "no such live key in this workspace")
	}
	s.audit(ctx, "workspace_key_revoke", c.UserID, id+" key "+strconv.FormatInt(keyID, 10))
	return nil
}

func (s *Service) audit(ctx context.Context, action, userID, detail string) {
	if s.cfg.Audit != nil {
		s.cfg.Audit(ctx, action, userID, detail)
	}
}

// OwnKeys lists the live workspace API keys the caller made, in every
// workspace, newest last (never the keys themselves). A caller confined to
// a credential (a workspace key) gets none.
func (s *Service) OwnKeys(ctx context.Context, c capabilities.Caller) ([]OwnKey, error) {
	if confined(c) {
		return nil, capabilities.Errorf(capabilities.CodeNotFound, "API keys cannot be listed with this credential")
	}
	uid, err := s.userOf(ctx, s.main.Reader, c)
	if err != nil {
		return nil, err
	}
	var rows []struct {
		keyRow        `bun:",extend"`
		WorkspaceName string `bun:"workspace_name"`
	}
	err = s.main.Reader.NewSelect().TableExpr("workspace_api_keys AS k").
		ColumnExpr("k.id, k.workspace_id, k.name, k.max_role, k.created_at, k.last_used_at, w.name AS workspace_name").
		Join("JOIN workspaces AS w ON w.id = k.workspace_id").
		Where("k.user_id = ?", uid).Where("k.revoked_at IS NULL").OrderExpr("k.id").Scan(ctx, &rows)
	if err != nil {
		return nil, fmt.Errorf("workspaces: list own keys: %w", err)
	}
	out := make([]OwnKey, len(rows))
	for i, r := range rows {
		out[i] = OwnKey{APIKey: APIKey{ID: r.ID, Name: r.Name, MaxRole: r.MaxRole, CreatedAt: r.CreatedAt, LastUsedAt: r.LastUsedAt},
			WorkspaceID: r.WorkspaceID, WorkspaceName: r.WorkspaceName}
	}
	return out, nil
}

// RevokeUserKeysInTx revokes, inside tx, every live workspace API key made
// by the account userID (users.id). It has the shape of an
// accounts.PasswordChangeHook: registered with
// accounts.Service.OnPasswordChange, keys die with the password as
// sessions and OAuth grants do, in the same transaction as a password
// change or reset and as every change of second factors that signs the
// account out everywhere. An enclave server registers it. Keys are checked
// in SQL on every call, so a revoked key is refused at its next request
// on every replica.
func (s *Service) RevokeUserKeysInTx(ctx context.Context, tx bun.Tx, userID int64) error {
	if _, err := tx.NewUpdate().Model((*keyRow)(nil)).Set("revoked_at = ?", s.now()).
		Where("user_id = ?", userID).Where("revoked_at IS NULL").Exec(ctx); err != nil {
		return fmt.Errorf("workspaces: revoke the account's keys: %w", err)
	}
	return nil
}
