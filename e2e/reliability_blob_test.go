package e2e

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/gcerrors"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/web"
)

// Blob store modes of faultBucket.
const (
	blobOK int32 = iota
	blobFail
	blobStall
)

// faultBucket is a blob driver over a real bucket that, by mode, passes
// every operation through, fails it, or stalls it until the caller's
// context ends.
type faultBucket struct {
	b    *blob.Bucket
	mode atomic.Int32
	hits atomic.Int64 // operations failed or stalled
}

var errInjected = errors.New("injected blob fault")

func (f *faultBucket) fault(ctx context.Context) error {
	switch f.mode.Load() {
	case blobFail:
		f.hits.Add(1)
		return errInjected
	case blobStall:
		f.hits.Add(1)
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (f *faultBucket) ErrorCode(err error) gcerrors.ErrorCode { return gcerrors.Code(err) }
func (f *faultBucket) As(any) bool                            { return false }
func (f *faultBucket) ErrorAs(error, any) bool                { return false }
func (f *faultBucket) Close() error                           { return f.b.Close() }

func (f *faultBucket) Attributes(ctx context.Context, key string) (*driver.Attributes, error) {
	if err := f.fault(ctx); err != nil {
		return nil, err
	}
	a, err := f.b.Attributes(ctx, key)
	if err != nil {
		return nil, err
	}
	return &driver.Attributes{ContentType: a.ContentType, Metadata: a.Metadata, ModTime: a.ModTime, Size: a.Size, MD5: a.MD5, ETag: a.ETag}, nil
}

func (f *faultBucket) ListPaged(ctx context.Context, opts *driver.ListOptions) (*driver.ListPage, error) {
	if err := f.fault(ctx); err != nil {
		return nil, err
	}
	token := opts.PageToken
	if len(token) == 0 {
		token = blob.FirstPageToken
	}
	objs, next, err := f.b.ListPage(ctx, token, max(opts.PageSize, 1), &blob.ListOptions{Prefix: opts.Prefix, Delimiter: opts.Delimiter})
	if err != nil {
		return nil, err
	}
	page := &driver.ListPage{NextPageToken: next}
	for _, o := range objs {
		page.Objects = append(page.Objects, &driver.ListObject{Key: o.Key, ModTime: o.ModTime, Size: o.Size, MD5: o.MD5, IsDir: o.IsDir})
	}
	return page, nil
}

type blobReader struct{ *blob.Reader }

func (r blobReader) Attributes() *driver.ReaderAttributes {
	return &driver.ReaderAttributes{ContentType: r.ContentType(), ModTime: r.ModTime(), Size: r.Size()}
}
func (r blobReader) As(any) bool { return false }

func (f *faultBucket) NewRangeReader(ctx context.Context, key string, offset, length int64, _ *driver.ReaderOptions) (driver.Reader, error) {
	if err := f.fault(ctx); err != nil {
		return nil, err
	}
	r, err := f.b.NewRangeReader(ctx, key, offset, length, nil)
	if err != nil {
		return nil, err
	}
	return blobReader{r}, nil
}

func (f *faultBucket) NewTypedWriter(ctx context.Context, key, contentType string, opts *driver.WriterOptions) (driver.Writer, error) {
	if err := f.fault(ctx); err != nil {
		return nil, err
	}
	return f.b.NewWriter(ctx, key, &blob.WriterOptions{ContentType: contentType, Metadata: opts.Metadata})
}

func (f *faultBucket) Copy(ctx context.Context, dst, src string, _ *driver.CopyOptions) error {
	if err := f.fault(ctx); err != nil {
		return err
	}
	return f.b.Copy(ctx, dst, src, nil)
}

func (f *faultBucket) Delete(ctx context.Context, key string, _ *driver.DeleteOptions) error {
	if err := f.fault(ctx); err != nil {
		return err
	}
	return f.b.Delete(ctx, key)
}

func (f *faultBucket) SignedURL(context.Context, string, *driver.SignedURLOptions) (string, error) {
	return "", errors.New("not supported")
}

// TestFaultBlobStore makes the blob store fail, then stall, under MCP
// export calls and a web account deletion; then brings it back and
// retries the deletion.
func TestFaultBlobStore(t *testing.T) {
	ctx := t.Context()
	fb := &faultBucket{}
	l := startLive(t, enclave.Config{DataDir: t.TempDir()}, func(srv *enclave.Server) {
		fb.b = srv.Store().Bucket
		srv.Store().Bucket = blob.NewBucket(fb)
		if err := srv.Inventory().AddBlobPrefix(storage.BlobPrefix{Domain: "files"}); err != nil {
			t.Fatal(err)
		}
	})
	s, webc := l.agent(t, "alice")
	u, err := l.srv.Accounts().Identity.UserByUsername(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	owner := storage.Owner{ID: u.ID, StableID: u.StableID}
	key := storage.BlobKey(owner, "files", "a.bin")
	if err := l.srv.Store().Bucket.WriteAll(ctx, key, []byte(strings.Repeat("x", 1000)), nil); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Call(ctx, "accountExportSection", map[string]any{"section": "blob:files"}); err != nil || r.IsError {
		t.Fatalf("export before the fault: %v %s", err, r.Text())
	}
	base := stableGoroutines()

	// Failing: tool errors with a request id, no detail; no 5xx.
	fb.mode.Store(blobFail)
	// The manifest degrades: it names the section it could not list.
	r, err := s.Call(ctx, "accountExportManifest", map[string]any{})
	if err != nil || r.IsError || !strings.Contains(r.Text(), "blob:files could not be listed") || strings.Contains(r.Text(), "injected") {
		t.Fatalf("manifest with the blob store failing: %v %s", err, r.Text())
	}
	r, err = s.Call(ctx, "accountExportSection", map[string]any{"section": "blob:files"})
	if err != nil || !r.IsError || strings.Contains(r.Text(), "injected") || !strings.Contains(r.Text(), "request id") {
		t.Fatalf("section with the blob store failing: %v %s", err, r.Text())
	}
	// The deletion stops with the account marked and the data kept.
	status, body, err := webc.PostForm(ctx, "/account/delete", url.Values{"confirm": {"alice"}, "password": {"a long password for alice"}})
	if err != nil {
		t.Fatal(err)
	}
	if status < 500 || !strings.Contains(body, "could not be deleted completely") || strings.Contains(body, "injected") {
		t.Fatalf("deletion with the blob store failing: %d %.300s", status, body)
	}
	if u, err := l.srv.Accounts().Identity.UserByID(ctx, owner.ID); err != nil || u.State() != accounts.StateDeleting {
		t.Fatalf("after the failed deletion: %v %v", u.State(), err)
	}
	if ok, err := fb.b.Exists(ctx, key); err != nil || !ok {
		t.Fatalf("blob gone after a failed deletion: %v %v", ok, err)
	}
	// A deleting account's writes are refused.
	if r, err := s.Call(ctx, "secretSet", map[string]any{"name": "late", "value": "v"}); err == nil && !r.IsError {
		t.Fatal("a write was accepted for an account being deleted")
	}

	// Stalling: the client's deadline ends the request; nothing stays
	// behind.
	fb.mode.Store(blobStall)
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	_, err = s.Call(cctx, "accountExportSection", map[string]any{"section": "blob:files"})
	cancel()
	if err == nil {
		t.Fatal("a call completed while the blob store stalled")
	}
	if fb.hits.Load() == 0 {
		t.Fatal("the stall was never reached")
	}
	fb.mode.Store(blobOK)
	l.ts.CloseClientConnections()
	goroutinesSettle(t, base, 10)

	// Back: the deletion completes on retry (what `enclave user delete`
	// runs), blobs included.
	res, err := l.srv.Lifecycle().Delete(ctx, owner)
	if err != nil {
		t.Fatalf("retried deletion: %v", err)
	}
	if ok, _ := fb.b.Exists(ctx, key); ok || res.Deleted["blob:files"] != 1 {
		t.Fatalf("after the retry: blob exists %v, result %+v", ok, res.Deleted)
	}
	if _, err := l.srv.Accounts().Identity.UserByID(ctx, owner.ID); !errors.Is(err, accounts.ErrNotFound) {
		t.Fatalf("account after the retried deletion: %v", err)
	}
}

// fakeSMTP is a minimal plaintext SMTP server on loopback that keeps what
// it receives.
type fakeSMTP struct {
	ln   net.Listener
	got  chan string // each message, when there is room
	done chan struct{}

	mu    sync.Mutex
	mails []string
}

// all returns every message received so far.
func (f *fakeSMTP) all() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.mails)
}

func startFakeSMTP(t *testing.T, addr string) *fakeSMTP {
	t.Helper()
	var ln net.Listener
	var err error
	for range 50 { // the port was just released
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeSMTP{ln: ln, got: make(chan string, 16), done: make(chan struct{})}
	go func() {
		defer close(f.done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go f.session(c)
		}
	}()
	t.Cleanup(func() { ln.Close(); <-f.done })
	return f
}

func (f *fakeSMTP) session(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 0, 4096)
	tmp := make([]byte, 4096)
	write := func(s string) { _, _ = c.Write([]byte(s + "\r\n")) }
	write("220 fake ESMTP")
	inData := false
	var data strings.Builder
	for {
		n, err := c.Read(tmp)
		if err != nil {
			return
		}
		buf = append(buf, tmp[:n]...)
		for {
			i := strings.Index(string(buf), "\r\n")
			if i < 0 {
				break
			}
			line := string(buf[:i])
			buf = buf[i+2:]
			if inData {
				if line == "." {
					inData = false
					f.mu.Lock()
					f.mails = append(f.mails, data.String())
					f.mu.Unlock()
					select {
					case f.got <- data.String():
					default:
					}
					data.Reset()
					write("250 ok")
					continue
				}
				data.WriteString(line + "\n")
				continue
			}
			switch cmd := strings.ToUpper(strings.SplitN(line, " ", 2)[0]); cmd {
			case "EHLO", "HELO":
				write("250 fake")
			case "DATA":
				inData = true
				write("354 go ahead")
			case "QUIT":
				write("221 bye")
				return
			default:
				write("250 ok")
			}
		}
	}
}

// TestFaultMailServerDown signs up while the mail server is down: the
// signup succeeds, the verification mail waits in the outbox, and goes out
// when the server comes up, without a restart.
func TestFaultMailServerDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // down: connections are refused
	mailer, err := web.NewSMTPMailer(web.SMTPConfig{Addr: addr, From: "enclave@example.com", Security: web.SMTPPlaintext})
	if err != nil {
		t.Fatal(err)
	}
	l := startLive(t, enclave.Config{DataDir: t.TempDir(), Mailer: mailer})
	ctx := t.Context()
	base := stableGoroutines()
	c := l.newWeb()
	status, body, err := c.PostForm(ctx, "/signup", url.Values{"email": {"new@example.com"}, "username": {"newcomer"}, "password": {"a long enough password"}})
	if err != nil || status != http.StatusOK {
		t.Fatalf("signup with the mail server down: %d %v %.200s", status, err, body)
	}
	// At least one delivery attempt fails while the server is down.
	deadline := time.Now().Add(10 * time.Second)
	var attempts int
	for attempts == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		_ = l.srv.Store().DB.NewSelect().Table("outbox").ColumnExpr("coalesce(max(attempts), 0)").Scan(ctx, &attempts)
	}
	if attempts == 0 {
		t.Fatal("no delivery attempt while the mail server was down")
	}
	smtp := startFakeSMTP(t, addr)
	select {
	case msg := <-smtp.got:
		if !strings.Contains(msg, "new@example.com") || !strings.Contains(msg, "verify-email") {
			t.Fatalf("delivered: %.500s", msg)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the mail was not delivered within 30 s of the server's return")
	}
	var pending int
	deadline = time.Now().Add(5 * time.Second)
	for {
		if err := l.srv.Store().DB.NewSelect().Table("outbox").ColumnExpr("count(*)").Scan(ctx, &pending); err != nil {
			t.Fatal(err)
		}
		if pending == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if pending != 0 {
		t.Fatalf("outbox rows after delivery: %d", pending)
	}
	t.Logf("mail delivered after %d failed attempt(s)", attempts)
	l.ts.CloseClientConnections()
	goroutinesSettle(t, base, 10)
}
