package codemode

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/uptrace/bun"
	"gocloud.dev/gcerrors"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
)

// Bounds of a package.
const (
	MaxFiles           = 64
	MaxFileBytes       = 256 << 10
	MaxPackageBytes    = 1 << 20
	MaxExports         = 32
	MaxJobsPerPackage  = 8
	MaxDescriptionRune = 1000
	// BlobDomain is the blob domain of package sources:
	// "<stableID>/packages/<sha256 hex>".
	BlobDomain = "packages"
)

var (
	packageName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,39}$`)
	exportName  = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9]{0,39}$`)
	jobName     = regexp.MustCompile(`^[a-z][a-z0-9-]{0,39}$`)
	filePath    = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9_.-]*(/[A-Za-z0-9_-][A-Za-z0-9_.-]*)*\.(js|mjs)$`)
	// dynamicImport finds import(...) calls; a save that has one is refused.
	dynamicImport = regexp.MustCompile(`(^|[^.\w$])import\s*\(`)
	// staticImport finds the specifiers of static imports and re-exports.
	staticImport = regexp.MustCompile(`(?m)(?:^|[;\s])(?:import|export)\s[^;'"]*?\bfrom\s*["']([^"']+)["']|(?:^|[;\s])import\s*["']([^"']+)["']`)
)

// Manifest describes a package: its main module, exports and jobs.
type Manifest struct {
	Description string            `json:"description,omitempty" jsonschema:"what the package does (at most 1000 characters)"`
	Main        string            `json:"main,omitempty" jsonschema:"the module whose named exports are the package's exports; default main.js"`
	Exports     map[string]Export `json:"exports,omitempty" jsonschema:"the functions of the main module offered as the owner's own tools, by export name (a JS identifier)"`
	Jobs        map[string]Job    `json:"jobs,omitempty" jsonschema:"scheduled runs of exports, by job name (lowercase letters, digits, -)"`
}

// Export is one function a package offers as its owner's capability.
type Export struct {
	Description string         `json:"description" jsonschema:"what the function does: the tool description a model reads"`
	InputSchema map[string]any `json:"inputSchema,omitempty" jsonschema:"JSON Schema (type object) of the function's single argument; default: any object"`
	ReadOnly    bool           `json:"readOnly,omitempty" jsonschema:"the function changes nothing"`
	Destructive bool           `json:"destructive,omitempty" jsonschema:"the function may delete or overwrite data"`
	Idempotent  bool           `json:"idempotent,omitempty" jsonschema:"calling it again with the same input has no further effect"`
	OpenWorld   bool           `json:"openWorld,omitempty" jsonschema:"the function reaches outside this server (fetch)"`
}

// Job is a scheduled run of one export.
type Job struct {
	Schedule string         `json:"schedule" jsonschema:"a cron schedule in UTC: minute hour day-of-month month day-of-week, e.g. '0 7 * * 1-5'"`
	Export   string         `json:"export" jsonschema:"the export the job calls"`
	Args     map[string]any `json:"args,omitempty" jsonschema:"the argument the export gets (a JSON object)"`
}

// Package is a saved package as listed.
type Package struct {
	Name          string    `json:"name"`
	Description   string    `json:"description"`
	LatestVersion int       `json:"latestVersion"`
	CreatedAt     time.Time `json:"createdAt"`
	UpdatedAt     time.Time `json:"updatedAt"`
}

// Version is one saved version of a package.
type Version struct {
	Package     string            `json:"package"`
	Version     int               `json:"version"`
	Manifest    Manifest          `json:"manifest"`
	Files       map[string]string `json:"files,omitempty" jsonschema:"the sources by path (packageGet only)"`
	SourceBytes int64             `json:"sourceBytes"`
	CreatedAt   time.Time         `json:"createdAt"`
}

type packageRow struct {
	bun.BaseModel `bun:"table:code_packages"`
	ID            int64     `bun:"id,pk,autoincrement"`
	UserID        int64     `bun:"user_id"`
	Name          string    `bun:"name"`
	Description   string    `bun:"description"`
	LatestVersion int       `bun:"latest_version"`
	CreatedAt     time.Time `bun:"created_at"`
	UpdatedAt     time.Time `bun:"updated_at"`
}

func (r packageRow) public() Package {
	return Package{Name: r.Name, Description: r.Description, LatestVersion: r.LatestVersion, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

type versionRow struct {
	bun.BaseModel `bun:"table:code_package_versions"`
	ID            int64     `bun:"id,pk,autoincrement"`
	UserID        int64     `bun:"user_id"`
	PackageID     int64     `bun:"package_id"`
	Version       int       `bun:"version"`
	Manifest      string    `bun:"manifest"`
	Files         string    `bun:"files"` // JSON {path: sha256 hex}
	SourceBytes   int64     `bun:"source_bytes"`
	CreatedAt     time.Time `bun:"created_at"`
}

func (r versionRow) decode() (Manifest, map[string]string, error) {
	var m Manifest
	var files map[string]string
	if err := json.Unmarshal([]byte(r.Manifest), &m); err != nil {
		return m, nil, fmt.Errorf("codemode: version %d: manifest: %w", r.ID, err)
	}
	if err := json.Unmarshal([]byte(r.Files), &files); err != nil {
		return m, nil, fmt.Errorf("codemode: version %d: files: %w", r.ID, err)
	}
	return m, files, nil
}

type jobRow struct {
	bun.BaseModel `bun:"table:code_package_jobs"`
	ID            int64      `bun:"id,pk,autoincrement"`
	UserID        int64      `bun:"user_id"`
	PackageID     int64      `bun:"package_id"`
	Name          string     `bun:"name"`
	ExportName    string     `bun:"export_name"`
	Schedule      string     `bun:"schedule"`
	NextRunAt     time.Time  `bun:"next_run_at"`
	RunningSince  *time.Time `bun:"running_since"`
	LastRunID     string     `bun:"last_run_id"`
	LastStatus    string     `bun:"last_status"`
	Scopes        string     `bun:"scopes"`
	Confined      *string    `bun:"confined"`
}

// authority is what a job may do, from the credential that saved it: its
// token scopes ("*": all) and its confinement (nil: none), as stored.
type authority struct {
	scopes   string
	confined *string
}

func authorityOf(c capabilities.Caller) authority {
	a := authority{scopes: "*"}
	if !c.AllScopes {
		b, _ := json.Marshal(nonNil(c.Scopes))
		a.scopes = string(b)
	}
	if c.Only != nil {
		b, _ := json.Marshal(c.Only)
		only := string(b)
		a.confined = &only
	}
	return a
}

// apply narrows a job's caller to the authority it was saved with.
func (a authority) apply(c capabilities.Caller) capabilities.Caller {
	c.AllScopes, c.Scopes = a.scopes == "*", nil
	if !c.AllScopes {
		if err := json.Unmarshal([]byte(a.scopes), &c.Scopes); err != nil {
			c.Scopes = []string{} // unreadable: no scope at all
		}
	}
	c.Only = nil
	if a.confined != nil {
		c.Only = []string{}
		_ = json.Unmarshal([]byte(*a.confined), &c.Only)
	}
	return c
}

func invalid(format string, args ...any) error {
	return capabilities.Errorf(capabilities.CodeInvalidInput, format, args...)
}

func notFound(name string) error {
	return capabilities.Errorf(capabilities.CodeNotFound, "package %q not found", name)
}

// validate checks a package before it is saved and fills the manifest's
// defaults. It returns the manifest as stored.
func (s *Service) validate(name string, files map[string]string, m Manifest) (Manifest, error) {
	if !packageName.MatchString(name) {
		return m, invalid("package name %q: use 1-40 lowercase letters, digits and '-', starting with a letter", name)
	}
	if utf8.RuneCountInString(m.Description) > MaxDescriptionRune {
		return m, invalid("the manifest's description is longer than %d characters", MaxDescriptionRune)
	}
	if len(files) == 0 {
		return m, invalid("a package needs at least one file")
	}
	if len(files) > MaxFiles {
		return m, invalid("a package has at most %d files", MaxFiles)
	}
	var total int
	for p, src := range files {
		if !filePath.MatchString(p) || strings.Contains(p, "..") || path.Clean(p) != p {
			return m, invalid("file path %q: use relative paths of letters, digits, '_', '-' and '.', ending in .js or .mjs", p)
		}
		if len(src) > MaxFileBytes {
			return m, invalid("file %s is larger than %d KiB", p, MaxFileBytes>>10)
		}
		if !utf8.ValidString(src) {
			return m, invalid("file %s is not UTF-8 text", p)
		}
		if dynamicImport.MatchString(stripComments(src)) {
			return m, invalid("file %s uses dynamic import(): import packages and modules with a static import at the top of the module instead", p)
		}
		for _, spec := range importsOf(src) {
			if !strings.HasPrefix(spec, "./") && !strings.HasPrefix(spec, "../") && !strings.HasPrefix(spec, "pkg:") {
				return m, invalid("file %s imports %q: a module may import files of its own package (\"./util.js\") or the owner's packages (\"pkg:name\" or \"pkg:name@3\")", p, spec)
			}
			if strings.HasPrefix(spec, ".") {
				if _, ok := files[path.Join(path.Dir(p), spec)]; !ok {
					return m, invalid("file %s imports %q, which is not a file of this package", p, spec)
				}
			}
		}
		total += len(src)
	}
	if total > MaxPackageBytes {
		return m, invalid("a package's sources are at most %d KiB in all", MaxPackageBytes>>10)
	}
	if m.Main == "" {
		m.Main = "main.js"
	}
	if _, ok := files[m.Main]; !ok {
		return m, invalid("the main module %q is not among the files", m.Main)
	}
	if len(m.Exports) > MaxExports {
		return m, invalid("a package has at most %d exports", MaxExports)
	}
	for e, x := range m.Exports {
		if !exportName.MatchString(e) {
			return m, invalid("export %q: an export name is a JS identifier of letters and digits (at most 40)", e)
		}
		if len(ExportPrefix+name+"_"+e) > 64 {
			return m, invalid("export %q: package and export names together are too long for a tool name (at most %d characters)", e, 64-len(ExportPrefix)-1)
		}
		if strings.TrimSpace(x.Description) == "" || utf8.RuneCountInString(x.Description) > MaxDescriptionRune {
			return m, invalid("export %q needs a description of 1-%d characters: it is what a model reads", e, MaxDescriptionRune)
		}
		if x.ReadOnly && x.Destructive {
			return m, invalid("export %q cannot be both readOnly and destructive", e)
		}
		if len(x.InputSchema) > 0 {
			if err := plainSchema(x.InputSchema); err != nil {
				return m, invalid("export %q: inputSchema: %v", e, err)
			}
			if _, err := s.reg.Compile(s.exportCapability(name, 1, e, x)); err != nil {
				return m, invalid("export %q: inputSchema must be a JSON Schema object of type \"object\"", e)
			}
		}
	}
	if len(m.Jobs) > MaxJobsPerPackage {
		return m, invalid("a package has at most %d jobs", MaxJobsPerPackage)
	}
	for j, job := range m.Jobs {
		if !jobName.MatchString(j) {
			return m, invalid("job name %q: use 1-40 lowercase letters, digits and '-'", j)
		}
		if _, err := ParseSchedule(job.Schedule); err != nil {
			return m, invalid("job %q: %v", j, err)
		}
		if _, ok := m.Exports[job.Export]; !ok {
			return m, invalid("job %q calls export %q, which the manifest does not declare", j, job.Export)
		}
	}
	return m, nil
}

// importsOf returns the specifiers of a module's static imports.
func importsOf(src string) []string {
	var out []string
	for _, m := range staticImport.FindAllStringSubmatch(stripComments(src), -1) {
		out = append(out, m[1]+m[2])
	}
	return out
}

// stripComments blanks // and /* */ comments outside string literals,
// enough for the import checks (which are a courtesy: the module loader
// decides at run time).
func stripComments(src string) string {
	b := []byte(src)
	var quote byte
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case quote != 0:
			if c == '\\' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'' || c == '`':
			quote = c
		case c == '/' && i+1 < len(b) && b[i+1] == '/':
			for ; i < len(b) && b[i] != '\n'; i++ {
				b[i] = ' '
			}
		case c == '/' && i+1 < len(b) && b[i+1] == '*':
			for ; i < len(b) && !(b[i] == '*' && i+1 < len(b) && b[i+1] == '/'); i++ {
				if b[i] != '\n' {
					b[i] = ' '
				}
			}
			if i+1 < len(b) {
				b[i], b[i+1] = ' ', ' '
				i++
			}
		}
	}
	return string(b)
}

func digest(src string) string {
	sum := sha256.Sum256([]byte(src))
	return hex.EncodeToString(sum[:])
}

// Save stores a new version of the owner's package (the first when it is
// new) and returns it. Sources go to blobs first (content-addressed, so a
// retried or repeated save writes nothing twice), then the rows in one
// transaction.
//
// by is the credential saving it: the package's jobs run with no more
// authority than it has (its scopes and confinement are kept with them).
func (s *Service) Save(ctx context.Context, by capabilities.Caller, o storage.Owner, name string, files map[string]string, m Manifest) (Version, error) {
	return s.save(ctx, by, o, name, files, m, false)
}

// Create saves a new package, version 1, like Save, but only if the
// owner has no package of that name: otherwise it answers
// capabilities.CodeConflict and saves nothing. The check is made in the
// transaction that inserts the package (the owner's saves take turns
// there), so a concurrent Save of the same name either comes first (and
// Create refuses) or adds its version after Create's.
func (s *Service) Create(ctx context.Context, by capabilities.Caller, o storage.Owner, name string, files map[string]string, m Manifest) (Version, error) {
	return s.save(ctx, by, o, name, files, m, true)
}

func (s *Service) save(ctx context.Context, by capabilities.Caller, o storage.Owner, name string, files map[string]string, m Manifest, createOnly bool) (Version, error) {
	m, err := s.validate(name, files, m)
	if err != nil {
		return Version{}, err
	}
	var written []string // source blobs this save wrote, removed again if it fails
	digests := make(map[string]string, len(files))
	var total int64
	for p, src := range files {
		d := digest(src)
		digests[p] = d
		total += int64(len(src))
		key := storage.BlobKey(o, BlobDomain, d)
		if ok, err := s.store.Bucket.Exists(ctx, key); err != nil {
			return Version{}, fmt.Errorf("codemode: save: %w", err)
		} else if !ok {
			// Under the call's write lease: a save whose account's
			// deletion has begun writes no more sources.
			if err := storage.CheckWrite(ctx); err != nil {
				_ = s.dropUnreferenced(context.WithoutCancel(ctx), o, written)
				return Version{}, fmt.Errorf("codemode: save: %w", err)
			}
			if err := s.store.Bucket.WriteAll(ctx, key, []byte(src), nil); err != nil {
				return Version{}, fmt.Errorf("codemode: save: %w", err)
			}
			written = append(written, d)
		}
	}
	manifestJSON, _ := json.Marshal(m)
	filesJSON, _ := json.Marshal(digests)
	now := time.Now().UTC()
	v := versionRow{UserID: o.ID, Manifest: string(manifestJSON), Files: string(filesJSON), SourceBytes: total, CreatedAt: now}
	err = s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		// Fencing: an account marked for deletion after this save passed
		// the registry's checks gets no new rows, and the sources written
		// above are removed below (its deletion may already have swept
		// the blobs).
		// On PostgreSQL the owner's row is locked too, so that concurrent
		// saves take turns counting packages and jobs against the limits
		// (SQLite runs one write transaction at a time anyway).
		var live []int64
		q := tx.NewSelect().Table("users").Column("id").Where("id = ? AND deleting_at IS NULL AND suspended_at IS NULL", o.ID)
		if s.store.Dialect() == storage.Postgres {
			q = q.For("UPDATE")
		}
		if err := q.Scan(ctx, &live); err != nil {
			return err
		}
		if len(live) != 1 {
			return capabilities.Errorf(capabilities.CodeAccountDeleting, "this account is suspended or being deleted: nothing is saved")
		}
		var p packageRow
		err := tx.NewSelect().Model(&p).Where("user_id = ? AND name = ?", o.ID, name).Scan(ctx)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			n, err := tx.NewSelect().Model((*packageRow)(nil)).Where("user_id = ?", o.ID).Count(ctx)
			if err != nil {
				return err
			}
			if n >= int64(s.cfg.MaxPackages) {
				return capabilities.Errorf(capabilities.CodeQuotaExceeded, "an account keeps at most %d packages: delete one first", s.cfg.MaxPackages)
			}
			p = packageRow{UserID: o.ID, Name: name, Description: m.Description, LatestVersion: 1, CreatedAt: now, UpdatedAt: now}
			if _, err := tx.NewInsert().Model(&p).Exec(ctx); err != nil {
				return err
			}
		case err != nil:
			return err
		case createOnly:
			return capabilities.Errorf(capabilities.CodeConflict, "you already have a package named %q: choose another name", name)
		default:
			p.LatestVersion++
			p.Description, p.UpdatedAt = m.Description, now
			if _, err := tx.NewUpdate().Model(&p).Column("latest_version", "description", "updated_at").
				Where("id = ? AND user_id = ?", p.ID, o.ID).Exec(ctx); err != nil {
				return err
			}
		}
		v.PackageID, v.Version = p.ID, p.LatestVersion
		if _, err := tx.NewInsert().Model(&v).Returning("NULL").Exec(ctx); err != nil {
			return err
		}
		return s.syncJobs(ctx, tx, o, p.ID, m, now, authorityOf(by))
	})
	if err != nil {
		s.dropUnreferenced(context.WithoutCancel(ctx), o, written)
		if _, ok := errors.AsType[*capabilities.Error](err); ok {
			return Version{}, err
		}
		return Version{}, fmt.Errorf("codemode: save %s: %w", name, err)
	}
	s.changed(ctx, o.StableID)
	return Version{Package: name, Version: v.Version, Manifest: m, SourceBytes: total, CreatedAt: now}, nil
}

// syncJobs makes the package's job rows those of manifest m, keeping the
// schedule state of jobs whose schedule did not change, within the
// owner's job budget.
func (s *Service) syncJobs(ctx context.Context, tx bun.Tx, o storage.Owner, packageID int64, m Manifest, now time.Time, a authority) error {
	others, err := tx.NewSelect().Model((*jobRow)(nil)).Where("user_id = ? AND package_id <> ?", o.ID, packageID).Count(ctx)
	if err != nil {
		return err
	}
	if others+int64(len(m.Jobs)) > int64(s.cfg.MaxJobs) {
		return capabilities.Errorf(capabilities.CodeQuotaExceeded, "an account has at most %d package jobs in all (%d in other packages)", s.cfg.MaxJobs, others)
	}
	var existing []jobRow
	if err := tx.NewSelect().Model(&existing).Where("user_id = ? AND package_id = ?", o.ID, packageID).Scan(ctx); err != nil {
		return err
	}
	kept := map[string]bool{}
	for _, j := range existing {
		nj, ok := m.Jobs[j.Name]
		if ok && nj.Schedule == j.Schedule && nj.Export == j.ExportName {
			kept[j.Name] = true
			// The latest saver's authority governs every job of the package.
			if _, err := tx.NewUpdate().Model((*jobRow)(nil)).Set("scopes = ?", a.scopes).Set("confined = ?", a.confined).
				Where("id = ? AND user_id = ?", j.ID, o.ID).Exec(ctx); err != nil {
				return err
			}
			continue
		}
		if _, err := tx.NewDelete().Model((*jobRow)(nil)).Where("id = ? AND user_id = ?", j.ID, o.ID).Exec(ctx); err != nil {
			return err
		}
	}
	names := make([]string, 0, len(m.Jobs))
	for n := range m.Jobs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if kept[n] {
			continue
		}
		j := m.Jobs[n]
		sched, _ := ParseSchedule(j.Schedule)
		row := jobRow{UserID: o.ID, PackageID: packageID, Name: n, ExportName: j.Export, Schedule: j.Schedule, NextRunAt: sched.Next(now),
			Scopes: a.scopes, Confined: a.confined}
		if _, err := tx.NewInsert().Model(&row).Returning("NULL").Exec(ctx); err != nil {
			return err
		}
	}
	return nil
}

// List pages through the owner's packages by name.
func (s *Service) List(ctx context.Context, o storage.Owner, req storage.PageRequest) (storage.Page[Package], error) {
	q := s.store.Reader.NewSelect().Model((*packageRow)(nil)).Where("user_id = ?", o.ID)
	page, err := storage.Paginate(ctx, q, storage.Keyset[packageRow]{Kind: "packages", Column: "name", Key: func(r *packageRow) any { return r.Name }}, req)
	if err != nil {
		return storage.Page[Package]{}, err
	}
	out := storage.Page[Package]{Next: page.Next, Items: make([]Package, len(page.Items))}
	for i, r := range page.Items {
		out.Items[i] = r.public()
	}
	return out, nil
}

// lookup returns the owner's package and one of its versions (0: the
// latest). Both reads carry the owner filter.
func (s *Service) lookup(ctx context.Context, db bun.IDB, o storage.Owner, name string, version int) (packageRow, versionRow, error) {
	var p packageRow
	if !packageName.MatchString(name) {
		return p, versionRow{}, notFound(name)
	}
	err := db.NewSelect().Model(&p).Where("user_id = ? AND name = ?", o.ID, name).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return p, versionRow{}, notFound(name)
	}
	if err != nil {
		return p, versionRow{}, fmt.Errorf("codemode: package %s: %w", name, err)
	}
	if version <= 0 {
		version = p.LatestVersion
	}
	var v versionRow
	err = db.NewSelect().Model(&v).Where("user_id = ? AND package_id = ? AND version = ?", o.ID, p.ID, version).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return p, v, capabilities.Errorf(capabilities.CodeNotFound, "package %q has no version %d", name, version)
	}
	if err != nil {
		return p, v, fmt.Errorf("codemode: package %s@%d: %w", name, version, err)
	}
	return p, v, nil
}

// Get returns one version of the owner's package (0: the latest) with its
// sources.
func (s *Service) Get(ctx context.Context, o storage.Owner, name string, version int) (Version, error) {
	_, v, err := s.lookup(ctx, s.store.Reader, o, name, version)
	if err != nil {
		return Version{}, err
	}
	m, digests, err := v.decode()
	if err != nil {
		return Version{}, err
	}
	files := make(map[string]string, len(digests))
	for p, d := range digests {
		src, err := s.source(ctx, o, d)
		if err != nil {
			return Version{}, err
		}
		files[p] = src
	}
	return Version{Package: name, Version: v.Version, Manifest: m, Files: files, SourceBytes: v.SourceBytes, CreatedAt: v.CreatedAt}, nil
}

// History lists the versions of the owner's package, newest first (no
// sources).
func (s *Service) History(ctx context.Context, o storage.Owner, name string) ([]Version, error) {
	p, _, err := s.lookup(ctx, s.store.Reader, o, name, 0)
	if err != nil {
		return nil, err
	}
	var rows []versionRow
	if err := s.store.Reader.NewSelect().Model(&rows).Where("user_id = ? AND package_id = ?", o.ID, p.ID).
		Order("version DESC").Limit(1000).Scan(ctx); err != nil {
		return nil, fmt.Errorf("codemode: history %s: %w", name, err)
	}
	out := make([]Version, 0, len(rows))
	for _, r := range rows {
		m, _, err := r.decode()
		if err != nil {
			return nil, err
		}
		out = append(out, Version{Package: name, Version: r.Version, Manifest: m, SourceBytes: r.SourceBytes, CreatedAt: r.CreatedAt})
	}
	return out, nil
}

// Delete removes the owner's package: every version and job, then the
// sources no other version of the owner uses. It reports whether there
// was one.
func (s *Service) Delete(ctx context.Context, o storage.Owner, name string) (bool, error) {
	if !packageName.MatchString(name) {
		return false, nil
	}
	var digests []string
	found := false
	err := s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		var p packageRow
		err := tx.NewSelect().Model(&p).Where("user_id = ? AND name = ?", o.ID, name).Scan(ctx)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		var versions []versionRow
		if err := tx.NewSelect().Model(&versions).Column("files").Where("user_id = ? AND package_id = ?", o.ID, p.ID).Scan(ctx); err != nil {
			return err
		}
		digests = filesDigests(versions)
		for _, q := range []*bun.DeleteQuery{
			tx.NewDelete().Model((*jobRow)(nil)).Where("user_id = ? AND package_id = ?", o.ID, p.ID),
			tx.NewDelete().Model((*versionRow)(nil)).Where("user_id = ? AND package_id = ?", o.ID, p.ID),
			tx.NewDelete().Model((*packageRow)(nil)).Where("user_id = ? AND id = ?", o.ID, p.ID),
		} {
			if _, err := q.Exec(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("codemode: delete %s: %w", name, err)
	}
	if !found {
		return false, nil
	}
	s.changed(ctx, o.StableID)
	return true, s.dropUnreferenced(ctx, o, digests)
}

func filesDigests(versions []versionRow) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range versions {
		var files map[string]string
		_ = json.Unmarshal([]byte(v.Files), &files)
		for _, d := range files {
			if !seen[d] {
				seen[d] = true
				out = append(out, d)
			}
		}
	}
	return out
}

// dropUnreferenced deletes the owner's source blobs among digests that no
// remaining version of the owner lists. A failure leaves an orphan blob
// (deleted with the account), never a version without its source.
func (s *Service) dropUnreferenced(ctx context.Context, o storage.Owner, digests []string) error {
	if len(digests) == 0 {
		return nil
	}
	var rest []versionRow
	if err := s.store.DB.NewSelect().Model(&rest).Column("files").Where("user_id = ?", o.ID).Scan(ctx); err != nil {
		return fmt.Errorf("codemode: sources in use: %w", err)
	}
	used := map[string]bool{}
	for _, d := range filesDigests(rest) {
		used[d] = true
	}
	var errs []error
	for _, d := range digests {
		if used[d] {
			continue
		}
		err := s.store.Bucket.Delete(ctx, storage.BlobKey(o, BlobDomain, d))
		if err != nil && gcerrors.Code(err) != gcerrors.NotFound {
			errs = append(errs, err)
		}
		s.sources.forget(o.StableID, d)
	}
	return errors.Join(errs...)
}

// source reads one of the owner's source blobs, through a small cache
// (sources are immutable: the key is their digest).
func (s *Service) source(ctx context.Context, o storage.Owner, d string) (string, error) {
	if src, ok := s.sources.get(o.StableID, d); ok {
		return src, nil
	}
	b, err := s.store.Bucket.ReadAll(ctx, storage.BlobKey(o, BlobDomain, d))
	if err != nil {
		return "", fmt.Errorf("codemode: read source: %w", err)
	}
	s.sources.put(o.StableID, d, string(b))
	return string(b), nil
}

// sourceCache keeps recently read sources, bounded by bytes.
type sourceCache struct {
	mu    sync.Mutex
	m     map[string]string
	bytes int
}

const sourceCacheBytes = 32 << 20

func (c *sourceCache) init() { c.m = map[string]string{} }

func (c *sourceCache) get(owner, d string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.m[owner+"/"+d]
	return s, ok
}

func (c *sourceCache) put(owner, d, src string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bytes+len(src) > sourceCacheBytes {
		c.m, c.bytes = map[string]string{}, 0 // simple and bounded: start over
	}
	c.m[owner+"/"+d] = src
	c.bytes += len(src)
}

func (c *sourceCache) forget(owner, d string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.m[owner+"/"+d]; ok {
		c.bytes -= len(s)
		delete(c.m, owner+"/"+d)
	}
}

// Bounds of an export's input schema.
const (
	maxSchemaBytes = 16 << 10
	maxSchemaDepth = 16
)

// plainSchema refuses what an export's input schema may not use: any
// reference ($ref and its kin: a schema referring to itself would recurse
// without end in validation), and more than maxSchemaBytes or
// maxSchemaDepth levels of nesting.
func plainSchema(schema map[string]any) error {
	if b, err := json.Marshal(schema); err != nil || len(b) > maxSchemaBytes {
		return fmt.Errorf("at most %d KiB of JSON", maxSchemaBytes>>10)
	}
	var walk func(v any, depth int) error
	walk = func(v any, depth int) error {
		if depth > maxSchemaDepth {
			return fmt.Errorf("at most %d levels deep", maxSchemaDepth)
		}
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				switch k {
				case "$ref", "$dynamicRef", "$recursiveRef", "$anchor", "$dynamicAnchor", "$recursiveAnchor", "$id", "$schema":
					return fmt.Errorf("%s is not supported: write the schema out in full", k)
				}
				if err := walk(x, depth+1); err != nil {
					return err
				}
			}
		case []any:
			for _, x := range v {
				if err := walk(x, depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk(schema, 0)
}
