package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
)

// The admin pages that act through capabilities: each parses the request,
// calls Registry.Invoke as the signed-in admin (the same checks as over
// MCP), and renders the result.

func (h *Handler) adminOpsRoutes(handle func(string, http.HandlerFunc), admin func(http.HandlerFunc) http.HandlerFunc) {
	if h.opts.Registry == nil || h.builtinOnly {
		return
	}
	handle("GET /admin/overview", admin(h.adminOverview))
	handle("GET /admin/clients", admin(h.adminClients))
	handle("POST /admin/clients/{id}/block", admin(h.adminClientBlock(true)))
	handle("POST /admin/clients/{id}/unblock", admin(h.adminClientBlock(false)))
	handle("POST /admin/client-hosts/block", admin(h.adminClientHostBlock(true)))
	handle("POST /admin/client-hosts/unblock", admin(h.adminClientHostBlock(false)))
	handle("GET /admin/invites", admin(h.adminInvites))
	handle("POST /admin/invites", admin(h.adminInviteCreate))
	handle("POST /admin/invites/{id}/revoke", admin(h.adminInviteRevoke))
	h.webhookRoutes(handle, admin)
}

// invoke runs a capability as the signed-in person and decodes its
// structured result into out.
func (h *Handler) invoke(r *http.Request, name string, in, out any) error {
	p := PrincipalFrom(r.Context())
	if p == nil {
		return errors.New("web: invoke without a signed-in person")
	}
	res, err := h.invokeAs(r, p.Session.User, name, in)
	if err != nil || out == nil {
		return err
	}
	b, err := json.Marshal(res.Structured)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// invokeAs runs a capability as u at the browser, signed in with the
// session cookie: the caller of u's account state (a suspended account is
// refused, and the refusal audited, by Registry.Invoke) and fresh grants.
func (h *Handler) invokeAs(r *http.Request, u accounts.User, name string, in any) (capabilities.Result, error) {
	if err := h.invokeRefusedCrossSite(r, name); err != nil {
		return capabilities.Result{}, err
	}
	caller := accounts.CallerFor(u, h.opts.Accounts.Roles.FreshGrants(r.Context(), u.ID))
	caller.Interactive, caller.AllScopes, caller.Session = true, true, true
	raw, err := json.Marshal(in)
	if err != nil {
		return capabilities.Result{}, err
	}
	return h.opts.Registry.Invoke(r.Context(), caller, name, raw)
}

// invokeFailed answers a failed invoke: a capability error becomes the
// status of its code (capabilities' one table, through capabilityStatus;
// a quota refusal is a 429 with Retry-After) and its message, anything
// else a 500.
func (h *Handler) invokeFailed(w http.ResponseWriter, r *http.Request, what string, err error) {
	if ce, ok := errors.AsType[*capabilities.Error](err); ok && ce.Code != capabilities.CodeInternal {
		h.renderCapabilityError(w, r, err)
		return
	}
	h.internalError(w, r, what, err)
}

// ---- overview ----

type overviewDay struct {
	Day            string
	Calls, Denials int64
}

type overviewData struct {
	Users struct {
		Total, New, Unverified, Suspended int
	}
	ActiveGrants int
	Days         []overviewDay
}

// chartBar is one rectangle of the overview chart.
type chartBar struct {
	X, Y, W, H string
	Class      string
	Title      string
}

// chart is the overview's bar chart, drawn on the server as SVG (no
// script, no inline style: colours come from the stylesheet's classes).
type chart struct {
	Width, Height, Base string
	Bars                []chartBar
	Max                 int64
	MaxY                string
	First, Last         string
}

func overviewChart(days []overviewDay) chart {
	const width, height, top, bottom = 600.0, 180.0, 12.0, 160.0
	var peak int64
	for _, d := range days {
		peak = max(peak, d.Calls, d.Denials)
	}
	c := chart{Width: "600", Height: "180", Base: f1(bottom), Max: peak, MaxY: f1(top)}
	if len(days) == 0 {
		return c
	}
	c.First, c.Last = days[0].Day, days[len(days)-1].Day
	slot := width / float64(len(days))
	barW := slot*0.4 - 0.5
	scale := 0.0
	if peak > 0 {
		scale = (bottom - top) / float64(peak)
	}
	for i, d := range days {
		x := float64(i) * slot
		for j, v := range []int64{d.Calls, d.Denials} {
			h := float64(v) * scale
			if v > 0 && h < 1 {
				h = 1
			}
			class, what := "bar-calls", "calls"
			if j == 1 {
				class, what = "bar-denials", "denials"
			}
			c.Bars = append(c.Bars, chartBar{
				X: f1(x + slot*0.1 + float64(j)*(barW+1)), Y: f1(bottom - h), W: f1(barW), H: f1(h),
				Class: class, Title: fmt.Sprintf("%s: %d %s", d.Day, v, what),
			})
		}
	}
	return c
}

func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

func (h *Handler) adminOverview(w http.ResponseWriter, r *http.Request) {
	var out overviewData
	if err := h.invoke(r, "adminOverview", struct{}{}, &out); err != nil {
		h.invokeFailed(w, r, "overview", err)
		return
	}
	var calls, denials int64
	for _, d := range out.Days {
		calls += d.Calls
		denials += d.Denials
	}
	h.render(w, r, http.StatusOK, adminOverviewPage(h.page(r, "Overview"), out, overviewChart(out.Days), calls, denials))
}

// ---- OAuth clients ----

type clientView struct {
	ID           string     `json:"id"`
	Name         string     `json:"name"`
	RedirectURIs []string   `json:"redirectUris"`
	Public       bool       `json:"public"`
	CreatedAt    time.Time  `json:"createdAt"`
	LastUsedAt   time.Time  `json:"lastUsedAt"`
	Grants       int        `json:"grants"`
	BlockedAt    *time.Time `json:"blockedAt"`
	Kind         string     `json:"kind"`
	Host         string     `json:"host"`
}

// clientBlockView is a blocked client metadata URL or host.
type clientBlockView struct {
	Kind      string    `json:"kind"`
	Value     string    `json:"value"`
	CreatedAt time.Time `json:"createdAt"`
}

func (h *Handler) adminClients(w http.ResponseWriter, r *http.Request) {
	var out struct {
		Clients []clientView      `json:"clients"`
		Blocks  []clientBlockView `json:"blocks"`
	}
	if err := h.invoke(r, "adminOAuthClientList", struct{}{}, &out); err != nil {
		h.invokeFailed(w, r, "list clients", err)
		return
	}
	h.render(w, r, http.StatusOK, adminClientsPage(h.page(r, "OAuth clients"), out.Clients, out.Blocks))
}

// adminClientHostBlock blocks or unblocks every client whose metadata
// document a host publishes (form field host).
func (h *Handler) adminClientHostBlock(block bool) http.HandlerFunc {
	name, action := "adminOAuthClientUnblockHost", "host_unblocked"
	if block {
		name, action = "adminOAuthClientBlockHost", "host_blocked"
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if !h.parseForm(w, r) {
			return
		}
		if err := h.invoke(r, name, map[string]string{"host": r.PostForm.Get("host")}, nil); err != nil {
			h.invokeFailed(w, r, "block client host", err)
			return
		}
		h.redirect(w, r, "/admin/clients?notice=client_"+action)
	}
}

func (h *Handler) adminClientBlock(block bool) http.HandlerFunc {
	name, action := "adminOAuthClientUnblock", "unblocked"
	if block {
		name, action = "adminOAuthClientBlock", "blocked"
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if !h.parseForm(w, r) {
			return
		}
		id := r.PathValue("id")
		err := h.invoke(r, name, map[string]string{"clientId": id}, nil)
		// The capability's call is in the audit log (enclave records it for
		// every transport: admin, address, client).
		if err != nil {
			h.invokeFailed(w, r, "block client", err)
			return
		}
		h.redirect(w, r, "/admin/clients?notice=client_"+action)
	}
}

// ---- invite codes ----

type inviteView struct {
	ID        int64      `json:"id"`
	Note      string     `json:"note"`
	CreatedAt time.Time  `json:"createdAt"`
	ExpiresAt time.Time  `json:"expiresAt"`
	UsedAt    *time.Time `json:"usedAt"`
}

func (v inviteView) state(now time.Time) string {
	switch {
	case v.UsedAt != nil:
		return "used"
	case !now.Before(v.ExpiresAt):
		return "expired"
	}
	return "open"
}

func (h *Handler) renderInvites(w http.ResponseWriter, r *http.Request, status int, newCode, errMsg string) {
	var out struct {
		Invites []inviteView `json:"invites"`
	}
	if err := h.invoke(r, "adminInviteList", struct{}{}, &out); err != nil {
		h.invokeFailed(w, r, "list invites", err)
		return
	}
	link := ""
	if newCode != "" {
		link = h.opts.BaseURL + "/signup?invite=" + newCode
	}
	h.render(w, r, status, adminInvitesPage(h.page(r, "Invite codes"), out.Invites, string(h.opts.Accounts.Identity.SignupMode()), newCode, link, errMsg, time.Now()))
}

func (h *Handler) adminInvites(w http.ResponseWriter, r *http.Request) {
	h.renderInvites(w, r, http.StatusOK, "", "")
}

func (h *Handler) adminInviteCreate(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	days := 0
	if v := strings.TrimSpace(r.PostFormValue("days")); v != "" {
		var err error
		if days, err = strconv.Atoi(v); err != nil {
			h.renderInvites(w, r, http.StatusUnprocessableEntity, "", "Days must be a whole number.")
			return
		}
	}
	var out struct {
		Code string `json:"code"`
	}
	err := h.invoke(r, "adminInviteCreate", map[string]any{"note": strings.TrimSpace(r.PostFormValue("note")), "expiresInDays": days}, &out)
	if status, msg, ok := formRefusal(w, err, capabilities.CodeInvalidInput); ok {
		h.renderInvites(w, r, status, "", msg)
		return
	}
	if err != nil {
		h.invokeFailed(w, r, "create invite", err)
		return
	}
	// The code is shown on this answer only (never stored in clear).
	h.renderInvites(w, r, http.StatusOK, out.Code, "")
}

func (h *Handler) adminInviteRevoke(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		h.renderError(w, r, http.StatusNotFound, "No such invite.")
		return
	}
	err = h.invoke(r, "adminInviteRevoke", map[string]int64{"id": id}, nil)
	if err != nil {
		h.invokeFailed(w, r, "revoke invite", err)
		return
	}
	h.redirect(w, r, "/admin/invites?notice=invite_revoked")
}
