package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/storage"
)

// adminRole is the role that opens the admin pages.
const adminRole = "admin"

// adminUsersPageSize is how many accounts one page of the users list shows.
const adminUsersPageSize = 50

// adminUserRow is everything the admin pages may show about an account:
// identity and state, never content, secrets or credential hashes. The
// column list is pinned by a test; widening it is a deliberate decision.
type adminUserRow struct {
	ID              int64      `bun:"id"`
	Username        string     `bun:"username"`
	Email           string     `bun:"email"`
	EmailVerifiedAt *time.Time `bun:"email_verified_at"`
	SuspendedAt     *time.Time `bun:"suspended_at"`
	DeletingAt      *time.Time `bun:"deleting_at"`
	CreatedAt       time.Time  `bun:"created_at"`
}

// adminUserColumns are the columns of adminUserRow, in order.
var adminUserColumns = []string{"id", "username", "email", "email_verified_at", "suspended_at", "deleting_at", "created_at"}

// adminUser is a listed account with its roles.
type adminUser struct {
	adminUserRow
	Roles []string
}

func (u adminUserRow) state() string {
	switch {
	case u.DeletingAt != nil:
		return "deleting"
	case u.SuspendedAt != nil:
		return "suspended"
	}
	return "active"
}

// userFilter is a users-list query.
type userFilter struct {
	Search string // substring of username or email
	Role   string // only accounts holding this role
	Cursor string
}

func (f userFilter) query(cursor string) string {
	v := url.Values{}
	if f.Search != "" {
		v.Set("q", f.Search)
	}
	if f.Role != "" {
		v.Set("role", f.Role)
	}
	if cursor != "" {
		v.Set("cursor", cursor)
	}
	if len(v) == 0 {
		return ""
	}
	return "?" + v.Encode()
}

// likeEscape escapes s for a LIKE pattern with ESCAPE '!'.
func likeEscape(s string) string {
	return strings.NewReplacer("!", "!!", "%", "!%", "_", "!_").Replace(s)
}

// listUsers returns one page of accounts matching f, oldest first.
func (h *Handler) listUsers(ctx context.Context, f userFilter) (storage.Page[adminUser], error) {
	db := h.opts.Store.Reader
	q := db.NewSelect().Table("users").Column(adminUserColumns...)
	if f.Search != "" {
		pat := "%" + likeEscape(strings.ToLower(f.Search)) + "%"
		q = q.WhereGroup(" AND ", func(q *bun.SelectQuery) *bun.SelectQuery {
			return q.Where("username LIKE ? ESCAPE '!'", pat).WhereOr("email LIKE ? ESCAPE '!'", pat)
		})
	}
	if f.Role != "" {
		q = q.Where("EXISTS (SELECT 1 FROM user_roles WHERE user_roles.user_id = users.id AND user_roles.role_name = ?)", f.Role)
	}
	rows, err := storage.Paginate(ctx, q, storage.Keyset[adminUserRow]{
		Kind: "admin-users", Column: "id", Key: func(u *adminUserRow) any { return u.ID },
	}, storage.PageRequest{Cursor: f.Cursor, Limit: adminUsersPageSize})
	if err != nil {
		return storage.Page[adminUser]{}, err
	}
	page := storage.Page[adminUser]{Next: rows.Next}
	if len(rows.Items) == 0 {
		return page, nil
	}
	ids := make([]int64, len(rows.Items))
	for i, u := range rows.Items {
		ids[i] = u.ID
	}
	var grants []struct {
		UserID   int64  `bun:"user_id"`
		RoleName string `bun:"role_name"`
	}
	if err := db.NewSelect().Table("user_roles").Column("user_id", "role_name").
		Where("user_id IN (?)", bun.In(ids)).Order("role_name").Scan(ctx, &grants); err != nil {
		return storage.Page[adminUser]{}, fmt.Errorf("web: list roles: %w", err)
	}
	byUser := map[int64][]string{}
	for _, g := range grants {
		byUser[g.UserID] = append(byUser[g.UserID], g.RoleName)
	}
	for _, u := range rows.Items {
		page.Items = append(page.Items, adminUser{adminUserRow: u, Roles: byUser[u.ID]})
	}
	return page, nil
}

func (h *Handler) adminRoutes(handle func(string, http.HandlerFunc)) {
	admin := func(fn http.HandlerFunc) http.HandlerFunc {
		return h.guards.RequireRole(adminRole)(fn).ServeHTTP
	}
	handle("GET /admin/{$}", admin(func(w http.ResponseWriter, r *http.Request) { h.redirect(w, r, "/admin/users") }))
	handle("GET /admin/users", admin(h.adminUsers))
	handle("GET /admin/users/new", admin(h.adminNewUserForm))
	handle("POST /admin/users", admin(h.adminCreateUser))
	handle("GET /admin/users/{id}", admin(h.adminUserDetail))
	handle("POST /admin/users/{id}/roles", admin(h.adminUserAction("assign_role", h.actAssignRole)))
	handle("POST /admin/users/{id}/roles/remove", admin(h.adminUserAction("remove_role", h.actRemoveRole)))
	handle("POST /admin/users/{id}/suspend", admin(h.adminUserAction("suspend", h.actSuspend)))
	handle("POST /admin/users/{id}/unsuspend", admin(h.adminUserAction("unsuspend", h.actUnsuspend)))
	handle("POST /admin/users/{id}/verify", admin(h.adminUserAction("mark_verified", h.actVerify)))
	handle("GET /admin/roles", admin(h.adminRoles))
	if h.opts.Audit != nil {
		handle("GET /admin/audit", admin(h.adminAudit))
	}
	h.adminOpsRoutes(handle, admin)
}

func (h *Handler) adminUsers(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := userFilter{Search: strings.TrimSpace(q.Get("q")), Role: q.Get("role"), Cursor: q.Get("cursor")}
	if len(f.Search) > 254 {
		h.renderError(w, r, http.StatusBadRequest, "The search is too long.")
		return
	}
	roles, err := h.opts.Accounts.Roles(r.Context())
	if err != nil {
		h.internalError(w, r, "list roles", err)
		return
	}
	page, err := h.listUsers(r.Context(), f)
	if errors.Is(err, storage.ErrInvalidCursor) {
		h.renderError(w, r, http.StatusBadRequest, "This page link is not valid. Start again from the first page.")
		return
	}
	if err != nil {
		h.internalError(w, r, "list users", err)
		return
	}
	next := ""
	if page.Next != "" {
		next = "/admin/users" + f.query(page.Next)
	}
	h.render(w, r, http.StatusOK, adminUsersPage(h.page(r, "Users"), f, roles, page.Items, next))
}

// adminTarget loads the account named by the {id} path value.
func (h *Handler) adminTarget(w http.ResponseWriter, r *http.Request) (accounts.User, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		h.renderError(w, r, http.StatusNotFound, "There is no such account.")
		return accounts.User{}, false
	}
	u, err := h.opts.Accounts.UserByID(r.Context(), id)
	if errors.Is(err, accounts.ErrNotFound) {
		h.renderError(w, r, http.StatusNotFound, "There is no such account.")
		return accounts.User{}, false
	}
	if err != nil {
		h.internalError(w, r, "load user", err)
		return accounts.User{}, false
	}
	return u, true
}

func (h *Handler) adminUserDetail(w http.ResponseWriter, r *http.Request) {
	u, ok := h.adminTarget(w, r)
	if !ok {
		return
	}
	h.renderAdminUser(w, r, http.StatusOK, u, "")
}

func (h *Handler) renderAdminUser(w http.ResponseWriter, r *http.Request, status int, u accounts.User, errMsg string) {
	ctx := r.Context()
	grants, err := h.opts.Accounts.RolesAndPermissions(ctx, u.ID)
	if err != nil {
		h.internalError(w, r, "load roles", err)
		return
	}
	all, err := h.opts.Accounts.Roles(ctx)
	if err != nil {
		h.internalError(w, r, "list roles", err)
		return
	}
	row := adminUserRow{ID: u.ID, Username: u.Username, Email: u.Email, EmailVerifiedAt: u.EmailVerifiedAt,
		SuspendedAt: u.SuspendedAt, DeletingAt: u.DeletingAt, CreatedAt: u.CreatedAt}
	var assignable []string
	for _, role := range all {
		if !grants.HasRole(role) && role != adminRole {
			assignable = append(assignable, role)
		}
	}
	self := PrincipalFrom(ctx).Session.User.ID == u.ID
	p := h.withNotice(r, h.page(r, u.Username))
	h.render(w, r, status, adminUserPage(p, adminUser{adminUserRow: row, Roles: grants.Roles}, assignable, self, errMsg))
}

// adminUserAction runs act on the {id} account and shows the account page
// again (with act's error, or after a redirect on success).
func (h *Handler) adminUserAction(name string, act func(ctx context.Context, admin, target accounts.User, form url.Values) (notice string, err error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !h.parseForm(w, r) {
			return
		}
		u, ok := h.adminTarget(w, r)
		if !ok {
			return
		}
		admin := PrincipalFrom(r.Context()).Session.User
		notice, err := act(r.Context(), admin, u, r.PostForm)
		h.audit(r, audit.CategoryAccount, "admin_"+name, resultOf(err), auditReason(err), &u)
		if err != nil {
			var ae adminError
			status, msg := http.StatusConflict, ""
			switch {
			case errors.As(err, &ae):
				msg = ae.msg
			default:
				var ok bool
				if status, msg, ok = userError(err); !ok {
					h.internalError(w, r, "admin action", err)
					return
				}
			}
			if fresh, ferr := h.opts.Accounts.UserByID(r.Context(), u.ID); ferr == nil {
				u = fresh
			}
			h.renderAdminUser(w, r, status, u, msg)
			return
		}
		h.log.InfoContext(r.Context(), "web: admin action", "admin_id", admin.ID, "user_id", u.ID, "action", notice)
		h.redirect(w, r, "/admin/users/"+strconv.FormatInt(u.ID, 10)+"?notice="+notice)
	}
}

// adminError is a refusal by the admin pages themselves.
type adminError struct{ msg string }

func (e adminError) Error() string { return e.msg }

func (h *Handler) actAssignRole(ctx context.Context, _, u accounts.User, form url.Values) (string, error) {
	_, err := h.opts.Accounts.AssignRole(ctx, u.ID, form.Get("role"))
	return "role-assigned", err
}

func (h *Handler) actRemoveRole(ctx context.Context, _, u accounts.User, form url.Values) (string, error) {
	_, err := h.opts.Accounts.RemoveRole(ctx, u.ID, form.Get("role"))
	return "role-removed", err
}

func (h *Handler) actSuspend(ctx context.Context, admin, u accounts.User, _ url.Values) (string, error) {
	if admin.ID == u.ID {
		return "", adminError{"You cannot suspend your own account."}
	}
	_, err := h.opts.Accounts.Suspend(ctx, u.ID)
	return "suspended", err
}

func (h *Handler) actUnsuspend(ctx context.Context, _, u accounts.User, _ url.Values) (string, error) {
	_, err := h.opts.Accounts.Unsuspend(ctx, u.ID)
	return "unsuspended", err
}

func (h *Handler) actVerify(ctx context.Context, _, u accounts.User, _ url.Values) (string, error) {
	_, err := h.opts.Accounts.MarkEmailVerified(ctx, u.ID)
	return "marked-verified", err
}

func (h *Handler) adminNewUserForm(w http.ResponseWriter, r *http.Request) {
	h.render(w, r, http.StatusOK, adminNewUserPage(h.page(r, "Create an account"), authForm{}))
}

func (h *Handler) adminCreateUser(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	f := authForm{Email: strings.TrimSpace(r.PostFormValue("email")), Username: strings.TrimSpace(r.PostFormValue("username"))}
	u, token, err := h.opts.Accounts.CreateUser(r.Context(), accounts.CreateUserInput{
		Email: f.Email, Username: f.Username, Verified: r.PostFormValue("verified") == "1",
	})
	if err != nil {
		status, msg, ok := userError(err)
		if !ok {
			h.internalError(w, r, "create user", err)
			return
		}
		f.Error = msg
		h.render(w, r, status, adminNewUserPage(h.page(r, "Create an account"), f))
		return
	}
	admin := PrincipalFrom(r.Context()).Session.User
	h.audit(r, audit.CategoryAccount, "admin_create_user", audit.ResultSuccess, "", &u)
	h.log.InfoContext(r.Context(), "web: admin created account", "admin_id", admin.ID, "user_id", u.ID)
	link := accounts.PasswordSetupURL(h.opts.BaseURL, token)
	h.render(w, r, http.StatusCreated, adminCreatedPage(h.page(r, "Account created"), u, link))
}

func (h *Handler) adminRoles(w http.ResponseWriter, r *http.Request) {
	roles, err := h.opts.Accounts.Roles(r.Context())
	if err != nil {
		h.internalError(w, r, "list roles", err)
		return
	}
	h.render(w, r, http.StatusOK, adminRolesPage(h.page(r, "Roles"), roles))
}
