package web

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/storage"
)

// audit records a browser event in the audit log, when one is configured.
// Identifiers are hashed by the log; a write failure is logged there and
// never fails the request.
func (h *Handler) audit(r *http.Request, category, action, result, reason string, u *accounts.User) {
	if h.opts.Audit == nil {
		return
	}
	e := audit.Event{Category: category, Action: action, Result: result, Reason: reason}
	if u != nil && u.StableID != "" {
		e.UserHash = h.opts.Audit.HashUser(u.StableID)
	}
	e.IPHash = h.opts.Audit.HashIP(h.ClientKey(r))
	_ = h.opts.Audit.Record(r.Context(), e)
}

// auditReason names a failure for the log: the domain error's identity,
// never the person's input.
func auditReason(err error) string {
	for name, e := range map[string]error{
		"invalid_credentials": accounts.ErrInvalidCredentials,
		"suspended":           accounts.ErrSuspended,
		"deleting":            accounts.ErrDeleting,
		"email_exists":        accounts.ErrEmailTaken,
		"email_claimed":       accounts.ErrEmailClaimed,
		"email_unverified":    accounts.ErrEmailUnverified,
		"weak_password":       accounts.ErrWeakPassword,
		"username_taken":      accounts.ErrUsernameTaken,
		"last_admin":          accounts.ErrLastAdmin,
		"unknown_role":        accounts.ErrUnknownRole,
		"admin_role_reserved": accounts.ErrAdminRoleReserved,
		"suspend_self":        accounts.ErrSuspendSelf,
		"invalid_token":       accounts.ErrInvalidToken,
	} {
		if errors.Is(err, e) {
			return name
		}
	}
	if err != nil {
		return "error"
	}
	return ""
}

func resultOf(err error) string {
	if err != nil {
		return audit.ResultFailure
	}
	return audit.ResultSuccess
}

// auditFilter is the audit page's query.
type auditFilter struct {
	Category, Result, Cursor string
}

func (f auditFilter) query(cursor string) string {
	q := []string{}
	if f.Category != "" {
		q = append(q, "category="+f.Category)
	}
	if f.Result != "" {
		q = append(q, "result="+f.Result)
	}
	if cursor != "" {
		q = append(q, "cursor="+cursor)
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + strings.Join(q, "&")
}

var (
	auditCategories = []string{audit.CategoryAuth, audit.CategoryAccount, audit.CategoryCapability, audit.CategoryMCP}
	auditResults    = []string{audit.ResultSuccess, audit.ResultFailure, audit.ResultDenied}
)

func oneOf(v string, allowed []string) string {
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	return ""
}

func (h *Handler) adminAudit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := auditFilter{Category: oneOf(q.Get("category"), auditCategories), Result: oneOf(q.Get("result"), auditResults), Cursor: q.Get("cursor")}
	page, err := h.opts.Audit.Query(r.Context(), audit.Filter{Category: f.Category, Result: f.Result},
		storage.PageRequest{Cursor: f.Cursor, Limit: adminUsersPageSize})
	if errors.Is(err, storage.ErrInvalidCursor) {
		h.renderError(w, r, http.StatusBadRequest, "This page link is not valid. Start again from the first page.")
		return
	}
	if err != nil {
		h.internalError(w, r, "query audit log", err)
		return
	}
	next := ""
	if page.Next != "" {
		next = "/admin/audit" + f.query(page.Next)
	}
	h.render(w, r, http.StatusOK, adminAuditPage(h.page(r, "Audit log"), f, page.Items, next))
}

func fmtTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }
