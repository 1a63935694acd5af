package mail_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/enclave-mcp/enclave/mail"
)

// The MIME path never panics, and what it keeps is safe to store and
// show: valid UTF-8, header values on one line, bounded bodies and parts.
func FuzzParse(f *testing.F) {
	f.Add(message("seed@x.test", "Hello", "", "body", []byte{0, 1, 2}))
	f.Add([]byte("Subject: =?utf-8?B?w6k=?=\r\nContent-Type: multipart/mixed; boundary=a\r\n\r\n--a\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n\r\nx\r\n--b--\r\n--a--\r\n"))
	f.Add([]byte("From: a\r\n\tb\r\nSubject: x\x00\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n=FF=00abc"))
	f.Add([]byte("Content-Type: text/html; charset=koi8-r\r\n\r\n<script>x</script>"))
	f.Add([]byte("Content-Type: multipart/mixed; boundary=a\r\n\r\nab\r\n--a\r\nContent-Type: x/y\r\n\r\nab\r\n--a\r\nContent-Type: x/y\r\nContent-Transfer-Encoding: base64\r\n\r\nYWI=\r\n--a--\r\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := mail.Parse(raw)
		if err != nil {
			return
		}
		for _, v := range append([]string{p.MessageID, p.InReplyTo, p.From, p.Subject}, append(p.To, p.References...)...) {
			if !utf8.ValidString(v) || strings.ContainsAny(v, "\r\n\x00") || len(v) > mail.MaxHeaderValueBytes {
				t.Fatalf("unsafe header value %q", v)
			}
		}
		for _, h := range p.Headers {
			if !utf8.ValidString(h.Value) || strings.ContainsAny(h.Value, "\r\n\x00") {
				t.Fatalf("unsafe header %q", h)
			}
		}
		if !utf8.ValidString(p.Text) || !utf8.ValidString(p.HTML) || len(p.Text) > mail.MaxBodyBytes || len(p.HTML) > mail.MaxBodyBytes {
			t.Fatal("unsafe body")
		}
		if len(p.Parts) > mail.MaxAttachments {
			t.Fatalf("%d parts", len(p.Parts))
		}
		for _, a := range p.Parts {
			if strings.ContainsAny(a.Filename, "/\\\r\n\x00") || a.Filename == "" {
				t.Fatalf("unsafe file name %q", a.Filename)
			}
			// A byte range stays inside the message, and one stored as
			// is holds exactly the part's bytes.
			if a.RawOffset >= 0 {
				if a.RawLength < 0 || a.RawOffset+a.RawLength > int64(len(raw)) {
					t.Fatalf("range %d+%d outside a message of %d bytes", a.RawOffset, a.RawLength, len(raw))
				}
				if a.Encoding == "" && string(raw[a.RawOffset:a.RawOffset+a.RawLength]) != string(a.Data) {
					t.Fatalf("range %d+%d does not hold the part's bytes", a.RawOffset, a.RawLength)
				}
			}
		}
		if out := mail.Sanitize(p.HTML); strings.Contains(strings.ToLower(out), "<script") {
			t.Fatalf("script survived: %q", out)
		}
	})
}
