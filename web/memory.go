package web

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/memory"
)

// The memory page: a person's memories (what their agents keep for later
// conversations), newest first or as found by a search, with forms that
// add, edit, archive and delete them. Every read and write runs a memory
// capability (memoryList, memorySearch, memorySave, memoryUpdate,
// memoryDelete) through Registry.Invoke as the signed-in person.

// memoriesPerPage is the page size of the memory page.
const memoriesPerPage = 25

// memoryNotices are the messages the memory page shows after a change, by
// code (never text from the request).
var memoryNotices = map[string]string{
	"memory-saved":   "The memory is saved.",
	"memory-updated": "The memory is updated.",
	"memory-deleted": "The memory is deleted.",
	"memory-missing": "There was no such memory.",
}

// memoryOn reports whether the memory page exists: Options.Memory is set
// and the registry holds the memory capabilities.
func (h *Handler) memoryOn() bool {
	return h.opts.Memory && h.opts.Registry != nil && h.opts.Registry.Has("memoryList")
}

func (h *Handler) memoryRoutes(handle func(string, http.HandlerFunc)) {
	if !h.memoryOn() {
		return
	}
	user := func(fn http.HandlerFunc) http.HandlerFunc { return h.guards.RequireUser(fn).ServeHTTP }
	handle("GET /account/memory", user(h.memoryPage))
	handle("POST /account/memory/save", user(h.saveMemory))
	handle("POST /account/memory/update", user(h.updateMemory))
	handle("POST /account/memory/delete", user(h.deleteMemory))
}

// memoryView is what the memory page shows.
type memoryView struct {
	Query    string // the search, "" when listing
	Status   string // the status filter: "", active or archived
	Memories []memory.Memory
	Next     string // the link to the next page of the listing, "" when none
	Paged    bool   // a later page of the listing
	Form     memoryForm
	Error    string
}

// memoryForm is the add form as posted (kept when it is refused).
type memoryForm struct {
	Text, Tags, Source string
}

func (h *Handler) memoryPage(w http.ResponseWriter, r *http.Request) {
	h.renderMemoryPage(w, r, http.StatusOK, memoryForm{}, "")
}

// renderMemoryPage shows the listing or the search the URL asks for, with
// the add form and an error, if any.
func (h *Handler) renderMemoryPage(w http.ResponseWriter, r *http.Request, status int, form memoryForm, errMsg string) {
	w.Header().Set("Cache-Control", "no-store")
	q := r.URL.Query()
	v := memoryView{Query: strings.TrimSpace(q.Get("q")), Status: q.Get("status"), Form: form, Error: errMsg}
	if v.Status != memory.StatusActive && v.Status != memory.StatusArchived {
		v.Status = ""
	}
	if v.Query != "" {
		status := v.Status
		if status == "" {
			status = "all"
		}
		var out memory.SearchOutput
		if err := h.invoke(r, "memorySearch", memory.SearchInput{Query: v.Query, Status: status, Limit: memoriesPerPage}, &out); err != nil {
			h.renderCapabilityError(w, r, err)
			return
		}
		for _, f := range out.Memories {
			v.Memories = append(v.Memories, f.Memory)
		}
	} else {
		after := q.Get("after")
		var out memory.ListOutput
		if err := h.invoke(r, "memoryList", memory.ListInput{Cursor: after, Limit: memoriesPerPage, Status: v.Status}, &out); err != nil {
			h.renderCapabilityError(w, r, err)
			return
		}
		v.Memories, v.Paged = out.Memories, after != ""
		if out.NextCursor != "" {
			v.Next = memoryLink(url.Values{"after": {out.NextCursor}, "status": {v.Status}})
		}
	}
	p := h.page(r, "Memory")
	p.Notice = memoryNotices[q.Get("notice")]
	h.render(w, r, status, memoryPage(p, v))
}

// memoryLink is the path of the memory page with the non-empty values of q.
func memoryLink(q url.Values) string {
	for k, vs := range q {
		if len(vs) == 0 || vs[0] == "" {
			delete(q, k)
		}
	}
	if len(q) == 0 {
		return "/account/memory"
	}
	return "/account/memory?" + q.Encode()
}

// formTags splits a comma-separated tags field.
func formTags(s string) []string {
	tags := []string{}
	for _, t := range strings.Split(s, ",") {
		if t = strings.TrimSpace(t); t != "" {
			tags = append(tags, t)
		}
	}
	return tags
}

func (h *Handler) saveMemory(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	form := memoryForm{Text: r.PostForm.Get("text"), Tags: r.PostForm.Get("tags"), Source: r.PostForm.Get("source")}
	err := h.invoke(r, "memorySave", memory.SaveInput{Text: form.Text, Tags: formTags(form.Tags), Source: form.Source}, nil)
	if status, msg, ok := formRefusal(w, err, capabilities.CodeInvalidInput); ok {
		h.renderMemoryPage(w, r, status, form, msg)
		return
	}
	if err != nil {
		w.Header().Set("Cache-Control", "no-store")
		h.renderCapabilityError(w, r, err)
		return
	}
	h.redirect(w, r, "/account/memory?notice=memory-saved")
}

// updateMemory replaces one memory's text, tags and status with the
// edit form's (a memory of another person is not found: memoryUpdate
// finds the caller's only).
func (h *Handler) updateMemory(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	tags := formTags(r.PostForm.Get("tags"))
	in := memory.UpdateInput{ID: strings.TrimSpace(r.PostForm.Get("id")), Text: r.PostForm.Get("text"), Tags: &tags, Status: r.PostForm.Get("status")}
	if strings.TrimSpace(in.Text) == "" {
		in.Text = " " // refused as empty, not taken as "unchanged"
	}
	err := h.invoke(r, "memoryUpdate", in, nil)
	if status, msg, ok := formRefusal(w, err, capabilities.CodeInvalidInput); ok {
		h.renderMemoryPage(w, r, status, memoryForm{}, msg)
		return
	}
	if isNotFound(err) {
		h.redirect(w, r, "/account/memory?notice=memory-missing")
		return
	}
	if err != nil {
		w.Header().Set("Cache-Control", "no-store")
		h.renderCapabilityError(w, r, err)
		return
	}
	h.redirect(w, r, "/account/memory?notice=memory-updated")
}

func (h *Handler) deleteMemory(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	var out memory.DeleteOutput
	if err := h.invoke(r, "memoryDelete", memory.GetInput{ID: strings.TrimSpace(r.PostForm.Get("id"))}, &out); err != nil {
		w.Header().Set("Cache-Control", "no-store")
		h.renderCapabilityError(w, r, err)
		return
	}
	if !out.Deleted {
		h.redirect(w, r, "/account/memory?notice=memory-missing")
		return
	}
	h.redirect(w, r, "/account/memory?notice=memory-deleted")
}

// memoryTags shows tags as the edit form's field holds them.
func memoryTags(tags []string) string { return strings.Join(tags, ", ") }
