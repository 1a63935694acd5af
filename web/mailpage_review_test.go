package web

import "testing"

// Review (#30): a sender's filename with a right-to-left override shows on
// the page (and saves) as a harmless name: "invoice\u202Efdp.exe" reads
// "invoiceexe.pdf". Bidi controls, zero-width characters and C1 controls
// are dropped, so the name shown is the name saved.
func TestReviewAttachmentFilenameInvisibleCharacters(t *testing.T) {
	for in, want := range map[string]string{
		"invoice\u202Efdp.exe":      "invoicefdp.exe",
		"report\u2067\u2066cod.scr": "reportcod.scr",
		"pay\u200Broll\uFEFF.pdf":   "payroll.pdf",
		"a\u0085b\u009b.txt":        "ab.txt",
		"\u202E":                    "attachment",
		"résumé 2026.pdf":           "résumé 2026.pdf",
		"日本語のファイル.pdf":              "日本語のファイル.pdf",
		"\u200F.hidden":             "hidden",
	} {
		if got := attachmentFilename(in); got != want {
			t.Errorf("attachmentFilename(%q) = %q, want %q", in, got, want)
		}
	}
}
