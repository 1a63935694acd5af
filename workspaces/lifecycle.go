package workspaces

import (
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
)

// MaxExportRows bounds the rows of each table (and the events) one export
// carries; Truncated says when a table had more.
const MaxExportRows = 10000

// coreTables are the package's own workspace tables, exported in their own
// sections (or not at all: idempotency results and pending jobs).
var coreTables = []string{"workspace_state", "workspace_events", "workspace_idempotency", "workspace_pending_jobs", "workspace_files"}

// Export is a workspace's logical export: its portable state.
type Export struct {
	Format    string                      `json:"format" jsonschema:"the export's format and version" schema:"enum=enclave-workspace-export/1"`
	Workspace Workspace                   `json:"workspace"`
	Revision  int64                       `json:"revision"`
	Members   []Member                    `json:"members"`
	Events    []Event                     `json:"events"`
	Files     []FileInfo                  `json:"files" jsonschema:"every file version, tombstones included; bytes come from workspaceExportFile"`
	Tables    map[string][]map[string]any `json:"tables" jsonschema:"the embedder's workspace tables, row by row"`
	Truncated []string                    `json:"truncated,omitempty" jsonschema:"tables (or \"events\") with more rows than one export carries"`
	At        time.Time                   `json:"exportedAt"`
}

// ExportFormat names the layout of Export.
const ExportFormat = "enclave-workspace-export/1"

// Export returns the logical export of a workspace. Owners and admins.
func (s *Service) Export(ctx context.Context, c capabilities.Caller, id string) (Export, error) {
	a, err := s.Access(ctx, c, id)
	if err != nil {
		return Export{}, err
	}
	if !a.Role.AtLeast(RoleAdmin) {
		return Export{}, errRole(a.Role, "exporting the workspace")
	}
	d, err := s.Get(ctx, c, id)
	if err != nil {
		return Export{}, err
	}
	members, _, err := s.Members(ctx, c, id)
	if err != nil {
		return Export{}, err
	}
	out := Export{Format: ExportFormat, Workspace: d.Workspace, Members: members, Tables: map[string][]map[string]any{}, At: s.now()}
	err = s.ws.View(ctx, id, func(ctx context.Context, tx bun.Tx) error {
		if out.Revision, err = readRevision(ctx, tx, id); err != nil {
			return err
		}
		var evs []eventRow
		if err := tx.NewSelect().Model(&evs).Where("workspace_id = ?", id).Order("revision").Limit(MaxExportRows + 1).Scan(ctx); err != nil {
			return fmt.Errorf("workspaces: export events: %w", err)
		}
		if len(evs) > MaxExportRows {
			evs, out.Truncated = evs[:MaxExportRows], append(out.Truncated, "events")
		}
		out.Events = make([]Event, len(evs))
		for i, r := range evs {
			out.Events[i] = Event{Revision: r.Revision, Op: r.Op, Actor: r.Actor, At: r.At}
		}
		var files []fileRow
		if err := tx.NewSelect().Model(&files).Where("workspace_id = ?", id).Order("name", "file_id", "version").Scan(ctx); err != nil {
			return fmt.Errorf("workspaces: export files: %w", err)
		}
		out.Files = make([]FileInfo, len(files))
		for i, r := range files {
			out.Files[i] = r.info()
			if a.Role != RoleOwner {
				// Who deleted a version and why are the owners' (fileList
				// shows them to owners alone): an admin's export keeps
				// the tombstone, not its author and reason.
				out.Files[i].DeletedBy, out.Files[i].Reason = "", ""
			}
		}
		var tables []string
		if ps, ok := s.ws.(*PostgresStore); ok {
			// The main database: only the workspace schema's tables.
			tables = ps.tables
		} else if tables, err = workspaceTables(ctx, tx); err != nil {
			return err
		}
		for _, t := range tables {
			if slices.Contains(coreTables, t) {
				continue
			}
			var rows []map[string]any
			if err := tx.NewSelect().Table(t).Where("workspace_id = ?", id).OrderExpr("1").Limit(MaxExportRows+1).Scan(ctx, &rows); err != nil {
				return fmt.Errorf("workspaces: export %s: %w", t, err)
			}
			if len(rows) > MaxExportRows {
				rows, out.Truncated = rows[:MaxExportRows], append(out.Truncated, t)
			}
			for _, r := range rows {
				for k, v := range r {
					if b, ok := v.([]byte); ok {
						r[k] = string(b)
					}
				}
			}
			if rows == nil {
				rows = []map[string]any{}
			}
			out.Tables[t] = rows
		}
		return nil
	})
	return out, err
}

// FileChunk is one piece of a file version's bytes.
type FileChunk struct {
	FileID  string `json:"fileId"`
	Version int64  `json:"version"`
	Offset  int64  `json:"offset"`
	Size    int64  `json:"size" jsonschema:"the whole file's size"`
	Data    string `json:"dataBase64"`
	// Next is the offset of the next chunk, or 0 after the last.
	Next int64 `json:"next,omitempty"`
}

// ExportFile returns up to storage.MaxBlobChunk bytes of a live file
// version from offset, for exports that carry the bytes. Owners and
// admins.
func (s *Service) ExportFile(ctx context.Context, c capabilities.Caller, id, fileID string, version, offset int64) (FileChunk, error) {
	a, err := s.Access(ctx, c, id)
	if err != nil {
		return FileChunk{}, err
	}
	if !a.Role.AtLeast(RoleAdmin) {
		return FileChunk{}, errRole(a.Role, "exporting the workspace")
	}
	var r fileRow
	err = s.ws.View(ctx, id, func(ctx context.Context, tx bun.Tx) error {
		return tx.NewSelect().Model(&r).Where("workspace_id = ?", id).Where("file_id = ?", fileID).Where("version = ?", version).Scan(ctx)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return FileChunk{}, errFileNotFound
	}
	if err != nil {
		return FileChunk{}, err
	}
	if r.DeletedAt != nil {
		return FileChunk{}, capabilities.Errorf(capabilities.CodeNotFound, "this file version was deleted")
	}
	if offset < 0 || offset > r.Size {
		return FileChunk{}, capabilities.Errorf(capabilities.CodeInvalidInput, "offset is outside the file")
	}
	rd, err := s.bucket().NewRangeReader(ctx, r.BlobKey, offset, storage.MaxBlobChunk, nil)
	if err != nil {
		return FileChunk{}, fmt.Errorf("workspaces: read file: %w", err)
	}
	defer rd.Close()
	b, err := io.ReadAll(rd)
	if err != nil {
		return FileChunk{}, fmt.Errorf("workspaces: read file: %w", err)
	}
	out := FileChunk{FileID: fileID, Version: version, Offset: offset, Size: r.Size, Data: base64.StdEncoding.EncodeToString(b)}
	if end := offset + int64(len(b)); end < r.Size {
		out.Next = end
	}
	return out, nil
}

// Inventory registers the service's account lifecycle surface: an
// account's export lists its memberships, and its deletion makes it leave
// every workspace. A workspace where it was the only owner passes to its
// oldest admin or, with no admin, is deleted with its files.
func (s *Service) Inventory(inv *storage.Inventory) error {
	return inv.AddCustom(storage.Custom{
		Name: "workspaces",
		Count: func(ctx context.Context, o storage.Owner) (int64, error) {
			n, err := s.main.Reader.NewSelect().Model((*memberRow)(nil)).Where("user_id = ?", o.ID).Count(ctx)
			return int64(n), err
		},
		Export: func(ctx context.Context, o storage.Owner, cursor string, limit int) ([]any, string, error) {
			if cursor != "" {
				return nil, "", nil
			}
			ws, err := s.List(ctx, capabilities.Caller{UserID: o.StableID, OwnerID: o.ID})
			items := make([]any, len(ws))
			for i, w := range ws {
				items[i] = w
			}
			return items, "", err
		},
		Delete: s.leaveAll,
	})
}

// leaveAll takes an account out of every workspace (account deletion).
func (s *Service) leaveAll(ctx context.Context, o storage.Owner) (int64, error) {
	var ids []string
	if err := s.main.DB.NewSelect().Model((*memberRow)(nil)).Column("workspace_id").Where("user_id = ?", o.ID).Scan(ctx, &ids); err != nil {
		return 0, fmt.Errorf("workspaces: list memberships: %w", err)
	}
	var n int64
	for _, id := range ids {
		drop := false
		err := s.main.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
			if _, err := s.lockWorkspace(ctx, tx, id); errors.Is(err, errNotFound) {
				return nil
			} else if err != nil {
				return err
			}
			role, err := roleIn(ctx, tx, id, o.ID)
			if errors.Is(err, errNotFound) {
				return nil
			} else if err != nil {
				return err
			}
			if role == RoleOwner {
				owners, err := tx.NewSelect().Model((*memberRow)(nil)).Where("workspace_id = ?", id).Where("role = 'owner'").Count(ctx)
				if err != nil {
					return err
				}
				if owners == 1 {
					var heir memberRow
					err := tx.NewSelect().Model(&heir).Where("workspace_id = ?", id).Where("role = 'admin'").
						Order("created_at", "id").Limit(1).Scan(ctx)
					switch {
					case err == nil:
						if _, err := tx.NewUpdate().Model((*memberRow)(nil)).Set("role = 'owner'").Where("id = ?", heir.ID).Exec(ctx); err != nil {
							return fmt.Errorf("workspaces: hand over ownership: %w", err)
						}
					case errors.Is(err, sql.ErrNoRows):
						drop = true
						return s.deleteDirectory(ctx, tx, id)
					default:
						return err
					}
				}
			}
			if _, err := tx.NewDelete().Model((*memberRow)(nil)).Where("workspace_id = ?", id).Where("user_id = ?", o.ID).Exec(ctx); err != nil {
				return fmt.Errorf("workspaces: leave: %w", err)
			}
			return nil
		})
		if err != nil {
			return n, err
		}
		if drop {
			if err := s.dropState(ctx, id); err != nil {
				return n, err
			}
		}
		n++
	}
	return n, nil
}
