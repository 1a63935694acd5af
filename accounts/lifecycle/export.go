package lifecycle

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/enclave-mcp/enclave/storage"
)

// SchemaVersion is the version of the export format.
const SchemaVersion = 1

// Section kinds.
const (
	KindSQL    = "sql"
	KindBlob   = "blob"
	KindCustom = "custom"
)

// ErrUnknownSection: the section is not in the inventory.
var ErrUnknownSection = errors.New("lifecycle: unknown export section")

// Manifest describes a complete export and how to page through it.
type Manifest struct {
	SchemaVersion int               `json:"schemaVersion"`
	GeneratedAt   time.Time         `json:"generatedAt"`
	User          ManifestUser      `json:"user"`
	Sections      []ManifestSection `json:"sections"`
	Warnings      []string          `json:"warnings"`
	// Excluded names the surfaces deleted with the account but never
	// exported, because they hold only credentials (one-time token hashes).
	Excluded []string         `json:"excluded"`
	Security ManifestSecurity `json:"security"`
	Chunking ManifestChunking `json:"chunking"`
}

// ManifestUser identifies whose export it is.
type ManifestUser struct {
	StableUserID string `json:"stableUserId"`
	Username     string `json:"username"`
	Email        string `json:"email"`
}

// ManifestSection is one section: its name (the section argument of
// accountExportSection), kind, item count, and the columns left out.
type ManifestSection struct {
	Name            string   `json:"name"`
	Kind            string   `json:"kind" jsonschema:"how the section is fetched: SQL rows, a stored file's chunks, or a custom domain's items" schema:"enum=sql|blob|custom"`
	Count           int64    `json:"count"`
	Bytes           int64    `json:"bytes,omitempty"`
	RedactedColumns []string `json:"redactedColumns,omitempty"`
	Warning         string   `json:"warning,omitempty"`
}

// ManifestSecurity states what is never in an export.
type ManifestSecurity struct {
	SecretValuesExported bool   `json:"secretValuesExported"`
	Note                 string `json:"note"`
}

// ManifestChunking tells a client how to fetch the sections.
type ManifestChunking struct {
	Capability        string `json:"capability"`
	MaxRowsPerPage    int    `json:"maxRowsPerPage"`
	MaxBlobChunkBytes int    `json:"maxBlobChunkBytes"`
}

// Manifest builds the export manifest of o: counts per section with
// bounded COUNT queries and blob listings, never the data itself.
func (s *Service) Manifest(ctx context.Context, o storage.Owner) (Manifest, error) {
	u, err := s.accounts.Identity.UserByID(ctx, o.ID)
	if err != nil {
		return Manifest{}, fmt.Errorf("lifecycle: manifest: %w", err)
	}
	m := Manifest{
		SchemaVersion: SchemaVersion,
		GeneratedAt:   time.Now().UTC().Truncate(time.Second),
		User:          ManifestUser{StableUserID: u.StableID, Username: u.Username, Email: u.Email},
		Sections:      []ManifestSection{},
		Warnings:      []string{},
		Excluded:      []string{},
		Security: ManifestSecurity{
			SecretValuesExported: false,
			Note:                 "Secret values, password hashes and token hashes are never exported; redacted columns are listed per section.",
		},
		Chunking: ManifestChunking{Capability: "accountExportSection", MaxRowsPerPage: storage.MaxPageLimit, MaxBlobChunkBytes: storage.MaxBlobChunk},
	}
	for _, t := range s.inv.Tables() {
		if t.SkipExport {
			m.Excluded = append(m.Excluded, KindSQL+":"+t.Name)
			continue
		}
		sec := ManifestSection{Name: KindSQL + ":" + t.Name, Kind: KindSQL, RedactedColumns: t.Redact}
		n, err := storage.CountRows(ctx, s.store.Reader, t, o)
		if err != nil {
			sec.Warning = "could not be counted"
			m.Warnings = append(m.Warnings, sec.Name+" could not be counted")
			s.opts.Logger.WarnContext(ctx, "lifecycle: count failed", "section", sec.Name, "err", err)
		}
		sec.Count = n
		m.Sections = append(m.Sections, sec)
	}
	for _, p := range s.inv.BlobPrefixes() {
		sec := ManifestSection{Name: KindBlob + ":" + p.Domain, Kind: KindBlob}
		keys, err := storage.ListBlobs(ctx, s.store.Bucket, o, p)
		if err != nil {
			sec.Warning = "could not be listed"
			m.Warnings = append(m.Warnings, sec.Name+" could not be listed")
			s.opts.Logger.WarnContext(ctx, "lifecycle: blob listing failed", "section", sec.Name, "err", err)
		}
		sec.Count = int64(len(keys))
		for _, k := range keys {
			if a, err := s.store.Bucket.Attributes(ctx, k); err == nil {
				sec.Bytes += a.Size
			}
		}
		m.Sections = append(m.Sections, sec)
	}
	for _, c := range s.inv.Customs() {
		sec := ManifestSection{Name: KindCustom + ":" + c.Name, Kind: KindCustom}
		n, err := c.Count(ctx, o)
		if err != nil {
			sec.Warning = "could not be counted"
			m.Warnings = append(m.Warnings, sec.Name+" could not be counted")
			s.opts.Logger.WarnContext(ctx, "lifecycle: count failed", "section", sec.Name, "err", err)
		}
		sec.Count = n
		m.Sections = append(m.Sections, sec)
	}
	return m, nil
}

// SectionPage is one page of one section. Exactly one of Rows, Chunk and
// Items is set, by the section's kind.
type SectionPage struct {
	Section    string           `json:"section"`
	Kind       string           `json:"kind" jsonschema:"the section's kind" schema:"enum=sql|blob|custom"`
	Rows       []map[string]any `json:"rows,omitempty"`
	Chunk      *BlobChunk       `json:"chunk,omitempty"`
	Items      []any            `json:"items,omitempty"`
	NextCursor string           `json:"nextCursor,omitempty"`
}

// BlobChunk is a piece of one object, base64-encoded.
type BlobChunk struct {
	Name    string `json:"name"`
	Offset  int64  `json:"offset"`
	Size    int64  `json:"size"`
	ETag    string `json:"etag,omitempty"`
	Data    string `json:"dataBase64"`
	Missing bool   `json:"missing,omitempty"`
}

// Section returns one page of section (a name from the manifest) for o.
// SQL sections page rows in key order with LIMIT; blob sections return one
// chunk of at most 256 KiB; the cursor comes from the previous page.
func (s *Service) Section(ctx context.Context, o storage.Owner, section, cursor string, limit int) (SectionPage, error) {
	kind, name, _ := strings.Cut(section, ":")
	page := SectionPage{Section: section, Kind: kind}
	switch kind {
	case KindSQL:
		t, ok := s.inv.Table(name)
		if !ok || t.SkipExport {
			return page, ErrUnknownSection
		}
		rows, err := storage.ExportRows(ctx, s.store.Reader, t, o, storage.PageRequest{Cursor: cursor, Limit: limit})
		if err != nil {
			return page, err
		}
		page.Rows, page.NextCursor = rows.Items, rows.Next
		if page.Rows == nil {
			page.Rows = []map[string]any{}
		}
		return page, nil
	case KindBlob:
		for _, p := range s.inv.BlobPrefixes() {
			if p.Domain != name {
				continue
			}
			c, err := storage.ExportBlobChunk(ctx, s.store.Bucket, o, p, cursor)
			if err != nil {
				return page, err
			}
			if c.Name != "" {
				page.Chunk = &BlobChunk{Name: c.Name, Offset: c.Offset, Size: c.Size, ETag: c.ETag, Data: base64.StdEncoding.EncodeToString(c.Data), Missing: c.Missing}
			}
			page.NextCursor = c.Next
			return page, nil
		}
	case KindCustom:
		for _, c := range s.inv.Customs() {
			if c.Name != name {
				continue
			}
			if limit <= 0 || limit > storage.MaxPageLimit {
				limit = storage.DefaultPageLimit
			}
			items, next, err := c.Export(ctx, o, cursor, limit)
			if err != nil {
				return page, fmt.Errorf("lifecycle: export %s: %w", section, err)
			}
			page.Items, page.NextCursor = items, next
			if page.Items == nil {
				page.Items = []any{}
			}
			return page, nil
		}
	}
	return page, ErrUnknownSection
}

// WriteExport writes o's complete export to w as one JSON document: the
// manifest, then every section's pages in order. Memory stays bounded by
// one page whatever the account's size.
func (s *Service) WriteExport(ctx context.Context, o storage.Owner, w io.Writer) error {
	m, err := s.Manifest(ctx, o)
	if err != nil {
		return err
	}
	head, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("lifecycle: export: %w", err)
	}
	if _, err := fmt.Fprintf(w, "{\"manifest\":%s,\"sections\":[", head); err != nil {
		return fmt.Errorf("lifecycle: export: %w", err)
	}
	first := true
	for _, sec := range m.Sections {
		cursor := ""
		for {
			page, err := s.Section(ctx, o, sec.Name, cursor, storage.MaxPageLimit)
			if err != nil {
				return fmt.Errorf("lifecycle: export %s: %w", sec.Name, err)
			}
			if page.Rows != nil || page.Chunk != nil || page.Items != nil {
				b, err := json.Marshal(page)
				if err != nil {
					return fmt.Errorf("lifecycle: export %s: %w", sec.Name, err)
				}
				if !first {
					if _, err := io.WriteString(w, ","); err != nil {
						return err
					}
				}
				first = false
				if _, err := w.Write(b); err != nil {
					return fmt.Errorf("lifecycle: export: %w", err)
				}
			}
			if page.NextCursor == "" {
				break
			}
			cursor = page.NextCursor
		}
	}
	_, err = io.WriteString(w, "]}\n")
	return err
}
