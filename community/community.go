package community

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/codemode"
	"github.com/enclave-mcp/enclave/events"
	"github.com/enclave-mcp/enclave/storage"
)

// BlobDomain is the blob prefix of listing snapshots:
// "<author's stable id>/community/<listing id>/<digest>".
const BlobDomain = "community"

// Bounds.
const (
	// MaxReadmeBytes bounds a listing's readme.
	MaxReadmeBytes = 64 << 10
	// MaxQueryBytes is how much of a search query is read: its first
	// MaxQueryWords words of at most MaxWordBytes each within its first
	// MaxQueryBytes bytes. The rest is ignored: a query of any length is
	// never an error.
	MaxQueryBytes = 4096
	MaxQueryWords = 8
	MaxWordBytes  = 64
	// PageSize is the number of listings a search page holds.
	PageSize = 20
	// MaxNoteChars bounds a rating's note, MaxDetailsChars a report's details.
	MaxNoteChars    = 1000
	MaxDetailsChars = 2000
)

// Statuses of a listing.
const (
	StatusPublic   = "public"
	StatusDelisted = "delisted"
)

// Report reasons and statuses.
var (
	ReportReasons  = []string{"spam", "malware", "abuse", "copyright", "other"}
	ReportStatuses = []string{"open", "dismissed", "actioned"}
)

// Packages is what the community needs of code mode: reading one version
// of the caller's package with its sources, and creating a new package
// for the forker (create-only: CodeConflict when the name is taken).
// *codemode.Service implements it.
type Packages interface {
	Get(ctx context.Context, o storage.Owner, name string, version int) (codemode.Version, error)
	Create(ctx context.Context, by capabilities.Caller, o storage.Owner, name string, files map[string]string, m codemode.Manifest) (codemode.Version, error)
}

// Events is where community.* events go; *events.Bus implements it.
type Events interface {
	Publish(ctx context.Context, db bun.IDB, typ string, data any) (events.Event, error)
	Enrich(typ string, f events.Enricher)
}

// Options tune the community (enclave.Config.Community).
type Options struct {
	// Disabled turns the community off: none of its capabilities is
	// registered. Its tables exist and are exported and deleted with
	// accounts all the same. The community is also off when code mode is.
	Disabled bool
}

// Config configures the service. Store, Owners and Packages are required.
type Config struct {
	Store    *storage.Store
	Owners   capabilities.OwnerOf
	Packages Packages
	// Events receives community.* events; nil publishes none.
	Events Events
	Logger *slog.Logger
	// Now is the clock (tests). Default time.Now.
	Now func() time.Time
}

// Service keeps the community's listings, forks, ratings, reports and bans.
type Service struct {
	store  *storage.Store
	owners capabilities.OwnerOf
	pkgs   Packages
	events Events
	log    *slog.Logger
	now    func() time.Time
}

// New returns the service and registers the enrichers of its events.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Owners == nil || cfg.Packages == nil {
		return nil, errors.New("community: Store, Owners and Packages are required")
	}
	s := &Service{store: cfg.Store, owners: cfg.Owners, pkgs: cfg.Packages, events: cfg.Events, log: cfg.Logger, now: cfg.Now}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.events != nil {
		s.registerEnrichers()
	}
	return s, nil
}

func (s *Service) clock() time.Time { return s.now().UTC().Truncate(time.Microsecond) }

// SearchTimeout bounds one word search's query (communitySearch answers
// anyone, signed in or not): a query of common words that takes longer
// is refused with a sentence asking for more distinctive words.
var SearchTimeout = 3 * time.Second

func invalid(format string, args ...any) error {
	return capabilities.Errorf(capabilities.CodeInvalidInput, format, args...)
}

func listingNotFound(id string) error {
	return capabilities.Errorf(capabilities.CodeNotFound, "listing %q not found", id)
}

func newID(prefix string) string { return prefix + strings.ToLower(rand.Text()) }

// listingRow is a community_listings row.
type listingRow struct {
	bun.BaseModel  `bun:"table:community_listings,alias:l"`
	ID             int64      `bun:"id,pk,autoincrement"`
	PublicID       string     `bun:"public_id"`
	UserID         int64      `bun:"user_id"`
	PackageName    string     `bun:"package_name"`
	PackageVersion int        `bun:"package_version"`
	Name           string     `bun:"name"`
	Description    string     `bun:"description"`
	Readme         string     `bun:"readme"`
	AuthorUsername string     `bun:"author_username"`
	SourceBlob     string     `bun:"source_blob"`
	SourceBytes    int64      `bun:"source_bytes"`
	Status         string     `bun:"status"`
	FeaturedAt     *time.Time `bun:"featured_at"`
	SearchText     string     `bun:"search_text"`
	PublishedAt    time.Time  `bun:"published_at"`
	UpdatedAt      time.Time  `bun:"updated_at"`
}

// snapshot is the blob of a listing: the package version's manifest and
// sources as published.
type snapshot struct {
	Manifest codemode.Manifest `json:"manifest"`
	Files    map[string]string `json:"files"`
}

// Export is one function a listed package offers.
type Export struct {
	Name        string `json:"name"`
	Description string `json:"description"`
}

// Rating is the aggregate of a listing's ratings.
type Rating struct {
	Average float64 `json:"average"`
	Count   int64   `json:"count"`
}

// Listing is a listing as anyone signed in sees it: public fields only.
type Listing struct {
	ID          string   `json:"id" jsonschema:"the listing's id (lst_…)"`
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Author      string   `json:"author" jsonschema:"the author's username when they published"`
	Package     string   `json:"package" jsonschema:"the name of the published package"`
	Version     int      `json:"version" jsonschema:"the published version of the package"`
	Exports     []Export `json:"exports"`
	Featured    bool     `json:"featured"`
	Status      string   `json:"status" schema:"enum=public|delisted"`
	Forks       int64    `json:"forks"`
	Rating      Rating   `json:"rating"`
	// Readme and Files are the published snapshot (communityGet only).
	Readme      string            `json:"readme,omitempty"`
	Files       map[string]string `json:"files,omitempty" jsonschema:"the published sources by path (communityGet only)"`
	SourceBytes int64             `json:"sourceBytes"`
	PublishedAt time.Time         `json:"publishedAt"`
	UpdatedAt   time.Time         `json:"updatedAt"`
	// Mine is true for the caller's own listing.
	Mine bool `json:"mine"`
}

func (r listingRow) listing(m codemode.Manifest) Listing {
	exports := make([]Export, 0, len(m.Exports))
	for _, name := range slices.Sorted(maps.Keys(m.Exports)) {
		exports = append(exports, Export{Name: name, Description: m.Exports[name].Description})
	}
	return Listing{
		ID: r.PublicID, Name: r.Name, Description: r.Description, Author: r.AuthorUsername, Package: r.PackageName,
		Version: r.PackageVersion, Exports: exports, Featured: r.FeaturedAt != nil, Status: r.Status,
		SourceBytes: r.SourceBytes, PublishedAt: r.PublishedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(),
	}
}

// searchText is what the catalogue searches: public fields only.
func searchText(name, description, readme, author string, m codemode.Manifest) string {
	parts := []string{name, description, author, readme}
	for n, e := range m.Exports {
		parts = append(parts, n, e.Description)
	}
	return strings.ToLower(strings.Join(parts, "\n"))
}

// usernameOf reads an account's current username.
func usernameOf(ctx context.Context, db bun.IDB, id int64) (string, error) {
	var name string
	err := db.NewSelect().Table("users").Column("username").Where("id = ?", id).Scan(ctx, &name)
	if errors.Is(err, sql.ErrNoRows) {
		return "", capabilities.Errorf(capabilities.CodeNotFound, "no such account")
	}
	return name, err
}

// checkNotBanned refuses a banned user's community actions.
func (s *Service) checkNotBanned(ctx context.Context, db bun.IDB, o storage.Owner) error {
	n, err := db.NewSelect().Table("community_bans").Where("user_id = ?", o.ID).Count(ctx)
	if err != nil {
		return fmt.Errorf("community: ban check: %w", err)
	}
	if n > 0 {
		return capabilities.Errorf(capabilities.CodeConflict, "this account is banned from the community: it may not publish, fork, rate or report")
	}
	return nil
}

// Publish lists version (0: the latest) of the owner's package, or
// replaces the snapshot of its existing listing (same id; a delisted
// listing stays delisted). readme is the listing's Markdown readme; nil
// keeps the existing listing's (none for a new one).
func (s *Service) Publish(ctx context.Context, o storage.Owner, pkg string, version int, readme *string) (Listing, error) {
	if readme != nil && len(*readme) > MaxReadmeBytes {
		return Listing{}, invalid("readme is %d bytes: at most %d KiB", len(*readme), MaxReadmeBytes>>10)
	}
	if err := s.checkNotBanned(ctx, s.store.Reader, o); err != nil {
		return Listing{}, err
	}
	v, err := s.pkgs.Get(ctx, o, pkg, version)
	if err != nil {
		return Listing{}, err
	}
	raw, err := json.Marshal(snapshot{Manifest: v.Manifest, Files: v.Files})
	if err != nil {
		return Listing{}, fmt.Errorf("community: publish: %w", err)
	}
	sum := sha256.Sum256(raw)
	digest := hex.EncodeToString(sum[:])

	var existing listingRow
	err = s.store.Reader.NewSelect().Model(&existing).Where("user_id = ? AND package_name = ?", o.ID, pkg).Scan(ctx)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		existing = listingRow{}
	case err != nil:
		return Listing{}, fmt.Errorf("community: publish: %w", err)
	}
	publicID := existing.PublicID
	if publicID == "" {
		publicID = newID("lst_")
	}
	text := existing.Readme
	if readme != nil {
		text = strings.TrimSpace(*readme)
	}
	blobName := publicID + "/" + digest
	if err := storage.CheckWrite(ctx); err != nil {
		return Listing{}, err
	}
	if err := s.store.Bucket.WriteAll(ctx, storage.BlobKey(o, BlobDomain, blobName), raw, nil); err != nil {
		return Listing{}, fmt.Errorf("community: publish: %w", err)
	}
	now := s.clock()
	var row listingRow
	first := false
	err = s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		author, err := usernameOf(ctx, tx, o.ID)
		if err != nil {
			return err
		}
		if err := s.checkNotBanned(ctx, tx, o); err != nil {
			return err
		}
		row = listingRow{
			PublicID: publicID, UserID: o.ID, PackageName: pkg, PackageVersion: v.Version, Name: pkg,
			Description: v.Manifest.Description, Readme: text, AuthorUsername: author, SourceBlob: blobName,
			SourceBytes: v.SourceBytes, Status: StatusPublic, PublishedAt: now, UpdatedAt: now,
			SearchText: searchText(pkg, v.Manifest.Description, text, author, v.Manifest),
		}
		var cur listingRow
		err = tx.NewSelect().Model(&cur).Where("user_id = ? AND package_name = ?", o.ID, pkg).Scan(ctx)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			// new, or unpublished since the read above: listed afresh
			// under the id the blob was written with
			first = true
			// A concurrent first publication of the same package inserts
			// nothing here (and this one answers conflict).
			res, err := tx.NewInsert().Model(&row).On("CONFLICT (user_id, package_name) DO NOTHING").Exec(ctx)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n != 1 {
				return capabilities.Errorf(capabilities.CodeConflict, "package %q was published concurrently: try again", pkg)
			}
			return nil
		case err != nil:
			return err
		}
		if cur.PublicID != publicID {
			return capabilities.Errorf(capabilities.CodeConflict, "package %q was published concurrently: try again", pkg)
		}
		row.ID, row.Status, row.FeaturedAt, row.PublishedAt = cur.ID, cur.Status, cur.FeaturedAt, cur.PublishedAt
		_, err = tx.NewUpdate().Model(&row).
			Column("package_version", "description", "readme", "author_username", "source_blob", "source_bytes", "search_text", "updated_at").
			Where("id = ? AND user_id = ?", cur.ID, o.ID).Exec(ctx)
		if err != nil {
			return err
		}
		existing = cur
		return nil
	})
	if err != nil {
		if existing.SourceBlob != blobName {
			_ = s.store.Bucket.Delete(context.WithoutCancel(ctx), storage.BlobKey(o, BlobDomain, blobName))
		}
		return Listing{}, wrap("publish", err)
	}
	if existing.SourceBlob != "" && existing.SourceBlob != blobName {
		s.deleteBlob(ctx, o, existing.SourceBlob)
	}
	if first {
		s.publish(ctx, TypePublished, map[string]string{"listingId": publicID})
	}
	out := row.listing(v.Manifest)
	out.Readme, out.Files, out.Mine = text, v.Files, true
	return out, nil
}

// wrap keeps capability errors as they are and prefixes the others.
func wrap(op string, err error) error {
	if _, ok := errors.AsType[*capabilities.Error](err); ok {
		return err
	}
	return fmt.Errorf("community: %s: %w", op, err)
}

func (s *Service) deleteBlob(ctx context.Context, o storage.Owner, name string) {
	if err := s.store.Bucket.Delete(context.WithoutCancel(ctx), storage.BlobKey(o, BlobDomain, name)); err != nil {
		s.log.WarnContext(ctx, "community: deleting a superseded snapshot failed", "err", err)
	}
}

// publish records an event in its own transaction (after the change
// committed); a failure is logged, never the caller's.
func (s *Service) publish(ctx context.Context, typ string, data any) {
	if s.events == nil {
		return
	}
	err := s.store.RunInTx(context.WithoutCancel(ctx), func(ctx context.Context, tx bun.Tx) error {
		_, err := s.events.Publish(ctx, tx, typ, data)
		return err
	})
	if err != nil {
		s.log.ErrorContext(ctx, "community: publishing an event failed", "type", typ, "err", err)
	}
}

// publishIn records an event in the change's own transaction.
func (s *Service) publishIn(ctx context.Context, tx bun.IDB, typ string, data any) error {
	if s.events == nil {
		return nil
	}
	_, err := s.events.Publish(ctx, tx, typ, data)
	return err
}

// Unpublish removes the owner's listing (by listing id or package name)
// with its snapshot and the ratings on it. Forks stay with their forkers.
func (s *Service) Unpublish(ctx context.Context, o storage.Owner, ref string) (bool, error) {
	var row listingRow
	err := s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		err := tx.NewSelect().Model(&row).Where("user_id = ? AND (public_id = ? OR package_name = ?)", o.ID, ref, ref).Limit(1).Scan(ctx)
		if err != nil {
			return err
		}
		if _, err := tx.NewDelete().Model((*listingRow)(nil)).Where("id = ? AND user_id = ?", row.ID, o.ID).Exec(ctx); err != nil {
			return err
		}
		return s.publishIn(ctx, tx, TypeUnpublished, map[string]string{"listingId": row.PublicID, "listingName": row.Name})
	})
	if errors.Is(err, sql.ErrNoRows) {
		return false, listingNotFound(ref)
	}
	if err != nil {
		return false, wrap("unpublish", err)
	}
	s.deleteBlob(ctx, o, row.SourceBlob)
	return true, nil
}

// visibleListing reads a listing the viewer may see: a public one, or the
// viewer's own in any status. admin sees every listing.
func (s *Service) visibleListing(ctx context.Context, db bun.IDB, viewer int64, id string, admin bool) (listingRow, error) {
	var row listingRow
	q := db.NewSelect().Model(&row).Where("public_id = ?", id)
	if !admin {
		q = q.Where("(status = ? OR user_id = ?)", StatusPublic, viewer)
	}
	err := q.Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return row, listingNotFound(id)
	}
	return row, err
}

// readSnapshot reads a listing's blob (under its author's prefix).
func (s *Service) readSnapshot(ctx context.Context, row listingRow) (snapshot, error) {
	var stable string
	if err := s.store.Reader.NewSelect().Table("users").Column("stable_user_id").Where("id = ?", row.UserID).Scan(ctx, &stable); err != nil {
		return snapshot{}, fmt.Errorf("community: listing author: %w", err)
	}
	raw, err := s.store.Bucket.ReadAll(ctx, storage.BlobKey(storage.Owner{ID: row.UserID, StableID: stable}, BlobDomain, row.SourceBlob))
	if err != nil {
		return snapshot{}, fmt.Errorf("community: read snapshot: %w", err)
	}
	var snap snapshot
	if err := json.Unmarshal(raw, &snap); err != nil {
		return snapshot{}, fmt.Errorf("community: decode snapshot: %w", err)
	}
	return snap, nil
}

// visibleSnapshot reads a listing the viewer may see with its snapshot.
// The author may replace the snapshot (rewriting its blob, or writing a
// new one and deleting the old) or unpublish between the two reads, and
// a blob store may fail a read that meets a rewrite of the same key: then
// the listing is read again and its snapshot once more, and a listing
// gone since answers not found, never an internal error.
func (s *Service) visibleSnapshot(ctx context.Context, viewer int64, id string, admin bool) (listingRow, snapshot, error) {
	row, err := s.visibleListing(ctx, s.store.Reader, viewer, id, admin)
	for attempt := 1; ; attempt++ {
		if err != nil {
			return listingRow{}, snapshot{}, err
		}
		snap, serr := s.readSnapshot(ctx, row)
		if serr == nil {
			return row, snap, nil
		}
		if attempt == 3 {
			return listingRow{}, snapshot{}, serr
		}
		select {
		case <-ctx.Done():
			return listingRow{}, snapshot{}, serr
		case <-time.After(time.Duration(attempt) * 5 * time.Millisecond):
		}
		row, err = s.visibleListing(ctx, s.store.Reader, viewer, id, admin)
	}
}

// stats fills the fork counts and ratings of listings.
func (s *Service) stats(ctx context.Context, ids []int64) (map[int64]int64, map[int64]Rating, error) {
	forks, ratings := map[int64]int64{}, map[int64]Rating{}
	if len(ids) == 0 {
		return forks, ratings, nil
	}
	var fc []struct {
		ListingID int64 `bun:"listing_id"`
		N         int64 `bun:"n"`
	}
	if err := s.store.Reader.NewSelect().Table("community_forks").ColumnExpr("listing_id, COUNT(*) AS n").
		Where("listing_id IN (?)", bun.In(ids)).Group("listing_id").Scan(ctx, &fc); err != nil {
		return nil, nil, err
	}
	for _, f := range fc {
		forks[f.ListingID] = f.N
	}
	var rc []struct {
		ListingID int64 `bun:"listing_id"`
		N         int64 `bun:"n"`
		Sum       int64 `bun:"total"`
	}
	if err := s.store.Reader.NewSelect().Table("community_ratings").ColumnExpr("listing_id, COUNT(*) AS n, SUM(score) AS total").
		Where("listing_id IN (?)", bun.In(ids)).Group("listing_id").Scan(ctx, &rc); err != nil {
		return nil, nil, err
	}
	for _, r := range rc {
		if r.N > 0 {
			ratings[r.ListingID] = Rating{Average: float64(r.Sum*100/r.N) / 100, Count: r.N}
		}
	}
	return forks, ratings, nil
}

// Get returns a listing with its readme and sources.
func (s *Service) Get(ctx context.Context, viewer storage.Owner, id string, admin bool) (Listing, error) {
	row, snap, err := s.visibleSnapshot(ctx, viewer.ID, id, admin)
	if err != nil {
		return Listing{}, wrap("get", err)
	}
	forks, ratings, err := s.stats(ctx, []int64{row.ID})
	if err != nil {
		return Listing{}, wrap("get", err)
	}
	out := row.listing(snap.Manifest)
	out.Readme, out.Files, out.Forks, out.Rating, out.Mine = row.Readme, snap.Files, forks[row.ID], ratings[row.ID], row.UserID == viewer.ID
	return out, nil
}

// SearchResult is one page of the catalogue.
type SearchResult struct {
	Listings   []Listing `json:"listings"`
	NextCursor string    `json:"nextCursor,omitempty"`
}

var listingKeyset = storage.Keyset[listingRow]{Kind: "community-search", Column: "l.id", Key: func(r *listingRow) any { return r.ID }, Desc: true}

// searchColumns are the listing columns a search page reads.
var searchColumns = []string{"l.id", "l.public_id", "l.user_id", "l.package_name", "l.package_version", "l.name", "l.description",
	"l.author_username", "l.source_bytes", "l.status", "l.featured_at", "l.published_at", "l.updated_at"}

// Search returns public listings. An empty query lists them all, newest
// first. Otherwise the query is words (see queryWords: quotes, operators,
// column filters and wildcards are not syntax but separators), every one
// of which a listing's public fields (name, description, readme, author's
// username) must hold, stemmed; the best ranked come first (a match in
// the name weighs most, then the description and the author, then the
// readme), ties newest first. The index and its statistics cover public
// listings only, the same for every caller. A query without any word
// finds nothing.
func (s *Service) Search(ctx context.Context, viewer storage.Owner, query, cursor string) (SearchResult, error) {
	var rows []listingRow
	var next string
	if strings.TrimSpace(query) == "" {
		q := s.store.Reader.NewSelect().Model((*listingRow)(nil)).Column(searchColumns...).Where("l.status = ?", StatusPublic)
		page, err := storage.Paginate(ctx, q, listingKeyset, storage.PageRequest{Cursor: cursor, Limit: PageSize})
		if err != nil {
			return SearchResult{}, err
		}
		rows, next = page.Items, page.Next
	} else {
		sctx, cancel := context.WithTimeout(ctx, SearchTimeout)
		var err error
		rows, next, err = s.fullText(sctx, queryWords(query), cursor)
		timedOut := sctx.Err() != nil && ctx.Err() == nil
		cancel()
		if err != nil && timedOut {
			return SearchResult{}, invalid("the search took too long: use fewer or more distinctive words")
		}
		if err != nil {
			return SearchResult{}, err
		}
	}
	ids := make([]int64, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	forks, ratings, err := s.stats(ctx, ids)
	if err != nil {
		return SearchResult{}, wrap("search", err)
	}
	out := SearchResult{Listings: make([]Listing, 0, len(rows)), NextCursor: next}
	for _, r := range rows {
		l := r.listing(codemode.Manifest{})
		l.Exports = nil
		l.Forks, l.Rating, l.Mine = forks[r.ID], ratings[r.ID], r.UserID == viewer.ID
		out.Listings = append(out.Listings, l)
	}
	return out, nil
}

// Mine lists the owner's own listings, in every status, newest first.
func (s *Service) Mine(ctx context.Context, o storage.Owner) ([]Listing, error) {
	var rows []listingRow
	if err := s.store.Reader.NewSelect().Model(&rows).Where("user_id = ?", o.ID).Order("id DESC").Limit(1000).Scan(ctx); err != nil {
		return nil, wrap("list", err)
	}
	ids := make([]int64, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	forks, ratings, err := s.stats(ctx, ids)
	if err != nil {
		return nil, wrap("list", err)
	}
	out := make([]Listing, 0, len(rows))
	for _, r := range rows {
		l := r.listing(codemode.Manifest{})
		l.Exports = nil
		l.Forks, l.Rating, l.Mine = forks[r.ID], ratings[r.ID], true
		out = append(out, l)
	}
	return out, nil
}

// Fork is the result of communityFork.
type Fork struct {
	Package string `json:"package" jsonschema:"the name of your new package"`
	Version int    `json:"version"`
	Listing string `json:"listing" jsonschema:"the listing it was forked from"`
	// Exports are the new package's functions, now your own tools.
	Exports []string `json:"exports"`
}

// Fork copies a public listing's snapshot into a new package of the
// forker, named name (default: the listing's package name). The
// manifest's jobs are left out: the forker schedules their own. A fork
// only ever creates a package: when the forker already has one of that
// name (even one saved while the fork runs) it is refused with
// CodeConflict and a sentence asking for another name, and the existing
// package gets no version from the listing.
func (s *Service) Fork(ctx context.Context, by capabilities.Caller, o storage.Owner, id, name string) (Fork, error) {
	if err := s.checkNotBanned(ctx, s.store.Reader, o); err != nil {
		return Fork{}, err
	}
	row, snap, err := s.visibleSnapshot(ctx, o.ID, id, false)
	if err != nil {
		return Fork{}, wrap("fork", err)
	}
	if name == "" {
		name = row.PackageName
	}
	if _, err := s.pkgs.Get(ctx, o, name, 0); err == nil {
		return Fork{}, capabilities.Errorf(capabilities.CodeConflict, "you already have a package named %q: choose another name for the fork", name)
	} else if capabilities.CodeOf(err) != capabilities.CodeNotFound {
		return Fork{}, err
	}
	m := snap.Manifest
	m.Jobs = nil
	v, err := s.pkgs.Create(ctx, by, o, name, snap.Files, m)
	if capabilities.CodeOf(err) == capabilities.CodeConflict {
		return Fork{}, capabilities.Errorf(capabilities.CodeConflict, "you already have a package named %q: choose another name for the fork", name)
	}
	if err != nil {
		return Fork{}, err
	}
	err = s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		f := forkRow{UserID: o.ID, ListingPublicID: row.PublicID, ListingName: row.Name, SourcePackageName: row.PackageName,
			SourceVersion: row.PackageVersion, ForkedPackageName: name, CreatedAt: s.clock()}
		// The listing may have gone since it was read: keep the link only
		// while it exists. On PostgreSQL the row is held (FOR KEY SHARE)
		// until the fork is recorded, so that an unpublishing or deletion
		// committing meanwhile waits for it (then its ON DELETE clears the
		// link) instead of failing the fork's insert on the foreign key
		// after the package was created.
		var live []int64
		q := tx.NewSelect().Model((*listingRow)(nil)).Column("id").Where("id = ?", row.ID)
		if s.store.Dialect() == storage.Postgres {
			q = q.For("KEY SHARE")
		}
		if err := q.Scan(ctx, &live); err != nil {
			return err
		}
		if len(live) == 1 {
			f.ListingID = &row.ID
		}
		if _, err := tx.NewInsert().Model(&f).Exec(ctx); err != nil {
			return err
		}
		return s.publishIn(ctx, tx, TypeForked, map[string]string{"activity": activityRef("fork", f.ID)})
	})
	if err != nil {
		return Fork{}, wrap("fork", err)
	}
	return Fork{Package: name, Version: v.Version, Listing: row.PublicID, Exports: slices.Sorted(maps.Keys(m.Exports))}, nil
}

type forkRow struct {
	bun.BaseModel     `bun:"table:community_forks,alias:f"`
	ID                int64     `bun:"id,pk,autoincrement"`
	UserID            int64     `bun:"user_id"`
	ListingID         *int64    `bun:"listing_id"`
	ListingPublicID   string    `bun:"listing_public_id"`
	ListingName       string    `bun:"listing_name"`
	SourcePackageName string    `bun:"source_package_name"`
	SourceVersion     int       `bun:"source_version"`
	ForkedPackageName string    `bun:"forked_package_name"`
	CreatedAt         time.Time `bun:"created_at"`
}

// ForkRecord is one of the caller's forks, with its provenance.
type ForkRecord struct {
	Package        string    `json:"package" jsonschema:"your package"`
	Listing        string    `json:"listing" jsonschema:"the listing it came from (it may since have been removed)"`
	ListingName    string    `json:"listingName"`
	SourcePackage  string    `json:"sourcePackage"`
	SourceVersion  int       `json:"sourceVersion"`
	ListingRemoved bool      `json:"listingRemoved"`
	CreatedAt      time.Time `json:"createdAt"`
}

// Forks lists the owner's forks, newest first.
func (s *Service) Forks(ctx context.Context, o storage.Owner) ([]ForkRecord, error) {
	var rows []forkRow
	if err := s.store.Reader.NewSelect().Model(&rows).Where("user_id = ?", o.ID).Order("id DESC").Limit(1000).Scan(ctx); err != nil {
		return nil, wrap("forks", err)
	}
	out := make([]ForkRecord, 0, len(rows))
	for _, r := range rows {
		out = append(out, ForkRecord{Package: r.ForkedPackageName, Listing: r.ListingPublicID, ListingName: r.ListingName,
			SourcePackage: r.SourcePackageName, SourceVersion: r.SourceVersion, ListingRemoved: r.ListingID == nil, CreatedAt: r.CreatedAt.UTC()})
	}
	return out, nil
}

type ratingRow struct {
	bun.BaseModel `bun:"table:community_ratings,alias:r"`
	ID            int64     `bun:"id,pk,autoincrement"`
	UserID        int64     `bun:"user_id"`
	ListingID     int64     `bun:"listing_id"`
	Score         int       `bun:"score"`
	Note          string    `bun:"note"`
	CreatedAt     time.Time `bun:"created_at"`
	UpdatedAt     time.Time `bun:"updated_at"`
}

// RateResult is the result of communityRate.
type RateResult struct {
	Listing string `json:"listing"`
	Score   int    `json:"score"`
	Note    string `json:"note"`
	Rating  Rating `json:"rating" jsonschema:"the listing's ratings now"`
}

// Rate sets the owner's rating of a public listing (one per person; a
// second call replaces it). Authors do not rate their own listings.
func (s *Service) Rate(ctx context.Context, o storage.Owner, id string, score int, note string) (RateResult, error) {
	if score < 1 || score > 5 {
		return RateResult{}, invalid("score must be 1 to 5")
	}
	note = strings.TrimSpace(note)
	if n := len([]rune(note)); n > MaxNoteChars {
		return RateResult{}, invalid("note is %d characters: at most %d", n, MaxNoteChars)
	}
	var row listingRow
	err := s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if err := s.checkNotBanned(ctx, tx, o); err != nil {
			return err
		}
		var err error
		if row, err = s.visibleListing(ctx, tx, o.ID, id, false); err != nil {
			return err
		}
		if row.UserID == o.ID {
			return invalid("you cannot rate your own listing")
		}
		if row.Status != StatusPublic {
			return listingNotFound(id)
		}
		now := s.clock()
		r := ratingRow{UserID: o.ID, ListingID: row.ID, Score: score, Note: note, CreatedAt: now, UpdatedAt: now}
		if err := tx.NewInsert().Model(&r).
			On("CONFLICT (user_id, listing_id) DO UPDATE").Set("score = EXCLUDED.score, note = EXCLUDED.note, updated_at = EXCLUDED.updated_at").
			Returning("id").Scan(ctx, &r.ID); err != nil {
			return err
		}
		return s.publishIn(ctx, tx, TypeRated, map[string]string{"activity": activityRef("rating", r.ID)})
	})
	if err != nil {
		return RateResult{}, wrap("rate", err)
	}
	_, ratings, err := s.stats(ctx, []int64{row.ID})
	if err != nil {
		return RateResult{}, wrap("rate", err)
	}
	return RateResult{Listing: row.PublicID, Score: score, Note: note, Rating: ratings[row.ID]}, nil
}

type reportRow struct {
	bun.BaseModel   `bun:"table:community_reports,alias:rp"`
	ID              int64      `bun:"id,pk,autoincrement"`
	PublicID        string     `bun:"public_id"`
	UserID          int64      `bun:"user_id"`
	ListingID       *int64     `bun:"listing_id"`
	ListingPublicID string     `bun:"listing_public_id"`
	ListingName     string     `bun:"listing_name"`
	Reason          string     `bun:"reason"`
	Details         string     `bun:"details"`
	Status          string     `bun:"status"`
	Resolution      string     `bun:"resolution"`
	ResolvedBy      *int64     `bun:"resolved_by"`
	ResolvedAt      *time.Time `bun:"resolved_at"`
	CreatedAt       time.Time  `bun:"created_at"`
}

// ReportResult is the result of communityReport.
type ReportResult struct {
	Report string `json:"report" jsonschema:"the report's id (rpt_…)"`
	Status string `json:"status" schema:"enum=open|dismissed|actioned"`
}

// MaxOpenReports bounds the open reports one person keeps.
const MaxOpenReports = 20

// Report flags a public listing for the admins; one open report per
// person and listing (a second one answers the first).
func (s *Service) Report(ctx context.Context, o storage.Owner, id, reason, details string) (ReportResult, error) {
	if !slices.Contains(ReportReasons, reason) {
		return ReportResult{}, invalid("reason must be one of %s", strings.Join(ReportReasons, ", "))
	}
	details = strings.TrimSpace(details)
	if n := len([]rune(details)); n > MaxDetailsChars {
		return ReportResult{}, invalid("details are %d characters: at most %d", n, MaxDetailsChars)
	}
	var out ReportResult
	err := s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if s.store.Dialect() == storage.Postgres {
			// One report at a time per person: the checks below (one open
			// report per listing, MaxOpenReports) then hold under
			// concurrent calls (SQLite serializes its writers already).
			if _, err := tx.ExecContext(ctx, "SELECT id FROM users WHERE id = ? FOR UPDATE", o.ID); err != nil {
				return err
			}
		}
		if err := s.checkNotBanned(ctx, tx, o); err != nil {
			return err
		}
		row, err := s.visibleListing(ctx, tx, o.ID, id, false)
		if err != nil {
			return err
		}
		var prior reportRow
		err = tx.NewSelect().Model(&prior).Where("user_id = ? AND listing_id = ? AND status = 'open'", o.ID, row.ID).Limit(1).Scan(ctx)
		if err == nil {
			out = ReportResult{Report: prior.PublicID, Status: prior.Status}
			return nil
		} else if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		open, err := tx.NewSelect().Model((*reportRow)(nil)).Where("user_id = ? AND status = 'open'", o.ID).Count(ctx)
		if err != nil {
			return err
		}
		if open >= MaxOpenReports {
			return capabilities.Errorf(capabilities.CodeQuotaExceeded, "you have %d open reports: wait until the admins resolve some", open)
		}
		r := reportRow{PublicID: newID("rpt_"), UserID: o.ID, ListingID: &row.ID, ListingPublicID: row.PublicID, ListingName: row.Name,
			Reason: reason, Details: details, Status: "open", CreatedAt: s.clock()}
		if _, err := tx.NewInsert().Model(&r).Exec(ctx); err != nil {
			return err
		}
		out = ReportResult{Report: r.PublicID, Status: r.Status}
		return s.publishIn(ctx, tx, TypeReported, map[string]string{"reportId": r.PublicID})
	})
	if err != nil {
		return ReportResult{}, wrap("report", err)
	}
	return out, nil
}
