// Package sqlsessions keeps MCP sessions (protocol 2025-11-25 and earlier)
// in SQL, so that every replica of a deployment serves every session: an
// mcp.SessionStore on table mcp_sessions (owned by users.id through
// user_id), keyed by the hash of the session id, plus mcp_session_answers,
// where a client's answer to a server-to-client request waits for the
// replica that asked. It is also the mcp.StateLedger of spent
// requestStates (protocol 2026-07-28), in mcp_spent_states.
package sqlsessions

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/mcp"
	"github.com/enclave-mcp/enclave/storage"
)

// Tables are the ownership-inventory entries of this package.
var Tables = []storage.Table{
	{Name: "mcp_sessions", KeyColumn: "id_hash", SkipExport: true},
	{Name: "mcp_session_answers", SkipExport: true},
	{Name: "mcp_session_events", KeyColumn: "id", SkipExport: true},
}

// AnswerTTL bounds how long an undelivered answer is kept.
const AnswerTTL = 10 * time.Minute

// Store is an mcp.SessionStore in SQL.
type Store struct {
	store  *storage.Store
	now    func() time.Time
	sealer Sealer
	seq    atomic.Int64 // orders a stream's events (a stream lives in one process)
	spends atomic.Int64 // Spend calls, to prune now and then
}

var _ mcp.SessionStore = (*Store)(nil)

// Sealer encrypts what the store keeps of user content: the messages of
// recorded SSE events (tool results, elicitation and sampling requests)
// and clients' answers waiting for another replica (what a user typed
// into an elicitation form). internal/envelope's Ring is one.
type Sealer interface {
	Seal(ad string, plaintext []byte) (keyID int64, sealed string, err error)
	Open(ctx context.Context, keyID int64, sealed, ad string) ([]byte, error)
}

// New returns a Store on store (migrated: migrations 0160, 0161) that
// keeps event messages and answers in the clear; see NewSealed.
func New(store *storage.Store) *Store { return &Store{store: store, now: time.Now} }

// NewSealed returns a Store that seals event messages and answers with
// sealer, each bound to its row. A server assembled by enclave uses it
// with the deployment's data keys: a tool result may hold a credential
// shown once, and the events table would otherwise keep it in the clear.
func NewSealed(store *storage.Store, sealer Sealer) *Store {
	st := New(store)
	st.sealer = sealer
	return st
}

// sealedPrefix marks a sealed value: "sealed:<key id>:<sealed>". JSON
// (what an unsealed value is) never starts with it.
const sealedPrefix = "sealed:"

func (s *Store) seal(ad string, plain []byte) (string, error) {
	if s.sealer == nil {
		return string(plain), nil
	}
	kid, sealed, err := s.sealer.Seal(ad, plain)
	if err != nil {
		return "", err
	}
	return sealedPrefix + strconv.FormatInt(kid, 10) + ":" + sealed, nil
}

func (s *Store) open(ctx context.Context, ad, stored string) ([]byte, error) {
	rest, ok := strings.CutPrefix(stored, sealedPrefix)
	if !ok {
		if s.sealer != nil {
			return nil, errors.New("sqlsessions: a value stored in the clear where sealing is on")
		}
		return []byte(stored), nil
	}
	if s.sealer == nil {
		return nil, errors.New("sqlsessions: a sealed value and no sealer")
	}
	k, sealed, ok := strings.Cut(rest, ":")
	kid, err := strconv.ParseInt(k, 10, 64)
	if !ok || err != nil {
		return nil, errors.New("sqlsessions: malformed sealed value")
	}
	return s.sealer.Open(ctx, kid, sealed, ad)
}

type row struct {
	bun.BaseModel   `bun:"table:mcp_sessions"`
	IDHash          string         `bun:"id_hash,pk"`
	UserID          int64          `bun:"user_id,notnull"`
	ProtocolVersion string         `bun:"protocol_version,notnull"`
	ClientInfo      sql.NullString `bun:"client_info"`
	ClientCaps      sql.NullString `bun:"client_caps"`
	LogLevel        string         `bun:"log_level,notnull"`
	ToolsFP         string         `bun:"tools_fp,notnull"`
	Subscriptions   sql.NullString `bun:"subscriptions"`
	Node            string         `bun:"node,notnull"`
	CreatedAt       time.Time      `bun:"created_at,notnull"`
	LastUsedAt      time.Time      `bun:"last_used_at,notnull"`
}

type caps struct {
	Sampling    bool `json:"sampling,omitempty"`
	Elicitation bool `json:"elicitation,omitempty"`
	Roots       bool `json:"roots,omitempty"`
}

func text(b []byte) sql.NullString {
	if len(b) == 0 {
		return sql.NullString{}
	}
	return sql.NullString{String: string(b), Valid: true}
}

func fields(rec mcp.SessionRecord) (info, cs, subs sql.NullString) {
	info = text(rec.ClientInfo)
	b, _ := json.Marshal(caps{rec.CanSample, rec.CanElicit, rec.CanRoots})
	cs = text(b)
	if len(rec.Subscriptions) > 0 {
		b, _ = json.Marshal(rec.Subscriptions)
		subs = text(b)
	}
	return
}

const ownerID = "(SELECT id FROM users WHERE stable_user_id = ?)"

// CreateSession stores rec and ends the owner's oldest sessions beyond
// keepPerUser, in one transaction.
func (s *Store) CreateSession(ctx context.Context, rec mcp.SessionRecord, keepPerUser int) ([]string, error) {
	now := s.now().UTC()
	info, cs, subs := fields(rec)
	var evicted []string
	err := s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		res, err := tx.NewRaw(`INSERT INTO mcp_sessions (id_hash, user_id, protocol_version, client_info, client_caps, log_level, tools_fp, subscriptions, node, created_at, last_used_at)
			SELECT ?, u.id, ?, ?, ?, ?, ?, ?, '', ?, ? FROM users AS u WHERE u.stable_user_id = ?`,
			mcp.SessionHash(rec.ID), rec.ProtocolVersion, info, cs, rec.LogLevel, rec.ToolsFP, subs, now, now, rec.UserID).Exec(ctx)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return fmt.Errorf("no user %q", rec.UserID)
		}
		if keepPerUser <= 0 {
			return nil
		}
		var old []string
		if err := tx.NewSelect().Model((*row)(nil)).Column("id_hash").
			Where("user_id = "+ownerID, rec.UserID).
			OrderExpr("last_used_at DESC, created_at DESC").Offset(int64(keepPerUser)).Limit(1000).
			Scan(ctx, &old); err != nil {
			return err
		}
		if len(old) == 0 {
			return nil
		}
		if _, err := tx.NewDelete().Model((*row)(nil)).Where("id_hash IN (?)", bun.In(old)).Exec(ctx); err != nil {
			return err
		}
		evicted = old
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sqlsessions: create: %w", err)
	}
	return evicted, nil
}

// LoadSession returns the session id, or mcp.ErrSessionNotFound.
func (s *Store) LoadSession(ctx context.Context, id string) (mcp.SessionRecord, error) {
	var r struct {
		row
		StableID string `bun:"stable_user_id"`
	}
	err := s.store.Reader.NewSelect().TableExpr("mcp_sessions AS s").
		ColumnExpr("s.*, u.stable_user_id").
		Join("JOIN users AS u ON u.id = s.user_id").
		Where("s.id_hash = ?", mcp.SessionHash(id)).Scan(ctx, &r)
	if errors.Is(err, sql.ErrNoRows) {
		return mcp.SessionRecord{}, mcp.ErrSessionNotFound
	} else if err != nil {
		return mcp.SessionRecord{}, fmt.Errorf("sqlsessions: load: %w", err)
	}
	rec := mcp.SessionRecord{ID: id, UserID: r.StableID, ProtocolVersion: r.ProtocolVersion,
		LogLevel: r.LogLevel, ToolsFP: r.ToolsFP, LastUsed: r.LastUsedAt}
	if r.ClientInfo.Valid {
		rec.ClientInfo = json.RawMessage(r.ClientInfo.String)
	}
	if r.ClientCaps.Valid {
		var c caps
		_ = json.Unmarshal([]byte(r.ClientCaps.String), &c)
		rec.CanSample, rec.CanElicit, rec.CanRoots = c.Sampling, c.Elicitation, c.Roots
	}
	if r.Subscriptions.Valid {
		_ = json.Unmarshal([]byte(r.Subscriptions.String), &rec.Subscriptions)
	}
	return rec, nil
}

// SaveSession stores the mutable fields of rec. The owner never changes.
func (s *Store) SaveSession(ctx context.Context, rec mcp.SessionRecord) error {
	info, cs, subs := fields(rec)
	_, err := s.store.DB.NewUpdate().Model((*row)(nil)).
		Set("protocol_version = ?", rec.ProtocolVersion).Set("client_info = ?", info).Set("client_caps = ?", cs).
		Set("log_level = ?", rec.LogLevel).Set("tools_fp = ?", rec.ToolsFP).Set("subscriptions = ?", subs).
		Set("last_used_at = ?", s.now().UTC()).
		Where("id_hash = ? AND user_id = "+ownerID, mcp.SessionHash(rec.ID), rec.UserID).Exec(ctx)
	if err != nil {
		return fmt.Errorf("sqlsessions: save: %w", err)
	}
	return nil
}

// TouchSessions records use of the sessions ids.
func (s *Store) TouchSessions(ctx context.Context, ids []string, at time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	hashes := make([]string, len(ids))
	for i, id := range ids {
		hashes[i] = mcp.SessionHash(id)
	}
	_, err := s.store.DB.NewUpdate().Model((*row)(nil)).Set("last_used_at = ?", at.UTC()).
		Where("id_hash IN (?) AND last_used_at < ?", bun.In(hashes), at.UTC()).Exec(ctx)
	if err != nil {
		return fmt.Errorf("sqlsessions: touch: %w", err)
	}
	return nil
}

// DeleteSession ends the session id.
func (s *Store) DeleteSession(ctx context.Context, id string) (bool, error) {
	res, err := s.store.DB.NewDelete().Model((*row)(nil)).Where("id_hash = ?", mcp.SessionHash(id)).Exec(ctx)
	if err != nil {
		return false, fmt.Errorf("sqlsessions: delete: %w", err)
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

// ExpireSessions ends the sessions unused since before, and drops answers
// older than AnswerTTL.
func (s *Store) ExpireSessions(ctx context.Context, before time.Time) ([]string, error) {
	var hashes []string
	err := s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if err := tx.NewSelect().Model((*row)(nil)).Column("id_hash").Where("last_used_at < ?", before.UTC()).Limit(10000).Scan(ctx, &hashes); err != nil {
			return err
		}
		if len(hashes) > 0 {
			if _, err := tx.NewDelete().Model((*row)(nil)).Where("id_hash IN (?)", bun.In(hashes)).Exec(ctx); err != nil {
				return err
			}
		}
		_, err := tx.NewDelete().Table("mcp_session_answers").Where("created_at < ?", s.now().Add(-AnswerTTL).UTC()).Exec(ctx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sqlsessions: expire: %w", err)
	}
	return hashes, nil
}

// MaxAnswersPerUser bounds the answers one user may have waiting (not yet
// taken, younger than AnswerTTL). An answer is handed over only when the
// request it names is pending on another replica, but the replica that
// hands it over cannot know that: without a bound, a client could park
// any number of answers naming requests that do not exist.
const MaxAnswersPerUser = 32

// MaxAnswerBytes bounds one answer.
const MaxAnswerBytes = 1 << 20

// ErrTooManyAnswers is returned by PutAnswer when the user already has
// MaxAnswersPerUser answers waiting, or the answer is over MaxAnswerBytes.
var ErrTooManyAnswers = errors.New("sqlsessions: too many or too large answers waiting")

// PutAnswer holds answer under key for the replica waiting for it.
func (s *Store) PutAnswer(ctx context.Context, userID, key string, answer []byte) error {
	if len(answer) > MaxAnswerBytes {
		return ErrTooManyAnswers
	}
	now := s.now().UTC()
	stored, err := s.seal(answerAD(key), answer)
	if err != nil {
		return fmt.Errorf("sqlsessions: put answer: %w", err)
	}
	res, err := s.store.DB.NewRaw(`INSERT INTO mcp_session_answers (id, user_id, answer, created_at)
		SELECT ?, u.id, ?, ? FROM users AS u WHERE u.stable_user_id = ?
		AND (SELECT count(*) FROM mcp_session_answers AS a WHERE a.user_id = u.id AND a.created_at >= ?) < ?`,
		key, stored, now, userID, now.Add(-AnswerTTL), MaxAnswersPerUser).Exec(ctx)
	if err != nil {
		return fmt.Errorf("sqlsessions: put answer: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		var known int
		if err := s.store.DB.NewRaw("SELECT count(*) FROM users WHERE stable_user_id = ?", userID).Scan(ctx, &known); err == nil && known > 0 {
			return ErrTooManyAnswers
		}
		return fmt.Errorf("sqlsessions: put answer: no user %q", userID)
	}
	return nil
}

// TakeAnswer returns and deletes the answer under key.
func (s *Store) TakeAnswer(ctx context.Context, key string) ([]byte, error) {
	var answer string
	err := s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if err := tx.NewSelect().Table("mcp_session_answers").Column("answer").
			Where("id = ? AND created_at >= ?", key, s.now().Add(-AnswerTTL).UTC()).Scan(ctx, &answer); err != nil {
			return err
		}
		_, err := tx.NewDelete().Table("mcp_session_answers").Where("id = ?", key).Exec(ctx)
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return nil, mcp.ErrSessionNotFound
	} else if err != nil {
		return nil, fmt.Errorf("sqlsessions: take answer: %w", err)
	}
	plain, err := s.open(ctx, answerAD(key), answer)
	if err != nil {
		return nil, fmt.Errorf("sqlsessions: take answer: %w", err)
	}
	return plain, nil
}

func answerAD(key string) string { return "mcp_session_answers:" + key }

func eventAD(sessionHash, id string) string {
	return "mcp_session_events:" + sessionHash + ":" + id
}

// EventTTL is how long a stream's events can be replayed.
const EventTTL = 5 * time.Minute

// MaxReplay bounds the events one resumption replays.
const MaxReplay = 1000

var _ mcp.EventLog = (*Store)(nil)

// AppendEvent records an SSE event of a shared session.
func (s *Store) AppendEvent(ctx context.Context, sessionHash, userID, streamID string, message json.RawMessage) (string, error) {
	seq := s.seq.Add(1)
	// The id the client sees is random: a counter would tell it how many
	// events the replica recorded for other sessions in between.
	id := randomID()
	now := s.now().UTC()
	stored, err := s.seal(eventAD(sessionHash, id), message)
	if err != nil {
		return "", fmt.Errorf("sqlsessions: append event: %w", err)
	}
	res, err := s.store.DB.NewRaw(`INSERT INTO mcp_session_events (session_hash, id, user_id, stream_id, seq, message, created_at)
		SELECT ?, ?, u.id, ?, ?, ?, ? FROM users AS u WHERE u.stable_user_id = ?`,
		sessionHash, id, streamID, seq, stored, now, userID).Exec(ctx)
	if err != nil {
		return "", fmt.Errorf("sqlsessions: append event: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return "", fmt.Errorf("sqlsessions: append event: no user %q", userID)
	}
	if seq%256 == 0 {
		_, _ = s.store.DB.NewDelete().Table("mcp_session_events").Where("created_at < ?", now.Add(-EventTTL)).Exec(ctx)
	}
	return id, nil
}

// ReplayEvents sends the events after lastEventID on its stream.
func (s *Store) ReplayEvents(ctx context.Context, sessionHash, lastEventID string, send func(string, json.RawMessage) error) (string, error) {
	var last struct {
		StreamID string `bun:"stream_id"`
		Seq      int64  `bun:"seq"`
	}
	cutoff := s.now().UTC().Add(-EventTTL)
	err := s.store.Reader.NewSelect().Table("mcp_session_events").Column("stream_id", "seq").
		Where("session_hash = ? AND id = ? AND created_at >= ?", sessionHash, lastEventID, cutoff).Scan(ctx, &last)
	if errors.Is(err, sql.ErrNoRows) {
		return "", mcp.ErrUnknownEvent
	} else if err != nil {
		return "", fmt.Errorf("sqlsessions: replay: %w", err)
	}
	var rows []struct {
		ID      string `bun:"id"`
		Message string `bun:"message"`
	}
	if err := s.store.Reader.NewSelect().Table("mcp_session_events").Column("id", "message").
		Where("session_hash = ? AND stream_id = ? AND seq > ? AND created_at >= ?", sessionHash, last.StreamID, last.Seq, cutoff).
		OrderExpr("seq").Limit(MaxReplay).Scan(ctx, &rows); err != nil {
		return "", fmt.Errorf("sqlsessions: replay: %w", err)
	}
	for _, r := range rows {
		msg, err := s.open(ctx, eventAD(sessionHash, r.ID), r.Message)
		if err != nil {
			return last.StreamID, fmt.Errorf("sqlsessions: replay: %w", err)
		}
		if err := send(r.ID, json.RawMessage(msg)); err != nil {
			return last.StreamID, err
		}
	}
	return last.StreamID, nil
}

// PurgeEvents drops a session's events.
func (s *Store) PurgeEvents(ctx context.Context, sessionHash string) error {
	_, err := s.store.DB.NewDelete().Table("mcp_session_events").Where("session_hash = ?", sessionHash).Exec(ctx)
	if err != nil {
		return fmt.Errorf("sqlsessions: purge events: %w", err)
	}
	return nil
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

var _ mcp.StateLedger = (*Store)(nil)

// Spend records a requestState id as used (table mcp_spent_states,
// migration 0215), reporting false when some replica recorded it before.
// Now and then it also drops the ids that have expired.
func (s *Store) Spend(ctx context.Context, id string, exp time.Time) (bool, error) {
	res, err := s.store.DB.NewRaw("INSERT INTO mcp_spent_states (id, expires_at) VALUES (?, ?) ON CONFLICT (id) DO NOTHING", id, exp.UTC()).Exec(ctx)
	if err != nil {
		return false, fmt.Errorf("sqlsessions: spend request state: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("sqlsessions: spend request state: %w", err)
	}
	if s.spends.Add(1)%256 == 0 {
		// Housekeeping, not part of the answer: the id is spent already,
		// so failing here would refuse the one retry the state was good
		// for, and the client could never use it again. The retention
		// lane drops expired ids as well.
		_, _ = s.store.DB.NewRaw("DELETE FROM mcp_spent_states WHERE expires_at < ?", s.now().UTC()).Exec(ctx)
	}
	return n == 1, nil
}
