package web

import (
	"net/http"
	"strings"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/events"
)

// The webhook subscriptions page: the signed-in admin's own subscriptions,
// a form to add one (its secret is shown on that answer only) and a
// delete button per subscription. Every action is a capability call.

func (h *Handler) webhookRoutes(handle func(string, http.HandlerFunc), admin func(http.HandlerFunc) http.HandlerFunc) {
	if !h.opts.Registry.Has("adminWebhookList") {
		return
	}
	handle("GET /admin/webhooks", admin(h.adminWebhooks))
	handle("POST /admin/webhooks", admin(h.adminWebhookCreate))
	handle("POST /admin/webhooks/{id}/delete", admin(h.adminWebhookDelete))
}

func (h *Handler) renderWebhooks(w http.ResponseWriter, r *http.Request, status int, created *events.WebhookCreateOutput, form events.WebhookCreateInput, errMsg string) {
	var out events.WebhookListOutput
	if err := h.invoke(r, "adminWebhookList", struct{}{}, &out); err != nil {
		h.invokeFailed(w, r, "list webhooks", err)
		return
	}
	p := h.withNotice(r, h.page(r, "Webhooks"))
	h.render(w, r, status, adminWebhooksPage(p, out.Webhooks, created, form, strings.Join(events.BuiltinTypes, ", "), errMsg))
}

func (h *Handler) adminWebhooks(w http.ResponseWriter, r *http.Request) {
	h.renderWebhooks(w, r, http.StatusOK, nil, events.WebhookCreateInput{}, "")
}

func (h *Handler) adminWebhookCreate(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	in := events.WebhookCreateInput{
		URL:         strings.TrimSpace(r.PostFormValue("url")),
		Description: strings.TrimSpace(r.PostFormValue("description")),
	}
	for _, t := range strings.FieldsFunc(r.PostFormValue("events"), func(c rune) bool { return c == ',' || c == ' ' || c == '\n' || c == '\r' || c == '\t' }) {
		in.Events = append(in.Events, t)
	}
	if !textStorable(in.URL) || !textStorable(in.Description) || !textStorable(r.PostFormValue("events")) {
		h.renderWebhooks(w, r, http.StatusUnprocessableEntity, nil, events.WebhookCreateInput{}, "The form contains characters that are not allowed.")
		return
	}
	var out events.WebhookCreateOutput
	err := h.invoke(r, "adminWebhookCreate", in, &out)
	if status, msg, ok := formRefusal(w, err, capabilities.CodeInvalidInput); ok {
		h.renderWebhooks(w, r, status, nil, in, msg)
		return
	}
	if err != nil {
		h.invokeFailed(w, r, "create webhook", err)
		return
	}
	// The secret is on this answer only; it is never shown again.
	h.renderWebhooks(w, r, http.StatusOK, &out, events.WebhookCreateInput{}, "")
}

func (h *Handler) adminWebhookDelete(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	if err := h.invoke(r, "adminWebhookDelete", events.WebhookRef{ID: r.PathValue("id")}, nil); err != nil {
		h.invokeFailed(w, r, "delete webhook", err)
		return
	}
	h.redirect(w, r, "/admin/webhooks?notice=webhook_deleted")
}
