package web

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/url"
	"strings"
)

// connectSetups is what the connect page shows: the MCP URL and, for
// each host people use, a ready-made setup carrying it.
type connectSetups struct {
	URL  string // the MCP endpoint
	Name string // the server's key in the hosts' configuration files

	ClaudeDesktop string // claude_desktop_config.json, through mcp-remote
	ClaudeCode    string // the claude mcp add command
	VSCodeLink    string // vscode:mcp/install?…
	VSCodeJSON    string // .vscode/mcp.json
	CursorLink    string // cursor://anysphere.cursor-deeplink/mcp/install?…
	CursorJSON    string // ~/.cursor/mcp.json
	Metadata      string // the protected-resource metadata document
}

// connectSetups builds the setups from the base URL and the site name.
func (h *Handler) connectSetups() connectSetups {
	mcpURL := h.mcpURL()
	name := serverKey(h.opts.SiteName)
	remoteArgs := []string{"-y", "mcp-remote", mcpURL}
	if insecureRemote(h.base) {
		// mcp-remote refuses plain http except to localhost.
		remoteArgs = append(remoteArgs, "--allow-http")
	}
	type stdio struct {
		Command string   `json:"command"`
		Args    []string `json:"args"`
	}
	type httpServer struct {
		Type string `json:"type,omitempty"`
		URL  string `json:"url"`
	}
	vscodeInstall, _ := marshalJSON(struct {
		Name string `json:"name"`
		Type string `json:"type"`
		URL  string `json:"url"`
	}{name, "http", mcpURL}, false)
	cursorConfig, _ := marshalJSON(httpServer{URL: mcpURL}, false)
	desktop, _ := marshalJSON(map[string]map[string]stdio{"mcpServers": {name: {Command: "npx", Args: remoteArgs}}}, true)
	vscode, _ := marshalJSON(map[string]map[string]httpServer{"servers": {name: {Type: "http", URL: mcpURL}}}, true)
	cursor, _ := marshalJSON(map[string]map[string]httpServer{"mcpServers": {name: {URL: mcpURL}}}, true)
	return connectSetups{
		URL:           mcpURL,
		Name:          name,
		ClaudeDesktop: desktop,
		ClaudeCode:    "claude mcp add --transport http " + shellWord(name) + " " + shellWord(mcpURL),
		VSCodeLink:    "vscode:mcp/install?" + encodeURIComponent(vscodeInstall),
		VSCodeJSON:    vscode,
		CursorLink: "cursor://anysphere.cursor-deeplink/mcp/install?" + url.Values{
			"name":   {name},
			"config": {base64.StdEncoding.EncodeToString([]byte(cursorConfig))},
		}.Encode(),
		CursorJSON: cursor,
		Metadata:   h.opts.BaseURL + "/.well-known/oauth-protected-resource" + mcpPath,
	}
}

// marshalJSON encodes v without HTML escaping (the page escapes), indented
// with two spaces when indent is set.
func marshalJSON(v any, indent bool) (string, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if indent {
		enc.SetIndent("", "  ")
	}
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimRight(buf.String(), "\n"), nil
}

// encodeURIComponent escapes s as JavaScript's encodeURIComponent does,
// which is how the hosts decode their install links.
func encodeURIComponent(s string) string {
	const keep = "-_.!~*'()"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(keep, c) >= 0 {
			b.WriteByte(c)
			continue
		}
		const hexDigits = "0123456789ABCDEF"
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	return b.String()
}

// serverKey turns the site name into the key the hosts file the server
// under: lowercase letters, digits and hyphens ("Acme Tools" →
// "acme-tools"), "mcp-server" when nothing is left.
func serverKey(site string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(site) {
		switch {
		case 'a' <= r && r <= 'z', '0' <= r && r <= '9':
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			b.WriteRune(r)
			dash = false
		default:
			dash = true
		}
	}
	if b.Len() == 0 {
		return "mcp-server"
	}
	return b.String()
}

// shellWord quotes s for a POSIX shell when it holds anything but plain
// URL characters.
func shellWord(s string) string {
	safe := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-_.:/@%+=,", c) >= 0) {
			safe = false
			break
		}
	}
	if safe && s != "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// insecureRemote reports whether base is plain http to a host other than
// a loopback one.
func insecureRemote(base *url.URL) bool {
	if base.Scheme != "http" {
		return false
	}
	host := base.Hostname()
	if strings.EqualFold(host, "localhost") {
		return false
	}
	ip := net.ParseIP(host)
	return ip == nil || !ip.IsLoopback()
}
