package memory

import (
	"bytes"
	"container/heap"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/schedules"
	"github.com/enclave-mcp/enclave/storage"
)

// Embedder turns texts into vectors for semantic search.
type Embedder interface {
	// Embed returns one vector per text, in order.
	Embed(ctx context.Context, texts []string) ([][]float32, error)
	// Model names the model; vectors of another model are stale.
	Model() string
	// Dimensions is the vector size requested of the model, 0 for the
	// model's own. A change makes the stored vectors stale.
	Dimensions() int
}

// EmbeddingsOptions configure OpenAIEmbedder. URL and Model set turn
// semantic search on.
type EmbeddingsOptions struct {
	// URL is the API's base URL; requests go to URL + "/embeddings"
	// (e.g. https://api.openai.com/v1). https, or http to a loopback
	// address.
	URL string
	// Model is the embedding model, e.g. text-embedding-3-small.
	Model string
	// KeyFile holds the API key (sent as a Bearer token), read once at
	// start; empty sends no key (a local server).
	KeyFile string
	// Dimensions, when set, asks the model for vectors of this size.
	Dimensions int
	// Timeout bounds one request (with HTTPClient too). Default 30 s.
	Timeout time.Duration
	// HTTPClient sends the requests. Default a client with Timeout that
	// follows no redirect.
	HTTPClient *http.Client
}

// Enabled reports whether the options ask for embeddings.
func (o EmbeddingsOptions) Enabled() bool { return o.URL != "" || o.Model != "" }

// maxEmbedBatch is how many texts one request to the embeddings API
// carries.
const maxEmbedBatch = 64

// MaxDimensions bounds the size of a vector: a larger one (or one that is
// not finite, or not of the size asked) is refused.
const MaxDimensions = 8192

// maxAnswerBytes bounds an answer of the embeddings API: a batch of
// vectors of MaxDimensions, in JSON, with room to spare.
const maxAnswerBytes = 32 << 20

// checkVector reports why v cannot be stored or compared: empty, larger
// than MaxDimensions, of another size than dims asks (when set), or with
// a component that is NaN or infinite.
func checkVector(v []float32, dims int) error {
	switch {
	case len(v) == 0:
		return errors.New("memory: embeddings: an empty vector")
	case len(v) > MaxDimensions:
		return fmt.Errorf("memory: embeddings: a vector of %d dimensions, more than %d", len(v), MaxDimensions)
	case dims > 0 && len(v) != dims:
		return fmt.Errorf("memory: embeddings: a vector of %d dimensions, %d asked", len(v), dims)
	}
	for _, f := range v {
		if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
			return errors.New("memory: embeddings: a vector with a component that is not a finite number")
		}
	}
	return nil
}

// OpenAIEmbedder calls an OpenAI-compatible embeddings API: POST
// {URL}/embeddings with {"model", "input"} and a Bearer key.
type OpenAIEmbedder struct {
	endpoint string
	model    string
	key      string
	dims     int
	timeout  time.Duration
	client   *http.Client
}

// NewOpenAIEmbedder checks o and reads the key file.
func NewOpenAIEmbedder(o EmbeddingsOptions) (*OpenAIEmbedder, error) {
	if o.URL == "" || o.Model == "" {
		return nil, errors.New("memory: embeddings: URL and Model are both required")
	}
	u, err := url.Parse(strings.TrimRight(o.URL, "/"))
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return nil, fmt.Errorf("memory: embeddings URL %q: want https://host/path", o.URL)
	}
	if u.Scheme == "http" && !loopback(u.Hostname()) {
		return nil, fmt.Errorf("memory: embeddings URL %q: plain http only to a loopback address (the key would travel in clear)", o.URL)
	}
	if o.Dimensions < 0 || o.Dimensions > MaxDimensions {
		return nil, fmt.Errorf("memory: embeddings dimensions %d: want 0 (the model's) to %d", o.Dimensions, MaxDimensions)
	}
	e := &OpenAIEmbedder{endpoint: u.String() + "/embeddings", model: o.Model, dims: o.Dimensions, client: o.HTTPClient}
	if o.KeyFile != "" {
		raw, err := os.ReadFile(o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("memory: embeddings key: %w", err)
		}
		if e.key = strings.TrimSpace(string(raw)); e.key == "" {
			return nil, fmt.Errorf("memory: embeddings key file %s is empty", o.KeyFile)
		}
	}
	if e.timeout = o.Timeout; e.timeout <= 0 {
		e.timeout = 30 * time.Second
	}
	if e.client == nil {
		// No redirect is followed: the key and the memories' texts go to
		// the configured URL only.
		e.client = &http.Client{Timeout: e.timeout, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}}
	}
	return e, nil
}

func loopback(host string) bool {
	return host == "localhost" || host == "::1" || strings.HasPrefix(host, "127.")
}

// Model returns the model name.
func (e *OpenAIEmbedder) Model() string { return e.model }

// Dimensions returns the requested vector size (0: the model's own).
func (e *OpenAIEmbedder) Dimensions() int { return e.dims }

// Embed embeds texts, maxEmbedBatch per request.
func (e *OpenAIEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, 0, len(texts))
	for start := 0; start < len(texts); start += maxEmbedBatch {
		batch := texts[start:min(start+maxEmbedBatch, len(texts))]
		vs, err := e.embed(ctx, batch)
		if err != nil {
			return nil, err
		}
		out = append(out, vs...)
	}
	return out, nil
}

func (e *OpenAIEmbedder) embed(ctx context.Context, texts []string) ([][]float32, error) {
	req := struct {
		Model      string   `json:"model"`
		Input      []string `json:"input"`
		Dimensions int      `json:"dimensions,omitempty"`
	}{e.model, texts, e.dims}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, e.timeout) // also with an HTTPClient of the caller's
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, e.endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("memory: embeddings: %w", err)
	}
	hr.Header.Set("Content-Type", "application/json")
	if e.key != "" {
		hr.Header.Set("Authorization", "Bearer "+e.key)
	}
	resp, err := e.client.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("memory: embeddings: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	if err != nil {
		return nil, fmt.Errorf("memory: embeddings: read answer: %w", err)
	}
	if len(raw) > maxAnswerBytes {
		return nil, fmt.Errorf("memory: embeddings: the answer is larger than %d MiB", maxAnswerBytes>>20)
	}
	if resp.StatusCode != http.StatusOK {
		// The body may echo the request; say only the status.
		return nil, fmt.Errorf("memory: embeddings: %s answered %s", e.endpoint, resp.Status)
	}
	var ans struct {
		Data []struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &ans); err != nil {
		return nil, fmt.Errorf("memory: embeddings: decode answer: %w", err)
	}
	out := make([][]float32, len(texts))
	for _, d := range ans.Data {
		if d.Index < 0 || d.Index >= len(texts) || out[d.Index] != nil || len(d.Embedding) == 0 {
			return nil, errors.New("memory: embeddings: the answer's indexes do not match the input")
		}
		out[d.Index] = d.Embedding
	}
	for _, v := range out {
		if v == nil {
			return nil, fmt.Errorf("memory: embeddings: %d texts sent, fewer vectors answered", len(texts))
		}
	}
	return out, nil
}

// vectorRow is a memory_vectors row.
type vectorRow struct {
	bun.BaseModel `bun:"table:memory_vectors"`
	MemoryID      int64     `bun:"memory_id,pk"`
	UserID        int64     `bun:"user_id"`
	Model         string    `bun:"model"`
	Dimensions    int       `bun:"dimensions"`
	Fingerprint   string    `bun:"fingerprint"`
	Vector        []byte    `bun:"vector"`
	EmbeddedAt    time.Time `bun:"embedded_at"`
}

// fingerprintVersion changes when what is embedded changes, so that every
// vector is rebuilt.
const fingerprintVersion = "1"

// fingerprint digests what a vector depends on: the model, the requested
// dimensions and the text.
func fingerprint(e Embedder, text string) string {
	h := sha256.New()
	for _, part := range []string{fingerprintVersion, e.Model(), strconv.Itoa(e.Dimensions()), text} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

func encodeVector(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

func decodeVector(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// cosine is the cosine similarity of a and b (0 when either is zero or
// their sizes differ).
func cosine(a, b []float32) float64 {
	if len(a) != len(b) {
		return 0
	}
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return dot / (math.Sqrt(na) * math.Sqrt(nb))
}

// pending is a memory whose vector is missing or stale.
type pending struct {
	ID          int64  `bun:"id"`
	UserID      int64  `bun:"user_id"`
	Text        string `bun:"text"`
	Fingerprint string `bun:"fingerprint"` // "" when there is no vector
}

// embedNow embeds one memory just written, when an embedder is set. A
// failure is logged: the reindex lane embeds the memory later.
func (s *Service) embedNow(ctx context.Context, o storage.Owner, id int64, text string) {
	if s.embed == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if _, err := s.embedAll(ctx, []pending{{ID: id, UserID: o.ID, Text: text}}); err != nil {
		s.log.WarnContext(ctx, "memory: embedding a memory failed; the reindex lane will retry", "err", err)
	}
}

// embedAll embeds the memories whose fingerprint differs from the stored
// one and stores their vectors; it returns how many it embedded.
func (s *Service) embedAll(ctx context.Context, ps []pending) (int, error) {
	var todo []pending
	var fps []string
	for _, p := range ps {
		if fp := fingerprint(s.embed, p.Text); fp != p.Fingerprint {
			todo = append(todo, p)
			fps = append(fps, fp)
		}
	}
	if len(todo) == 0 {
		return 0, nil
	}
	texts := make([]string, len(todo))
	for i, p := range todo {
		texts[i] = p.Text
	}
	vs, err := s.embed.Embed(ctx, texts)
	if err != nil {
		return 0, err
	}
	if len(vs) != len(todo) {
		return 0, fmt.Errorf("memory: the embedder returned %d vectors for %d texts", len(vs), len(todo))
	}
	now := s.now().UTC()
	rows := make([]vectorRow, 0, len(todo))
	var bad error
	for i, p := range todo {
		if err := checkVector(vs[i], s.embed.Dimensions()); err != nil {
			bad = err // not stored: the memory is found by its words
			continue
		}
		rows = append(rows, vectorRow{MemoryID: p.ID, UserID: p.UserID, Model: s.embed.Model(), Dimensions: s.embed.Dimensions(),
			Fingerprint: fps[i], Vector: encodeVector(vs[i]), EmbeddedAt: now})
	}
	if bad != nil {
		s.log.WarnContext(ctx, "memory: the embedder answered unusable vectors; those memories are found by their words only",
			"refused", len(todo)-len(rows), "err", bad)
	}
	if len(rows) == 0 {
		return 0, bad
	}
	err = s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		for _, r := range rows {
			// Only while the memory exists with the text embedded: a
			// memory deleted or rewritten meanwhile keeps no stale vector.
			var text string
			err := tx.NewSelect().Table("memories").Column("text").Where("id = ? AND user_id = ?", r.MemoryID, r.UserID).Scan(ctx, &text)
			if errors.Is(err, sql.ErrNoRows) || err == nil && fingerprint(s.embed, text) != r.Fingerprint {
				continue
			}
			if err != nil {
				return fmt.Errorf("memory: store vector: %w", err)
			}
			if _, err := tx.NewInsert().Model(&r).On("CONFLICT (memory_id) DO UPDATE").
				Set("model = EXCLUDED.model, dimensions = EXCLUDED.dimensions, fingerprint = EXCLUDED.fingerprint, vector = EXCLUDED.vector, embedded_at = EXCLUDED.embedded_at").
				Returning("NULL").Exec(ctx); err != nil {
				return fmt.Errorf("memory: store vector: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return len(rows), nil
}

// nearest ranks o's memories matching f by cosine similarity to the
// query's embedding, best first. It reads the owner's vectors of the
// current model only, one row at a time.
func (s *Service) nearest(ctx context.Context, o storage.Owner, query string, f Filter, limit int) ([]ranked, error) {
	qv, err := s.embed.Embed(ctx, []string{query})
	if err != nil {
		return nil, err
	}
	if len(qv) != 1 {
		return nil, errors.New("memory: the embedder returned no vector for the query")
	}
	if err := checkVector(qv[0], s.embed.Dimensions()); err != nil {
		return nil, err
	}
	cond, args := s.where(f)
	rows, err := s.store.Reader.NewSelect().TableExpr("memory_vectors AS v").
		Join("JOIN memories AS m ON m.id = v.memory_id AND m.user_id = v.user_id").
		ColumnExpr("v.memory_id, v.vector").
		Where("v.user_id = ? AND v.model = ? AND v.dimensions = ?", o.ID, s.embed.Model(), s.embed.Dimensions()).
		Where(cond, args...).Rows(ctx)
	if err != nil {
		return nil, fmt.Errorf("memory: read vectors: %w", err)
	}
	defer rows.Close()
	top := &topK{}
	for rows.Next() {
		var id int64
		var raw []byte
		if err := rows.Scan(&id, &raw); err != nil {
			return nil, fmt.Errorf("memory: read vectors: %w", err)
		}
		if len(raw) != 4*len(qv[0]) {
			continue // another size: not comparable, so not similar
		}
		sim := cosine(qv[0], decodeVector(raw))
		if math.IsNaN(sim) {
			continue
		}
		if top.Len() < limit {
			heap.Push(top, ranked{ID: id, Score: sim})
		} else if sim > (*top)[0].Score {
			(*top)[0] = ranked{ID: id, Score: sim}
			heap.Fix(top, 0)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("memory: read vectors: %w", err)
	}
	out := make([]ranked, top.Len())
	for i := len(out) - 1; i >= 0; i-- {
		out[i] = heap.Pop(top).(ranked)
	}
	return out, nil
}

// topK is a min-heap of the best scores seen.
type topK []ranked

func (h topK) Len() int           { return len(h) }
func (h topK) Less(i, j int) bool { return h[i].Score < h[j].Score }
func (h topK) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *topK) Push(x any)        { *h = append(*h, x.(ranked)) }
func (h *topK) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// ReindexReport says what one Reindex call did.
type ReindexReport struct {
	// Embedded is how many memories got a new vector.
	Embedded int
	// Complete is true when no memory is left without a current vector.
	Complete bool
}

// ReindexLane names the reindex schedule.
const ReindexLane = "memory-reindex"

// reindexPerTick is the budget of one tick of the reindex lane.
const reindexPerTick = 256

// Reindex embeds up to budget memories whose vector is missing (a failed
// embedding at write time) or was made by another model or size. With no
// embedder it has nothing to do.
func (s *Service) Reindex(ctx context.Context, budget int) (ReindexReport, error) {
	if s.embed == nil {
		return ReindexReport{Complete: true}, nil
	}
	if budget <= 0 {
		return ReindexReport{}, fmt.Errorf("memory: reindex budget %d: want a positive number", budget)
	}
	var rep ReindexReport
	// The scan goes on after the memories the last call saw, and wraps
	// once: memories the embedder refuses (or fails on) never hold the
	// others back.
	s.reindexMu.Lock()
	defer s.reindexMu.Unlock()
	after, wrapped, clean := s.reindexAfter, s.reindexAfter == 0, true
	defer func() { s.reindexAfter = after }()
	for rep.Embedded < budget {
		batch := min(maxEmbedBatch, budget-rep.Embedded)
		var ps []pending
		err := s.store.Reader.NewSelect().TableExpr("memories AS m").
			Join("LEFT JOIN memory_vectors AS v ON v.memory_id = m.id").
			ColumnExpr("m.id, m.user_id, m.text, COALESCE(v.fingerprint, '') AS fingerprint").
			Where("m.id > ?", after).
			Where("v.memory_id IS NULL OR v.model <> ? OR v.dimensions <> ?", s.embed.Model(), s.embed.Dimensions()).
			OrderExpr("m.id").Limit(int64(batch)).Scan(ctx, &ps)
		if err != nil {
			return rep, fmt.Errorf("memory: reindex: %w", err)
		}
		if len(ps) == 0 {
			if !wrapped {
				after, wrapped = 0, true
				continue
			}
			after, rep.Complete = 0, clean
			return rep, nil
		}
		after = ps[len(ps)-1].ID
		n, err := s.embedAll(ctx, ps)
		rep.Embedded += n
		if n < len(ps) {
			clean = false
		}
		if err != nil {
			return rep, fmt.Errorf("memory: reindex: %w", err)
		}
	}
	return rep, nil
}

// Schedule returns the reindex lane: every five minutes, on one replica
// at a time, it embeds up to 256 memories whose vector is missing or stale.
func (s *Service) Schedule() schedules.Schedule {
	return schedules.Schedule{Name: ReindexLane, Every: 5 * time.Minute, Run: func(ctx context.Context, _ schedules.Tick) error {
		rep, err := s.Reindex(ctx, reindexPerTick)
		if rep.Embedded > 0 {
			s.log.InfoContext(ctx, "memory: reindexed memories", "embedded", rep.Embedded, "complete", rep.Complete)
		}
		return err
	}}
}
