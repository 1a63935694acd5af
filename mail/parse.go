package mail

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	netmail "net/mail"
	"net/textproto"
	"strings"
	"time"
	"unicode/utf8"
)

// Bounds of the MIME path.
const (
	// DefaultMaxMessageBytes is the largest message accepted (the SMTP
	// SIZE limit): 25 MiB.
	DefaultMaxMessageBytes = 25 << 20
	// MaxParts bounds the leaf parts of a message read; further parts are
	// ignored (they stay in the raw MIME).
	MaxParts = 200
	// MaxAttachments bounds the attachments stored apart.
	MaxAttachments = 100
	// MaxBodyBytes bounds the HTML kept in rows (the whole message is
	// always in the raw MIME blob).
	MaxBodyBytes = 1 << 20
	// MaxTextBytes bounds the text body kept in rows. It is what search
	// indexes, and PostgreSQL's full-text index of subject, sender and
	// text holds at most 1 MB of lexemes (about three times the text at
	// worst): a longer text would make the delivery fail for good.
	MaxTextBytes = 256 << 10
	// MaxHeaderValueBytes bounds a stored header value.
	MaxHeaderValueBytes = 2000
	// MaxReferences bounds the message ids a message's threading reads.
	MaxReferences = 50
	// MaxHeaderBytes bounds a message's header section: real mail's is a
	// few KiB, and parsing megabytes of addresses or message ids costs
	// seconds of CPU. A larger one is refused as malformed.
	MaxHeaderBytes = 1 << 20
	// MaxEntities bounds the MIME entities (multiparts included) a read
	// walks; further ones are ignored (they stay in the raw MIME).
	MaxEntities = 1000
)

// Header is one header field as shown to readers.
type Header struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Parsed is what the MIME reader takes from a message.
type Parsed struct {
	MessageID  string
	InReplyTo  string
	References []string
	From       string
	// FromAddress is the first From address alone, lowercased.
	FromAddress string
	To, Cc      []string
	Subject     string
	Date        time.Time
	Text, HTML  string
	Headers     []Header
	Parts       []Part
}

// Part is an attachment (any leaf part that is not the text or HTML body).
type Part struct {
	Filename    string
	ContentType string
	Data        []byte
	// RawOffset and RawLength locate the part's body, still in its
	// transfer encoding (Encoding), in the raw message: a delivery stores
	// the attachment as this byte range of the raw MIME blob instead of a
	// blob of its own. RawOffset is -1 when the body was not found
	// verbatim in the raw message (then Data is stored apart).
	RawOffset, RawLength int64
	Encoding             string
	// layout is how a base64 range longer than a page is laid out when
	// its lines are regular (" <chars a line> <line-break bytes>"), so a
	// page is read at its place; empty otherwise.
	layout string
}

// shownHeaders are the header fields readers see, in this order.
var shownHeaders = []string{"From", "Reply-To", "To", "Cc", "Subject", "Date", "Message-Id", "In-Reply-To", "References", "List-Id", "Auto-Submitted"}

// ErrMalformed is returned for input that is not a message at all.
var ErrMalformed = errors.New("mail: malformed message")

// Parse reads a raw RFC 5322 message with the standard library's MIME
// readers (net/mail, mime, mime/multipart, mime/quotedprintable). It is
// lenient where mail in the wild is (an unknown charset or transfer
// encoding keeps the part's bytes as they are; a broken multipart keeps
// what was read) and strict about bounds: every stored value is valid
// UTF-8 without NUL or line breaks in headers, bodies are cut at
// MaxTextBytes and MaxBodyBytes, at most MaxParts leaf parts are read and multiparts nest
// at most MaxDepth deep.
func Parse(raw []byte) (Parsed, error) {
	if headerBytes(raw) > MaxHeaderBytes {
		return Parsed{}, fmt.Errorf("%w: the header section is larger than %d bytes", ErrMalformed, MaxHeaderBytes)
	}
	msg, err := netmail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		return Parsed{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	h := msg.Header
	dec := &mime.WordDecoder{CharsetReader: func(charset string, input io.Reader) (io.Reader, error) {
		// Without conversion tables, other charsets keep their bytes
		// (made valid UTF-8 later).
		return input, nil
	}}
	decode := func(v string) string {
		if d, err := dec.DecodeHeader(v); err == nil {
			return d
		}
		return v
	}
	var p Parsed
	p.MessageID = headerText(firstMsgID(h.Get("Message-Id")))
	p.InReplyTo = headerText(firstMsgID(h.Get("In-Reply-To")))
	refs := msgIDs(h.Get("References"))
	if len(refs) > MaxReferences {
		refs = refs[len(refs)-MaxReferences:]
	}
	for _, id := range refs {
		if id = headerText(id); id != "" {
			p.References = append(p.References, id)
		}
	}
	p.From = addressText(h, "From", decode)
	if l, err := h.AddressList("From"); err == nil && len(l) > 0 {
		p.FromAddress = headerText(strings.ToLower(l[0].Address))
	}
	p.To = addressList(h, "To")
	p.Cc = addressList(h, "Cc")
	p.Subject = headerText(decode(h.Get("Subject")))
	if d, err := h.Date(); err == nil {
		p.Date = d.UTC()
	}
	for _, name := range shownHeaders {
		for _, v := range h[textproto.CanonicalMIMEHeaderKey(name)] {
			if v = headerText(decode(v)); v != "" {
				p.Headers = append(p.Headers, Header{Name: name, Value: v})
			}
		}
	}
	walker := &walker{p: &p, raw: raw, cursor: headerBytes(raw), budget: locateBudget(len(raw))}
	walker.entity(textproto.MIMEHeader(h), msg.Body, 0)
	return p, nil
}

// locateBudget is the bytes locate may compare for a message of n bytes:
// finding every body where it stands compares each once (at most n in
// all), so four times that leaves room for a few false starts.
func locateBudget(n int) int { return 4*n + 64<<10 }

// MaxDepth bounds how deep multiparts nest.
const MaxDepth = 20

type walker struct {
	p        *Parsed
	parts    int
	entities int
	// raw is the message and cursor where the next leaf body is looked
	// for in it (bodies appear in the raw message in reading order).
	raw    []byte
	cursor int
	// budget is the bytes locate may still compare for this message.
	budget int
}

// headerBytes is the length of raw's header section (all of raw when no
// empty line ends it).
func headerBytes(raw []byte) int {
	if i := bytes.Index(raw, []byte("\n\r\n")); i >= 0 {
		if j := bytes.Index(raw[:i+1], []byte("\n\n")); j >= 0 {
			return j + 1
		}
		return i + 1
	}
	if j := bytes.Index(raw, []byte("\n\n")); j >= 0 {
		return j + 1
	}
	return len(raw)
}

// entity reads one MIME entity: a multipart's children, or a leaf.
func (w *walker) entity(h textproto.MIMEHeader, body io.Reader, depth int) {
	if w.parts >= MaxParts || w.entities >= MaxEntities {
		return
	}
	w.entities++
	ct, params, err := mime.ParseMediaType(h.Get("Content-Type"))
	if err != nil {
		ct, params = "text/plain", nil
	}
	if strings.HasPrefix(ct, "multipart/") {
		if depth >= MaxDepth || params["boundary"] == "" {
			return
		}
		mr := multipart.NewReader(body, params["boundary"])
		for w.parts < MaxParts && w.entities < MaxEntities {
			part, err := mr.NextRawPart()
			if err != nil {
				return // the end, or a broken multipart: keep what was read
			}
			w.entity(part.Header, part, depth+1)
		}
		return
	}
	w.parts++
	cte := strings.ToLower(strings.TrimSpace(h.Get("Content-Transfer-Encoding")))
	disp, dparams, _ := mime.ParseMediaType(h.Get("Content-Disposition"))
	if disp != "attachment" {
		switch {
		case ct == "text/html" && w.p.HTML == "":
			data, _ := io.ReadAll(io.LimitReader(transferDecoder(cte, body), DefaultMaxMessageBytes+1))
			w.p.HTML = bodyText(data)
			return
		case ct == "text/plain" && w.p.Text == "":
			data, _ := io.ReadAll(io.LimitReader(transferDecoder(cte, body), DefaultMaxMessageBytes+1))
			w.p.Text = truncate(bodyText(data), MaxTextBytes)
			return
		}
	}
	if len(w.p.Parts) >= MaxAttachments {
		return
	}
	// An attachment: its body as it stands in the message (multipart's
	// raw parts and net/mail's body are verbatim slices of it), then
	// decoded.
	enc, _ := io.ReadAll(io.LimitReader(body, DefaultMaxMessageBytes+1))
	data := enc
	if encodingName(cte) != "" {
		data, _ = io.ReadAll(transferDecoder(cte, bytes.NewReader(enc)))
	}
	name := fileName(dparams["filename"])
	if name == "" {
		name = fileName(params["name"])
	}
	if name == "" {
		name = fmt.Sprintf("part-%d", len(w.p.Parts)+1)
	}
	part := Part{Filename: name, ContentType: contentType(ct), Data: data, RawOffset: -1, Encoding: encodingName(cte)}
	// Where the encoded body is in the raw message. Any occurrence of the
	// same bytes decodes to the same data, so the first one after the
	// previous body is as good as the body's own.
	// A quoted-printable body longer than a page is not a range: no
	// decoded position maps to an encoded one, so every page of it would
	// decode all that comes before (a 25 MB attachment: ~100 ms of CPU
	// and the whole range read, for each 256 KB page); its decoded bytes
	// get a blob of their own and a page is one ranged read again.
	if part.Encoding == "quoted-printable" && len(enc) > AttachmentChunkBytes {
		w.p.Parts = append(w.p.Parts, part)
		return
	}
	if i := locate(w.raw, w.cursor, enc, &w.budget); i >= 0 {
		part.RawOffset, part.RawLength = int64(i), int64(len(enc))
		w.cursor = i + len(enc)
		if part.Encoding == "base64" && len(enc) > AttachmentChunkBytes {
			if chars, eol, ok := base64Layout(enc); ok {
				part.layout = fmt.Sprintf(" %d %d", chars, eol)
			}
		}
	}
	w.p.Parts = append(w.p.Parts, part)
}

// locateProbe is how much of a body locate looks for before comparing
// the rest: short enough for bytes.Index's bounded-cost search (longer
// patterns go through Rabin-Karp, whose 32-bit rolling hash a sender can
// make collide at every position of a repetitive stretch, each collision
// then costing a compare of the whole body: quadratic in the message).
const locateProbe = 32

// locate returns where enc occurs in raw at or after from, or -1. Each
// candidate (an occurrence of enc's first locateProbe bytes) costs
// len(enc) of *budget to verify; when the budget runs out locate gives
// up (-1: the part is stored as a blob of its own), so a message whose
// body prefix repeats all over (say a preamble of blank lines before a
// body of blank lines) costs a bounded amount of work, not
// (message size)² byte compares.
func locate(raw []byte, from int, enc []byte, budget *int) int {
	if from < 0 || from > len(raw) || len(enc) > len(raw)-from || *budget < 0 {
		return -1 // (a spent budget: the later parts are not looked for either)
	}
	if len(enc) == 0 {
		return from
	}
	probe := enc[:min(len(enc), locateProbe)]
	last := len(raw) - len(enc) // the last offset enc can start at
	for from <= last {
		i := bytes.Index(raw[from:last+len(probe)], probe)
		if i < 0 {
			return -1
		}
		at := from + i
		if *budget -= len(enc); *budget < 0 {
			return -1
		}
		if bytes.Equal(raw[at:at+len(enc)], enc) {
			return at
		}
		from = at + 1
	}
	return -1
}

// base64Layout reports whether enc is base64 in lines of the same number
// of characters (a multiple of 4), each ended by the same line break
// ("\r\n": 2, "\n": 1), with nothing else in it and padding only at
// the very end, a shorter last line of whole quanta allowed: then the
// quantum holding decoded byte k starts at a position computed from k,
// and decoding from there gives the bytes decoding from the start would.
func base64Layout(enc []byte) (chars, eol int, ok bool) {
	first := bytes.IndexByte(enc, '\n')
	if first <= 0 {
		return 0, 0, false
	}
	chars, eol = first, 1
	if enc[first-1] == '\r' {
		chars, eol = first-1, 2
	}
	if chars == 0 || chars%4 != 0 {
		return 0, 0, false
	}
	stride := chars + eol
	i := 0
	for ; i+stride <= len(enc); i += stride {
		if !base64Chars(enc[i:i+chars]) || enc[i+stride-1] != '\n' || eol == 2 && enc[i+chars] != '\r' {
			return 0, 0, false
		}
	}
	last := enc[i:]
	if eol == 2 {
		last = bytes.TrimSuffix(last, []byte("\r\n"))
	} else {
		last = bytes.TrimSuffix(last, []byte("\n"))
	}
	body := bytes.TrimSuffix(bytes.TrimSuffix(last, []byte("=")), []byte("="))
	if len(last)%4 != 0 || len(last) > chars || !base64Chars(body) {
		return 0, 0, false
	}
	return chars, eol, true
}

// base64Chars reports whether b holds base64 characters only (no padding).
func base64Chars(b []byte) bool {
	for _, ch := range b {
		if !(ch >= 'A' && ch <= 'Z' || ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' || ch == '+' || ch == '/') {
			return false
		}
	}
	return true
}

// encodingName is a Content-Transfer-Encoding as stored with a byte-range
// attachment: base64 and quoted-printable are decoded on read, anything
// else is read as it is (transferDecoder's rule).
func encodingName(cte string) string {
	switch cte {
	case "base64", "quoted-printable":
		return cte
	}
	return ""
}

// transferDecoder undoes a Content-Transfer-Encoding; an unknown one keeps
// the bytes as they are.
func transferDecoder(cte string, r io.Reader) io.Reader {
	switch strings.ToLower(strings.TrimSpace(cte)) {
	case "base64":
		return base64.NewDecoder(base64.StdEncoding, &base64Cleaner{r: r})
	case "quoted-printable":
		return quotedprintable.NewReader(r)
	}
	return r
}

// base64Cleaner drops everything but the base64 alphabet (line breaks,
// spaces, stray characters), as mail readers do.
type base64Cleaner struct{ r io.Reader }

func (c *base64Cleaner) Read(b []byte) (int, error) {
	for {
		n, err := c.r.Read(b)
		j := 0
		for _, ch := range b[:n] {
			if ch >= 'A' && ch <= 'Z' || ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' || ch == '+' || ch == '/' || ch == '=' {
				b[j] = ch
				j++
			}
		}
		if j > 0 || err != nil {
			return j, err
		}
	}
}

// msgIDs returns the message ids of a header (<id> <id> ...), without
// their brackets.
func msgIDs(v string) []string {
	var out []string
	for {
		i := strings.IndexByte(v, '<')
		if i < 0 {
			return out
		}
		j := strings.IndexByte(v[i:], '>')
		if j < 0 {
			return out
		}
		if id := strings.TrimSpace(v[i+1 : i+j]); id != "" {
			out = append(out, id)
		}
		v = v[i+j+1:]
	}
}

func firstMsgID(v string) string {
	if ids := msgIDs(v); len(ids) > 0 {
		return ids[0]
	}
	return strings.TrimSpace(v)
}

func addressText(h netmail.Header, key string, decode func(string) string) string {
	if l := addressList(h, key); len(l) > 0 {
		return l[0]
	}
	return headerText(decode(h.Get(key)))
}

func addressList(h netmail.Header, key string) []string {
	list, err := h.AddressList(key)
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(list))
	for _, a := range list {
		if s := headerText(a.String()); s != "" && len(out) < 100 {
			out = append(out, s)
		}
	}
	return out
}

// headerText makes s safe to store and show as one header value: valid
// UTF-8, no control characters (CR and LF included, so a value can never
// start another header when written back), at most MaxHeaderValueBytes.
func headerText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			if r == '\t' || r == '\r' || r == '\n' {
				return ' '
			}
			return -1
		}
		return r
	}, s)
	s = strings.Join(strings.Fields(s), " ")
	return truncate(s, MaxHeaderValueBytes)
}

// bodyText is a body as stored: valid UTF-8 without NUL, at most
// MaxBodyBytes.
func bodyText(b []byte) string {
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "")
	return truncate(s, MaxBodyBytes)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

func contentType(ct string) string {
	if ct == "" {
		return "application/octet-stream"
	}
	return headerText(ct)
}

// fileName keeps the last path element of a sender-chosen file name,
// without control characters.
func fileName(name string) string {
	name = headerText(name)
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	name = strings.TrimLeft(name, ". ")
	return truncate(name, 255)
}
