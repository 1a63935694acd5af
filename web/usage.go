package web

import (
	"net/http"
	"strconv"

	"github.com/enclave-mcp/enclave/quota"
)

// The usage page: a person's use of each meter today and this week
// against their plan's limits, and the bytes they store against their
// storage limit. It runs usageGet through Registry.Invoke as the
// signed-in person and renders the answer; nothing else.

// usageOn reports whether the usage page exists (usageGet is registered).
func (h *Handler) usageOn() bool {
	return h.opts.Registry != nil && h.opts.Registry.Has("usageGet")
}

func (h *Handler) usageRoutes(handle func(string, http.HandlerFunc)) {
	if !h.usageOn() {
		return
	}
	handle("GET /account/usage", h.guards.RequireUser(http.HandlerFunc(h.usagePage)).ServeHTTP)
}

func (h *Handler) usagePage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	var u quota.PlanUsage
	if err := h.invoke(r, "usageGet", struct{}{}, &u); err != nil {
		h.renderCapabilityError(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, usagePage(h.page(r, "Usage"), u))
}

// meterNames are the meters as the usage page names them.
var meterNames = map[string]string{
	quota.MeterExecute:     "Code runs",
	quota.MeterOutbound:    "Outbound fetches",
	quota.MeterMailSend:    "Mails sent",
	quota.MeterMailReceive: "Mails received",
}

func meterName(m string) string {
	if n, ok := meterNames[m]; ok {
		return n
	}
	return m
}

// usageLimit is a limit as the page shows it: a number, or "no limit".
func usageLimit(v *int64) string {
	if v == nil {
		return "no limit"
	}
	return strconv.FormatInt(*v, 10)
}

// usageOf is "used of limit (p %)", or just the use without a limit.
func usageOf(used int64, limit *int64) string {
	s := strconv.FormatInt(used, 10)
	if limit == nil {
		return s
	}
	s += " of " + strconv.FormatInt(*limit, 10)
	if *limit > 0 {
		s += " (" + strconv.FormatInt(used*100 / *limit, 10) + " %)"
	}
	return s
}

// storageOf is "used of limit (p %)" in readable units.
func storageOf(u quota.StorageUsage) string {
	s := byteSize(u.Used) + " of " + byteSize(u.Limit)
	if u.Limit > 0 {
		s += " (" + strconv.FormatInt(u.Used*100/u.Limit, 10) + " %)"
	}
	return s
}
