package storage

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// MaxBlobChunk is the most bytes one BlobChunk carries (256 KiB).
const MaxBlobChunk = 256 << 10

// ErrBlobChanged reports that an object changed (size or ETag) between two
// chunks of its export; restart that object from an empty cursor.
var ErrBlobChanged = errors.New("storage: blob changed during export")

// BlobChunk is one piece of one of the owner's objects.
type BlobChunk struct {
	// Name is the object's key after "<stableID>/<domain>/".
	Name   string
	Offset int64
	Size   int64
	ETag   string
	// Data holds at most MaxBlobChunk bytes, from Offset.
	Data []byte
	// Missing is set when the object disappeared before its first byte was
	// read; Data is empty.
	Missing bool
	// Next continues the export; empty after the last chunk of the last
	// object.
	Next string
}

type blobCursor struct {
	Domain string `json:"d"`
	Key    string `json:"k"`
	Offset int64  `json:"o"`
	Size   int64  `json:"s"`
	ETag   string `json:"e"`
}

// ExportBlobChunk returns the next chunk of the owner's objects in domain d,
// in key order. An empty cursor starts at the first object; when no object
// exists the chunk is zero and Next is empty. The cursor binds the key,
// size and ETag of the object being read, so an object overwritten between
// chunks yields ErrBlobChanged instead of bytes from two versions.
func ExportBlobChunk(ctx context.Context, b *blob.Bucket, o Owner, d BlobPrefix, cursor string) (BlobChunk, error) {
	prefix := blobPrefix(o, d.Domain)
	var cur blobCursor
	if cursor == "" {
		keys, err := ListBlobs(ctx, b, o, d)
		if err != nil || len(keys) == 0 {
			return BlobChunk{}, err
		}
		cur = blobCursor{Domain: d.Domain, Key: keys[0], Offset: 0, Size: -1}
	} else {
		raw, err := base64.RawURLEncoding.DecodeString(cursor)
		if err != nil || json.Unmarshal(raw, &cur) != nil || cur.Domain != d.Domain || !strings.HasPrefix(cur.Key, prefix) || cur.Offset < 0 {
			return BlobChunk{}, ErrInvalidCursor
		}
	}

	attrs, err := b.Attributes(ctx, cur.Key)
	switch {
	case gcerrors.Code(err) == gcerrors.NotFound && cur.Offset == 0:
		chunk := BlobChunk{Name: strings.TrimPrefix(cur.Key, prefix), Missing: true}
		chunk.Next, err = nextObject(ctx, b, o, d, cur.Key)
		return chunk, err
	case gcerrors.Code(err) == gcerrors.NotFound:
		return BlobChunk{}, fmt.Errorf("%w: %s was deleted", ErrBlobChanged, strings.TrimPrefix(cur.Key, prefix))
	case err != nil && cursor != "" && !ownerHasKey(ctx, b, o, d, cur.Key):
		// A cursor naming a key the owner does not have (a forged one the
		// store cannot even stat) is the caller's mistake, not ours.
		return BlobChunk{}, ErrInvalidCursor
	case err != nil:
		return BlobChunk{}, fmt.Errorf("storage: export blob: %w", err)
	}
	if cur.Size >= 0 && (attrs.Size != cur.Size || attrs.ETag != cur.ETag) {
		return BlobChunk{}, fmt.Errorf("%w: %s", ErrBlobChanged, strings.TrimPrefix(cur.Key, prefix))
	}
	if cur.Offset > attrs.Size {
		return BlobChunk{}, ErrInvalidCursor
	}
	n := min(int64(MaxBlobChunk), attrs.Size-cur.Offset)
	data := make([]byte, 0, n)
	if n > 0 {
		r, err := b.NewRangeReader(ctx, cur.Key, cur.Offset, n, nil)
		if err != nil {
			return BlobChunk{}, fmt.Errorf("storage: export blob: %w", err)
		}
		data, err = io.ReadAll(r)
		r.Close()
		if err != nil {
			return BlobChunk{}, fmt.Errorf("storage: export blob: %w", err)
		}
	}
	chunk := BlobChunk{Name: strings.TrimPrefix(cur.Key, prefix), Offset: cur.Offset, Size: attrs.Size, ETag: attrs.ETag, Data: data}
	if end := cur.Offset + int64(len(data)); end < attrs.Size {
		chunk.Next = encodeBlobCursor(blobCursor{Domain: d.Domain, Key: cur.Key, Offset: end, Size: attrs.Size, ETag: attrs.ETag})
		return chunk, nil
	}
	chunk.Next, err = nextObject(ctx, b, o, d, cur.Key)
	return chunk, err
}

// ownerHasKey says whether key is one of o's objects in d. When the
// listing itself fails it answers true, so that the store's error is
// reported rather than blamed on the cursor.
func ownerHasKey(ctx context.Context, b *blob.Bucket, o Owner, d BlobPrefix, key string) bool {
	keys, err := ListBlobs(ctx, b, o, d)
	return err != nil || slices.Contains(keys, key)
}

// nextObject returns a cursor at the start of the first object after key.
func nextObject(ctx context.Context, b *blob.Bucket, o Owner, d BlobPrefix, key string) (string, error) {
	keys, err := ListBlobs(ctx, b, o, d)
	if err != nil {
		return "", err
	}
	for _, k := range keys {
		if k > key {
			return encodeBlobCursor(blobCursor{Domain: d.Domain, Key: k, Size: -1}), nil
		}
	}
	return "", nil
}

func encodeBlobCursor(c blobCursor) string {
	raw, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(raw)
}
