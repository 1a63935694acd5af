package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/storage"
)

// ConnectedApps lists and revokes the OAuth grants of a person;
// *oauth.Server implements it.
type ConnectedApps interface {
	Grants(ctx context.Context, userID int64) ([]oauth.Grant, error)
	RevokeGrant(ctx context.Context, userID int64, grantID string) error
}

var _ ConnectedApps = (*oauth.Server)(nil)

// ConnectedApps is what oauth.GrantCapabilities needs: the same methods.
var _ oauth.GrantStore = ConnectedApps(nil)

// removedItem is one line of the deletion result page.
type removedItem struct {
	Surface string
	Count   string
}

func (h *Handler) lifecycleRoutes(handle func(string, http.HandlerFunc)) {
	user := func(fn http.HandlerFunc) http.HandlerFunc { return h.guards.RequireUser(fn).ServeHTTP }
	if h.opts.OAuth != nil {
		handle("GET /account/apps", user(h.apps))
		handle("POST /account/apps/{id}/revoke", user(h.revokeApp))
	}
	if h.opts.Lifecycle != nil {
		handle("GET /account/export", user(h.exportPage))
		handle("GET /account/export/manifest.json", user(h.exportManifest))
		handle("GET /account/export/data.json", user(h.exportData))
		handle("GET "+pathExportJSON, h.exportManifestJSON)
		handle("GET "+pathAccountDelete, h.deletionUser(h.deleteForm))
		handle("POST "+pathAccountDelete, h.LimitCredentials(h.deletionUser(h.deleteAccount)).ServeHTTP)
	}
}

func ownerOf(u accounts.User) storage.Owner { return storage.Owner{ID: u.ID, StableID: u.StableID} }

func (h *Handler) apps(w http.ResponseWriter, r *http.Request) {
	u := PrincipalFrom(r.Context()).Session.User
	grants, err := h.opts.OAuth.Grants(r.Context(), u.ID)
	if err != nil {
		h.internalError(w, r, "list grants", err)
		return
	}
	h.render(w, r, http.StatusOK, appsPage(h.withNotice(r, h.page(r, "Connected apps")), grants))
}

func (h *Handler) revokeApp(w http.ResponseWriter, r *http.Request) {
	var out oauth.GrantRevokeOutput
	err := h.invoke(r, "oauthGrantRevoke", oauth.GrantRevokeInput{ID: r.PathValue("id")}, &out)
	switch {
	case err != nil:
		h.renderCapabilityError(w, r, err)
	case !out.Revoked:
		h.renderError(w, r, http.StatusNotFound, "There is no such connected app.")
	default:
		h.redirect(w, r, "/account/apps?notice=app-revoked")
	}
}

func (h *Handler) exportPage(w http.ResponseWriter, r *http.Request) {
	h.render(w, r, http.StatusOK, exportPage(h.page(r, "Export your data")))
}

// downloadHeaders prepares a JSON attachment response.
func (h *Handler) downloadHeaders(w http.ResponseWriter, r *http.Request, name string) {
	hdr := w.Header()
	h.setSecurityHeaders(hdr, r)
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("Content-Disposition", `attachment; filename="`+name+`"`)
}

// exportManifest runs accountExportManifest, the capability agents use,
// and offers its answer as a download.
func (h *Handler) exportManifest(w http.ResponseWriter, r *http.Request) {
	u := PrincipalFrom(r.Context()).Session.User
	var m json.RawMessage
	if err := h.invoke(r, "accountExportManifest", struct{}{}, &m); err != nil {
		h.renderCapabilityError(w, r, err)
		return
	}
	var body bytes.Buffer
	if err := json.Indent(&body, m, "", "  "); err != nil {
		h.internalError(w, r, "export manifest", err)
		return
	}
	h.downloadHeaders(w, r, serverKey(h.opts.SiteName)+"-manifest-"+u.Username+".json")
	_, _ = w.Write(append(body.Bytes(), '\n'))
}

func (h *Handler) exportData(w http.ResponseWriter, r *http.Request) {
	u := PrincipalFrom(r.Context()).Session.User
	h.downloadHeaders(w, r, serverKey(h.opts.SiteName)+"-export-"+u.Username+".json")
	// The export streams: once it has started, a failure can only cut it
	// short (the document is then invalid JSON, which a reader notices).
	if err := h.opts.Lifecycle.WriteExport(r.Context(), ownerOf(u), w); err != nil {
		h.log.ErrorContext(r.Context(), "web: export", "user_id", u.ID, "err", err)
	}
}

// deletionUser admits what RequireUser admits and, in addition, the
// session of an account whose deletion started but did not finish (see
// accounts.Credentials.StartDeletingSession): the deletion pages are the one place
// such a session works, so the person can see it and retry. It holds no
// roles there.
func (h *Handler) deletionUser(next http.HandlerFunc) http.HandlerFunc {
	active := h.guards.RequireUser(next)
	return func(w http.ResponseWriter, r *http.Request) {
		if PrincipalFrom(r.Context()) == nil && hasSessionCookie(r) {
			sess, err := h.opts.Accounts.Credentials.Authenticate(r.Context(), r)
			if errors.Is(err, accounts.ErrDeleting) {
				p := &Principal{Session: sess}
				next(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
				return
			}
		}
		active.ServeHTTP(w, r)
	}
}

func (h *Handler) deleteForm(w http.ResponseWriter, r *http.Request) {
	u := PrincipalFrom(r.Context()).Session.User
	h.render(w, r, http.StatusOK, deletePage(h.page(r, "Delete your account"), u.Username, u.State() == accounts.StateDeleting, ""))
}

func (h *Handler) deleteAccount(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	ctx := r.Context()
	u := PrincipalFrom(ctx).Session.User
	again := func(status int, msg string) {
		h.render(w, r, status, deletePage(h.page(r, "Delete your account"), u.Username, u.State() == accounts.StateDeleting, msg))
	}
	var res lifecycle.DeletionResult
	err := h.invoke(r, "accountDelete", lifecycle.DeleteInput{Confirm: r.PostFormValue("confirm"), Password: r.PostFormValue("password")}, &res)
	switch {
	case errors.Is(err, lifecycle.ErrConfirmMismatch):
		again(http.StatusUnprocessableEntity, lifecycle.ErrConfirmMismatch.Error())
		return
	case errors.Is(err, accounts.ErrInvalidCredentials):
		again(http.StatusUnauthorized, "Your password is not correct.")
		return
	}
	if err == nil || capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
		// Confirmation typos are not deletions; attempts are.
		h.audit(r, audit.CategoryAccount, "delete_account", resultOf(err), auditReason(err), &u)
	}
	if err != nil {
		if status, msg, ok := formRefusal(w, err); ok {
			again(status, msg)
			return
		}
		h.log.ErrorContext(ctx, "web: delete account", "user_id", u.ID, "err", err)
		h.renderError(w, r, http.StatusInternalServerError,
			"Your account could not be deleted completely. It stays locked, and the data not yet removed is kept, until the deletion finishes: sign in again later to retry it.")
		return
	}
	h.log.InfoContext(ctx, "web: account deleted", "user_id", u.ID)
	h.opts.Accounts.Credentials.EndSession(w, r)
	var removed []removedItem
	for surface, n := range res.Deleted {
		removed = append(removed, removedItem{Surface: surface, Count: strconv.FormatInt(n, 10)})
	}
	for surface, n := range res.Updated {
		// References to the account cleared from rows that stay.
		removed = append(removed, removedItem{Surface: surface + " (cleared)", Count: strconv.FormatInt(n, 10)})
	}
	slices.SortFunc(removed, func(a, b removedItem) int { return strings.Compare(a.Surface, b.Surface) })
	p := h.page(r, "Account deleted")
	p.Viewer = nil
	h.render(w, r, http.StatusOK, deletedPage(p, removed))
}
