// Package events is a small event-planning domain built on enclave's
// workspaces, from public API only: one workspace is one event, whose
// team (owner, admins, viewers) plans speakers, sessions and a schedule.
//
//   - its tables ship as a migrations.Source passed in
//     enclave.Config.Workspaces.Schema; each has a workspace_id column and
//     every query filters by it;
//   - each change is a named operation (workspaces.Op) registered with
//     workspaces.Register: it runs serialized per event, bumps the event's
//     revision, and honours expectedRevision and idempotencyKey;
//   - reads are read-only ops any member (viewer up) may run.
package events

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/workspaces"
)

//go:embed schema
var files embed.FS

// Schema holds the event tables; pass it in enclave.Config.Workspaces.Schema.
var Schema = migrations.Source{Name: "events", FS: mustSub(files, "schema")}

func mustSub(f fs.FS, dir string) fs.FS {
	s, err := fs.Sub(f, dir)
	if err != nil {
		panic(err)
	}
	return s
}

// Speaker is one speaker of the event.
type Speaker struct {
	ID   string `json:"speakerId" bun:"id"`
	Name string `json:"name" bun:"name"`
	Bio  string `json:"bio" bun:"bio"`
}

// Session is one talk.
type Session struct {
	ID        string `json:"sessionId" bun:"id"`
	Title     string `json:"title" bun:"title"`
	Abstract  string `json:"abstract" bun:"abstract"`
	SpeakerID string `json:"speakerId,omitempty" bun:"speaker_id"`
}

// Slot places a session in a room and a time.
type Slot struct {
	SessionID string    `json:"sessionId" bun:"session_id"`
	Title     string    `json:"title" bun:"title"`
	Speaker   string    `json:"speaker,omitempty" bun:"speaker"`
	Room      string    `json:"room" bun:"room"`
	StartsAt  time.Time `json:"startsAt" bun:"starts_at"`
	EndsAt    time.Time `json:"endsAt" bun:"ends_at"`
}

// Inputs and outputs of the operations.
type (
	SpeakerAddInput struct {
		Name string `json:"name"`
		Bio  string `json:"bio,omitempty"`
	}
	SessionCreateInput struct {
		Title     string `json:"title"`
		Abstract  string `json:"abstract,omitempty"`
		SpeakerID string `json:"speakerId,omitempty" jsonschema:"a speaker added with speakerAdd"`
	}
	SessionScheduleInput struct {
		SessionID string    `json:"sessionId"`
		Room      string    `json:"room"`
		StartsAt  time.Time `json:"startsAt" jsonschema:"RFC 3339 time"`
		EndsAt    time.Time `json:"endsAt" jsonschema:"RFC 3339 time"`
	}
	ProgramOutput struct {
		Speakers []Speaker `json:"speakers"`
		Sessions []Session `json:"sessions"`
	}
	ScheduleOutput struct {
		Slots []Slot `json:"slots"`
	}
)

func invalid(format string, args ...any) error {
	return capabilities.Errorf(capabilities.CodeInvalidInput, format, args...)
}

// id makes an id unique in the event: the revision the op commits.
func id(prefix string, tx *workspaces.Tx) string { return prefix + strconv.FormatInt(tx.Revision, 10) }

// Retention declares how long the event tables keep their rows: as long
// as their event. On PostgreSQL they live in the main database, so add
// them to the server's retention set (enclave.Server.Retention); on SQLite
// they live in each workspace's own file.
func Retention() []retention.Policy {
	return []retention.Policy{
		retention.Kept("event_speakers", "an event's speakers; deleted with the event's workspace"),
		retention.Kept("event_sessions", "an event's sessions; deleted with the event's workspace"),
		retention.Kept("event_slots", "an event's schedule; deleted with the event's workspace"),
	}
}

// Register adds the event operations to a server's workspaces service
// (enclave.Server.Workspaces, with Schema in the server's configuration).
func Register(ws *workspaces.Service) error {
	return errors.Join(
		workspaces.Register(ws, workspaces.Op[SpeakerAddInput, Speaker]{
			Name: "speakerAdd", Title: "Add a speaker", Description: "Adds a speaker to the event.",
			Handler: func(ctx context.Context, tx *workspaces.Tx, in SpeakerAddInput) (Speaker, error) {
				s := Speaker{ID: id("sp", tx), Name: strings.TrimSpace(in.Name), Bio: strings.TrimSpace(in.Bio)}
				if s.Name == "" || len(s.Name) > 200 || len(s.Bio) > 2000 {
					return Speaker{}, invalid("a speaker has a name of 1 to 200 characters and a bio of at most 2000")
				}
				_, err := tx.NewRaw("INSERT INTO event_speakers (workspace_id, id, name, bio) VALUES (?, ?, ?, ?)", tx.WorkspaceID, s.ID, s.Name, s.Bio).Exec(ctx)
				return s, err
			},
		}),
		workspaces.Register(ws, workspaces.Op[SessionCreateInput, Session]{
			Name: "sessionCreate", Title: "Create a session", Description: "Creates a session (a talk), optionally with its speaker.",
			Handler: func(ctx context.Context, tx *workspaces.Tx, in SessionCreateInput) (Session, error) {
				s := Session{ID: id("se", tx), Title: strings.TrimSpace(in.Title), Abstract: strings.TrimSpace(in.Abstract), SpeakerID: in.SpeakerID}
				if s.Title == "" || len(s.Title) > 200 || len(s.Abstract) > 5000 {
					return Session{}, invalid("a session has a title of 1 to 200 characters and an abstract of at most 5000")
				}
				if s.SpeakerID != "" {
					n, err := tx.NewSelect().Table("event_speakers").Where("workspace_id = ?", tx.WorkspaceID).Where("id = ?", s.SpeakerID).Count(ctx)
					if err != nil {
						return Session{}, err
					}
					if n == 0 {
						return Session{}, invalid("no speaker %q in this event", s.SpeakerID)
					}
				}
				_, err := tx.NewRaw("INSERT INTO event_sessions (workspace_id, id, title, abstract, speaker_id) VALUES (?, ?, ?, ?, ?)",
					tx.WorkspaceID, s.ID, s.Title, s.Abstract, s.SpeakerID).Exec(ctx)
				return s, err
			},
		}),
		workspaces.Register(ws, workspaces.Op[SessionScheduleInput, Slot]{
			Name: "sessionSchedule", Title: "Schedule a session",
			Description: "Places a session in a room and a time (moving it if it was scheduled). Two sessions never share a room at the same time.",
			Handler:     schedule,
		}),
		workspaces.Register(ws, workspaces.Op[struct{}, ProgramOutput]{
			Name: "programGet", Title: "Get the program", ReadOnly: true,
			Description: "Lists the event's speakers and sessions.",
			Handler: func(ctx context.Context, tx *workspaces.Tx, _ struct{}) (ProgramOutput, error) {
				out := ProgramOutput{Speakers: []Speaker{}, Sessions: []Session{}}
				if err := tx.NewSelect().Table("event_speakers").Column("id", "name", "bio").Where("workspace_id = ?", tx.WorkspaceID).Order("name").Scan(ctx, &out.Speakers); err != nil {
					return out, err
				}
				err := tx.NewSelect().Table("event_sessions").Column("id", "title", "abstract", "speaker_id").Where("workspace_id = ?", tx.WorkspaceID).Order("title").Scan(ctx, &out.Sessions)
				return out, err
			},
		}),
		workspaces.Register(ws, workspaces.Op[struct{}, ScheduleOutput]{
			Name: "scheduleGet", Title: "Get the schedule", ReadOnly: true,
			Description: "Returns the schedule: each scheduled session with its room, times and speaker, in time order.",
			Handler: func(ctx context.Context, tx *workspaces.Tx, _ struct{}) (ScheduleOutput, error) {
				out := ScheduleOutput{Slots: []Slot{}}
				err := tx.NewSelect().TableExpr("event_slots AS sl").
					ColumnExpr("sl.session_id, se.title, COALESCE(sp.name, '') AS speaker, sl.room, sl.starts_at, sl.ends_at").
					Join("JOIN event_sessions AS se ON se.workspace_id = sl.workspace_id AND se.id = sl.session_id").
					Join("LEFT JOIN event_speakers AS sp ON sp.workspace_id = se.workspace_id AND sp.id = se.speaker_id").
					Where("sl.workspace_id = ?", tx.WorkspaceID).OrderExpr("sl.starts_at, sl.room").Scan(ctx, &out.Slots)
				return out, err
			},
		}),
	)
}

func schedule(ctx context.Context, tx *workspaces.Tx, in SessionScheduleInput) (Slot, error) {
	room := strings.TrimSpace(in.Room)
	if room == "" || len(room) > 100 {
		return Slot{}, invalid("a room has 1 to 100 characters")
	}
	start, end := in.StartsAt.UTC(), in.EndsAt.UTC()
	if !end.After(start) || end.Sub(start) > 24*time.Hour {
		return Slot{}, invalid("a session ends after it starts, within a day")
	}
	var title string
	err := tx.NewSelect().Table("event_sessions").Column("title").Where("workspace_id = ?", tx.WorkspaceID).Where("id = ?", in.SessionID).Scan(ctx, &title)
	if errors.Is(err, sql.ErrNoRows) {
		return Slot{}, capabilities.Errorf(capabilities.CodeNotFound, "no session %q in this event", in.SessionID)
	}
	if err != nil {
		return Slot{}, err
	}
	var clash []string
	if err := tx.NewSelect().Table("event_slots").Column("session_id").Where("workspace_id = ?", tx.WorkspaceID).
		Where("room = ?", room).Where("session_id <> ?", in.SessionID).
		Where("starts_at < ?", end).Where("ends_at > ?", start).Scan(ctx, &clash); err != nil {
		return Slot{}, err
	}
	if len(clash) > 0 {
		return Slot{}, capabilities.Errorf(capabilities.CodeConflict, "room %s is taken then by session %s", room, clash[0])
	}
	if _, err := tx.NewRaw(`INSERT INTO event_slots (workspace_id, session_id, room, starts_at, ends_at) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (workspace_id, session_id) DO UPDATE SET room = excluded.room, starts_at = excluded.starts_at, ends_at = excluded.ends_at`,
		tx.WorkspaceID, in.SessionID, room, start, end).Exec(ctx); err != nil {
		return Slot{}, fmt.Errorf("events: schedule: %w", err)
	}
	return Slot{SessionID: in.SessionID, Title: title, Room: room, StartsAt: start, EndsAt: end}, nil
}
