package mail_test

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"

	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/gcerrors"

	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// breakingBucket is a blob driver over a real bucket whose first writer
// stops in its first Write until release is closed, then writes half of
// the bytes and fails: a disk filling up or a connection dropping in the
// middle of an upload. Like the file driver, its writers commit what was
// written on Close unless their context was cancelled.
type breakingBucket struct {
	b       *blob.Bucket
	writers atomic.Int32
	writing chan struct{} // closed when the first writer's Write begins
	release chan struct{}
}

var errDiskFull = errors.New("injected: no space left on device")

func (f *breakingBucket) ErrorCode(err error) gcerrors.ErrorCode { return gcerrors.Code(err) }
func (f *breakingBucket) As(any) bool                            { return false }
func (f *breakingBucket) ErrorAs(error, any) bool                { return false }
func (f *breakingBucket) Close() error                           { return f.b.Close() }

func (f *breakingBucket) Attributes(ctx context.Context, key string) (*driver.Attributes, error) {
	a, err := f.b.Attributes(ctx, key)
	if err != nil {
		return nil, err
	}
	return &driver.Attributes{ContentType: a.ContentType, Metadata: a.Metadata, ModTime: a.ModTime, Size: a.Size, MD5: a.MD5, ETag: a.ETag}, nil
}

func (f *breakingBucket) ListPaged(ctx context.Context, opts *driver.ListOptions) (*driver.ListPage, error) {
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

type breakingReader struct{ *blob.Reader }

func (r breakingReader) Attributes() *driver.ReaderAttributes {
	return &driver.ReaderAttributes{ContentType: r.ContentType(), ModTime: r.ModTime(), Size: r.Size()}
}
func (r breakingReader) As(any) bool { return false }

func (f *breakingBucket) NewRangeReader(ctx context.Context, key string, offset, length int64, _ *driver.ReaderOptions) (driver.Reader, error) {
	r, err := f.b.NewRangeReader(ctx, key, offset, length, nil)
	if err != nil {
		return nil, err
	}
	return breakingReader{r}, nil
}

type breakingWriter struct {
	*blob.Writer
	f *breakingBucket
}

func (w breakingWriter) Write(p []byte) (int, error) {
	close(w.f.writing)
	<-w.f.release
	n, _ := w.Writer.Write(p[:len(p)/2])
	return n, errDiskFull
}

func (f *breakingBucket) NewTypedWriter(ctx context.Context, key, contentType string, opts *driver.WriterOptions) (driver.Writer, error) {
	w, err := f.b.NewWriter(ctx, key, &blob.WriterOptions{ContentType: contentType, Metadata: opts.Metadata})
	if err != nil {
		return nil, err
	}
	if f.writers.Add(1) == 1 {
		return breakingWriter{w, f}, nil
	}
	return w, nil
}

func (f *breakingBucket) Copy(ctx context.Context, dst, src string, _ *driver.CopyOptions) error {
	return f.b.Copy(ctx, dst, src, nil)
}

func (f *breakingBucket) Delete(ctx context.Context, key string, _ *driver.DeleteOptions) error {
	return f.b.Delete(ctx, key)
}

func (f *breakingBucket) SignedURL(context.Context, string, *driver.SignedURLOptions) (string, error) {
	return "", errors.New("not supported")
}

// TestMailReviewFailedBlobWriteLeavesNoPartialBlob: two identical
// deliveries race (a sender retrying while its first attempt is still
// being stored): both write the same blob keys. The first stores the
// message; the second's raw MIME write fails half way. The stored
// message's blobs must stay whole: a failed write is abandoned, never
// committed with the half it wrote over the winner's bytes.
func TestMailReviewFailedBlobWriteLeavesNoPartialBlob(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		f := &breakingBucket{b: s.Bucket, writing: make(chan struct{}), release: make(chan struct{})}
		s.Bucket = blob.NewBucket(f)
		e := newEnv(t, s, mail.Config{})
		alice := e.user("alice")
		payload := []byte("the whole attachment, every byte of it")
		raw := message("retry@elsewhere.test", "retried", "", "Hello.", payload)

		failed := make(chan error, 1)
		go func() {
			_, err := e.svc.Deliver(t.Context(), mail.Delivery{Recipient: "alice@" + domain, Raw: raw})
			failed <- err
		}()
		<-f.writing // the retry is half way through its raw MIME
		d, err := e.svc.Deliver(t.Context(), mail.Delivery{Recipient: "alice@" + domain, Raw: raw})
		if err != nil || d.Duplicate {
			t.Fatalf("first delivery: %+v, %v", d, err)
		}
		close(f.release)
		if err := <-failed; !errors.Is(err, errDiskFull) {
			t.Fatalf("the broken delivery: %v, want the injected failure", err)
		}

		// Every blob is whole: the raw MIME or the attachment, not half of one.
		it := s.Bucket.List(nil)
		for {
			obj, err := it.Next(t.Context())
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			b, err := s.Bucket.ReadAll(t.Context(), obj.Key)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != string(raw) && string(b) != string(payload) {
				t.Errorf("blob %s holds %d bytes, neither the message (%d) nor its attachment (%d): a failed write was committed", obj.Key, len(b), len(raw), len(payload))
			}
		}
		l := must[mail.ListOutput](e, alice, "mailList", map[string]any{})
		if len(l.Messages) != 1 {
			t.Fatalf("messages: %+v", l.Messages)
		}
	})
}
