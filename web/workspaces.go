package web

import (
	"net/http"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/workspaces"
)

// The workspace pages: each parses the form, calls the workspace
// capabilities through Registry.Invoke as the signed-in person, and
// renders. They exist when the registry holds the workspace capabilities
// (enclave.Config.Workspaces).

func (h *Handler) workspaceRoutes(handle func(string, http.HandlerFunc)) {
	if h.opts.Registry == nil || !h.opts.Registry.Has("workspaceList") {
		return
	}
	user := func(fn http.HandlerFunc) http.HandlerFunc { return h.guards.RequireUser(fn).ServeHTTP }
	handle("GET /workspaces", user(h.workspacesPage))
	handle("POST /workspaces", user(h.workspaceCreate))
	handle("GET "+workspaces.InvitationPath, user(h.workspaceJoinForm))
	handle("POST "+workspaces.InvitationPath, user(h.workspaceJoin))
	handle("GET /workspaces/{id}", user(h.workspacePage))
	handle("POST /workspaces/{id}/invite", user(h.workspaceInvite))
	handle("POST /workspaces/{id}/members/{uid}/role", user(h.workspaceRole))
	handle("POST /workspaces/{id}/members/{uid}/remove", user(h.workspaceRemove))
	handle("POST /workspaces/{id}/leave", user(h.workspaceLeave))
	handle("POST /workspaces/{id}/delete", user(h.workspaceDelete))
	// Making a key takes the password (and a second factor): it counts in
	// the credential bucket, like every endpoint that checks one.
	handle("POST /workspaces/{id}/keys", h.LimitCredentials(user(h.workspaceKeyCreate)).ServeHTTP)
	handle("POST /workspaces/{id}/keys/{kid}/revoke", user(h.workspaceKeyRevoke))
}

// wsView is what the workspace page shows.
type wsView struct {
	Details     workspaces.Details
	Members     []workspaces.Member
	Invitations []workspaces.Invitation
	Keys        []workspaces.APIKey
	NewKey      string
	// Factors are the owner's own second factors: the key form asks for a
	// proof of one when there is one.
	Factors accounts.Factors
	Notice  string
	Error   string
	Self    string // the viewer's stable id
}

func (v wsView) admin() bool {
	return v.Details.Role == workspaces.RoleAdmin || v.Details.Role == workspaces.RoleOwner
}
func (v wsView) owner() bool { return v.Details.Role == workspaces.RoleOwner }

func (h *Handler) workspacesPage(w http.ResponseWriter, r *http.Request) {
	h.renderWorkspaces(w, r, http.StatusOK, "")
}

func (h *Handler) renderWorkspaces(w http.ResponseWriter, r *http.Request, status int, errMsg string) {
	var out workspaces.ListOutput
	if err := h.invoke(r, "workspaceList", struct{}{}, &out); err != nil {
		h.invokeFailed(w, r, "list workspaces", err)
		return
	}
	h.render(w, r, status, workspacesListPage(h.page(r, "Workspaces"), out.Workspaces, errMsg))
}

func (h *Handler) workspaceCreate(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	var ws workspaces.Workspace
	err := h.invoke(r, "workspaceCreate", map[string]any{"name": r.PostFormValue("name")}, &ws)
	if status, msg, ok := formRefusal(w, err, workspaceFormCodes...); ok {
		h.renderWorkspaces(w, r, status, msg)
		return
	}
	if err != nil {
		h.invokeFailed(w, r, "create workspace", err)
		return
	}
	h.redirect(w, r, "/workspaces/"+ws.ID)
}

// workspaceFormCodes are the refusals a workspace form shows again for
// the person to act on (a mistake in a field, a conflict such as the
// last-owner rule, what this client cannot do), with the status and
// sentence of formRefusal.
var workspaceFormCodes = []capabilities.Code{capabilities.CodeInvalidInput, capabilities.CodeConflict, capabilities.CodeUnsupported}

// sentence makes a domain refusal's message, often a lowercase fragment
// ("a key name has 1 to 100 characters"), read as a sentence on a page: a
// capital first letter and a full stop. A message that opens with an
// identifier (a field name such as maxRole, a code) keeps its first word
// as it is; the domain's error code and text are unchanged.
func sentence(msg string) string {
	msg = strings.TrimSpace(msg)
	if msg == "" {
		return ""
	}
	first, _, _ := strings.Cut(msg, " ")
	plain := true
	for _, c := range first {
		if unicode.IsUpper(c) || unicode.IsDigit(c) || c == '_' {
			plain = false
			break
		}
	}
	if plain {
		c, n := utf8.DecodeRuneInString(msg)
		msg = string(unicode.ToUpper(c)) + msg[n:]
	}
	switch last, _ := utf8.DecodeLastRuneInString(msg); last {
	case '.', '!', '?', '…':
	default:
		msg += "."
	}
	return msg
}

func (h *Handler) workspacePage(w http.ResponseWriter, r *http.Request) {
	h.renderWorkspace(w, r, http.StatusOK, wsView{})
}

func (h *Handler) renderWorkspace(w http.ResponseWriter, r *http.Request, status int, v wsView) {
	id := r.PathValue("id")
	if err := h.invoke(r, "workspaceGet", map[string]any{"workspaceId": id}, &v.Details); err != nil {
		h.invokeFailed(w, r, "get workspace", err)
		return
	}
	var m workspaces.MembersOutput
	if err := h.invoke(r, "workspaceMemberList", map[string]any{"workspaceId": id}, &m); err != nil {
		h.invokeFailed(w, r, "list members", err)
		return
	}
	v.Members, v.Invitations = m.Members, m.Invitations
	if v.owner() {
		var k workspaces.KeysOutput
		if err := h.invoke(r, "workspaceKeyList", map[string]any{"workspaceId": id}, &k); err != nil {
			h.invokeFailed(w, r, "list keys", err)
			return
		}
		v.Keys = k.Keys
		if err := h.invoke(r, "accountFactors", struct{}{}, &v.Factors); err != nil {
			h.invokeFailed(w, r, "list factors", err)
			return
		}
	}
	if p := PrincipalFrom(r.Context()); p != nil {
		v.Self = p.Session.User.StableID
	}
	pg := h.page(r, v.Details.Name)
	pg.Script = len(v.Factors.Passkeys) > 0 // the key form's passkey proof
	h.render(w, r, status, workspacePage(pg, v))
}

// act runs one workspace capability from a form and re-renders the
// workspace page with its outcome.
func (h *Handler) act(w http.ResponseWriter, r *http.Request, name string, args map[string]any, notice string) {
	if !h.parseForm(w, r) {
		return
	}
	args["workspaceId"] = r.PathValue("id")
	err := h.invoke(r, name, args, nil)
	if status, msg, ok := formRefusal(w, err, workspaceFormCodes...); ok {
		h.renderWorkspace(w, r, status, wsView{Error: msg})
		return
	}
	if err != nil {
		h.invokeFailed(w, r, name, err)
		return
	}
	h.renderWorkspace(w, r, http.StatusOK, wsView{Notice: notice})
}

func (h *Handler) workspaceInvite(w http.ResponseWriter, r *http.Request) {
	h.act(w, r, "workspaceMemberInvite", map[string]any{"email": r.FormValue("email"), "role": r.FormValue("role")}, "Invitation sent.")
}

func (h *Handler) workspaceRole(w http.ResponseWriter, r *http.Request) {
	h.act(w, r, "workspaceMemberRoleSet", map[string]any{"userId": r.PathValue("uid"), "role": r.FormValue("role")}, "Role changed.")
}

func (h *Handler) workspaceRemove(w http.ResponseWriter, r *http.Request) {
	h.act(w, r, "workspaceMemberRemove", map[string]any{"userId": r.PathValue("uid")}, "Member removed.")
}

func (h *Handler) workspaceLeave(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	err := h.invoke(r, "workspaceLeave", map[string]any{"workspaceId": r.PathValue("id")}, nil)
	if status, msg, ok := formRefusal(w, err, workspaceFormCodes...); ok {
		h.renderWorkspace(w, r, status, wsView{Error: msg})
		return
	}
	if err != nil {
		h.invokeFailed(w, r, "leave workspace", err)
		return
	}
	h.redirect(w, r, "/workspaces")
}

// workspaceDelete is two-step: without a token it shows the confirmation
// (the token rides in a hidden field); with one it deletes.
func (h *Handler) workspaceDelete(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	id := r.PathValue("id")
	token := strings.TrimSpace(r.PostFormValue("confirmationToken"))
	var out workspaces.DeleteOutput
	err := h.invoke(r, "workspaceDelete", map[string]any{"workspaceId": id, "confirmationToken": token}, &out)
	if status, msg, ok := formRefusal(w, err, workspaceFormCodes...); ok {
		h.renderWorkspace(w, r, status, wsView{Error: msg})
		return
	}
	if err != nil {
		h.invokeFailed(w, r, "delete workspace", err)
		return
	}
	if !out.Deleted {
		h.render(w, r, http.StatusOK, workspaceDeleteConfirmPage(h.page(r, "Delete workspace"), id, out))
		return
	}
	h.redirect(w, r, "/workspaces")
}

func (h *Handler) workspaceKeyCreate(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	code := strings.TrimSpace(r.PostFormValue("code"))
	if status, msg := h.allowFactorCode(w, r, code); status != 0 {
		h.renderWorkspace(w, r, status, wsView{Error: msg})
		return
	}
	args := map[string]any{"workspaceId": r.PathValue("id"), "name": r.PostFormValue("name"), "maxRole": r.PostFormValue("maxRole"),
		"currentPassword": r.PostFormValue("currentPassword"), "code": code}
	if token, cred := passkeyProofOf(r); token != "" {
		args["passkeyToken"], args["passkeyCredential"] = token, cred
	}
	var k workspaces.NewKey
	err := h.invoke(r, "workspaceKeyCreate", args, &k)
	if status, msg, ok := formRefusal(w, err, workspaceFormCodes...); ok {
		h.renderWorkspace(w, r, status, wsView{Error: msg})
		return
	}
	if err != nil {
		h.invokeFailed(w, r, "create key", err)
		return
	}
	// The key is shown on this answer only (only its hash is kept).
	h.renderWorkspace(w, r, http.StatusOK, wsView{NewKey: k.Key})
}

func (h *Handler) workspaceKeyRevoke(w http.ResponseWriter, r *http.Request) {
	kid, err := strconv.ParseInt(r.PathValue("kid"), 10, 64)
	if err != nil {
		h.renderError(w, r, http.StatusNotFound, "No such key.")
		return
	}
	h.act(w, r, "workspaceKeyRevoke", map[string]any{"keyId": kid}, "Key revoked.")
}

func (h *Handler) workspaceJoinForm(w http.ResponseWriter, r *http.Request) {
	h.render(w, r, http.StatusOK, workspaceJoinPage(h.page(r, "Join a workspace"), r.URL.Query().Get("token"), ""))
}

func (h *Handler) workspaceJoin(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	token := r.PostFormValue("token")
	var ws workspaces.Workspace
	err := h.invoke(r, "workspaceInvitationAccept", map[string]any{"token": token}, &ws)
	if status, msg, ok := formRefusal(w, err, capabilities.CodeNotFound); ok {
		h.render(w, r, status, workspaceJoinPage(h.page(r, "Join a workspace"), "", msg))
		return
	}
	if err != nil {
		h.invokeFailed(w, r, "accept invitation", err)
		return
	}
	h.redirect(w, r, "/workspaces/"+ws.ID)
}

func itoa64(n int64) string { return strconv.FormatInt(n, 10) }
