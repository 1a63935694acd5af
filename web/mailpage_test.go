package web

import (
	"mime"
	"strings"
	"testing"
)

// A sender's attachment filename never carries a path, control
// characters or quotes into the download, and the Content-Disposition
// built from it parses back to the same safe name.
func TestAttachmentFilename(t *testing.T) {
	for in, want := range map[string]string{
		"notes.txt":                "notes.txt",
		"../../etc/passwd":         "passwd",
		`C:\Users\x\evil.exe`:      "evil.exe",
		"a\r\nSet-Cookie: x=1.txt": "aSet-Cookie: x=1.txt",
		`quote".html`:              "quote.html",
		"...":                      "attachment",
		"":                         "attachment",
		".hidden":                  "hidden",
		"résumé 2026.pdf":          "résumé 2026.pdf",
		"dir/\x00\x7fname.bin":     "name.bin",
	} {
		got := attachmentFilename(in)
		if got != want {
			t.Errorf("attachmentFilename(%q) = %q, want %q", in, got, want)
		}
		cd := mime.FormatMediaType("attachment", map[string]string{"filename": got})
		typ, params, err := mime.ParseMediaType(cd)
		if err != nil || typ != "attachment" || params["filename"] != got || strings.ContainsAny(cd, "\r\n") {
			t.Errorf("Content-Disposition %q for %q: %v %v", cd, got, params, err)
		}
	}
}
