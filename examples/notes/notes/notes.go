// Package notes is a user-owned domain built on enclave: notes with an
// optional file attachment. It is the pattern to copy for your own data:
//
//   - its table has an owner column (user_id) and every query filters by the
//     caller's id;
//   - its blobs live under storage.BlobKey(owner, "notes", …);
//   - both are registered in the ownership inventory, so account export and
//     deletion cover them with no code here;
//   - its schema ships as a migrations.Source applied by enclave.New;
//   - its permissions are its own entity, "note" (create:note:own …), added
//     with enclave.Config.Vocabulary;
//   - uploading an attachment enqueues a job (note.wordcount) in the same
//     transaction as the note; the job reads the note back through the
//     registry as a non-interactive caller and records the word count;
//   - a schedule (notes.stats) refreshes per-user statistics in note_stats,
//     which, like the jobs, is exported and deleted with the account.
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
	"strings"
	"time"

	"github.com/uptrace/bun"
	"gocloud.dev/gcerrors"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/jobs"
	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/schedules"
	"github.com/enclave-mcp/enclave/storage"
)

// Entity is the permission entity of notes.
const Entity capabilities.Entity = "note"

// The note permissions. Role user holds them all (they are :own); there is
// no :any form for an embedder's entity.
const (
	CreateNoteOwn capabilities.Permission = "create:note:own"
	ReadNoteOwn   capabilities.Permission = "read:note:own"
	UpdateNoteOwn capabilities.Permission = "update:note:own"
	DeleteNoteOwn capabilities.Permission = "delete:note:own"
)

// Vocabulary returns the permission vocabulary with notes' entity: pass it
// in enclave.Config.Vocabulary.
func Vocabulary() *capabilities.Vocabulary {
	v, err := capabilities.NewVocabulary(Entity)
	if err != nil {
		panic(err) // a constant entity name: a bug caught by the tests
	}
	return v
}

// WordCountJob is the job kind that counts an attachment's words.
const WordCountJob = "note.wordcount"

// StatsSchedule is the schedule that refreshes note_stats.
const StatsSchedule = "notes.stats"

// StatsEvery is how often StatsSchedule runs.
var StatsEvery = time.Hour

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
	ID            int64  `bun:"id,pk,autoincrement" json:"id"`
	UserID        int64  `bun:"user_id,notnull" json:"-"`
	Title         string `bun:"title,notnull" json:"title"`
	Body          string `bun:"body,notnull" json:"body"`
	Attachment    string `bun:"attachment,notnull" json:"attachment,omitempty"`
	// AttachmentWords is counted by the WordCountJob after the upload;
	// nil until it ran.
	AttachmentWords *int64    `bun:"attachment_words" json:"attachmentWords,omitempty"`
	CreatedAt       time.Time `bun:"created_at,notnull" json:"createdAt"`
}

// Stats are one user's note statistics, refreshed by StatsSchedule.
type Stats struct {
	bun.BaseModel `bun:"table:note_stats"`
	UserID        int64     `bun:"user_id,pk" json:"-"`
	Notes         int64     `bun:"notes,notnull" json:"notes"`
	Words         int64     `bun:"words,notnull" json:"words"`
	UpdatedAt     time.Time `bun:"updated_at,notnull" json:"updatedAt"`
}

// Service stores notes.
type Service struct {
	store *storage.Store
	owner capabilities.OwnerOf
	jobs  *jobs.Queue
}

// Register adds the notes domain to a server built with Migrations and
// Vocabulary: its ownership surfaces, its capabilities, its job kind and
// its schedule. Call it before the server runs.
func Register(srv *enclave.Server) (*Service, error) {
	s := &Service{store: srv.Store(), owner: lifecycle.Owners(srv.Accounts()), jobs: srv.Jobs()}
	inv := srv.Inventory()
	if err := errors.Join(
		inv.AddTable(storage.Table{Name: "notes"}),
		inv.AddTable(storage.Table{Name: "note_stats", KeyColumn: "user_id"}),
		inv.AddBlobPrefix(storage.BlobPrefix{Domain: Domain}),
		// Every table declares how long its rows live (see docs/data.md).
		srv.Retention().Add(
			retention.UntilAccountDeleted("notes"),
			retention.UntilAccountDeleted("note_stats").Because("recomputed by the stats schedule"),
		),
		srv.Jobs().Register(WordCountJob, s.countWords),
		srv.Schedules().Add(schedules.Schedule{Name: StatsSchedule, Every: StatsEvery, Run: func(ctx context.Context, _ schedules.Tick) error {
			_, err := s.RefreshStats(ctx)
			return err
		}}),
		srv.Registry().Register(s.capabilities()...),
	); err != nil {
		return nil, fmt.Errorf("notes: %w", err)
	}
	return s, nil
}

// wordCount is the payload of a WordCountJob.
type wordCount struct {
	NoteID int64 `json:"noteId"`
}

// countWords is the WordCountJob: it reads the note through the registry
// as its owner (a non-interactive caller, so read:note:own is checked
// afresh and a suspended account stops it), then records the count.
func (s *Service) countWords(ctx context.Context, job jobs.Job) error {
	var p wordCount
	if err := job.Decode(&p); err != nil {
		return err
	}
	res, err := job.Invoke(ctx, "noteGet", IDInput{ID: p.NoteID})
	if capabilities.CodeOf(err) == capabilities.CodeNotFound {
		return nil // the note (or the account) is gone: nothing to count
	}
	if err != nil {
		return err
	}
	out, ok := res.Structured.(GetOutput)
	if !ok {
		return fmt.Errorf("notes: noteGet returned %T", res.Structured)
	}
	data, err := base64.StdEncoding.DecodeString(out.AttachmentBase64)
	if err != nil {
		return err
	}
	words := int64(len(strings.Fields(string(data))))
	_, err = s.store.DB.NewUpdate().Model((*Note)(nil)).Set("attachment_words = ?", words).
		Where("id = ? AND user_id = (SELECT id FROM users WHERE stable_user_id = ?)", p.NoteID, job.UserID).Exec(ctx)
	return err
}

// RefreshStats recomputes note_stats for every user with notes and
// returns how many rows it wrote.
func (s *Service) RefreshStats(ctx context.Context) (int64, error) {
	res, err := s.store.DB.NewRaw(`INSERT INTO note_stats (user_id, notes, words, updated_at)
		SELECT user_id, COUNT(*), COALESCE(SUM(attachment_words), 0), ? FROM notes WHERE true GROUP BY user_id
		ON CONFLICT (user_id) DO UPDATE SET notes = EXCLUDED.notes, words = EXCLUDED.words, updated_at = EXCLUDED.updated_at`,
		time.Now().UTC()).Exec(ctx)
	if err != nil {
		return 0, fmt.Errorf("notes: refresh stats: %w", err)
	}
	return res.RowsAffected()
}

func attachmentKey(o storage.Owner, noteID int64) string {
	return storage.BlobKey(o, Domain, strconv.FormatInt(noteID, 10))
}

var errNoNote = capabilities.Errorf(capabilities.CodeNotFound, "no such note")

// Create stores a note, and its attachment when given. With an
// attachment, the WordCountJob is enqueued in the note's transaction: it
// runs once the note exists, and never if the note is not stored.
func (s *Service) Create(ctx context.Context, o storage.Owner, title, body string, attachment []byte) (Note, error) {
	n := Note{UserID: o.ID, Title: title, Body: body, CreatedAt: time.Now().UTC()}
	if len(attachment) > 0 {
		n.Attachment = "attachment"
	}
	err := s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewInsert().Model(&n).Returning("id").Exec(ctx); err != nil {
			return err
		}
		if len(attachment) == 0 {
			return nil
		}
		// The blob is written inside the transaction: if it fails, neither
		// the row nor the job exists. A blob has no foreign key to go with
		// the account: CheckWrite refuses it once the account's deletion
		// fenced this call (its write lease ended), so no attachment is
		// written after the deletion removed the owner's blobs.
		if err := storage.CheckWrite(ctx); err != nil {
			return err
		}
		if err := s.store.Bucket.WriteAll(ctx, attachmentKey(o, n.ID), attachment, nil); err != nil {
			return fmt.Errorf("store attachment: %w", err)
		}
		return s.jobs.Enqueue(ctx, tx, WordCountJob, o.StableID, wordCount{NoteID: n.ID})
	})
	if err != nil {
		return Note{}, fmt.Errorf("notes: create: %w", err)
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
	Limit  int    `json:"limit,omitempty" jsonschema:"page size, 1 to 1000 (default 50)" schema:"minimum=1,maximum=1000,default=50"`
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
			Requires:    need(CreateNoteOwn),
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
			Requires:    need(ReadNoteOwn),
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
			Requires:    need(ReadNoteOwn),
			Handler: func(ctx context.Context, call *capabilities.Call, in ListInput) (ListOutput, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return ListOutput{}, err
				}
				q := s.store.Reader.NewSelect().Model((*Note)(nil)).Where("user_id = ?", o.ID)
				req, err := storage.PageInput(in.Cursor, in.Limit)
				if err != nil {
					return ListOutput{}, err
				}
				page, err := storage.Paginate(ctx, q, storage.Keyset[Note]{Kind: "notes", Column: "id", Key: func(n *Note) any { return n.ID }}, req)
				if err != nil {
					return ListOutput{}, err
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
			Requires:    need(DeleteNoteOwn),
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
