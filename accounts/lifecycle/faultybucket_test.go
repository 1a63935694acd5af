package lifecycle_test

import (
	"context"
	"errors"
	"sync/atomic"

	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/gcerrors"
)

// faultyBucket is a blob driver over a real bucket whose Delete fails while
// failDeletes is set: the injected storage failure of the retry test.
type faultyBucket struct {
	b           *blob.Bucket
	failDeletes atomic.Bool
}

var errInjected = errors.New("injected blob failure")

func (f *faultyBucket) ErrorCode(err error) gcerrors.ErrorCode { return gcerrors.Code(err) }
func (f *faultyBucket) As(any) bool                            { return false }
func (f *faultyBucket) ErrorAs(error, any) bool                { return false }
func (f *faultyBucket) Close() error                           { return f.b.Close() }

func (f *faultyBucket) Attributes(ctx context.Context, key string) (*driver.Attributes, error) {
	a, err := f.b.Attributes(ctx, key)
	if err != nil {
		return nil, err
	}
	return &driver.Attributes{ContentType: a.ContentType, Metadata: a.Metadata, ModTime: a.ModTime, Size: a.Size, MD5: a.MD5, ETag: a.ETag}, nil
}

func (f *faultyBucket) ListPaged(ctx context.Context, opts *driver.ListOptions) (*driver.ListPage, error) {
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

type reader struct{ *blob.Reader }

func (r reader) Attributes() *driver.ReaderAttributes {
	return &driver.ReaderAttributes{ContentType: r.ContentType(), ModTime: r.ModTime(), Size: r.Size()}
}
func (r reader) As(any) bool { return false }

func (f *faultyBucket) NewRangeReader(ctx context.Context, key string, offset, length int64, _ *driver.ReaderOptions) (driver.Reader, error) {
	r, err := f.b.NewRangeReader(ctx, key, offset, length, nil)
	if err != nil {
		return nil, err
	}
	return reader{r}, nil
}

func (f *faultyBucket) NewTypedWriter(ctx context.Context, key, contentType string, opts *driver.WriterOptions) (driver.Writer, error) {
	return f.b.NewWriter(ctx, key, &blob.WriterOptions{ContentType: contentType, Metadata: opts.Metadata})
}

func (f *faultyBucket) Copy(ctx context.Context, dst, src string, _ *driver.CopyOptions) error {
	return f.b.Copy(ctx, dst, src, nil)
}

func (f *faultyBucket) Delete(ctx context.Context, key string, _ *driver.DeleteOptions) error {
	if f.failDeletes.Load() {
		return errInjected
	}
	return f.b.Delete(ctx, key)
}

func (f *faultyBucket) SignedURL(context.Context, string, *driver.SignedURLOptions) (string, error) {
	return "", errors.New("not supported")
}
