package web

import (
	"cmp"
	"encoding/json"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/community"
	"github.com/enclave-mcp/enclave/community/markdown"
)

// The community pages: the public catalogue /community and a listing's
// page /community/{listing} (no sign-in needed to browse: they run the
// public communitySearch and communityGet as capabilities.Anonymous for a
// visitor, as the person when signed in); a signed-in person's fork, rate
// and report forms; the author's publish controls on the packages page and
// their listings at /account/community (unpublish); and the admins'
// moderation pages under /admin/community. Every page parses its form,
// runs the capability through Registry.Invoke and renders the answer.
// Readmes and descriptions are rendered by community/markdown only.

// anonymousLimit bounds the public reads a visitor who is not signed in
// makes, per client network (the rate limiter's client bucket), in the
// shared SQL limiter: the quota meter counts signed-in accounts only.
var anonymousLimit = Limit{Requests: 120, Window: time.Minute}

// anonymousBucketPrefix prefixes a visitor's bucket of public reads.
const anonymousBucketPrefix = "community:anon:ip:"

// pathCommunityPublish is the author's publish form. Its body may be
// larger than other forms' (communityPublishFormBytes): it carries a readme
// of up to community.MaxReadmeBytes, and form encoding turns each byte of
// it into up to three.
const pathCommunityPublish = "/account/community/publish"

// communityPublishFormBytes bounds the publish form's body: the largest
// readme communityPublish takes, form-encoded, and the form's other fields.
const communityPublishFormBytes = 3*community.MaxReadmeBytes + 4<<10

// communityNotices are the messages the community pages show after an
// action, by code (never text from the request).
var communityNotices = map[string]string{
	"forked":      "Forked: the package is now yours, on your packages page.",
	"rated":       "Thank you: your rating is saved.",
	"reported":    "Thank you: the admins will look at your report.",
	"published":   "Published: the listing is in the community catalogue.",
	"unpublished": "Unpublished: the listing is gone from the catalogue. Forks of it stay with the people who made them.",
	"featured":    "The listing's featuring is changed.",
	"delisted":    "The listing's visibility is changed.",
	"deleted":     "The listing is deleted.",
	"resolved":    "The report is resolved.",
}

// communityOn reports whether the community pages exist (the community's
// capabilities are registered).
func (h *Handler) communityOn() bool {
	return h.opts.Registry != nil && h.opts.Registry.Has("communitySearch")
}

func (h *Handler) communityRoutes(handle func(string, http.HandlerFunc)) {
	if !h.communityOn() {
		return
	}
	admin := func(fn http.HandlerFunc) http.HandlerFunc {
		return h.guards.RequireRole(adminRole)(h.requireAdminFactor(fn)).ServeHTTP
	}
	user := func(fn http.HandlerFunc) http.HandlerFunc { return h.guards.RequireUser(fn).ServeHTTP }
	handle("GET /community", h.communityCatalogue)
	handle("GET /community/{listing}", h.communityListing)
	handle("POST /community/{listing}/fork", user(h.communityAction("communityFork", "forked")))
	handle("POST /community/{listing}/rate", user(h.communityAction("communityRate", "rated")))
	handle("POST /community/{listing}/report", user(h.communityAction("communityReport", "reported")))
	handle("GET /account/community", user(h.communityOwn))
	handle("POST "+pathCommunityPublish, user(h.communityPublish))
	handle("POST /account/community/unpublish", user(h.communityUnpublish))
	handle("GET /admin/community", admin(h.adminCommunityReports))
	handle("GET /admin/community/activity", admin(h.adminCommunityActivity))
	handle("POST /admin/community/reports/{report}/resolve", admin(h.adminCommunityResolve))
	handle("POST /admin/community/listings/{listing}/{action}", admin(h.adminCommunityListingAction))
	handle("POST /admin/community/listings", admin(h.adminCommunityListingAction))
}

// invokePublic runs a public capability for whoever is asking: the
// signed-in person, or capabilities.Anonymous for a visitor, counted per
// client network against anonymousLimit. It answers a refused or failed
// visitor itself and returns false then.
func (h *Handler) invokePublic(w http.ResponseWriter, r *http.Request, name string, in, out any) bool {
	if PrincipalFrom(r.Context()) != nil {
		if err := h.invoke(r, name, in, out); err != nil {
			h.renderCapabilityError(w, r, err)
			return false
		}
		return true
	}
	d, err := h.limiter.Allow(r.Context(), anonymousBucketPrefix+clientBucket(h.ipOf.Addr(r)), anonymousLimit)
	if err != nil {
		h.log.ErrorContext(r.Context(), "web: rate limit check failed", "err", err)
		w.Header().Set("Retry-After", "5")
		h.renderError(w, r, http.StatusServiceUnavailable, "The service is briefly unavailable. Please try again in a moment.")
		return false
	}
	if !d.Allowed {
		secs := int64(math.Ceil(d.RetryAfter.Seconds()))
		w.Header().Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
		h.renderError(w, r, http.StatusTooManyRequests, fmt.Sprintf("Too many requests from your network. Sign in, or try again in %s.", humanSeconds(max(secs, 1))))
		return false
	}
	if err := h.invokeRefusedCrossSite(r, name); err != nil {
		h.renderCapabilityError(w, r, err)
		return false
	}
	raw, err := json.Marshal(in)
	if err != nil {
		h.internalError(w, r, "encode "+name, err)
		return false
	}
	res, err := h.opts.Registry.Invoke(r.Context(), capabilities.Anonymous(), name, raw)
	if err == nil {
		var b []byte
		if b, err = json.Marshal(res.Structured); err == nil {
			err = json.Unmarshal(b, out)
		}
	}
	if err != nil {
		h.renderCapabilityError(w, r, err)
		return false
	}
	return true
}

// communityCatalogueView is what the catalogue shows.
type communityCatalogueView struct {
	Query    string
	Listings []community.Listing
	Next     string // the link to the next page, "" when none
	Paged    bool
}

func (h *Handler) communityCatalogue(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	v := communityCatalogueView{Query: strings.TrimSpace(q.Get("q")), Paged: q.Get("cursor") != ""}
	if !textStorable(v.Query) {
		h.renderError(w, r, http.StatusBadRequest, "The search contains characters that are not allowed.")
		return
	}
	var res community.SearchResult
	if !h.invokePublic(w, r, "communitySearch", community.SearchInput{Query: v.Query, Cursor: q.Get("cursor")}, &res) {
		return
	}
	// Featured listings first on each page, otherwise as the search
	// answers (newest first).
	v.Listings = res.Listings
	slices.SortStableFunc(v.Listings, func(a, b community.Listing) int {
		return cmp.Compare(boolRank(b.Featured), boolRank(a.Featured))
	})
	if res.NextCursor != "" {
		nq := url.Values{"cursor": {res.NextCursor}}
		if v.Query != "" {
			nq.Set("q", v.Query)
		}
		v.Next = "/community?" + nq.Encode()
	}
	if PrincipalFrom(r.Context()) != nil {
		w.Header().Set("Cache-Control", "no-store")
	}
	p := h.page(r, "Community")
	p.Notice = communityNotices[q.Get("notice")]
	h.render(w, r, http.StatusOK, communityCataloguePage(p, v))
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// communityListingView is what a listing's page shows.
type communityListingView struct {
	Listing     community.Listing
	Readme      template.HTML // rendered by community/markdown
	Description template.HTML
	SignedIn    bool
	Admin       bool
}

func (h *Handler) communityListing(w http.ResponseWriter, r *http.Request) {
	var l community.Listing
	if !h.invokePublic(w, r, "communityGet", community.ListingInput{Listing: r.PathValue("listing")}, &l) {
		return
	}
	p := h.page(r, l.Name+" · Community")
	p.Notice = communityNotices[r.URL.Query().Get("notice")]
	v := communityListingView{Listing: l, Readme: markdown.Render(l.Readme), Description: markdown.Render(l.Description)}
	if p.Viewer != nil {
		w.Header().Set("Cache-Control", "no-store")
		v.SignedIn, v.Admin = true, p.Viewer.Admin
	}
	h.render(w, r, http.StatusOK, communityListingPage(p, v))
}

// communityAction runs a signed-in person's action on a listing
// (communityFork, communityRate, communityReport) from its form and goes
// back to the listing's page with a notice.
func (h *Handler) communityAction(name, notice string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !h.parseForm(w, r) {
			return
		}
		listing := r.PathValue("listing")
		f := r.PostForm
		var in any
		switch name {
		case "communityFork":
			in = community.ForkInput{Listing: listing, Name: strings.TrimSpace(f.Get("name"))}
		case "communityRate":
			score, err := strconv.Atoi(f.Get("score"))
			if err != nil {
				h.renderError(w, r, http.StatusBadRequest, "Choose a score from 1 to 5.")
				return
			}
			in = community.RateInput{Listing: listing, Score: score, Note: strings.TrimSpace(f.Get("note"))}
		default:
			in = community.ReportInput{Listing: listing, Reason: f.Get("reason"), Details: strings.TrimSpace(f.Get("details"))}
		}
		if err := h.invoke(r, name, in, nil); err != nil {
			w.Header().Set("Cache-Control", "no-store")
			h.renderCapabilityError(w, r, err)
			return
		}
		h.redirect(w, r, "/community/"+url.PathEscape(listing)+"?notice="+notice)
	}
}

// communityOwnView is the author's page of listings and forks.
type communityOwnView struct {
	Own community.OwnOutput
}

func (h *Handler) communityOwn(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	var v communityOwnView
	if err := h.invoke(r, "communityListOwn", struct{}{}, &v.Own); err != nil {
		h.renderCapabilityError(w, r, err)
		return
	}
	p := h.page(r, "Community listings")
	p.Notice = communityNotices[r.URL.Query().Get("notice")]
	h.render(w, r, http.StatusOK, communityOwnPage(p, v))
}

// communityPublish publishes a version of one of the person's packages
// (the form on the packages page).
func (h *Handler) communityPublish(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	f := r.PostForm
	in := community.PublishInput{Package: strings.TrimSpace(f.Get("package"))}
	if s := strings.TrimSpace(f.Get("version")); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			h.renderError(w, r, http.StatusBadRequest, "Choose a version of the package to publish.")
			return
		}
		in.Version = v
	}
	if readme := f.Get("readme"); strings.TrimSpace(readme) != "" {
		in.Readme = &readme
	}
	if err := h.invoke(r, "communityPublish", in, nil); err != nil {
		w.Header().Set("Cache-Control", "no-store")
		h.renderCapabilityError(w, r, err)
		return
	}
	h.redirect(w, r, "/account/community?notice=published")
}

// communityUnpublish removes one of the person's listings.
func (h *Handler) communityUnpublish(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	if err := h.invoke(r, "communityUnpublish", community.UnpublishInput{Listing: strings.TrimSpace(r.PostForm.Get("listing"))}, nil); err != nil {
		w.Header().Set("Cache-Control", "no-store")
		h.renderCapabilityError(w, r, err)
		return
	}
	h.redirect(w, r, "/account/community?notice=unpublished")
}

// adminCommunityReportsView is the moderation page.
type adminCommunityReportsView struct {
	Status  string
	Reports community.ReportPage
	Next    string
}

func (h *Handler) adminCommunityReports(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	q := r.URL.Query()
	v := adminCommunityReportsView{Status: q.Get("status")}
	if v.Status == "" && !q.Has("status") {
		v.Status = "open"
	}
	if err := h.invoke(r, "adminCommunityReportList", community.ReportListInput{Status: v.Status, Cursor: q.Get("cursor"), Limit: 50}, &v.Reports); err != nil {
		h.renderCapabilityError(w, r, err)
		return
	}
	if v.Reports.NextCursor != "" {
		v.Next = "/admin/community?" + url.Values{"status": {v.Status}, "cursor": {v.Reports.NextCursor}}.Encode()
	}
	p := h.page(r, "Community moderation")
	p.Notice = communityNotices[q.Get("notice")]
	h.render(w, r, http.StatusOK, adminCommunityReportsPage(p, v))
}

func (h *Handler) adminCommunityActivity(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	var page community.ActivityPage
	if err := h.invoke(r, "adminCommunityActivityList", community.ActivityListInput{Cursor: r.URL.Query().Get("cursor"), Limit: 50}, &page); err != nil {
		h.renderCapabilityError(w, r, err)
		return
	}
	next := ""
	if page.NextCursor != "" {
		next = "/admin/community/activity?" + url.Values{"cursor": {page.NextCursor}}.Encode()
	}
	h.render(w, r, http.StatusOK, adminCommunityActivityPage(h.page(r, "Community activity"), page.Activity, next))
}

func (h *Handler) adminCommunityResolve(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	f := r.PostForm
	in := community.ResolveInput{Report: r.PathValue("report"), Status: f.Get("status"), Action: f.Get("action"),
		BanAuthor: f.Get("banAuthor") == "on", Resolution: strings.TrimSpace(f.Get("resolution"))}
	if err := h.invoke(r, "adminCommunityReportResolve", in, nil); err != nil {
		w.Header().Set("Cache-Control", "no-store")
		h.renderCapabilityError(w, r, err)
		return
	}
	h.redirect(w, r, "/admin/community?notice=resolved")
}

// adminCommunityListingAction features, delists or deletes a listing
// (feature, unfeature, delist, relist, delete): the listing and action
// from the path (the buttons of a listing's page), or from the form (the
// moderation page's form, for any listing, delisted ones included).
func (h *Handler) adminCommunityListingAction(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	listing, action := r.PathValue("listing"), r.PathValue("action")
	if listing == "" {
		listing, action = strings.TrimSpace(r.PostForm.Get("listing")), r.PostForm.Get("action")
	}
	if listing == "" {
		h.renderError(w, r, http.StatusBadRequest, "Give the listing's id (lst_…).")
		return
	}
	var name, notice string
	var in any
	switch action {
	case "feature", "unfeature":
		name, notice, in = "adminCommunityFeature", "featured", community.FeatureInput{Listing: listing, Featured: action == "feature"}
	case "delist", "relist":
		name, notice, in = "adminCommunityDelist", "delisted", community.DelistInput{Listing: listing, Delisted: action == "delist"}
	case "delete":
		name, notice, in = "adminCommunityDelete", "deleted", community.ListingInput{Listing: listing}
	default:
		h.renderError(w, r, http.StatusBadRequest, "Choose what to do with the listing: feature, unfeature, delist, relist or delete.")
		return
	}
	if err := h.invoke(r, name, in, nil); err != nil {
		w.Header().Set("Cache-Control", "no-store")
		h.renderCapabilityError(w, r, err)
		return
	}
	h.redirect(w, r, "/admin/community?notice="+notice)
}

// ratingText says a rating summary for a person.
func ratingText(r community.Rating) string {
	if r.Count == 0 {
		return "not rated yet"
	}
	s := "ratings"
	if r.Count == 1 {
		s = "rating"
	}
	return fmt.Sprintf("%.1f of 5 (%d %s)", r.Average, r.Count, s)
}
