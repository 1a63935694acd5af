package web

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/codemode"
	"github.com/enclave-mcp/enclave/community"
	"github.com/enclave-mcp/enclave/storage"
)

// The packages page: a person's saved code-mode packages (their versions,
// exports as tools, jobs with their live state) and recent code runs, with
// a button that deletes a package. Reads run packageList, packageHistory
// and runList through Registry.Invoke as the signed-in person; the jobs'
// live state (next run, running) has no capability and is read through
// Options.CodeMode; deleting runs packageDelete through Registry.Invoke.

// PackageJobs reads the live state of a person's package jobs: next run,
// whether one is running, how the last one ended. *codemode.Service
// implements it.
type PackageJobs interface {
	ListJobs(ctx context.Context, o storage.Owner) ([]codemode.JobState, error)
}

// Page sizes of the packages page.
const (
	packagesPerPage = 25
	runsPerPage     = 20
)

// packageNotices are the messages the packages page shows after a delete,
// by code (never text from the request).
var packageNotices = map[string]string{
	"package-deleted": "The package is deleted: every version, its tools and its jobs. Its run records stay until they expire.",
	"package-missing": "There was no such package to delete.",
}

// packagesOn reports whether the packages page exists: code mode's
// capabilities are in the registry and its jobs can be read. A nil
// *codemode.Service passed as PackageJobs (code mode off) counts as none.
func (h *Handler) packagesOn() bool {
	j := h.opts.CodeMode
	if j == nil || h.opts.Registry == nil || !h.opts.Registry.Has("packageList") {
		return false
	}
	if s, ok := j.(*codemode.Service); ok && s == nil {
		return false
	}
	return true
}

func (h *Handler) packageRoutes(handle func(string, http.HandlerFunc)) {
	if !h.packagesOn() {
		return
	}
	user := func(fn http.HandlerFunc) http.HandlerFunc { return h.guards.RequireUser(fn).ServeHTTP }
	handle("GET /account/packages", user(h.packagesPage))
	handle("POST /account/packages/delete", user(h.deletePackage))
}

// packageView is one package with its versions (newest first) and jobs.
type packageView struct {
	codemode.Package
	Versions []codemode.Version
	Jobs     []codemode.JobState
	// Listing is the package's community listing, nil when unpublished;
	// Publishable is set when the community pages exist.
	Listing     *community.Listing
	Publishable bool
}

// packagesView is what the packages page shows.
type packagesView struct {
	Packages     []packageView
	NextPackages string // the link to the next page of packages, "" when none
	Runs         []codemode.Run
	NextRuns     string // the link to the next page of runs, "" when none
	// Paged is set when the page shows a later page of packages or runs.
	Paged bool
}

func (h *Handler) packagesPage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	q := r.URL.Query()
	after, runsAfter := q.Get("after"), q.Get("runs")
	var list codemode.PackageListOutput
	if err := h.invoke(r, "packageList", codemode.ListInput{Cursor: after, Limit: packagesPerPage}, &list); err != nil {
		h.renderCapabilityError(w, r, err)
		return
	}
	u := PrincipalFrom(r.Context()).Session.User
	jobs, err := h.opts.CodeMode.ListJobs(r.Context(), ownerOf(u))
	if err != nil {
		h.internalError(w, r, "list package jobs", err)
		return
	}
	v := packagesView{Paged: after != "" || runsAfter != ""}
	// The author's publish controls: which packages are listed, through
	// communityListOwn.
	listed := map[string]community.Listing{}
	if h.communityOn() {
		var own community.OwnOutput
		if err := h.invoke(r, "communityListOwn", struct{}{}, &own); err != nil {
			h.renderCapabilityError(w, r, err)
			return
		}
		for _, l := range own.Listings {
			listed[l.Package] = l
		}
	}
	for _, p := range list.Packages {
		var hist codemode.HistoryOutput
		if err := h.invoke(r, "packageHistory", codemode.NameInput{Name: p.Name}, &hist); err != nil {
			if isNotFound(err) {
				continue // deleted since it was listed
			}
			h.renderCapabilityError(w, r, err)
			return
		}
		pv := packageView{Package: p, Versions: hist.Versions, Publishable: h.communityOn()}
		if l, ok := listed[p.Name]; ok {
			pv.Listing = &l
		}
		for _, j := range jobs {
			if j.Package == p.Name {
				pv.Jobs = append(pv.Jobs, j)
			}
		}
		v.Packages = append(v.Packages, pv)
	}
	var runs codemode.RunListOutput
	if err := h.invoke(r, "runList", codemode.RunListInput{Cursor: runsAfter, Limit: runsPerPage}, &runs); err != nil {
		h.renderCapabilityError(w, r, err)
		return
	}
	v.Runs = runs.Runs
	if list.NextCursor != "" {
		v.NextPackages = packagesLink(list.NextCursor, runsAfter)
	}
	if runs.NextCursor != "" {
		v.NextRuns = packagesLink(after, runs.NextCursor) + "#runs"
	}
	p := h.page(r, "Packages")
	p.Notice = packageNotices[q.Get("notice")]
	h.render(w, r, http.StatusOK, packagesPage(p, v))
}

// packagesLink is the path of the packages page at the given cursors.
func packagesLink(after, runs string) string {
	q := url.Values{}
	if after != "" {
		q.Set("after", after)
	}
	if runs != "" {
		q.Set("runs", runs)
	}
	if len(q) == 0 {
		return "/account/packages"
	}
	return "/account/packages?" + q.Encode()
}

// deletePackage deletes one of the person's packages by name (a name
// they do not have deletes nothing: packageDelete finds packages of the
// caller only).
func (h *Handler) deletePackage(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	var out codemode.DeleteOutput
	if err := h.invoke(r, "packageDelete", codemode.NameInput{Name: strings.TrimSpace(r.PostForm.Get("name"))}, &out); err != nil {
		w.Header().Set("Cache-Control", "no-store")
		h.renderCapabilityError(w, r, err)
		return
	}
	if !out.Deleted {
		h.redirect(w, r, "/account/packages?notice=package-missing")
		return
	}
	h.redirect(w, r, "/account/packages?notice=package-deleted")
}

func isNotFound(err error) bool {
	return capabilities.CodeOf(err) == capabilities.CodeNotFound
}

// exportNames returns a manifest's export names, sorted.
func exportNames(m codemode.Manifest) []string {
	names := make([]string, 0, len(m.Exports))
	for n := range m.Exports {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// jobNames returns a manifest's job names, sorted.
func jobNames(m codemode.Manifest) []string {
	names := make([]string, 0, len(m.Jobs))
	for n := range m.Jobs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// utcTime shows a time to the minute, in UTC (schedules are in UTC).
func utcTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }

// byteSize says n bytes for a person: 512 B, 3.4 KiB, 1.0 MiB.
func byteSize(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
}

// runDuration says a run's duration in milliseconds for a person.
func runDuration(ms int64) string {
	if ms < 1000 {
		return fmt.Sprintf("%d ms", ms)
	}
	return fmt.Sprintf("%.1f s", float64(ms)/1000)
}

// runWhat says what a run ran: the program sent to execute, or a
// package's export at a version.
func runWhat(r codemode.Run) string {
	if r.PackageName == "" {
		return "a program sent to execute"
	}
	s := r.PackageName
	if r.PackageVersion > 0 {
		s += fmt.Sprintf(" v%d", r.PackageVersion)
	}
	if r.ExportName != "" {
		s += " · " + r.ExportName
	}
	return s
}

// runFailure says why a run failed, in a sentence.
func runFailure(f *codemode.RunFailure) string {
	if f == nil {
		return ""
	}
	msg := strings.TrimSpace(f.Message)
	switch f.Kind {
	case "limit":
		if name, ok := limitNames[f.Limit]; ok {
			return "The run stopped at its " + name + " limit."
		}
		return "The run stopped at one of its limits."
	case "exception":
		return withDetail("The program threw an error", msg)
	case "syntax":
		return withDetail("The program does not parse", msg)
	case "cancelled":
		return "The run was cancelled."
	case "busy":
		return "The server was too busy to run it. Try again in a moment."
	default:
		// The sandbox's own failure: no detail for the page.
		return "The run failed on our side. Try again."
	}
}

// limitNames name a run's limits (codemode.RunFailure.Limit) for people.
var limitNames = map[string]string{
	"memory": "memory", "timeout": "time", "stack": "stack depth", "result": "result size", "hostCalls": "host call",
}

// withDetail joins a sentence's opening and the program's own message.
func withDetail(what, msg string) string {
	if msg == "" {
		return what + "."
	}
	return sentence(what + ": " + msg)
}

// jobState says a job's live state: running, or how its last run ended.
func jobState(j codemode.JobState) string {
	switch {
	case j.Running:
		return "running now"
	case j.LastStatus == "":
		return "not run yet"
	default:
		return "last run " + j.LastStatus
	}
}
