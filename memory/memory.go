package memory

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base32"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
)

// Bounds and defaults.
const (
	// MaxTextBytes bounds a memory's text.
	MaxTextBytes = 16 << 10
	// MaxTags bounds a memory's tags; MaxTagBytes each tag.
	MaxTags     = 20
	MaxTagBytes = 64
	// MaxSourceBytes bounds the source.
	MaxSourceBytes = 512
	// MaxQueryBytes bounds a search query.
	MaxQueryBytes = 1 << 10
	// DefaultMaxMemories is how many memories a user may keep by default.
	DefaultMaxMemories = 10000
	// DefaultSearchLimit and MaxSearchLimit bound a search's results.
	DefaultSearchLimit = 10
	MaxSearchLimit     = 100
)

// The statuses of a memory.
const (
	StatusActive   = "active"
	StatusArchived = "archived"
)

// Options tune memories. Every zero value is a documented default.
type Options struct {
	// Disabled turns memories off (enclave.Config.Memory): none of their
	// capabilities, resources or prompts is registered. The tables exist
	// and are exported and deleted with accounts all the same.
	Disabled bool
	// MaxMemories bounds the memories one user keeps (active and
	// archived). Default DefaultMaxMemories.
	MaxMemories int
	// Embeddings configures semantic search through an OpenAI-compatible
	// embeddings API. Zero: full-text search only.
	Embeddings EmbeddingsOptions
}

// Config configures the service: Options, plus what the server provides.
// Store, Registry and Owners are required.
type Config struct {
	Options
	Store    *storage.Store
	Registry *capabilities.Registry
	Owners   capabilities.OwnerOf
	// Embedder, when set, is used instead of the one Options.Embeddings
	// describes.
	Embedder Embedder
	Logger   *slog.Logger
	// Now is the clock (tests). Default time.Now.
	Now func() time.Time
}

// Service keeps memories.
type Service struct {
	store  *storage.Store
	reg    *capabilities.Registry
	owners capabilities.OwnerOf
	embed  Embedder // nil: full-text only
	max    int
	log    *slog.Logger
	now    func() time.Time

	reindexMu    sync.Mutex
	reindexAfter int64 // the row id the reindex scan goes on after
}

// New returns the service. Register its capabilities, resources and prompt
// with Capabilities, Resources and Prompts, and its reindex lane with
// Schedule.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Registry == nil || cfg.Owners == nil {
		return nil, errors.New("memory: Store, Registry and Owners are required")
	}
	if cfg.MaxMemories < 0 {
		return nil, fmt.Errorf("memory: MaxMemories %d: want 0 (default) or more", cfg.MaxMemories)
	}
	s := &Service{
		store: cfg.Store, reg: cfg.Registry, owners: cfg.Owners, embed: cfg.Embedder,
		max: cmp.Or(cfg.MaxMemories, DefaultMaxMemories), log: cfg.Logger, now: cfg.Now,
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.embed == nil && cfg.Embeddings.Enabled() {
		e, err := NewOpenAIEmbedder(cfg.Embeddings)
		if err != nil {
			return nil, err
		}
		s.embed = e
	}
	return s, nil
}

// Semantic reports whether searches also rank by embeddings.
func (s *Service) Semantic() bool { return s.embed != nil }

// Memory is one memory.
type Memory struct {
	ID   string   `json:"id" jsonschema:"the memory's id (mem_…)"`
	Text string   `json:"text"`
	Tags []string `json:"tags"`
	// Source is the provenance the writer gave (free text).
	Source string `json:"source,omitempty"`
	// Writer is who wrote the memory, as the server saw the caller:
	// "agent" (an access token), "web" (the web shell), "background" (a
	// code run or a job acting for the user) or "credential:<kind>".
	Writer    string    `json:"writer"`
	Status    string    `json:"status" schema:"enum=active|archived"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// row is a memories row.
type row struct {
	bun.BaseModel `bun:"table:memories"`
	ID            int64     `bun:"id,pk,autoincrement"`
	PublicID      string    `bun:"public_id"`
	UserID        int64     `bun:"user_id"`
	Text          string    `bun:"text"`
	Tags          string    `bun:"tags"`
	Source        string    `bun:"source"`
	Writer        string    `bun:"writer"`
	Status        string    `bun:"status"`
	CreatedAt     time.Time `bun:"created_at"`
	UpdatedAt     time.Time `bun:"updated_at"`
}

func (r row) memory() Memory {
	var tags []string
	_ = json.Unmarshal([]byte(r.Tags), &tags) // written by us: always a JSON array
	if tags == nil {
		tags = []string{}
	}
	return Memory{ID: r.PublicID, Text: r.Text, Tags: tags, Source: r.Source, Writer: r.Writer, Status: r.Status,
		CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC()}
}

// Writer says who wrote through caller: the web shell, an agent's access
// token, a background run (code mode, a job) or a narrower credential.
func Writer(c capabilities.Caller) string {
	switch {
	case c.Session:
		return "web"
	case c.Credential != "":
		kind, _, _ := strings.Cut(c.Credential, ":")
		return "credential:" + kind
	case !c.Interactive:
		return "background"
	default:
		return "agent"
	}
}

func invalid(format string, args ...any) error {
	return capabilities.Errorf(capabilities.CodeInvalidInput, format, args...)
}

func notFound(id string) error {
	return capabilities.Errorf(capabilities.CodeNotFound, "memory %q not found", id)
}

// checkText validates a memory's text.
func checkText(text string) (string, error) {
	text = strings.TrimSpace(text)
	switch {
	case text == "":
		return "", invalid("text is empty")
	case len(text) > MaxTextBytes:
		return "", invalid("text is %d bytes: at most %d KiB", len(text), MaxTextBytes>>10)
	case !utf8.ValidString(text) || strings.ContainsRune(text, 0):
		return "", invalid("text must be UTF-8 without NUL characters")
	}
	return text, nil
}

// checkTags validates and normalizes tags: lowercase, trimmed, without
// duplicates, in the order given.
func checkTags(tags []string) ([]string, error) {
	if len(tags) > MaxTags {
		return nil, invalid("%d tags: at most %d", len(tags), MaxTags)
	}
	out := make([]string, 0, len(tags))
	for _, t := range tags {
		t = strings.ToLower(strings.TrimSpace(t))
		if t == "" || len(t) > MaxTagBytes || !utf8.ValidString(t) {
			return nil, invalid("tag %q: want 1 to %d bytes", t, MaxTagBytes)
		}
		for _, r := range t {
			if !unicode.IsLetter(r) && !unicode.IsDigit(r) && !strings.ContainsRune("-_.:/", r) {
				return nil, invalid("tag %q: use letters, digits and - _ . : /", t)
			}
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out, nil
}

func checkSource(src string) (string, error) {
	src = strings.TrimSpace(src)
	if len(src) > MaxSourceBytes || !utf8.ValidString(src) || strings.ContainsRune(src, 0) {
		return "", invalid("source: at most %d bytes of UTF-8 without NUL characters", MaxSourceBytes)
	}
	return src, nil
}

func checkStatus(status string) error {
	if status != StatusActive && status != StatusArchived {
		return invalid("status is %q or %q", StatusActive, StatusArchived)
	}
	return nil
}

func encodeTags(tags []string) string {
	b, _ := json.Marshal(tags)
	return string(b)
}

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

func newID() string {
	b := make([]byte, 15)
	_, _ = rand.Read(b)
	return "mem_" + strings.ToLower(idEncoding.EncodeToString(b))
}

// plausibleID reports whether id could be a memory id (anything else is
// not found without a query).
func plausibleID(id string) bool {
	rest, ok := strings.CutPrefix(id, "mem_")
	if !ok || len(rest) != 24 {
		return false
	}
	for _, r := range rest {
		if !(r >= 'a' && r <= 'z' || r >= '2' && r <= '7') {
			return false
		}
	}
	return true
}

func (s *Service) owner(ctx context.Context, c capabilities.Caller) (storage.Owner, error) {
	o, err := s.owners(ctx, c)
	return storage.Owner(o), err
}

// SaveInput is the input of memorySave.
type SaveInput struct {
	Text   string   `json:"text" jsonschema:"what to remember: a self-contained statement, at most 16 KiB"`
	Tags   []string `json:"tags,omitempty" jsonschema:"up to 20 short tags (letters, digits, - _ . : /), e.g. preferences or project:atlas" schema:"maxItems=20"`
	Source string   `json:"source,omitempty" jsonschema:"where this comes from, in a few words (a conversation, a document, a URL)"`
}

// Save stores a new memory of o, written by writer.
func (s *Service) Save(ctx context.Context, o storage.Owner, writer string, in SaveInput) (Memory, error) {
	text, err := checkText(in.Text)
	if err != nil {
		return Memory{}, err
	}
	tags, err := checkTags(in.Tags)
	if err != nil {
		return Memory{}, err
	}
	src, err := checkSource(in.Source)
	if err != nil {
		return Memory{}, err
	}
	now := s.now().UTC().Truncate(time.Microsecond) // what both databases keep
	r := row{PublicID: newID(), UserID: o.ID, Text: text, Tags: encodeTags(tags), Source: src, Writer: writer,
		Status: StatusActive, CreatedAt: now, UpdatedAt: now}
	err = s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if s.store.Dialect() == storage.Postgres {
			// Concurrent saves of one user count one after the other.
			if _, err := tx.ExecContext(ctx, "SELECT id FROM users WHERE id = ? FOR UPDATE", o.ID); err != nil {
				return fmt.Errorf("memory: lock owner: %w", err)
			}
		}
		// memory_counts is kept by triggers in the same transactions as
		// the rows (migration 0250).
		var n int64
		if err := tx.NewRaw("SELECT COALESCE((SELECT active + archived FROM memory_counts WHERE user_id = ?), 0)", o.ID).Scan(ctx, &n); err != nil {
			return fmt.Errorf("memory: count: %w", err)
		}
		if n >= int64(s.max) {
			return capabilities.Errorf(capabilities.CodeConflict, "you keep %d memories, the most allowed: delete or update some first", n)
		}
		if _, err := tx.NewInsert().Model(&r).Returning("id").Exec(ctx); err != nil {
			return fmt.Errorf("memory: save: %w", err)
		}
		return nil
	})
	if err != nil {
		return Memory{}, err
	}
	s.embedNow(ctx, o, r.ID, text)
	return r.memory(), nil
}

// lookup reads o's memory id; another owner's reads as missing. In a
// transaction on PostgreSQL it locks the row, so that an update writes
// back nothing a concurrent one changed since the read (SQLite's write
// transactions run one at a time).
func (s *Service) lookup(ctx context.Context, db bun.IDB, o storage.Owner, id string) (row, error) {
	var r row
	if !plausibleID(id) {
		return r, notFound(id)
	}
	q := db.NewSelect().Model(&r).Where("public_id = ? AND user_id = ?", id, o.ID)
	if _, inTx := db.(bun.Tx); inTx && s.store.Dialect() == storage.Postgres {
		q = q.For("UPDATE")
	}
	err := q.Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return r, notFound(id)
	}
	if err != nil {
		return r, fmt.Errorf("memory: get: %w", err)
	}
	return r, nil
}

// Get returns o's memory id.
func (s *Service) Get(ctx context.Context, o storage.Owner, id string) (Memory, error) {
	r, err := s.lookup(ctx, s.store.Reader, o, id)
	if err != nil {
		return Memory{}, err
	}
	return r.memory(), nil
}

// UpdateInput is the input of memoryUpdate. Absent fields stay as they
// are.
type UpdateInput struct {
	ID     string    `json:"id" jsonschema:"the memory's id (mem_…)"`
	Text   string    `json:"text,omitempty" jsonschema:"the new text (absent: unchanged)"`
	Tags   *[]string `json:"tags,omitempty" jsonschema:"the new tags, replacing the old ones ([] removes them; absent: unchanged)" schema:"maxItems=20"`
	Status string    `json:"status,omitempty" jsonschema:"archived memories are left out of searches unless asked for" schema:"enum=active|archived"`
}

// Update changes o's memory in.ID, as writer. A change of the text or the
// tags makes writer the memory's writer (whoever rewrote it is who wrote
// what it says now); a change of status alone keeps it.
func (s *Service) Update(ctx context.Context, o storage.Owner, writer string, in UpdateInput) (Memory, error) {
	if in.Text == "" && in.Tags == nil && in.Status == "" {
		return Memory{}, invalid("nothing to update: give text, tags or status")
	}
	var text string
	var err error
	if in.Text != "" {
		if text, err = checkText(in.Text); err != nil {
			return Memory{}, err
		}
	}
	var tags []string
	if in.Tags != nil {
		if tags, err = checkTags(*in.Tags); err != nil {
			return Memory{}, err
		}
	}
	if in.Status != "" {
		if err := checkStatus(in.Status); err != nil {
			return Memory{}, err
		}
	}
	var r row
	textChanged, tagsChanged := false, false
	err = s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		var err error
		if r, err = s.lookup(ctx, tx, o, in.ID); err != nil {
			return err
		}
		if text != "" && text != r.Text {
			r.Text, textChanged = text, true
		}
		if in.Tags != nil {
			if t := encodeTags(tags); t != r.Tags {
				r.Tags, tagsChanged = t, true
			}
		}
		if textChanged || tagsChanged {
			r.Writer = writer
		}
		if in.Status != "" {
			r.Status = in.Status
		}
		r.UpdatedAt = s.now().UTC().Truncate(time.Microsecond)
		if _, err := tx.NewUpdate().Model(&r).Column("text", "tags", "writer", "status", "updated_at").
			Where("id = ? AND user_id = ?", r.ID, o.ID).Exec(ctx); err != nil {
			return fmt.Errorf("memory: update: %w", err)
		}
		if textChanged { // the old vector describes the old text
			if _, err := tx.NewDelete().Model((*vectorRow)(nil)).Where("memory_id = ? AND user_id = ?", r.ID, o.ID).Exec(ctx); err != nil {
				return fmt.Errorf("memory: drop stale vector: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return Memory{}, err
	}
	if textChanged {
		s.embedNow(ctx, o, r.ID, r.Text)
	}
	return r.memory(), nil
}

// Delete removes o's memory id with its vector; false when o has none.
func (s *Service) Delete(ctx context.Context, o storage.Owner, id string) (bool, error) {
	if !plausibleID(id) {
		return false, nil
	}
	var n int64
	err := s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewDelete().Model((*vectorRow)(nil)).
			Where("user_id = ? AND memory_id IN (SELECT id FROM memories WHERE public_id = ? AND user_id = ?)", o.ID, id, o.ID).Exec(ctx); err != nil {
			return fmt.Errorf("memory: delete vector: %w", err)
		}
		res, err := tx.NewDelete().Model((*row)(nil)).Where("public_id = ? AND user_id = ?", id, o.ID).Exec(ctx)
		if err != nil {
			return fmt.Errorf("memory: delete: %w", err)
		}
		n, _ = res.RowsAffected()
		return nil
	})
	return n > 0, err
}

// Filter narrows a listing or a search.
type Filter struct {
	// Tags: only memories holding every one of them.
	Tags []string
	// Status: only memories with this status; "" means every status in a
	// listing and active in a search.
	Status string
}

func (f Filter) check(search bool) (Filter, error) {
	tags, err := checkTags(f.Tags)
	if err != nil {
		return f, err
	}
	f.Tags = tags
	switch {
	case f.Status == "" && search:
		f.Status = StatusActive
	case f.Status == "all":
		f.Status = ""
	case f.Status != "":
		if err := checkStatus(f.Status); err != nil {
			return f, err
		}
	}
	return f, nil
}

// where returns the SQL condition of f on the memories alias m, and its
// arguments. Tags are compared as JSON array elements.
func (s *Service) where(f Filter) (string, []any) {
	var conds []string
	var args []any
	if f.Status != "" {
		conds = append(conds, "m.status = ?")
		args = append(args, f.Status)
	}
	if len(f.Tags) > 0 {
		if s.store.Dialect() == storage.Postgres {
			conds = append(conds, "m.tags::jsonb @> ?::jsonb")
			args = append(args, encodeTags(f.Tags))
		} else {
			for _, t := range f.Tags {
				conds = append(conds, "EXISTS (SELECT 1 FROM json_each(m.tags) WHERE json_each.value = ?)")
				args = append(args, t)
			}
		}
	}
	if len(conds) == 0 {
		return "TRUE", nil
	}
	return strings.Join(conds, " AND "), args
}

// List returns one page of o's memories, newest first: by creation time,
// then by id. Its cursor names the last memory of the page by those two
// (base64 of a small JSON object), never by a row id of the table, which
// would tell how many memories every user saved in between.
func (s *Service) List(ctx context.Context, o storage.Owner, f Filter, req storage.PageRequest) (storage.Page[Memory], error) {
	f, err := f.check(false)
	if err != nil {
		return storage.Page[Memory]{}, err
	}
	limit := req.Limit
	switch {
	case limit <= 0:
		limit = storage.DefaultPageLimit
	case limit > storage.MaxPageLimit:
		limit = storage.MaxPageLimit
	}
	cond, args := s.where(f)
	q := s.store.Reader.NewSelect().TableExpr("memories AS m").ColumnExpr("m.*").
		Where("m.user_id = ?", o.ID).Where(cond, args...)
	if req.Cursor != "" {
		c, err := decodeListCursor(req.Cursor)
		if err != nil {
			return storage.Page[Memory]{}, err
		}
		q = q.Where("(m.created_at < ? OR (m.created_at = ? AND m.public_id < ?))", c.Created, c.Created, c.ID)
	}
	var rows []row
	if err := q.OrderExpr("m.created_at DESC, m.public_id DESC").Limit(int64(limit+1)).Scan(ctx, &rows); err != nil {
		return storage.Page[Memory]{}, fmt.Errorf("memory: list: %w", err)
	}
	var out storage.Page[Memory]
	if len(rows) > limit {
		rows = rows[:limit]
		last := rows[limit-1]
		out.Next = encodeListCursor(listCursor{Created: last.CreatedAt.UTC(), ID: last.PublicID})
	}
	out.Items = make([]Memory, 0, len(rows))
	for _, r := range rows {
		out.Items = append(out.Items, r.memory())
	}
	return out, nil
}

// listCursor is where a memoryList page ended: the last memory's creation
// time and public id, both of which the caller was just shown.
type listCursor struct {
	Kind    string    `json:"k"`
	Created time.Time `json:"t"`
	ID      string    `json:"p"`
}

const listCursorKind = "memories/v2"

func encodeListCursor(c listCursor) string {
	c.Kind = listCursorKind
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeListCursor reads a cursor List issued; anything else is the
// caller's mistake (storage.ErrInvalidCursor, answered as invalid input).
func decodeListCursor(cursor string) (listCursor, error) {
	var c listCursor
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || len(raw) > 256 {
		return c, storage.ErrInvalidCursor
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil || c.Kind != listCursorKind || !plausibleID(c.ID) || c.Created.IsZero() {
		return listCursor{}, storage.ErrInvalidCursor
	}
	c.Created = c.Created.UTC()
	return c, nil
}

// byIDs reads o's memories with these row ids, in the order given.
func (s *Service) byIDs(ctx context.Context, o storage.Owner, ids []int64) ([]row, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	var rows []row
	if err := s.store.Reader.NewSelect().Model(&rows).Where("user_id = ? AND id IN (?)", o.ID, bun.In(ids)).Scan(ctx); err != nil {
		return nil, fmt.Errorf("memory: read: %w", err)
	}
	pos := make(map[int64]int, len(ids))
	for i, id := range ids {
		pos[id] = i
	}
	slices.SortFunc(rows, func(a, b row) int { return cmp.Compare(pos[a.ID], pos[b.ID]) })
	return rows, nil
}
