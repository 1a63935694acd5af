package workspaces

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/uptrace/bun"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/jobs"
	"github.com/enclave-mcp/enclave/storage"
)

// File limits and the purge job.
const (
	// DefaultMaxFileSize bounds an uploaded file by default (10 MiB).
	DefaultMaxFileSize = 10 << 20
	// PurgeJob is the job kind that deletes a tombstoned file's blob and
	// confirms the deletion.
	PurgeJob = "workspace.file.purge"
)

// DefaultFileTypes are the content types accepted by default.
var DefaultFileTypes = []string{
	"text/plain", "text/csv", "text/markdown", "application/json", "application/pdf",
	"image/png", "image/jpeg", "image/gif", "image/webp",
}

// FileInfo is one version of a workspace file as members see it.
type FileInfo struct {
	FileID      string     `json:"fileId"`
	Version     int64      `json:"version"`
	Name        string     `json:"name"`
	ContentType string     `json:"contentType"`
	Size        int64      `json:"size"`
	SHA256      string     `json:"sha256"`
	UploadedBy  string     `json:"uploadedBy"`
	UploadedAt  time.Time  `json:"uploadedAt"`
	DeletedAt   *time.Time `json:"deletedAt,omitempty"`
	DeletedBy   string     `json:"deletedBy,omitempty"`
	Reason      string     `json:"deleteReason,omitempty"`
	// CleanupPending: deleted, but its bytes are not confirmed gone yet
	// (an owner may retry the cleanup with fileCleanupRetry).
	CleanupPending bool       `json:"cleanupPending,omitempty"`
	PurgedAt       *time.Time `json:"purgedAt,omitempty"`
}

type fileRow struct {
	bun.BaseModel  `bun:"table:workspace_files"`
	ID             int64      `bun:"id,pk,autoincrement"`
	WorkspaceID    string     `bun:"workspace_id,notnull"`
	FileID         string     `bun:"file_id,notnull"`
	Version        int64      `bun:"version,notnull"`
	Name           string     `bun:"name,notnull"`
	ContentType    string     `bun:"content_type,notnull"`
	Size           int64      `bun:"size,notnull"`
	SHA256         string     `bun:"sha256,notnull"`
	BlobKey        string     `bun:"blob_key,notnull"`
	UploadedBy     string     `bun:"uploaded_by,notnull"`
	UploadedAt     time.Time  `bun:"uploaded_at,notnull"`
	DeletedAt      *time.Time `bun:"deleted_at"`
	DeletedBy      string     `bun:"deleted_by,notnull"`
	DeleteReason   string     `bun:"delete_reason,notnull"`
	CleanupPending bool       `bun:"cleanup_pending,notnull"`
	PurgedAt       *time.Time `bun:"purged_at"`
}

func (r fileRow) info() FileInfo {
	return FileInfo{FileID: r.FileID, Version: r.Version, Name: r.Name, ContentType: r.ContentType, Size: r.Size,
		SHA256: r.SHA256, UploadedBy: r.UploadedBy, UploadedAt: r.UploadedAt, DeletedAt: r.DeletedAt,
		DeletedBy: r.DeletedBy, Reason: r.DeleteReason, CleanupPending: r.CleanupPending, PurgedAt: r.PurgedAt}
}

// BlobPrefix returns the prefix of every blob of workspace id.
func BlobPrefix(id string) string { return "workspaces/" + id + "/" }

// Inputs of the file ops.
type (
	FileUploadInput struct {
		Name        string `json:"name" jsonschema:"the file's name; uploading an existing name adds a version"`
		ContentType string `json:"contentType" jsonschema:"the MIME type, e.g. text/plain or application/pdf"`
		Content     string `json:"contentBase64" jsonschema:"the bytes, base64-encoded"`
	}
	FileListInput struct {
		Deleted bool `json:"includeDeleted,omitempty" jsonschema:"also list deleted versions (tombstones)"`
	}
	FileListOutput struct {
		Files []FileInfo `json:"files"`
	}
	FileRef struct {
		FileID  string `json:"fileId" jsonschema:"the file's id (fileId in fileList)"`
		Version int64  `json:"version,omitempty" jsonschema:"the version; default the newest"`
	}
	FileContent struct {
		FileInfo
		Content string `json:"contentBase64" jsonschema:"the bytes, base64-encoded"`
	}
	FileDeleteInput struct {
		FileID  string `json:"fileId" jsonschema:"the file's id (fileId in fileList)"`
		Version int64  `json:"version" jsonschema:"the version to delete"`
		Reason  string `json:"reason,omitempty" jsonschema:"why it is deleted, kept with the tombstone"`
	}
	fileConfirmInput struct {
		FileID  string `json:"fileId"`
		Version int64  `json:"version"`
	}
	purgePayload struct {
		WorkspaceID string `json:"workspaceId"`
		FileID      string `json:"fileId"`
		Version     int64  `json:"version"`
	}
)

var errFileNotFound = capabilities.Errorf(capabilities.CodeNotFound, "no such file in this workspace")

func (s *Service) bucket() *blob.Bucket { return s.main.Bucket }

// registerFiles adds the file ops and the purge job.
func (s *Service) registerFiles() error {
	maxSize := s.cfg.MaxFileSize
	if maxSize <= 0 {
		maxSize = DefaultMaxFileSize
	}
	types := s.cfg.FileTypes
	if types == nil {
		types = DefaultFileTypes
	}
	errs := []error{
		Register(s, Op[FileUploadInput, FileInfo]{
			Name: "fileUpload", Title: "Upload a file",
			Description: fmt.Sprintf("Uploads a file to the workspace (at most %d bytes; types %s). Uploading a name that exists adds a new version.", maxSize, strings.Join(types, ", ")),
			MinRole:     RoleAdmin,
			Handler: func(ctx context.Context, tx *Tx, in FileUploadInput) (FileInfo, error) {
				return s.upload(ctx, tx, in, maxSize, types)
			},
		}),
		Register(s, Op[FileListInput, FileListOutput]{
			Name: "fileList", Title: "List files", ReadOnly: true,
			Description: "Lists the workspace's files, newest version first per file. For owners, deleted versions whose cleanup is pending are listed and flagged (and every deleted version with includeDeleted); other members see live versions only.",
			Handler: func(ctx context.Context, tx *Tx, in FileListInput) (FileListOutput, error) {
				q := tx.NewSelect().Model((*fileRow)(nil)).Where("workspace_id = ?", tx.WorkspaceID)
				switch {
				case tx.Actor.Role != RoleOwner && !tx.Actor.System:
					// Deletions (who, why, a cleanup that failed) are the
					// owners' business: they alone delete and retry.
					q = q.Where("deleted_at IS NULL")
				case !in.Deleted:
					q = q.Where("deleted_at IS NULL OR cleanup_pending")
				}
				var rows []fileRow
				if err := q.Order("name", "file_id").OrderExpr("version DESC").Scan(ctx, &rows); err != nil {
					return FileListOutput{}, fmt.Errorf("workspaces: list files: %w", err)
				}
				out := FileListOutput{Files: make([]FileInfo, len(rows))}
				for i, r := range rows {
					out.Files[i] = r.info()
				}
				return out, nil
			},
		}),
		Register(s, Op[FileRef, FileContent]{
			Name: "fileDownload", Title: "Download a file", ReadOnly: true,
			Description: "Returns a file's bytes (base64): the version named, or else the newest one not deleted. A deleted version is refused from the moment it is deleted.",
			Handler: func(ctx context.Context, tx *Tx, in FileRef) (FileContent, error) {
				r, err := findFile(ctx, tx, in.FileID, in.Version)
				if err == nil && in.Version <= 0 && r.DeletedAt != nil {
					// No version named: the newest one not deleted (deleting
					// the newest version moves the current one back).
					r, err = findLiveFile(ctx, tx, in.FileID)
				}
				if err != nil {
					return FileContent{}, err
				}
				if r.DeletedAt != nil {
					return FileContent{}, capabilities.Errorf(capabilities.CodeNotFound, "this file version was deleted")
				}
				b, err := s.bucket().ReadAll(ctx, r.BlobKey)
				if err != nil {
					return FileContent{}, fmt.Errorf("workspaces: read file: %w", err)
				}
				return FileContent{FileInfo: r.info(), Content: base64.StdEncoding.EncodeToString(b)}, nil
			},
		}),
		Register(s, Op[FileDeleteInput, FileInfo]{
			Name: "fileDelete", Title: "Delete a file version", Destructive: true, MinRole: RoleOwner,
			Description: "Deletes one version of a file: downloads are refused at once, its bytes are removed in the background. The record of the deletion stays in the workspace's history.",
			Handler: func(ctx context.Context, tx *Tx, in FileDeleteInput) (FileInfo, error) {
				return s.tombstone(ctx, tx, in)
			},
		}),
		Register(s, Op[FileRef, FileInfo]{
			Name: "fileCleanupRetry", Title: "Retry a file cleanup", MinRole: RoleOwner,
			Description: "Schedules again the removal of a deleted file version's bytes whose cleanup is still pending.",
			Handler: func(ctx context.Context, tx *Tx, in FileRef) (FileInfo, error) {
				r, err := findFile(ctx, tx, in.FileID, in.Version)
				if err != nil {
					return FileInfo{}, err
				}
				if !r.CleanupPending {
					return FileInfo{}, errConflict("this file version has no pending cleanup")
				}
				if err := tx.Enqueue(ctx, PurgeJob, purgePayload{WorkspaceID: tx.WorkspaceID, FileID: r.FileID, Version: r.Version}); err != nil {
					return FileInfo{}, err
				}
				return r.info(), nil
			},
		}),
		Register(s, Op[fileConfirmInput, FileInfo]{
			Name: "fileDeletionConfirm", System: true,
			Description: "Records that a deleted file version's bytes are gone.",
			Handler: func(ctx context.Context, tx *Tx, in fileConfirmInput) (FileInfo, error) {
				r, err := findFile(ctx, tx, in.FileID, in.Version)
				if err != nil {
					return FileInfo{}, err
				}
				now := s.now()
				if _, err := tx.NewUpdate().Model((*fileRow)(nil)).Set("cleanup_pending = ?", false).Set("purged_at = ?", now).
					Where("id = ?", r.ID).Where("workspace_id = ?", tx.WorkspaceID).Exec(ctx); err != nil {
					return FileInfo{}, fmt.Errorf("workspaces: confirm deletion: %w", err)
				}
				r.CleanupPending, r.PurgedAt = false, &now
				return r.info(), nil
			},
		}),
	}
	if s.jobs != nil {
		errs = append(errs, s.jobs.Register(PurgeJob, s.purgeJob))
	}
	s.OnDelete(s.deleteBlobs)
	return errors.Join(errs...)
}

func findFile(ctx context.Context, tx *Tx, fileID string, version int64) (fileRow, error) {
	var r fileRow
	q := tx.NewSelect().Model(&r).Where("workspace_id = ?", tx.WorkspaceID).Where("file_id = ?", fileID)
	if version > 0 {
		q = q.Where("version = ?", version)
	} else {
		q = q.OrderExpr("version DESC").Limit(1)
	}
	err := q.Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return r, errFileNotFound
	}
	if err != nil {
		return r, fmt.Errorf("workspaces: find file: %w", err)
	}
	return r, nil
}

// findLiveFile returns the newest version of fileID that is not deleted.
func findLiveFile(ctx context.Context, tx *Tx, fileID string) (fileRow, error) {
	var r fileRow
	err := tx.NewSelect().Model(&r).Where("workspace_id = ?", tx.WorkspaceID).Where("file_id = ?", fileID).
		Where("deleted_at IS NULL").OrderExpr("version DESC").Limit(1).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return r, capabilities.Errorf(capabilities.CodeNotFound, "every version of this file was deleted")
	}
	if err != nil {
		return r, fmt.Errorf("workspaces: find file: %w", err)
	}
	return r, nil
}

// sniffable are the types whose bytes must look like what they claim.
var sniffable = map[string]bool{"application/pdf": true, "image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

func (s *Service) upload(ctx context.Context, tx *Tx, in FileUploadInput, maxSize int64, types []string) (FileInfo, error) {
	if int64(len(in.Content)) > maxSize/3*4+8 {
		return FileInfo{}, capabilities.Errorf(capabilities.CodeInvalidInput, "the file is larger than %d bytes", maxSize)
	}
	content, err := base64.StdEncoding.DecodeString(in.Content)
	if err != nil {
		return FileInfo{}, capabilities.Errorf(capabilities.CodeInvalidInput, "contentBase64 is not valid base64")
	}
	name := strings.TrimSpace(in.Name)
	if name == "" || len(name) > 255 || strings.ContainsAny(name, "/\\\x00") {
		return FileInfo{}, capabilities.Errorf(capabilities.CodeInvalidInput, "a file name has 1 to 255 characters and no slashes")
	}
	ct := strings.ToLower(strings.TrimSpace(in.ContentType))
	if !slices.Contains(types, ct) {
		return FileInfo{}, capabilities.Errorf(capabilities.CodeInvalidInput, "content type %q is not accepted (accepted: %s)", in.ContentType, strings.Join(types, ", "))
	}
	if int64(len(content)) > maxSize {
		return FileInfo{}, capabilities.Errorf(capabilities.CodeInvalidInput, "the file is larger than %d bytes", maxSize)
	}
	if sniffable[ct] {
		if got := http.DetectContentType(content); got != ct {
			return FileInfo{}, capabilities.Errorf(capabilities.CodeInvalidInput, "the bytes are not %s", ct)
		}
	} else if got := http.DetectContentType(content); !strings.HasPrefix(got, "text/plain") && len(content) > 0 {
		return FileInfo{}, capabilities.Errorf(capabilities.CodeInvalidInput, "the bytes are not text")
	}
	var prev fileRow
	err = tx.NewSelect().Model(&prev).Where("workspace_id = ?", tx.WorkspaceID).Where("name = ?", name).
		OrderExpr("version DESC").Limit(1).Scan(ctx)
	fileID, version := "", int64(1)
	switch {
	case err == nil:
		fileID, version = prev.FileID, prev.Version+1
	case errors.Is(err, sql.ErrNoRows):
		fileID = "f_" + strings.ToLower(rand.Text())
	default:
		return FileInfo{}, fmt.Errorf("workspaces: find file: %w", err)
	}
	sum := sha256.Sum256(content)
	key := fmt.Sprintf("%sfiles/%s/v%d-%s", BlobPrefix(tx.WorkspaceID), fileID, version, strings.ToLower(rand.Text()[:8]))
	// The bytes go first: a version row never points at missing bytes.
	// Should the op then roll back, the blob is removed again below. They
	// are written under the call's write lease: once the uploader's account
	// deletion has begun (which may drop the workspace), nothing is.
	if err := storage.CheckWrite(ctx); err != nil {
		return FileInfo{}, fmt.Errorf("workspaces: write file: %w", err)
	}
	if err := s.bucket().WriteAll(ctx, key, content, &blob.WriterOptions{ContentType: ct}); err != nil {
		return FileInfo{}, fmt.Errorf("workspaces: write file: %w", err)
	}
	row := fileRow{WorkspaceID: tx.WorkspaceID, FileID: fileID, Version: version, Name: name, ContentType: ct,
		Size: int64(len(content)), SHA256: hex.EncodeToString(sum[:]), BlobKey: key, UploadedBy: tx.Actor.StableID, UploadedAt: s.now()}
	if _, err := tx.NewInsert().Model(&row).Returning("NULL").Exec(ctx); err != nil {
		_ = s.bucket().Delete(context.WithoutCancel(ctx), key)
		return FileInfo{}, fmt.Errorf("workspaces: record file: %w", err)
	}
	return row.info(), nil
}

func (s *Service) tombstone(ctx context.Context, tx *Tx, in FileDeleteInput) (FileInfo, error) {
	if in.Version <= 0 {
		return FileInfo{}, capabilities.Errorf(capabilities.CodeInvalidInput, "version is required")
	}
	r, err := findFile(ctx, tx, in.FileID, in.Version)
	if err != nil {
		return FileInfo{}, err
	}
	if r.DeletedAt != nil {
		return FileInfo{}, errConflict("this file version is already deleted")
	}
	if len(in.Reason) > 500 {
		return FileInfo{}, capabilities.Errorf(capabilities.CodeInvalidInput, "the reason has at most 500 characters")
	}
	now := s.now()
	if _, err := tx.NewUpdate().Model((*fileRow)(nil)).Set("deleted_at = ?", now).Set("deleted_by = ?", tx.Actor.StableID).
		Set("delete_reason = ?", in.Reason).Set("cleanup_pending = ?", true).
		Where("id = ?", r.ID).Where("workspace_id = ?", tx.WorkspaceID).Exec(ctx); err != nil {
		return FileInfo{}, fmt.Errorf("workspaces: delete file: %w", err)
	}
	if err := tx.Enqueue(ctx, PurgeJob, purgePayload{WorkspaceID: tx.WorkspaceID, FileID: r.FileID, Version: r.Version}); err != nil {
		return FileInfo{}, err
	}
	r.DeletedAt, r.DeletedBy, r.DeleteReason, r.CleanupPending = &now, tx.Actor.StableID, in.Reason, true
	return r.info(), nil
}

func (s *Service) purgeJob(ctx context.Context, job jobs.Job) error {
	var p purgePayload
	if err := job.Decode(&p); err != nil {
		return err
	}
	return s.PurgeFile(ctx, p.WorkspaceID, p.FileID, p.Version)
}

// PurgeFile is the second phase of a file deletion (the PurgeJob): it
// deletes the blob of a tombstoned version (already gone is fine) and runs
// the system op fileDeletionConfirm. It refuses a key outside the
// workspace's prefix. A gone workspace or an already purged version is
// done.
func (s *Service) PurgeFile(ctx context.Context, id, fileID string, version int64) error {
	var r fileRow
	err := s.ws.View(ctx, id, func(ctx context.Context, tx bun.Tx) error {
		return tx.NewSelect().Model(&r).Where("workspace_id = ?", id).Where("file_id = ?", fileID).Where("version = ?", version).Scan(ctx)
	})
	if errors.Is(err, sql.ErrNoRows) || errors.Is(err, errNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if r.DeletedAt == nil || !r.CleanupPending {
		return nil
	}
	if !strings.HasPrefix(r.BlobKey, BlobPrefix(id)) {
		return fmt.Errorf("workspaces: refusing to delete blob %q outside workspace %s", r.BlobKey, id)
	}
	if err := s.bucket().Delete(ctx, r.BlobKey); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return fmt.Errorf("workspaces: delete file bytes: %w", err)
	}
	_, err = s.RunSystem(ctx, "fileDeletionConfirm", id, fileConfirmInput{FileID: fileID, Version: version})
	if errors.Is(err, errNotFound) {
		return nil
	}
	return err
}

// deleteBlobs removes every blob of a deleted workspace.
func (s *Service) deleteBlobs(ctx context.Context, id string) error {
	it := s.bucket().List(&blob.ListOptions{Prefix: BlobPrefix(id)})
	for {
		obj, err := it.Next(ctx)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("workspaces: list files: %w", err)
		}
		if err := s.bucket().Delete(ctx, obj.Key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
			return fmt.Errorf("workspaces: delete file bytes: %w", err)
		}
	}
}
