package web

import (
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
)

// adminRole is the role that opens the admin pages.
const adminRole = "admin"

// adminUsersPageSize is how many accounts one page of the users list shows.
const adminUsersPageSize = 50

// adminUser is what the admin pages show of an account: the allowlist of
// the admin capabilities (accounts.AdminUser), nothing more.
type adminUser = accounts.AdminUser

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

func (h *Handler) adminRoutes(handle func(string, http.HandlerFunc)) {
	admin := func(fn http.HandlerFunc) http.HandlerFunc {
		return h.guards.RequireRole(adminRole)(h.requireAdminFactor(fn)).ServeHTTP
	}
	handle("GET /admin/{$}", admin(func(w http.ResponseWriter, r *http.Request) { h.redirect(w, r, "/admin/users") }))
	handle("GET /admin/roles", admin(h.adminRoles))
	if h.opts.Audit != nil {
		handle("GET /admin/audit", admin(h.adminAudit))
	}
	// The account pages act through the admin capabilities: the same
	// checks, rules and field allowlist as over MCP.
	handle("GET /admin/users", admin(h.adminUsers))
	handle("GET /admin/users/new", admin(h.adminNewUserForm))
	handle("POST /admin/users", admin(h.adminCreateUser))
	handle("GET /admin/users/{id}", admin(h.adminUserDetail))
	handle("POST /admin/users/{id}/roles", admin(h.adminUserAction("assign_role", "adminRoleAssign", "role-assigned")))
	handle("POST /admin/users/{id}/roles/remove", admin(h.adminUserAction("remove_role", "adminRoleRemove", "role-removed")))
	handle("POST /admin/users/{id}/suspend", admin(h.adminUserAction("suspend", "adminUserSuspend", "suspended")))
	handle("POST /admin/users/{id}/unsuspend", admin(h.adminUserAction("unsuspend", "adminUserUnsuspend", "unsuspended")))
	handle("POST /admin/users/{id}/verify", admin(h.adminUserAction("mark_verified", "adminUserVerify", "marked-verified")))
	h.adminOpsRoutes(handle, admin)
}

func (h *Handler) adminUsers(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := userFilter{Search: strings.TrimSpace(q.Get("q")), Role: q.Get("role"), Cursor: q.Get("cursor")}
	if len(f.Search) > 254 {
		h.renderError(w, r, http.StatusBadRequest, "The search is too long.")
		return
	}
	if !textStorable(f.Search) || !textStorable(f.Role) {
		h.renderError(w, r, http.StatusBadRequest, "The search contains characters that are not allowed.")
		return
	}
	roles, err := h.opts.Accounts.Roles.Roles(r.Context())
	if err != nil {
		h.internalError(w, r, "list roles", err)
		return
	}
	var out accounts.AdminUserListOutput
	err = h.invoke(r, "adminUserList", accounts.AdminUserListInput{Query: f.Search, Role: f.Role, Cursor: f.Cursor, Limit: adminUsersPageSize}, &out)
	if err != nil {
		h.renderCapabilityError(w, r, err)
		return
	}
	next := ""
	if out.NextCursor != "" {
		next = "/admin/users" + f.query(out.NextCursor)
	}
	h.render(w, r, http.StatusOK, adminUsersPage(h.page(r, "Users"), f, roles, out.Users, next))
}

func (h *Handler) adminUserDetail(w http.ResponseWriter, r *http.Request) {
	var out accounts.AdminUserOutput
	if err := h.invoke(r, "adminUserGet", accounts.AdminUserRef{UserID: r.PathValue("id")}, &out); err != nil {
		h.renderCapabilityError(w, r, err)
		return
	}
	h.renderAdminUser(w, r, http.StatusOK, out.User, "")
}

func (h *Handler) renderAdminUser(w http.ResponseWriter, r *http.Request, status int, u adminUser, errMsg string) {
	all, err := h.opts.Accounts.Roles.Roles(r.Context())
	if err != nil {
		h.internalError(w, r, "list roles", err)
		return
	}
	var assignable []string
	for _, role := range all {
		if !slices.Contains(u.Roles, role) && role != adminRole {
			assignable = append(assignable, role)
		}
	}
	self := PrincipalFrom(r.Context()).Session.User.StableID == u.StableUserID
	p := h.withNotice(r, h.page(r, u.Username))
	h.render(w, r, status, adminUserPage(p, u, assignable, self, errMsg))
}

// adminUserAction runs the capability on the {id} account (with the
// form's role) and shows the account page again: with the refusal's
// message, or after a redirect on success.
func (h *Handler) adminUserAction(name, capability, notice string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !h.parseForm(w, r) {
			return
		}
		sid := r.PathValue("id")
		var out accounts.AdminUserOutput
		var in any = accounts.AdminUserRef{UserID: sid}
		if strings.HasPrefix(capability, "adminRole") {
			in = accounts.AdminRoleInput{UserID: sid, Role: r.PostForm.Get("role")}
		}
		err := h.invoke(r, capability, in, &out)
		h.audit(r, audit.CategoryAccount, "admin_"+name, resultOf(err), auditReason(err), &accounts.User{StableID: sid})
		if err != nil {
			// An unknown account has no page to show again.
			status, msg, ok := formRefusal(w, err)
			if !ok || capabilities.CodeOf(err) == capabilities.CodeNotFound {
				h.renderCapabilityError(w, r, err)
				return
			}
			var cur accounts.AdminUserOutput
			if gerr := h.invoke(r, "adminUserGet", accounts.AdminUserRef{UserID: sid}, &cur); gerr != nil {
				h.renderCapabilityError(w, r, err)
				return
			}
			h.renderAdminUser(w, r, status, cur.User, msg)
			return
		}
		admin := PrincipalFrom(r.Context()).Session.User
		h.log.InfoContext(r.Context(), "web: admin action", "admin_id", admin.ID, "user", sid, "action", notice)
		h.redirect(w, r, "/admin/users/"+url.PathEscape(sid)+"?notice="+notice)
	}
}

func (h *Handler) adminNewUserForm(w http.ResponseWriter, r *http.Request) {
	h.render(w, r, http.StatusOK, adminNewUserPage(h.page(r, "Create an account"), authForm{}))
}

func (h *Handler) adminCreateUser(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	f := authForm{Email: strings.TrimSpace(r.PostFormValue("email")), Username: strings.TrimSpace(r.PostFormValue("username"))}
	var out accounts.AdminUserCreateOutput
	err := h.invoke(r, "adminUserCreate", accounts.AdminUserCreateInput{
		Email: f.Email, Username: f.Username, Verified: r.PostFormValue("verified") == "1",
	}, &out)
	if err != nil {
		status, msg, ok := formRefusal(w, err)
		if !ok || capabilities.CodeOf(err) == capabilities.CodeNotFound {
			h.renderCapabilityError(w, r, err)
			return
		}
		f.Error = msg
		h.render(w, r, status, adminNewUserPage(h.page(r, "Create an account"), f))
		return
	}
	h.audit(r, audit.CategoryAccount, "admin_create_user", audit.ResultSuccess, "", &accounts.User{StableID: out.User.StableUserID})
	h.render(w, r, http.StatusCreated, adminCreatedPage(h.page(r, "Account created"), out.User))
}

func (h *Handler) adminRoles(w http.ResponseWriter, r *http.Request) {
	roles, err := h.opts.Accounts.Roles.Roles(r.Context())
	if err != nil {
		h.internalError(w, r, "list roles", err)
		return
	}
	h.render(w, r, http.StatusOK, adminRolesPage(h.page(r, "Roles"), roles))
}
