package mail_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"mime/quotedprintable"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// rangedMessage holds a base64 attachment (three pages), a
// quoted-printable one, a 7bit one nested two multiparts deep, the same
// base64 bytes a second time, a one-byte attachment and broken base64.
func rangedMessage(bin, qp, plain []byte) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "From: Sender <sender@elsewhere.test>\r\nTo: alice@%s\r\nSubject: ranges\r\nMessage-ID: <ranges@elsewhere.test>\r\n", domain)
	b.WriteString("MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"O\"\r\n\r\npreamble\r\n")
	b.WriteString("--O\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nSee the attachments.\r\n")
	enc := base64.StdEncoding.EncodeToString(bin)
	b.WriteString("--O\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=\"a.bin\"\r\nContent-Transfer-Encoding: base64\r\n\r\n")
	for len(enc) > 76 {
		b.WriteString(enc[:76] + "\r\n")
		enc = enc[76:]
	}
	b.WriteString(enc + "\r\n")
	var q bytes.Buffer
	w := quotedprintable.NewWriter(&q)
	w.Write(qp)
	w.Close()
	fmt.Fprintf(&b, "--O\r\nContent-Type: text/csv\r\nContent-Disposition: attachment; filename=\"b.csv\"\r\nContent-Transfer-Encoding: Quoted-Printable\r\n\r\n%s\r\n", q.String())
	b.WriteString("--O\r\nContent-Type: multipart/mixed; boundary=\"M\"\r\n\r\n--M\r\nContent-Type: multipart/related; boundary=\"I\"\r\n\r\n")
	fmt.Fprintf(&b, "--I\r\nContent-Type: text/x-log\r\nContent-Disposition: attachment; filename=\"c.log\"\r\n\r\n%s\r\n--I--\r\n--M--\r\n", plain)
	fmt.Fprintf(&b, "--O\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=\"d.bin\"\r\nContent-Transfer-Encoding: base64\r\n\r\n%s\r\n", base64.StdEncoding.EncodeToString(bin))
	b.WriteString("--O\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=\"e.bin\"\r\n\r\nx\r\n")
	// base64 in lines of varying length with stray spaces and tabs (the
	// decoder drops them): pages after the first skip whole quanta.
	enc = base64.StdEncoding.EncodeToString(bin[:590_000])
	b.WriteString("--O\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=\"g.bin\"\r\nContent-Transfer-Encoding: base64\r\n\r\n")
	for i := 0; len(enc) > 0; i++ {
		l := min(len(enc), []int{76, 13, 60, 1, 77}[i%5])
		b.WriteString(enc[:l])
		if i%7 == 0 {
			b.WriteString(" \t")
		}
		b.WriteString("\r\n")
		enc = enc[l:]
	}
	// Broken base64: what decodes before the padding in the middle is
	// the attachment, at delivery and when read.
	b.WriteString("--O\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=\"f.bin\"\r\nContent-Transfer-Encoding: base64\r\n\r\nQUJDRA==QUJD\r\n--O--\r\n")
	return []byte(b.String())
}

// readAttachment reads an attachment back through mailAttachmentGet, page
// by page.
func readAttachment(e *env, c capabilities.Caller, id string) ([]byte, int) {
	e.t.Helper()
	var data []byte
	offset, pages := int64(0), 0
	for {
		page := must[mail.AttachmentPage](e, c, "mailAttachmentGet", map[string]any{"attachmentId": id, "offset": offset})
		b, err := base64.StdEncoding.DecodeString(page.DataBase64)
		if err != nil {
			e.t.Fatal(err)
		}
		data, pages = append(data, b...), pages+1
		if page.NextOffset == 0 {
			return data, pages
		}
		offset = page.NextOffset
	}
}

func TestMailAttachmentByteRanges(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, mail.Config{})
		alice, bob := e.user("alice"), e.user("bob")
		bin := make([]byte, 600_000)
		for i := range bin {
			bin[i] = byte(i*31 + i>>8)
		}
		qp := []byte(strings.Repeat("naïve,café,=equals=,tab\there, trailing space \r\n", 3000) + "a line far longer than seventy-six characters, so the writer must break it with soft line breaks " + strings.Repeat("x", 300))
		plain := []byte("line one\r\nline two, nested two multiparts deep")
		raw := rangedMessage(bin, qp, plain)
		d, err := e.svc.Deliver(t.Context(), mail.Delivery{Recipient: "alice@" + domain, Raw: raw})
		if err != nil {
			t.Fatal(err)
		}
		// One blob for the delivery: the raw message.
		if n := blobCount(t, s); n != 1 {
			t.Errorf("%d blobs after one delivery, want 1 (attachments are ranges of the raw MIME)", n)
		}
		msg := must[mail.Message](e, alice, "mailRead", map[string]any{"messageId": d.MessageID})
		want := map[string][]byte{"a.bin": bin, "b.csv": qp, "c.log": plain, "d.bin": bin, "e.bin": []byte("x"), "f.bin": []byte("ABCD"), "g.bin": bin[:590_000]}
		if len(msg.Attachments) != len(want) {
			t.Fatalf("attachments: %+v", msg.Attachments)
		}
		for _, a := range msg.Attachments {
			got, pages := readAttachment(e, alice, a.ID)
			if !bytes.Equal(got, want[a.Filename]) {
				t.Errorf("%s: read back %d bytes that differ from the %d sent", a.Filename, len(got), len(want[a.Filename]))
			}
			if a.SizeBytes != int64(len(want[a.Filename])) {
				t.Errorf("%s: size %d, want %d", a.Filename, a.SizeBytes, len(want[a.Filename]))
			}
			if (a.Filename == "a.bin" || a.Filename == "g.bin") && pages != 3 {
				t.Errorf("%s in %d pages, want 3", a.Filename, pages)
			}
			// Another user gets not_found, exactly as for a missing id.
			if _, err := call[mail.AttachmentPage](e, bob, "mailAttachmentGet", map[string]any{"attachmentId": a.ID}); code(err) != capabilities.CodeNotFound {
				t.Errorf("bob's mailAttachmentGet of alice's %s: %v, want not_found", a.Filename, err)
			}
		}
		var ranged int
		if err := s.DB.NewRaw("SELECT count(*) FROM mail_attachments WHERE user_id = ? AND raw_offset IS NOT NULL", alice.OwnerID).Scan(t.Context(), &ranged); err != nil || ranged != len(want) {
			t.Errorf("%d attachment rows are ranges (%v), want %d", ranged, err, len(want))
		}

		// Deleting the message leaves no blob and no row.
		if del := must[mail.DeleteOutput](e, alice, "mailDelete", map[string]any{"messageId": d.MessageID}); !del.Deleted {
			t.Fatal("not deleted")
		}
		if n := blobCount(t, s); n != 0 {
			t.Errorf("%d blobs after the delete", n)
		}
		if n := count(t, s, "mail_attachments"); n != 0 {
			t.Errorf("%d attachment rows after the delete", n)
		}
	})
}

// TestMailAttachmentOldRowsReadable: an attachment stored before byte
// ranges (its own blob, NULL range columns) is still read, and deleted
// with its message.
func TestMailAttachmentOldRowsReadable(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, mail.Config{})
		alice := e.user("alice")
		att := []byte("the attachment of an older delivery")
		d, err := e.svc.Deliver(t.Context(), mail.Delivery{Recipient: "alice@" + domain, Raw: message("old@elsewhere.test", "old", "", "old", att)})
		if err != nil {
			t.Fatal(err)
		}
		// Make the row what an older build wrote: no range, a blob of its
		// own next to the raw MIME (<prefix>/att/<key>/<position>).
		var key string
		if err := s.DB.NewRaw("SELECT delivery_key FROM mail_messages WHERE public_id = ?", d.MessageID).Scan(t.Context(), &key); err != nil {
			t.Fatal(err)
		}
		if _, err := s.DB.NewRaw("UPDATE mail_attachments SET raw_offset = NULL, raw_length = NULL, transfer_encoding = NULL WHERE user_id = ?", alice.OwnerID).Exec(t.Context()); err != nil {
			t.Fatal(err)
		}
		// The legacy blob holds other bytes than the raw MIME's range, so
		// reading the range by mistake would show.
		legacy := []byte("the attachment, from its own blob")
		if err := s.Bucket.WriteAll(t.Context(), fmt.Sprintf("%s/%s/att/%s/0", alice.UserID, mail.BlobDomain, key), legacy, nil); err != nil {
			t.Fatal(err)
		}
		msg := must[mail.Message](e, alice, "mailRead", map[string]any{"messageId": d.MessageID})
		if len(msg.Attachments) != 1 {
			t.Fatalf("attachments: %+v", msg.Attachments)
		}
		page := must[mail.AttachmentPage](e, alice, "mailAttachmentGet", map[string]any{"attachmentId": msg.Attachments[0].ID})
		if got, _ := base64.StdEncoding.DecodeString(page.DataBase64); !bytes.HasPrefix(legacy, got) || len(got) == 0 {
			t.Errorf("old row read %q, want the start of its own blob %q", got, legacy)
		}
		if n := blobCount(t, s); n != 2 {
			t.Fatalf("%d blobs, want the raw MIME and the old attachment blob", n)
		}
		must[mail.DeleteOutput](e, alice, "mailDelete", map[string]any{"messageId": d.MessageID})
		if n := blobCount(t, s); n != 0 {
			t.Errorf("%d blobs left after deleting an old message, want 0", n)
		}
	})
}

// TestMailAttachmentRepeatedBodyPrefix: a message built so that finding
// an attachment's body in the raw MIME would compare the whole body at
// every position of a long preamble (bytes.Index's Rabin-Karp hash made
// to collide) is delivered without that work: the attachment gets a blob
// of its own, reads back exactly, and goes with its message.
func TestMailAttachmentRepeatedBodyPrefix(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, mail.Config{})
		alice := e.user("alice")
		raw, body := mail.CollidingMessage(t, 64<<10)
		raw = bytes.Replace(raw, []byte("To: c@d.test"), []byte("To: alice@"+domain), 1)
		d, err := e.svc.Deliver(t.Context(), mail.Delivery{Recipient: "alice@" + domain, Raw: raw})
		if err != nil {
			t.Fatal(err)
		}
		msg := must[mail.Message](e, alice, "mailRead", map[string]any{"messageId": d.MessageID})
		if len(msg.Attachments) != 1 {
			t.Fatalf("attachments: %+v", msg.Attachments)
		}
		if got, _ := readAttachment(e, alice, msg.Attachments[0].ID); !bytes.Equal(got, body) {
			t.Errorf("read back %d bytes that differ from the %d sent", len(got), len(body))
		}
		if n := blobCount(t, s); n != 2 {
			t.Errorf("%d blobs, want the raw MIME and the attachment's own", n)
		}
		must[mail.DeleteOutput](e, alice, "mailDelete", map[string]any{"messageId": d.MessageID})
		if n := blobCount(t, s); n != 0 {
			t.Errorf("%d blobs left after the delete", n)
		}
	})
}

// TestMailAttachmentLargeQuotedPrintable: a quoted-printable attachment
// longer than a page is stored decoded in a blob of its own (a later page
// of a range would decode everything before it), reads back exactly, and
// goes with its message; a short one stays a range.
func TestMailAttachmentLargeQuotedPrintable(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, mail.Config{})
		alice := e.user("alice")
		long := []byte(strings.Repeat("tarif=5€, naïve café;\tligne suivante\r\n", 12_000))
		short := []byte("court=1€\r\n")
		var b strings.Builder
		fmt.Fprintf(&b, "From: s@elsewhere.test\r\nTo: alice@%s\r\nSubject: qp\r\nMessage-ID: <qp@elsewhere.test>\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"O\"\r\n\r\n", domain)
		for _, a := range []struct {
			name string
			data []byte
		}{{"long.csv", long}, {"short.csv", short}} {
			var q bytes.Buffer
			w := quotedprintable.NewWriter(&q)
			w.Write(a.data)
			w.Close()
			if a.name == "long.csv" && q.Len() <= mail.AttachmentChunkBytes {
				t.Fatalf("the long attachment encodes to %d bytes, not more than a page", q.Len())
			}
			fmt.Fprintf(&b, "--O\r\nContent-Type: text/csv\r\nContent-Disposition: attachment; filename=%q\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n%s\r\n", a.name, q.String())
		}
		b.WriteString("--O--\r\n")
		d, err := e.svc.Deliver(t.Context(), mail.Delivery{Recipient: "alice@" + domain, Raw: []byte(b.String())})
		if err != nil {
			t.Fatal(err)
		}
		msg := must[mail.Message](e, alice, "mailRead", map[string]any{"messageId": d.MessageID})
		want := map[string][]byte{"long.csv": long, "short.csv": short}
		if len(msg.Attachments) != 2 {
			t.Fatalf("attachments: %+v", msg.Attachments)
		}
		for _, a := range msg.Attachments {
			if got, _ := readAttachment(e, alice, a.ID); !bytes.Equal(got, want[a.Filename]) {
				t.Errorf("%s: read back %d bytes that differ from the %d sent", a.Filename, len(got), len(want[a.Filename]))
			}
		}
		var ranged []string
		if err := s.DB.NewRaw("SELECT filename FROM mail_attachments WHERE user_id = ? AND raw_offset IS NOT NULL", alice.OwnerID).Scan(t.Context(), &ranged); err != nil || len(ranged) != 1 || ranged[0] != "short.csv" {
			t.Errorf("ranged attachments %v (%v), want only short.csv", ranged, err)
		}
		if n := blobCount(t, s); n != 2 {
			t.Errorf("%d blobs, want the raw MIME and long.csv's own", n)
		}
		must[mail.DeleteOutput](e, alice, "mailDelete", map[string]any{"messageId": d.MessageID})
		if n := blobCount(t, s); n != 0 {
			t.Errorf("%d blobs left after the delete", n)
		}
	})
}

// TestMailAttachmentBase64PageInPlace: a later page of a base64
// attachment in regular lines is read where it stands, not by scanning
// (or reading) the encoded bytes before it: with those overwritten in the
// blob, later pages still read back exactly, in CRLF and LF lines, with
// or without padding.
func TestMailAttachmentBase64PageInPlace(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, mail.Config{})
		alice := e.user("alice")
		for i, c := range []struct {
			size int
			eol  string
		}{{700_000, "\r\n"}, {600_001, "\n"}, {524_290, "\r\n"}} {
			bin := make([]byte, c.size)
			for j := range bin {
				bin[j] = byte(j*7 + j>>9 + i)
			}
			enc := base64.StdEncoding.EncodeToString(bin)
			var b strings.Builder
			fmt.Fprintf(&b, "From: s@elsewhere.test\r\nTo: alice@%s\r\nSubject: b64\r\nMessage-ID: <b64-%d@elsewhere.test>\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"O\"\r\n\r\n", domain, i)
			b.WriteString("--O\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=\"x.bin\"\r\nContent-Transfer-Encoding: base64\r\n\r\n")
			start := b.Len()
			for len(enc) > 76 {
				b.WriteString(enc[:76] + c.eol)
				enc = enc[76:]
			}
			b.WriteString(enc + "\r\n--O--\r\n")
			raw := []byte(b.String())
			d, err := e.svc.Deliver(t.Context(), mail.Delivery{Recipient: "alice@" + domain, Raw: raw})
			if err != nil {
				t.Fatal(err)
			}
			msg := must[mail.Message](e, alice, "mailRead", map[string]any{"messageId": d.MessageID})
			if len(msg.Attachments) != 1 {
				t.Fatalf("attachments: %+v", msg.Attachments)
			}
			id := msg.Attachments[0].ID
			if got, _ := readAttachment(e, alice, id); !bytes.Equal(got, bin) {
				t.Fatalf("%d: read back %d bytes that differ from the %d sent", i, len(got), len(bin))
			}
			// Overwrite the first page's encoded bytes (same length,
			// no base64 characters left) in the stored blob.
			var key string
			if err := s.DB.NewRaw("SELECT delivery_key FROM mail_messages WHERE public_id = ?", d.MessageID).Scan(t.Context(), &key); err != nil {
				t.Fatal(err)
			}
			blobKey := fmt.Sprintf("%s/%s/raw/%s.eml", alice.UserID, mail.BlobDomain, key)
			stored, err := s.Bucket.ReadAll(t.Context(), blobKey)
			if err != nil || !bytes.Equal(stored, raw) {
				t.Fatalf("the raw blob is not at %s (%v)", blobKey, err)
			}
			firstPage := mail.AttachmentChunkBytes / 3 * 4 * (76 + len(c.eol)) / 76
			for j := start; j < start+firstPage-400; j++ {
				stored[j] = '*'
			}
			if err := s.Bucket.WriteAll(t.Context(), blobKey, stored, nil); err != nil {
				t.Fatal(err)
			}
			var got []byte
			for offset := int64(mail.AttachmentChunkBytes); offset < int64(len(bin)); {
				page := must[mail.AttachmentPage](e, alice, "mailAttachmentGet", map[string]any{"attachmentId": id, "offset": offset})
				p, _ := base64.StdEncoding.DecodeString(page.DataBase64)
				got = append(got, p...)
				if page.NextOffset == 0 || len(p) == 0 {
					break
				}
				offset = page.NextOffset
			}
			if want := bin[mail.AttachmentChunkBytes:]; !bytes.Equal(got, want) {
				t.Errorf("%d: the pages after the first read %d bytes that differ from the %d sent", i, len(got), len(want))
			}
		}
	})
}
