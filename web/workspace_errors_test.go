package web

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
	"github.com/enclave-mcp/enclave/workspaces"
)

// A workspace refusal reaches the page as a sentence: a capital letter and
// a full stop, while an opening identifier keeps its spelling.
func TestWorkspaceErrorsAreSentences(t *testing.T) {
	for in, want := range map[string]string{
		"a key name has 1 to 100 characters on one line, with no control characters": "A key name has 1 to 100 characters on one line, with no control characters.",
		"maxRole must be owner, admin or viewer":                                     "maxRole must be owner, admin or viewer.",
		"the last owner cannot leave; hand over ownership first":                     "The last owner cannot leave; hand over ownership first.",
		"API keys cannot be listed with this credential":                             "API keys cannot be listed with this credential.",
		"Already a sentence.": "Already a sentence.",
		"  élan is needed ":   "Élan is needed.",
		"":                    "",
	} {
		if got := sentence(in); got != want {
			t.Errorf("sentence(%q) = %q, want %q", in, got, want)
		}
	}
	err := capabilities.Errorf(capabilities.CodeInvalidInput, "a key name has 1 to 100 characters")
	status, msg, ok := formRefusal(httptest.NewRecorder(), err, workspaceFormCodes...)
	if !ok || status != http.StatusUnprocessableEntity || msg != "A key name has 1 to 100 characters." {
		t.Fatalf("formRefusal = %d %q, %v", status, msg, ok)
	}
	if capabilities.CodeOf(err) != capabilities.CodeInvalidInput || err.Message != "a key name has 1 to 100 characters" {
		t.Fatalf("the domain error changed: %v", err)
	}
}

// workspaceStubs are the workspace capabilities the pages call, answering
// the refusals this test needs: a name is taken (conflict), empty
// (invalid input) or over quota; the last owner cannot leave; an
// invitation is unknown.
func workspaceStubs(reset time.Time) []capabilities.Capability {
	type ref struct {
		WorkspaceID string `json:"workspaceId"`
	}
	ro := &capabilities.Annotations{ReadOnly: true}
	rw := &capabilities.Annotations{}
	return []capabilities.Capability{
		capabilities.Define(capabilities.Spec[struct{}, workspaces.ListOutput]{
			Name: "workspaceList", Domain: "workspaces", Description: "Lists.", Annotations: ro,
			Handler: func(context.Context, *capabilities.Call, struct{}) (workspaces.ListOutput, error) {
				return workspaces.ListOutput{}, nil
			},
		}),
		capabilities.Define(capabilities.Spec[struct {
			Name string `json:"name"`
		}, workspaces.Workspace]{
			Name: "workspaceCreate", Domain: "workspaces", Description: "Creates.", Annotations: rw,
			Handler: func(_ context.Context, _ *capabilities.Call, in struct {
				Name string `json:"name"`
			}) (workspaces.Workspace, error) {
				switch in.Name {
				case "taken":
					return workspaces.Workspace{}, capabilities.Errorf(capabilities.CodeConflict, "you have a workspace named taken already")
				case "busy":
					return workspaces.Workspace{}, &capabilities.Error{Code: capabilities.CodeQuotaExceeded, Message: "daily limit reached", RetryAfter: reset}
				}
				return workspaces.Workspace{}, capabilities.Errorf(capabilities.CodeInvalidInput, "a workspace name has 1 to 100 characters")
			},
		}),
		capabilities.Define(capabilities.Spec[ref, workspaces.Details]{
			Name: "workspaceGet", Domain: "workspaces", Description: "Gets.", Annotations: ro,
			Handler: func(_ context.Context, _ *capabilities.Call, in ref) (workspaces.Details, error) {
				return workspaces.Details{Workspace: workspaces.Workspace{ID: in.WorkspaceID, Name: "Team", Role: workspaces.RoleAdmin}}, nil
			},
		}),
		capabilities.Define(capabilities.Spec[ref, workspaces.MembersOutput]{
			Name: "workspaceMemberList", Domain: "workspaces", Description: "Lists members.", Annotations: ro,
			Handler: func(context.Context, *capabilities.Call, ref) (workspaces.MembersOutput, error) {
				return workspaces.MembersOutput{}, nil
			},
		}),
		capabilities.Define(capabilities.Spec[ref, struct{}]{
			Name: "workspaceLeave", Domain: "workspaces", Description: "Leaves.", Annotations: rw,
			Handler: func(context.Context, *capabilities.Call, ref) (struct{}, error) {
				return struct{}{}, capabilities.Errorf(capabilities.CodeConflict, "the last owner cannot leave; hand over ownership first")
			},
		}),
		capabilities.Define(capabilities.Spec[struct {
			Token string `json:"token"`
		}, workspaces.Workspace]{
			Name: "workspaceInvitationAccept", Domain: "workspaces", Description: "Joins.", Annotations: rw,
			Handler: func(context.Context, *capabilities.Call, struct {
				Token string `json:"token"`
			}) (workspaces.Workspace, error) {
				return workspaces.Workspace{}, capabilities.Errorf(capabilities.CodeNotFound, "no such invitation: ask for a new one")
			},
		}),
	}
}

// The workspace pages answer a refusal through the one table: a form
// shown again has formStatus's status (422 for a mistake in a field, 409
// for a conflict, 404 for an unknown invitation) and the refusal as a
// sentence; a refusal that is not the form's (a quota) is the error page
// with the table's 429 and Retry-After.
func TestWorkspacePagesAnswerRefusalsThroughTheTable(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	acc := newAccounts(t, s, nil)
	reg := capabilities.NewRegistry(capabilities.Options{Logger: quietLogger()})
	reset := time.Now().Add(2 * time.Minute)
	if err := reg.Register(append(acc.AccountCapabilities(accounts.AccountOptions{}), workspaceStubs(reset)...)...); err != nil {
		t.Fatal(err)
	}
	h := newTestHandler(t, s, func(o *Options) { o.Accounts, o.Registry = acc, reg })
	e := &pkgEnv{t: t, h: h, acc: acc, reg: reg}
	ann := e.user("ann")
	for _, tc := range []struct {
		name, path string
		form       url.Values
		status     int
		msg        string
	}{
		{"a name in use", "/workspaces", url.Values{"name": {"taken"}}, http.StatusConflict, "You have a workspace named taken already."},
		{"an empty name", "/workspaces", url.Values{"name": {""}}, http.StatusUnprocessableEntity, "A workspace name has 1 to 100 characters."},
		{"the last owner leaves", "/workspaces/ws1/leave", url.Values{}, http.StatusConflict, "The last owner cannot leave; hand over ownership first."},
		{"an unknown invitation", workspaces.InvitationPath, url.Values{"token": {"nope"}}, http.StatusNotFound, "No such invitation: ask for a new one."},
		{"over quota", "/workspaces", url.Values{"name": {"busy"}}, http.StatusTooManyRequests, "Daily limit reached."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := e.do(ann, "POST", tc.path, tc.form)
			if w.Code != tc.status || shownMessage(w.Body.String()) != tc.msg {
				t.Fatalf("%d %q, want %d %q", w.Code, shownMessage(w.Body.String()), tc.status, tc.msg)
			}
			if retry := w.Header().Get("Retry-After"); (tc.status == http.StatusTooManyRequests) != (retry != "") {
				t.Errorf("Retry-After %q on a %d", retry, w.Code)
			}
		})
	}
}
