package web

import (
	"net/http"
	"regexp"

	"github.com/a-h/templ"
)

// page is what the layout needs to know about the request being answered.
type page struct {
	Title        string
	Site         string
	Prefix       string // path of the base URL, "" at the root
	StyleVersion string
	Viewer       *viewer // nil when signed out
	Notice       string
	Features     features
	// Script loads the first-party passkey script (pages with passkey
	// buttons).
	Script bool
	// ConnectScript loads the copy buttons' script (the connect page).
	ConnectScript bool
	// Logo is the path of the header's logo (Options.LogoURL), "" for none.
	Logo string
	// Theme is the version of the accent-colour stylesheet, "" for none.
	Theme string
	// Home is set on the start page (its heading is the site name).
	Home bool
	// Nav lists the embedders' pages in the account navigation.
	Nav []navLink
	// Refresh, when set, is a meta refresh ("0;url=/path"): the page
	// moves on to a path of this site (redirectAfterCallback).
	Refresh string
}

// features says which optional account pages exist.
type features struct {
	Apps      bool // connected apps (Options.OAuth)
	Lifecycle bool // export and deletion (Options.Lifecycle)
	Audit     bool // the admin audit page (Options.Audit)
	Secrets   bool // the secrets page (Options.Secrets)
	Feedback  bool // the feedback pages (feedbackSubmit registered)
	// Workspaces: the workspace pages (the registry holds workspaceList).
	Workspaces bool
	Packages   bool // the packages page (Options.CodeMode with code mode's capabilities)
	Memory     bool // the memory page (Options.Memory with the memory capabilities)
	// Connections: the connected accounts page (connectionList registered).
	Connections bool
	// Community: the community pages (communitySearch registered).
	Community bool
	Usage     bool // the usage page (usageGet registered)
	Mail      bool // the mail page (the registry holds the mail capabilities)
	// MCPServers: the remote MCP servers page (mcpServerList registered).
	MCPServers bool
}

// viewer is the signed-in person, as far as the layout shows them.
type viewer struct {
	Username string
	Admin    bool
}

// link returns the URL of a path on this site.
func (p page) link(path string) templ.SafeURL {
	return templ.SafeURL(p.Prefix + path)
}

// page returns the page frame for r.
func (h *Handler) page(r *http.Request, title string) page {
	p := page{
		Title:        title,
		Site:         h.opts.SiteName,
		Prefix:       h.prefix,
		StyleVersion: styleVersion,
		Features: features{Apps: h.opts.OAuth != nil, Lifecycle: h.opts.Lifecycle != nil, Audit: h.opts.Audit != nil, Secrets: h.opts.Secrets != nil,
			Feedback:   h.opts.Registry != nil && h.opts.Registry.Has("feedbackSubmit"),
			Workspaces: h.opts.Registry != nil && h.opts.Registry.Has("workspaceList"), Packages: h.packagesOn(),
			Memory: h.memoryOn(), Connections: h.connectionsOn(), Community: h.communityOn(), Usage: h.usageOn(), Mail: h.mailOn(),
			MCPServers: h.mcpServersOn()},
	}
	p.Logo = h.opts.LogoURL
	if h.theme != nil {
		p.Theme = h.themeVersion
	}
	p.Nav = h.extraNav()
	if pr := PrincipalFrom(r.Context()); pr != nil {
		p.Viewer = &viewer{Username: pr.Session.User.Username, Admin: pr.Grants.HasRole(adminRole)}
	}
	return p
}

var linkPattern = regexp.MustCompile(`https?://[^\s<>"]+`)

// linksIn returns the http(s) links in a text, for the development mailbox.
func linksIn(text string) []string {
	return linkPattern.FindAllString(text, -1)
}
