package web

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"net/http"
	"time"
)

//go:embed static/style.css
var stylesheet []byte

// stylesheetPath is where the stylesheet is served. Pages link it with
// ?v=styleVersion, so a new release is fetched at once while an unchanged
// one is cached for a long time.
const stylesheetPath = "/static/style.css"

var styleVersion = func() string {
	sum := sha256.Sum256(stylesheet)
	return hex.EncodeToString(sum[:6])
}()

// serveStylesheet serves the embedded stylesheet.
func (h *Handler) serveStylesheet(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Content-Type", "text/css; charset=utf-8")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("ETag", `"`+styleVersion+`"`)
	if r.URL.Query().Get("v") == styleVersion {
		hdr.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		hdr.Set("Cache-Control", "public, max-age=300")
	}
	http.ServeContent(w, r, "style.css", time.Time{}, bytes.NewReader(stylesheet))
}
