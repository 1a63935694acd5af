package web

import (
	"errors"
	"net/http"
	"strings"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/feedback"
)

// Platform feedback pages. The person's page lists their feedback and
// takes a new one in two steps without script: the form posts to a
// preview showing the exact text that will be sent, and only the preview's
// button sends it (with userConfirmed). The admin page lists feedback for
// triage, the user's text shown as untrusted. Every action is a
// capability call.

func (h *Handler) feedbackRoutes(handle func(string, http.HandlerFunc)) {
	if h.opts.Registry == nil || !h.opts.Registry.Has("feedbackSubmit") {
		return
	}
	user := func(fn http.HandlerFunc) http.HandlerFunc { return h.guards.RequireUser(fn).ServeHTTP }
	// The same wrapper as every admin page: the role, then the second
	// factor the server may require of admins.
	admin := func(fn http.HandlerFunc) http.HandlerFunc {
		return h.guards.RequireRole(adminRole)(h.requireAdminFactor(fn)).ServeHTTP
	}
	handle("GET /account/feedback", user(h.feedbackPage))
	handle("POST /account/feedback/preview", user(h.feedbackPreview))
	handle("POST /account/feedback", user(h.feedbackSend))
	handle("GET /admin/feedback", admin(h.adminFeedback))
	handle("GET /admin/feedback/{id}", admin(h.adminFeedbackItem))
	handle("POST /admin/feedback/{id}", admin(h.adminFeedbackUpdate))
}

// feedbackUnconfirmedMessage answers a send that did not come from the
// preview's button.
const feedbackUnconfirmedMessage = "Your feedback was not sent yet. Review it, then press Send on the preview to confirm it."

// feedbackForm is a submission being written or confirmed.
type feedbackForm struct {
	Category, Summary, Details string
}

func (h *Handler) renderFeedback(w http.ResponseWriter, r *http.Request, status int, form feedbackForm, errMsg string) {
	var out feedback.ListOwnOutput
	if err := h.invoke(r, "feedbackListOwn", struct{}{}, &out); err != nil {
		h.invokeFailed(w, r, "list feedback", err)
		return
	}
	p := h.withNotice(r, h.page(r, "Feedback"))
	h.render(w, r, status, feedbackPage(p, out.Feedback, form, feedback.Categories, errMsg))
}

func (h *Handler) feedbackPage(w http.ResponseWriter, r *http.Request) {
	h.renderFeedback(w, r, http.StatusOK, feedbackForm{Category: "idea"}, "")
}

func (h *Handler) parseFeedback(w http.ResponseWriter, r *http.Request) (feedbackForm, bool) {
	if !h.parseForm(w, r) {
		return feedbackForm{}, false
	}
	f := feedbackForm{Category: r.PostFormValue("category"), Summary: r.PostFormValue("summary"), Details: r.PostFormValue("details")}
	if !textStorable(f.Category) || !textStorable(f.Summary) || !textStorable(f.Details) {
		h.renderFeedback(w, r, http.StatusUnprocessableEntity, feedbackForm{Category: "idea"}, "The text contains characters that are not allowed.")
		return feedbackForm{}, false
	}
	return f, true
}

// feedbackPreview shows the exact text that would be sent (as the
// feedback domain normalizes it), or the form again with the problem.
func (h *Handler) feedbackPreview(w http.ResponseWriter, r *http.Request) {
	f, ok := h.parseFeedback(w, r)
	if !ok {
		return
	}
	if r.PostFormValue("edit") != "" {
		h.renderFeedback(w, r, http.StatusOK, f, "")
		return
	}
	sub, err := feedback.Submission{Category: f.Category, Summary: f.Summary, Details: f.Details}.Validate()
	if fe := (*feedback.Error)(nil); errors.As(err, &fe) {
		h.renderFeedback(w, r, http.StatusUnprocessableEntity, f, pageMessage(fe.Msg))
		return
	}
	if err != nil {
		h.internalError(w, r, "check feedback", err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	h.render(w, r, http.StatusOK, feedbackConfirmPage(h.page(r, "Confirm feedback"), feedbackForm{Category: sub.Category, Summary: sub.Summary, Details: sub.Details}))
}

// feedbackSend submits what the preview showed. Only the preview's button
// carries confirm=yes: the person saw and approved this exact text.
func (h *Handler) feedbackSend(w http.ResponseWriter, r *http.Request) {
	f, ok := h.parseFeedback(w, r)
	if !ok {
		return
	}
	in := feedback.SubmitInput{Category: f.Category, Summary: f.Summary, Details: f.Details, UserConfirmed: r.PostFormValue("confirm") == "yes"}
	err := h.invoke(r, "feedbackSubmit", in, nil)
	if status, msg, ok := formRefusal(w, err, capabilities.CodeInvalidInput, capabilities.CodeQuotaExceeded); ok {
		if !in.UserConfirmed {
			// The capability's words are for agents (userConfirmed); a
			// person confirms with the preview's button.
			msg = feedbackUnconfirmedMessage
		}
		h.renderFeedback(w, r, status, f, msg)
		return
	}
	if err != nil {
		h.invokeFailed(w, r, "send feedback", err)
		return
	}
	h.redirect(w, r, "/account/feedback?notice=feedback_sent")
}

func (h *Handler) adminFeedback(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	status := q.Get("status")
	var out feedback.AdminListOutput
	err := h.invoke(r, "adminFeedbackList", feedback.AdminListInput{Status: status, Cursor: q.Get("cursor"), Limit: 50}, &out)
	if err != nil {
		h.invokeFailed(w, r, "list feedback", err)
		return
	}
	next := ""
	if out.NextCursor != "" {
		next = "/admin/feedback?status=" + status + "&cursor=" + out.NextCursor
	}
	p := h.withNotice(r, h.page(r, "Feedback"))
	h.render(w, r, http.StatusOK, adminFeedbackPage(p, out, status, next))
}

func (h *Handler) adminFeedbackItem(w http.ResponseWriter, r *http.Request) {
	var out feedback.AdminGetOutput
	if err := h.invoke(r, "adminFeedbackGet", feedback.AdminGetInput{ID: r.PathValue("id")}, &out); err != nil {
		h.invokeFailed(w, r, "show feedback", err)
		return
	}
	p := h.withNotice(r, h.page(r, "Feedback"))
	h.render(w, r, http.StatusOK, adminFeedbackItemPage(p, out))
}

func (h *Handler) adminFeedbackUpdate(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	note := strings.TrimSpace(r.PostFormValue("note"))
	if !textStorable(note) {
		h.renderError(w, r, http.StatusBadRequest, "The note contains characters that are not allowed.")
		return
	}
	in := feedback.AdminUpdateInput{ID: r.PathValue("id"), Status: r.PostFormValue("status"), AdminNote: &note}
	if err := h.invoke(r, "adminFeedbackUpdate", in, nil); err != nil {
		h.invokeFailed(w, r, "update feedback", err)
		return
	}
	h.redirect(w, r, "/admin/feedback?notice=feedback_updated")
}
