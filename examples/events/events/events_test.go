package events_test

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/examples/events/events"
	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/web"
	"github.com/enclave-mcp/enclave/workspaces"
)

// mailbox keeps the mail the server sends (invitation links).
type mailbox struct {
	mu   sync.Mutex
	msgs []web.Message
}

func (m *mailbox) Send(_ context.Context, msg web.Message) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.msgs = append(m.msgs, msg)
	return nil
}

var tokenInLink = regexp.MustCompile(`token=([A-Za-z0-9]+)`)

func (m *mailbox) token(t *testing.T, to string) string {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		m.mu.Lock()
		for _, msg := range m.msgs {
			if msg.To == to {
				m.mu.Unlock()
				return tokenInLink.FindStringSubmatch(msg.Text)[1]
			}
		}
		m.mu.Unlock()
	}
	t.Fatalf("no mail to %s", to)
	return ""
}

func options(box *mailbox) enclavetest.Options {
	return enclavetest.Options{
		Config: enclave.Config{Mailer: box, Workspaces: &workspaces.Options{Schema: []migrations.Source{events.Schema}}},
		Setup: func(srv *enclave.Server) error {
			if srv.Store().Dialect() == storage.Postgres {
				if err := srv.Retention().Add(events.Retention()...); err != nil {
					return err
				}
			}
			return events.Register(srv.Workspaces())
		},
	}
}

type result[T any] struct {
	Revision int64 `json:"revision"`
	Result   T     `json:"result"`
}

// An event planned by its team over real MCP with real tokens: admins
// write, a viewer reads, an outsider sees nothing, the schedule refuses a
// double-booked room, and stale or repeated writes behave.
func TestEventPlanning(t *testing.T) {
	box := &mailbox{}
	enclavetest.Each(t, options(box), func(t *testing.T, s *enclavetest.Server) {
		box.mu.Lock()
		box.msgs = nil // each dialect's server starts with an empty mailbox
		box.mu.Unlock()
		if err := s.Inventory().Check(context.Background(), s.Store().DB); err != nil {
			t.Fatal(err)
		}
		if err := s.Retention().Check(context.Background(), s.Store().DB); err != nil {
			t.Fatal(err)
		}
		annU, valU, eveU := s.CreateUser(t, "ann"), s.CreateUser(t, "val"), s.CreateUser(t, "eve")
		ann, val, eve := annU.MCP(t), valU.MCP(t), eveU.MCP(t)
		call := func(c *enclavetest.Client, name string, args map[string]any, out any) enclavetest.ToolResult {
			t.Helper()
			res, err := c.Call(name, args)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if out != nil && !res.IsError {
				if err := json.Unmarshal(res.Structured, out); err != nil {
					t.Fatalf("%s: %v (%s)", name, err, res.Structured)
				}
			}
			return res
		}
		var w workspaces.Workspace
		call(ann, "workspaceCreate", map[string]any{"name": "GopherCon"}, &w)
		ws := w.ID

		// val joins as a viewer through a mailed invitation link.
		if res := call(ann, "workspaceMemberInvite", map[string]any{"workspaceId": ws, "email": valU.Email, "role": "viewer"}, nil); res.IsError {
			t.Fatalf("invite: %s", res.Text)
		}
		if res := call(val, "workspaceInvitationAccept", map[string]any{"token": box.token(t, valU.Email)}, nil); res.IsError {
			t.Fatalf("accept: %s", res.Text)
		}
		var sp result[events.Speaker]
		call(ann, "speakerAdd", map[string]any{"workspaceId": ws, "name": "Rob", "bio": "Go"}, &sp)
		var se result[events.Session]
		if res := call(ann, "sessionCreate", map[string]any{"workspaceId": ws, "title": "Concurrency", "speakerId": sp.Result.ID}, &se); res.IsError {
			t.Fatalf("create session: %s", res.Text)
		}
		if res := call(ann, "sessionCreate", map[string]any{"workspaceId": ws, "title": "Ghost", "speakerId": "sp999"}, nil); !res.IsError {
			t.Fatal("a session with an unknown speaker")
		}
		var other result[events.Session]
		call(ann, "sessionCreate", map[string]any{"workspaceId": ws, "title": "Generics"}, &other)
		nine := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
		slot := func(id, room string, start time.Time) map[string]any {
			return map[string]any{"workspaceId": ws, "sessionId": id, "room": room, "startsAt": start, "endsAt": start.Add(time.Hour)}
		}
		if res := call(ann, "sessionSchedule", slot(se.Result.ID, "A", nine), nil); res.IsError {
			t.Fatalf("schedule: %s", res.Text)
		}
		if res := call(ann, "sessionSchedule", slot(other.Result.ID, "A", nine.Add(30*time.Minute)), nil); !res.IsError || !strings.Contains(res.Text, "taken") {
			t.Fatalf("double booking: %+v", res)
		}
		var placed result[events.Slot]
		call(ann, "sessionSchedule", slot(other.Result.ID, "A", nine.Add(time.Hour)), &placed)

		// Optimistic concurrency and idempotent retries.
		stale := map[string]any{"workspaceId": ws, "name": "Late", "expectedRevision": placed.Revision - 1}
		if res := call(ann, "speakerAdd", stale, nil); !res.IsError || !strings.Contains(res.Text, "revision") {
			t.Fatalf("stale write: %+v", res)
		}
		retry := map[string]any{"workspaceId": ws, "name": "Ken", "idempotencyKey": "add-ken"}
		var k1, k2 result[events.Speaker]
		call(ann, "speakerAdd", retry, &k1)
		call(ann, "speakerAdd", retry, &k2)
		if k1.Result.ID != k2.Result.ID || k1.Revision != k2.Revision {
			t.Fatalf("retry ran again: %+v %+v", k1, k2)
		}

		var sched result[events.ScheduleOutput]
		call(ann, "scheduleGet", map[string]any{"workspaceId": ws}, &sched)
		if len(sched.Result.Slots) != 2 || sched.Result.Slots[0].Speaker != "Rob" || sched.Result.Slots[1].Title != "Generics" {
			t.Fatalf("schedule: %+v", sched.Result.Slots)
		}
		var prog result[events.ProgramOutput]
		call(ann, "programGet", map[string]any{"workspaceId": ws}, &prog)
		if len(prog.Result.Speakers) != 2 || len(prog.Result.Sessions) != 2 {
			t.Fatalf("program: %+v", prog.Result)
		}

		// An outsider sees nothing; a removed or viewer member cannot write.
		if res := call(eve, "scheduleGet", map[string]any{"workspaceId": ws}, nil); !res.IsError || !strings.Contains(res.Text, "workspace not found") {
			t.Fatalf("outsider: %+v", res)
		}
		call(val, "scheduleGet", map[string]any{"workspaceId": ws}, &sched)
		if len(sched.Result.Slots) != 2 {
			t.Fatalf("viewer's schedule: %+v", sched.Result)
		}
		if res := call(val, "speakerAdd", map[string]any{"workspaceId": ws, "name": "X"}, nil); !res.IsError {
			t.Fatal("a viewer wrote")
		}
		var members workspaces.MembersOutput
		call(ann, "workspaceMemberList", map[string]any{"workspaceId": ws}, &members)
		call(ann, "workspaceMemberRemove", map[string]any{"workspaceId": ws, "userId": valU.StableID}, nil)
		if res := call(val, "scheduleGet", map[string]any{"workspaceId": ws}, nil); !res.IsError {
			t.Fatal("a removed member still reads")
		}
	})
}
