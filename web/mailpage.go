package web

import (
	"encoding/base64"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"unicode"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/mail"
)

// The mail page: a person's mailbox (the address to give out, the inbox,
// the quarantine and sent folders, threads, messages, attachments) and
// their sender rules. Every read and write runs a mail capability
// (mailList, mailThread, mailRead, mailDelete, mailAttachmentGet,
// mailRuleSet, mailRuleList, mailRuleDelete) through Registry.Invoke as
// the signed-in person: a message of another person is not found, as
// over MCP.
//
// Everything a sender wrote is shown as text. A message's HTML, already
// sanitised by mailRead, is shown only when asked for, and only inside a
// sandboxed frame (no scripts, no same origin, no forms, no navigation of
// the page) whose document is served by its own route with a policy that
// loads nothing (mailHTMLPolicy).

// mailHTMLPolicy is the content security policy of a message's HTML
// document: nothing is loaded or run (inline styles and data: images
// only), the document is sandboxed even when opened outside its frame,
// and only this site's pages may frame it.
const mailHTMLPolicy = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; sandbox; base-uri 'none'; form-action 'none'; frame-ancestors 'self'"

// attachmentPolicy is the content security policy of an attachment
// download: were a browser to render it anyway, nothing in it runs.
const attachmentPolicy = "default-src 'none'; sandbox"

// mailNotices are the messages the mail page shows after a change, by
// code (never text from the request).
var mailNotices = map[string]string{
	"mail-deleted": "The message is deleted.",
	"mail-missing": "There was no such message.",
	"rule-set":     "The sender rule is saved.",
	"rule-deleted": "The sender rule is deleted.",
	"rule-missing": "There was no such sender rule.",
}

// mailOn reports whether the mail page exists: the registry holds the
// mail capabilities (mail is not disabled).
func (h *Handler) mailOn() bool {
	return h.opts.Registry != nil && h.opts.Registry.Has("mailList") && h.opts.Registry.Has("mailRuleList")
}

func (h *Handler) mailRoutes(handle func(string, http.HandlerFunc)) {
	if !h.mailOn() {
		return
	}
	user := func(fn http.HandlerFunc) http.HandlerFunc { return h.guards.RequireUser(fn).ServeHTTP }
	handle("GET /account/mail", user(h.mailPage))
	handle("GET /account/mail/thread", user(h.mailThreadPage))
	handle("GET /account/mail/message", user(h.mailMessagePage))
	handle("GET /account/mail/html", user(h.mailHTML))
	handle("GET /account/mail/attachment", user(h.mailAttachment))
	handle("POST /account/mail/delete", user(h.deleteMail))
	handle("POST /account/mail/rules/set", user(h.setMailRule))
	handle("POST /account/mail/rules/delete", user(h.deleteMailRule))
}

// mailView is what the mailbox page shows.
type mailView struct {
	Address  string
	Folder   string
	Messages []mail.Summary
	Next     string // the link to the next page, "" when none
	Paged    bool   // a later page
	Rules    []mail.Rule
	Rule     mail.RuleSetInput // the rule form as posted (kept when refused)
	Error    string
}

// mailFolders are the folders the page offers, in order.
var mailFolders = []string{mail.FolderInbox, mail.FolderQuarantine, mail.FolderSent}

func (h *Handler) mailPage(w http.ResponseWriter, r *http.Request) {
	h.renderMailPage(w, r, http.StatusOK, mail.RuleSetInput{Action: "block"}, "")
}

func (h *Handler) renderMailPage(w http.ResponseWriter, r *http.Request, status int, rule mail.RuleSetInput, errMsg string) {
	w.Header().Set("Cache-Control", "no-store")
	q := r.URL.Query()
	v := mailView{Folder: q.Get("folder"), Rule: rule, Error: errMsg}
	if v.Folder != mail.FolderQuarantine && v.Folder != mail.FolderSent {
		v.Folder = mail.FolderInbox
	}
	after := q.Get("after")
	var list mail.ListOutput
	if err := h.invoke(r, "mailList", mail.ListInput{Folder: v.Folder, Cursor: after}, &list); err != nil {
		h.renderCapabilityError(w, r, err)
		return
	}
	v.Address, v.Messages, v.Paged = list.Address, list.Messages, after != ""
	if list.NextCursor != "" {
		v.Next = mailLink("/account/mail", url.Values{"folder": {v.Folder}, "after": {list.NextCursor}})
	}
	var rules mail.RuleListOutput
	if err := h.invoke(r, "mailRuleList", struct{}{}, &rules); err != nil {
		h.renderCapabilityError(w, r, err)
		return
	}
	v.Rules = rules.Rules
	p := h.page(r, "Mail")
	p.Notice = mailNotices[q.Get("notice")]
	h.render(w, r, status, mailPage(p, v))
}

// mailLink is path with the non-empty values of q.
func mailLink(path string, q url.Values) string {
	for k, vs := range q {
		if len(vs) == 0 || vs[0] == "" || (k == "folder" && vs[0] == mail.FolderInbox) {
			delete(q, k)
		}
	}
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}

// tagHint is the tagged form of an address, user+tag@domain, as an
// example for the page.
func tagHint(address string) string {
	local, domain, ok := strings.Cut(address, "@")
	if !ok {
		return ""
	}
	return local + "+shopping@" + domain
}

func (h *Handler) mailThreadPage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	var th mail.Thread
	if err := h.invoke(r, "mailThread", mail.ThreadInput{ThreadID: strings.TrimSpace(r.URL.Query().Get("id"))}, &th); err != nil {
		h.renderCapabilityError(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, mailThreadPage(h.page(r, "Mail thread"), th))
}

// messageView is what a message's page shows.
type messageView struct {
	Message mail.Message
	HTML    bool // show the HTML frame (asked for, and there is HTML)
}

func (h *Handler) mailMessagePage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	var m mail.Message
	if err := h.invoke(r, "mailRead", mail.MessageInput{MessageID: strings.TrimSpace(r.URL.Query().Get("id"))}, &m); err != nil {
		h.renderCapabilityError(w, r, err)
		return
	}
	v := messageView{Message: m, HTML: r.URL.Query().Get("view") == "html" && m.HTML != ""}
	h.render(w, r, http.StatusOK, mailMessagePage(h.page(r, "Mail message"), v))
}

// mailHTML serves a message's sanitised HTML as a document of its own,
// for the sandboxed frame of the message page: its policy loads and runs
// nothing, and sandboxes it even when opened directly.
func (h *Handler) mailHTML(w http.ResponseWriter, r *http.Request) {
	var m mail.Message
	if err := h.invoke(r, "mailRead", mail.MessageInput{MessageID: strings.TrimSpace(r.URL.Query().Get("id"))}, &m); err != nil {
		w.Header().Set("Cache-Control", "no-store")
		h.renderCapabilityError(w, r, err)
		return
	}
	hdr := w.Header()
	hdr.Set("Content-Security-Policy", mailHTMLPolicy)
	hdr.Set("X-Frame-Options", "SAMEORIGIN")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write([]byte("<!doctype html><html><head><meta charset=\"utf-8\"><title>message</title></head><body>"))
	_, _ = w.Write([]byte(m.HTML))
	_, _ = w.Write([]byte("</body></html>"))
}

// maxAttachmentPages bounds the pages one download reads (256 KiB each:
// far beyond the largest message the listener accepts).
const maxAttachmentPages = 1024

// mailAttachment downloads an attachment: always as a download
// (Content-Disposition attachment, a generic type, nosniff), never shown
// in the page's origin.
func (h *Handler) mailAttachment(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimSpace(r.URL.Query().Get("id"))
	var page mail.AttachmentPage
	if err := h.invoke(r, "mailAttachmentGet", mail.AttachmentInput{AttachmentID: id}, &page); err != nil {
		w.Header().Set("Cache-Control", "no-store")
		h.renderCapabilityError(w, r, err)
		return
	}
	name := attachmentFilename(page.Filename)
	hdr := w.Header()
	hdr.Set("Content-Type", "application/octet-stream")
	hdr.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Content-Security-Policy", attachmentPolicy)
	hdr.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	for i := 0; r.Method != http.MethodHead; i++ {
		data, err := base64.StdEncoding.DecodeString(page.DataBase64)
		if err != nil {
			h.log.ErrorContext(r.Context(), "web: attachment page", "err", err)
			return
		}
		if _, err := w.Write(data); err != nil || page.NextOffset == 0 || i >= maxAttachmentPages {
			return
		}
		next := page.NextOffset
		page = mail.AttachmentPage{}
		if err := h.invoke(r, "mailAttachmentGet", mail.AttachmentInput{AttachmentID: id, Offset: next}, &page); err != nil {
			// The headers are gone: cut the download short rather than
			// let it look complete.
			h.log.ErrorContext(r.Context(), "web: attachment page", "err", err)
			panic(http.ErrAbortHandler)
		}
	}
}

// attachmentFilename is a sender's filename made safe for a download:
// no path, no control characters, not empty.
func attachmentFilename(name string) string {
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	name = strings.Map(func(r rune) rune {
		// Controls (C0 and C1) and format characters (bidi overrides
		// and isolates, zero-width characters): a right-to-left override
		// makes "invoice\u202Efdp.exe" read "invoiceexe.pdf".
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '"' {
			return -1
		}
		return r
	}, name)
	name = strings.TrimLeft(strings.TrimSpace(name), ".")
	if name == "" {
		return "attachment"
	}
	return name
}

func (h *Handler) deleteMail(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	var out mail.DeleteOutput
	err := h.invoke(r, "mailDelete", mail.MessageInput{MessageID: strings.TrimSpace(r.PostForm.Get("id"))}, &out)
	if isNotFound(err) || err == nil && !out.Deleted {
		h.redirect(w, r, "/account/mail?notice=mail-missing")
		return
	}
	if err != nil {
		w.Header().Set("Cache-Control", "no-store")
		h.renderCapabilityError(w, r, err)
		return
	}
	h.redirect(w, r, "/account/mail?notice=mail-deleted")
}

func (h *Handler) setMailRule(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	in := mail.RuleSetInput{Sender: strings.TrimSpace(r.PostForm.Get("sender")), Action: r.PostForm.Get("action")}
	err := h.invoke(r, "mailRuleSet", in, nil)
	if status, msg, ok := formRefusal(w, err, capabilities.CodeInvalidInput); ok {
		h.renderMailPage(w, r, status, in, msg)
		return
	}
	if err != nil {
		w.Header().Set("Cache-Control", "no-store")
		h.renderCapabilityError(w, r, err)
		return
	}
	h.redirect(w, r, "/account/mail?notice=rule-set")
}

func (h *Handler) deleteMailRule(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	var out mail.DeleteOutput
	err := h.invoke(r, "mailRuleDelete", mail.RuleDeleteInput{Sender: strings.TrimSpace(r.PostForm.Get("sender"))}, &out)
	if isNotFound(err) || err == nil && !out.Deleted {
		h.redirect(w, r, "/account/mail?notice=rule-missing")
		return
	}
	if err != nil {
		w.Header().Set("Cache-Control", "no-store")
		h.renderCapabilityError(w, r, err)
		return
	}
	h.redirect(w, r, "/account/mail?notice=rule-deleted")
}

// folderTitle is a folder's name on the page.
func folderTitle(f string) string {
	switch f {
	case mail.FolderQuarantine:
		return "Quarantine"
	case mail.FolderSent:
		return "Sent"
	}
	return "Inbox"
}

// subjectOrNone is a subject for the page, "(no subject)" when empty.
func subjectOrNone(s string) string {
	if strings.TrimSpace(s) == "" {
		return "(no subject)"
	}
	return s
}
