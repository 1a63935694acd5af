package web

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/enclave-mcp/enclave/accounts"
)

// The site's own pages: the start page, which says what the server is,
// and the page that shows how to connect an agent to it. Both are public;
// the branding (site name, description, logo, accent colour) comes from
// Options.

const (
	pathHome    = "/"
	pathConnect = "/connect"
	// mcpPath is where the MCP endpoint is served, under the base URL.
	mcpPath = "/mcp"
	// connectScriptPath serves the copy buttons' script.
	connectScriptPath = "/static/connect.js"
	// themePath serves the colours of Options.AccentColor.
	themePath = "/static/theme.css"
)

// DefaultSiteName is the site name used when Options.SiteName is empty.
const DefaultSiteName = "enclave"

// defaultDescription is the start page's sentence when the operator sets
// none.
const defaultDescription = "A server where AI agents act for you through tools, each call checked against your own account."

// maxSiteName and maxDescription bound the branding texts: they are shown
// in every title and mail subject.
const (
	maxSiteName    = 64
	maxDescription = 500
)

//go:embed static/connect.js
var connectScript []byte

var connectScriptVersion = assetVersion(connectScript)

func assetVersion(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}

// accentPattern is the one accent colour syntax accepted: #rgb or #rrggbb.
var accentPattern = regexp.MustCompile(`^#([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$`)

// checkBranding validates and normalizes the branding options.
func checkBranding(opts *Options) error {
	opts.SiteName = strings.TrimSpace(opts.SiteName)
	if opts.SiteName == "" {
		opts.SiteName = DefaultSiteName
	}
	if err := checkBrandText(opts.SiteName, maxSiteName); err != nil {
		return fmt.Errorf("web: site name %q: %w", opts.SiteName, err)
	}
	opts.SiteDescription = strings.TrimSpace(opts.SiteDescription)
	if err := checkBrandText(opts.SiteDescription, maxDescription); err != nil {
		return fmt.Errorf("web: site description: %w", err)
	}
	if opts.AccentColor != "" && !accentPattern.MatchString(opts.AccentColor) {
		return fmt.Errorf("web: accent colour %q: want #rrggbb (or #rgb)", opts.AccentColor)
	}
	opts.AccentColor = strings.ToLower(opts.AccentColor)
	if opts.LogoURL != "" && !localPath(opts.LogoURL) {
		return fmt.Errorf("web: logo URL %q: want a path on this server, such as /brand/logo.svg (the pages load images from their own origin only)", opts.LogoURL)
	}
	return nil
}

// checkBrandText refuses a text that would break a title, a mail subject
// or a header line: control characters (line breaks included), invalid
// UTF-8, or more than max characters.
func checkBrandText(s string, max int) error {
	if !utf8.ValidString(s) {
		return errors.New("not valid UTF-8")
	}
	if n := len([]rune(s)); n > max {
		return fmt.Errorf("%d characters, at most %d", n, max)
	}
	for _, r := range s {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return errors.New("contains a control character")
		}
	}
	return nil
}

// localPath reports whether p is an absolute path on this server: it
// starts with one "/" (not "//" or "/\", which browsers read as another
// host), and has no scheme, host, control character or space.
func localPath(p string) bool {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.HasPrefix(p, `/\`) {
		return false
	}
	for _, r := range p {
		if r <= ' ' || r == 0x7f || r == '\\' || r == '"' || r == '<' || r == '>' {
			return false
		}
	}
	u, err := url.Parse(p)
	return err == nil && u.Scheme == "" && u.Host == "" && u.User == nil
}

// themeCSS returns the stylesheet of the accent colour, or nil without
// one. The pages' policy allows styles from this origin only, so the
// colour is a file, not an inline style.
func themeCSS(accent string) []byte {
	if accent == "" {
		return nil
	}
	fg := "#ffffff"
	if luminance(accent) > 0.18 { // where black text starts to contrast better than white
		fg = "#111111"
	}
	return fmt.Appendf(nil, "/* %s: the operator's accent colour */\n:root { --accent: %s; --accent-fg: %s; }\n@media (prefers-color-scheme: dark) {\n\t:root { --accent: %s; --accent-fg: %s; }\n}\n",
		"enclave theme", accent, fg, accent, fg)
}

// luminance is the relative luminance (WCAG) of a #rgb or #rrggbb colour.
func luminance(c string) float64 {
	hexs := strings.TrimPrefix(c, "#")
	if len(hexs) == 3 {
		hexs = string([]byte{hexs[0], hexs[0], hexs[1], hexs[1], hexs[2], hexs[2]})
	}
	var ch [3]float64
	for i := range ch {
		v, _ := strconv.ParseUint(hexs[2*i:2*i+2], 16, 8)
		x := float64(v) / 255
		if x <= 0.03928 {
			x /= 12.92
		} else {
			x = math.Pow((x+0.055)/1.055, 2.4)
		}
		ch[i] = x
	}
	return 0.2126*ch[0] + 0.7152*ch[1] + 0.0722*ch[2]
}

// serveAsset serves an embedded first-party file. Pages link it with
// ?v=version, so a changed file is fetched at once and an unchanged one
// is cached for a year.
func (h *Handler) serveAsset(name, contentType string, body []byte, version string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		hdr := w.Header()
		h.setSecurityHeaders(hdr, r)
		hdr.Set("Content-Type", contentType)
		hdr.Set("ETag", `"`+version+`"`)
		if r.URL.Query().Get("v") == version {
			hdr.Set("Cache-Control", "public, max-age=31536000, immutable")
		} else {
			hdr.Set("Cache-Control", "public, max-age=300")
		}
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(body))
	}
}

// siteRoutes mounts the start page, the connect page and their files.
func (h *Handler) siteRoutes(handle func(string, http.HandlerFunc)) {
	handle("GET "+connectScriptPath, h.serveAsset("connect.js", "text/javascript; charset=utf-8", connectScript, connectScriptVersion))
	if h.theme != nil {
		handle("GET "+themePath, h.serveAsset("theme.css", "text/css; charset=utf-8", h.theme, h.themeVersion))
	}
	handle("GET "+pathConnect, h.connect)
	handle("GET /{$}", h.home)
}

// homeView is what the start page shows.
type homeView struct {
	Description string
	MCPURL      string
	Signup      bool // sign-up is open or by invitation
}

func (h *Handler) home(w http.ResponseWriter, r *http.Request) {
	v := homeView{Description: h.opts.SiteDescription, MCPURL: h.mcpURL(), Signup: h.opts.Accounts.Identity.SignupMode() != accounts.SignupClosed}
	if v.Description == "" {
		v.Description = defaultDescription
	}
	p := h.page(r, "Welcome")
	p.Home = true
	h.render(w, r, http.StatusOK, homePage(p, v))
}

func (h *Handler) connect(w http.ResponseWriter, r *http.Request) {
	p := h.page(r, "Connect an agent")
	p.ConnectScript = true
	h.render(w, r, http.StatusOK, connectPage(p, h.connectSetups()))
}

// mcpURL is the public URL of the MCP endpoint.
func (h *Handler) mcpURL() string {
	return h.opts.BaseURL + mcpPath
}
