// Package notes is a user-owned domain built on enclave: notes with an
// optional file attachment. It is the pattern to copy for your own data:
//
//   - its table has an owner column (user_id) and every query filters by the
//     caller's id;
//   - its blobs live under storage.BlobKey(owner, "notes", …);
//   - both are registered in the ownership inventory, so account export and
//     deletion cover them with no code here;
//   - its schema ships as a migrations.Source applied by enclave.New.
package notes

import (
	"context"
	"database/sql"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"time"

	"github.com/uptrace/bun"
	"gocloud.dev/gcerrors"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/storage"
)

//go:embed migrations
var files embed.FS

// Migrations creates the notes table; pass it in enclave.Config.Migrations.
var Migrations = migrations.Source{Name: "notes", FS: mustSub(files, "migrations")}

// Domain is the blob domain (and capability domain) of notes.
const Domain = "notes"

// MaxAttachment bounds an attachment's size.
const MaxAttachment = 1 << 20

// Note is one note.
type Note struct {
	bun.BaseModel `bun:"table:notes"`
	ID            int64     `bun:"id,pk,autoincrement" json:"id"`
	UserID        int64     `bun:"user_id,notnull" json:"-"`
	Title         string    `bun:"title,notnull" json:"title"`
	Body          string    `bun:"body,notnull" json:"body"`
	Attachment    string    `bun:"attachment,notnull" json:"attachment,omitempty"`
	CreatedAt     time.Time `bun:"created_at,notnull" json:"createdAt"`
}

// Service stores notes.
type Service struct {
	store *storage.Store
	owner capabilities.OwnerOf
}

// Register adds the notes domain to a server: its ownership surfaces and
// its capabilities.
func Register(store *storage.Store, inv *storage.Inventory, reg *capabilities.Registry, owner capabilities.OwnerOf) (*Service, error) {
	s := &Service{store: store, owner: owner}
	if err := errors.Join(
		inv.AddTable(storage.Table{Name: "notes"}),
		inv.AddBlobPrefix(storage.BlobPrefix{Domain: Domain}),
	); err != nil {
		return nil, fmt.Errorf("notes: %w", err)
	}
	if err := reg.Register(s.capabilities()...); err != nil {
		return nil, fmt.Errorf("notes: %w", err)
	}
	return s, nil
}

func attachmentKey(o storage.Owner, noteID int64) string {
	return storage.BlobKey(o, Domain, strconv.FormatInt(noteID, 10))
}

var errNoNote = capabilities.Errorf(capabilities.CodeNotFound, "no such note")

// Create stores a note, and its attachment when given.
func (s *Service) Create(ctx context.Context, o storage.Owner, title, body string, attachment []byte) (Note, error) {
	n := Note{UserID: o.ID, Title: title, Body: body, CreatedAt: time.Now().UTC()}
	if len(attachment) > 0 {
		n.Attachment = "attachment"
	}
	if _, err := s.store.DB.NewInsert().Model(&n).Returning("id").Exec(ctx); err != nil {
		return Note{}, fmt.Errorf("notes: create: %w", err)
	}
	if len(attachment) > 0 {
		if err := s.store.Bucket.WriteAll(ctx, attachmentKey(o, n.ID), attachment, nil); err != nil {
			return Note{}, fmt.Errorf("notes: store attachment: %w", err)
		}
	}
	return n, nil
}

// Get returns the owner's note id; another user's note is not found.
func (s *Service) Get(ctx context.Context, o storage.Owner, id int64) (Note, []byte, error) {
	var n Note
	err := s.store.Reader.NewSelect().Model(&n).Where("id = ? AND user_id = ?", id, o.ID).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return Note{}, nil, errNoNote
	}
	if err != nil {
		return Note{}, nil, fmt.Errorf("notes: get: %w", err)
	}
	if n.Attachment == "" {
		return n, nil, nil
	}
	data, err := s.store.Bucket.ReadAll(ctx, attachmentKey(o, id))
	if err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return Note{}, nil, fmt.Errorf("notes: read attachment: %w", err)
	}
	return n, data, nil
}

// Delete removes the owner's note and its attachment.
func (s *Service) Delete(ctx context.Context, o storage.Owner, id int64) (bool, error) {
	// The blob goes first: a failure leaves the row, so a retry finds it.
	if err := s.store.Bucket.Delete(ctx, attachmentKey(o, id)); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return false, fmt.Errorf("notes: delete attachment: %w", err)
	}
	res, err := s.store.DB.NewDelete().Model((*Note)(nil)).Where("id = ? AND user_id = ?", id, o.ID).Exec(ctx)
	if err != nil {
		return false, fmt.Errorf("notes: delete: %w", err)
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

// CreateInput is the input of noteCreate.
type CreateInput struct {
	Title            string `json:"title" jsonschema:"the note's title"`
	Body             string `json:"body" jsonschema:"the note's text"`
	AttachmentBase64 string `json:"attachmentBase64,omitempty" jsonschema:"an optional file, base64-encoded (at most 1 MiB)"`
}

// IDInput names a note.
type IDInput struct {
	ID int64 `json:"id" jsonschema:"the note's id"`
}

// GetOutput is a note with its attachment.
type GetOutput struct {
	Note             Note   `json:"note"`
	AttachmentBase64 string `json:"attachmentBase64,omitempty"`
}

// ListInput pages through notes.
type ListInput struct {
	Cursor string `json:"cursor,omitempty" jsonschema:"the nextCursor of the previous page"`
	Limit  int    `json:"limit,omitempty" jsonschema:"page size, 1 to 1000 (default 50)"`
}

// ListOutput is one page of notes.
type ListOutput struct {
	Notes      []Note `json:"notes"`
	NextCursor string `json:"nextCursor,omitempty"`
}

// DeleteOutput says whether a note was deleted.
type DeleteOutput struct {
	Deleted bool `json:"deleted"`
}

func (s *Service) capabilities() []capabilities.Capability {
	need := func(p capabilities.Permission) capabilities.Requirement {
		return capabilities.Requirement{Permissions: []capabilities.Permission{p}}
	}
	return []capabilities.Capability{
		capabilities.Define(capabilities.Spec[CreateInput, Note]{
			Name: "noteCreate", Domain: Domain, Title: "Create a note",
			Description: "Creates a note for the signed-in user, with an optional attachment.",
			Annotations: &capabilities.Annotations{},
			Requires:    need(capabilities.UpdateUserOwn),
			Handler: func(ctx context.Context, call *capabilities.Call, in CreateInput) (Note, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return Note{}, err
				}
				att, err := base64.StdEncoding.DecodeString(in.AttachmentBase64)
				if err != nil || len(att) > MaxAttachment {
					return Note{}, capabilities.Errorf(capabilities.CodeInvalidInput, "attachmentBase64 must be base64 of at most %d bytes", MaxAttachment)
				}
				if in.Title == "" {
					return Note{}, capabilities.Errorf(capabilities.CodeInvalidInput, "title is required")
				}
				return s.Create(ctx, o, in.Title, in.Body, att)
			},
		}),
		capabilities.Define(capabilities.Spec[IDInput, GetOutput]{
			Name: "noteGet", Domain: Domain, Title: "Read a note",
			Description: "Returns one of the signed-in user's notes, with its attachment.",
			Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
			Requires:    need(capabilities.ReadUserOwn),
			Handler: func(ctx context.Context, call *capabilities.Call, in IDInput) (GetOutput, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return GetOutput{}, err
				}
				n, data, err := s.Get(ctx, o, in.ID)
				if err != nil {
					return GetOutput{}, err
				}
				return GetOutput{Note: n, AttachmentBase64: base64.StdEncoding.EncodeToString(data)}, nil
			},
		}),
		capabilities.Define(capabilities.Spec[ListInput, ListOutput]{
			Name: "noteList", Domain: Domain, Title: "List notes",
			Description: "Lists the signed-in user's notes, oldest first.",
			Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
			Requires:    need(capabilities.ReadUserOwn),
			Handler: func(ctx context.Context, call *capabilities.Call, in ListInput) (ListOutput, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return ListOutput{}, err
				}
				q := s.store.Reader.NewSelect().Model((*Note)(nil)).Where("user_id = ?", o.ID)
				req, err := capabilities.Page(in.Cursor, in.Limit)
				if err != nil {
					return ListOutput{}, err
				}
				page, err := storage.Paginate(ctx, q, storage.Keyset[Note]{Kind: "notes", Column: "id", Key: func(n *Note) any { return n.ID }}, req)
				if err != nil {
					return ListOutput{}, capabilities.PageError(err)
				}
				if page.Items == nil {
					page.Items = []Note{}
				}
				return ListOutput{Notes: page.Items, NextCursor: page.Next}, nil
			},
		}),
		capabilities.Define(capabilities.Spec[IDInput, DeleteOutput]{
			Name: "noteDelete", Domain: Domain, Title: "Delete a note",
			Description: "Deletes one of the signed-in user's notes and its attachment.",
			Annotations: &capabilities.Annotations{Destructive: true, Idempotent: true},
			Requires:    need(capabilities.UpdateUserOwn),
			Handler: func(ctx context.Context, call *capabilities.Call, in IDInput) (DeleteOutput, error) {
				var out DeleteOutput
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return out, err
				}
				out.Deleted, err = s.Delete(ctx, o, in.ID)
				return out, err
			},
		}),
	}
}

func mustSub(fsys embed.FS, dir string) fs.FS {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		panic(err)
	}
	return sub
}
