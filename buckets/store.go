package buckets

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
)

// Entry is one stored value.
type Entry struct {
	Key       string          `json:"key"`
	Value     json.RawMessage `json:"value"`
	Revision  int64           `json:"revision"`
	UpdatedAt time.Time       `json:"updatedAt"`
}

// KeyInfo is a key as a listing shows it: no value.
type KeyInfo struct {
	Key      string `json:"key" bun:"entry_key"`
	Revision int64  `json:"revision" bun:"revision"`
	Bytes    int64  `json:"bytes" bun:"bytes" jsonschema:"the key's and the value's bytes, as charged to your budget"`
}

// Bucket is one bucket as storageBuckets lists it.
type Bucket struct {
	StorageID string    `json:"storageId" bun:"storage_id"`
	Kind      string    `json:"kind" bun:"kind" jsonschema:"whose bucket it is: a code run's, a package's, a job's, or one you named" schema:"enum=exec|package|job|named"`
	Bytes     int64     `json:"bytes" bun:"bytes"`
	Keys      int64     `json:"keys" bun:"key_count"`
	CreatedAt time.Time `json:"createdAt" bun:"created_at"`
	UpdatedAt time.Time `json:"updatedAt" bun:"updated_at"`
}

// Usage is a user's use of their budget.
type Usage struct {
	Bytes    int64 `json:"bytes"`
	Keys     int64 `json:"keys"`
	MaxBytes int64 `json:"maxBytes"`
	MaxKeys  int64 `json:"maxKeys"`
}

// Op is one operation of Transact: a set (the default) or a delete of Key.
// IfRevision, when set, makes it conditional: the key must have that
// revision, or not exist when it is 0.
type Op struct {
	Delete     bool
	Key        string
	Value      json.RawMessage
	IfRevision *int64
}

// OpResult is what one operation of Transact did: the revision a set
// wrote, or whether a delete removed a key.
type OpResult struct {
	Key      string `json:"key"`
	Revision int64  `json:"revision,omitempty" jsonschema:"the new revision (a set)"`
	Deleted  bool   `json:"deleted,omitempty" jsonschema:"whether the key existed (a delete)"`
}

// Get returns the entry at key in o's bucket storageID; ok is false when
// there is none.
func (s *Service) Get(ctx context.Context, o storage.Owner, storageID, key string) (e Entry, ok bool, err error) {
	if _, err := ParseID(storageID); err != nil {
		return e, false, err
	}
	if err := checkKey(key); err != nil {
		return e, false, err
	}
	var row struct {
		Value     string    `bun:"value"`
		Revision  int64     `bun:"revision"`
		UpdatedAt time.Time `bun:"updated_at"`
	}
	err = s.store.Reader.NewSelect().TableExpr("storage_entries AS e").
		Join("JOIN storage_buckets AS b ON b.id = e.bucket_id").
		ColumnExpr("e.value, e.revision, e.updated_at").
		Where("b.user_id = ? AND b.storage_id = ?", o.ID, storageID).
		Where("e.user_id = ? AND e.entry_key = ?", o.ID, key).
		Scan(ctx, &row)
	if errors.Is(err, sql.ErrNoRows) {
		return e, false, nil
	}
	if err != nil {
		return e, false, fmt.Errorf("buckets: get: %w", err)
	}
	return Entry{Key: key, Value: json.RawMessage(row.Value), Revision: row.Revision, UpdatedAt: row.UpdatedAt.UTC()}, true, nil
}

// Set stores value at key in o's bucket storageID (created on first
// write) and returns the entry's new revision. With ifRevision set, the
// key must have that revision (0: must not exist), else it answers
// CodeConflict and writes nothing.
func (s *Service) Set(ctx context.Context, o storage.Owner, storageID, key string, value json.RawMessage, ifRevision *int64) (int64, error) {
	res, err := s.Transact(ctx, o, storageID, []Op{{Key: key, Value: value, IfRevision: ifRevision}})
	if err != nil {
		return 0, err
	}
	return res[0].Revision, nil
}

// Delete removes key from o's bucket storageID and reports whether it
// existed. ifRevision makes it conditional, as for Set.
func (s *Service) Delete(ctx context.Context, o storage.Owner, storageID, key string, ifRevision *int64) (bool, error) {
	res, err := s.Transact(ctx, o, storageID, []Op{{Delete: true, Key: key, IfRevision: ifRevision}})
	if err != nil {
		return false, err
	}
	return res[0].Deleted, nil
}

// Transact applies ops to o's bucket storageID in one transaction, all or
// none: a failed condition answers CodeConflict, a write past the budget
// CodeQuotaExceeded, and then nothing is written. Each key appears once.
// Every set of one call gets the same revision.
func (s *Service) Transact(ctx context.Context, o storage.Owner, storageID string, ops []Op) ([]OpResult, error) {
	id, err := ParseID(storageID)
	if err != nil {
		return nil, err
	}
	if len(ops) == 0 || len(ops) > MaxTransactOps {
		return nil, invalid("a transaction has 1 to %d operations", MaxTransactOps)
	}
	keys := make([]string, 0, len(ops))
	seen := make(map[string]bool, len(ops))
	total := 0
	for i, op := range ops {
		if total += len(op.Value); total > MaxTransactBytes {
			return nil, invalid("the values of one transaction are at most %d MiB together", MaxTransactBytes>>20)
		}
		if err := checkKey(op.Key); err != nil {
			return nil, err
		}
		if seen[op.Key] {
			return nil, invalid("key %s appears twice in one transaction", quote(op.Key))
		}
		seen[op.Key] = true
		keys = append(keys, op.Key)
		if op.IfRevision != nil && *op.IfRevision < 0 {
			return nil, invalid("ifRevision is a revision, or 0 for a key that must not exist")
		}
		if !op.Delete {
			if err := checkValue(op.Value); err != nil {
				if len(ops) > 1 {
					return nil, invalid("operation %d: %s", i+1, errMessage(err))
				}
				return nil, err
			}
		}
	}

	results := make([]OpResult, len(ops))
	now := time.Now().UTC()
	maxBytes, byPlan, err := s.maxBytes(ctx, o.ID)
	if err != nil {
		return nil, err
	}
	err = s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		u, err := lockUsage(ctx, tx, o.ID, now)
		if err != nil {
			return err
		}
		bucketID, err := upsertBucket(ctx, tx, o.ID, id, now)
		if err != nil {
			return err
		}
		var old []struct {
			Key      string `bun:"entry_key"`
			Bytes    int64  `bun:"bytes"`
			Revision int64  `bun:"revision"`
		}
		if err := tx.NewSelect().Table("storage_entries").Column("entry_key", "bytes", "revision").
			Where("user_id = ? AND bucket_id = ? AND entry_key IN (?)", o.ID, bucketID, bun.In(keys)).Scan(ctx, &old); err != nil {
			return fmt.Errorf("buckets: read entries: %w", err)
		}
		type prior struct{ bytes, revision int64 }
		have := make(map[string]prior, len(old))
		for _, e := range old {
			have[e.Key] = prior{e.Bytes, e.Revision}
		}
		var dBytes, dKeys int64
		for i, op := range ops {
			p, exists := have[op.Key]
			if err := checkCondition(op, p.revision, exists); err != nil {
				return err
			}
			results[i].Key = op.Key
			switch {
			case op.Delete && exists:
				dBytes -= p.bytes
				dKeys--
				results[i].Deleted = true
			case !op.Delete:
				dBytes += entryBytes(op.Key, op.Value)
				if exists {
					dBytes -= p.bytes
				} else {
					dKeys++
				}
				results[i].Revision = u.revision
			}
		}
		if err := s.reserve(ctx, tx, o.ID, u, dBytes, dKeys, maxBytes, byPlan, now); err != nil {
			return err
		}
		for _, op := range ops {
			if op.Delete {
				if _, err := tx.NewRaw("DELETE FROM storage_entries WHERE user_id = ? AND bucket_id = ? AND entry_key = ?", o.ID, bucketID, op.Key).Exec(ctx); err != nil {
					return fmt.Errorf("buckets: delete entry: %w", err)
				}
				continue
			}
			if _, err := tx.NewRaw(`INSERT INTO storage_entries (user_id, bucket_id, entry_key, value, bytes, revision, updated_at)
				VALUES (?, ?, ?, ?, ?, ?, ?)
				ON CONFLICT (bucket_id, entry_key) DO UPDATE SET value = excluded.value, bytes = excluded.bytes,
					revision = excluded.revision, updated_at = excluded.updated_at`,
				o.ID, bucketID, op.Key, string(op.Value), entryBytes(op.Key, op.Value), u.revision, now).Exec(ctx); err != nil {
				return fmt.Errorf("buckets: write entry: %w", err)
			}
		}
		if _, err := tx.NewRaw("UPDATE storage_buckets SET bytes = bytes + ?, key_count = key_count + ?, updated_at = ? WHERE user_id = ? AND id = ?",
			dBytes, dKeys, now, o.ID, bucketID).Exec(ctx); err != nil {
			return fmt.Errorf("buckets: count bucket: %w", err)
		}
		return removeIfEmpty(ctx, tx, o.ID, bucketID)
	})
	if err != nil {
		return nil, err
	}
	return results, nil
}

// entryBytes is what an entry costs: its key and its value.
func entryBytes(key string, value json.RawMessage) int64 { return int64(len(key) + len(value)) }

func checkCondition(op Op, revision int64, exists bool) error {
	if op.IfRevision == nil {
		return nil
	}
	want := *op.IfRevision
	switch {
	case want == 0 && exists:
		return capabilities.Errorf(capabilities.CodeConflict, "key %s already exists (revision %d)", quote(op.Key), revision)
	case want != 0 && !exists:
		return capabilities.Errorf(capabilities.CodeConflict, "key %s does not exist (expected revision %d)", quote(op.Key), want)
	case want != 0 && revision != want:
		return capabilities.Errorf(capabilities.CodeConflict, "key %s has changed: its revision is %d, not %d", quote(op.Key), revision, want)
	}
	return nil
}

// usageRow is a user's counters as a write transaction found them.
type usageRow struct {
	bytes, keys, revision int64
}

// errAccountGone answers a write whose account was marked deleting (or
// deleted) after Registry.Invoke checked it: the write's own transaction
// checks again, so nothing is written once the mark is committed.
var errAccountGone = capabilities.Errorf(capabilities.CodeAccountDeleting, "this account is being deleted; only reads are allowed")

// lockUsage takes the user's counter row for the rest of tx (creating it
// at zero), advancing its revision: every write of one user runs after
// the previous one committed, on both dialects. It refuses, with
// errAccountGone, an account that is marked deleting or gone: a write
// that passed Invoke's check just before the mark cannot add rows behind
// the deletion (and one that races the deletion's own transaction fails
// on the users foreign key).
func lockUsage(ctx context.Context, tx bun.Tx, userID int64, now time.Time) (usageRow, error) {
	var u usageRow
	err := tx.NewRaw(`INSERT INTO storage_usage (user_id, bytes, key_count, revision, updated_at)
		SELECT ?, 0, 0, 1, ? WHERE EXISTS (SELECT 1 FROM users WHERE id = ? AND deleting_at IS NULL)
		ON CONFLICT (user_id) DO UPDATE SET revision = storage_usage.revision + 1, updated_at = excluded.updated_at
		RETURNING bytes, key_count, revision`, userID, now, userID).Scan(ctx, &u.bytes, &u.keys, &u.revision)
	if errors.Is(err, sql.ErrNoRows) {
		return u, errAccountGone
	}
	if err != nil {
		return u, fmt.Errorf("buckets: lock usage: %w", err)
	}
	return u, nil
}

// reserve charges dBytes and dKeys to the user's counters, within
// maxBytes (byPlan: the account's plan's storage bytes). The limit is
// checked by the UPDATE itself, in the transaction that holds the
// counter row (lockUsage), so two writers cannot both take the last
// bytes; a write that shrinks usage always passes, even over a lowered
// limit.
func (s *Service) reserve(ctx context.Context, tx bun.Tx, userID int64, u usageRow, dBytes, dKeys, maxBytes int64, byPlan bool, now time.Time) error {
	maxKeys := s.cfg.MaxKeys
	res, err := tx.NewRaw(`UPDATE storage_usage SET bytes = bytes + ?, key_count = key_count + ?, updated_at = ?
		WHERE user_id = ? AND (? <= 0 OR bytes + ? <= ?) AND (? <= 0 OR key_count + ? <= ?)`,
		dBytes, dKeys, now, userID, dBytes, dBytes, maxBytes, dKeys, dKeys, maxKeys).Exec(ctx)
	if err != nil {
		return fmt.Errorf("buckets: reserve: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("buckets: reserve: %w", err)
	} else if n == 1 {
		return nil
	}
	if dBytes > 0 && u.bytes+dBytes > maxBytes && byPlan {
		return capabilities.Errorf(capabilities.CodeQuotaExceeded,
			"storage limit of your plan reached: it allows %d bytes, %d are in use, and this write needs %d more; delete keys or drop buckets (storageBuckets lists them) to make room, or ask an admin for a larger plan",
			maxBytes, u.bytes, dBytes)
	}
	if dBytes > 0 && u.bytes+dBytes > maxBytes {
		return capabilities.Errorf(capabilities.CodeQuotaExceeded,
			"storage budget exceeded: this write needs %d more bytes, and %d of your %d bytes are in use; delete keys or drop buckets (storageBuckets lists them) to make room",
			dBytes, u.bytes, maxBytes)
	}
	return capabilities.Errorf(capabilities.CodeQuotaExceeded,
		"storage key limit reached: this write adds %d keys, and %d of your %d keys are in use; delete keys or drop buckets (storageBuckets lists them) to make room",
		dKeys, u.keys, maxKeys)
}

// upsertBucket returns the id of the user's bucket, creating it.
func upsertBucket(ctx context.Context, tx bun.Tx, userID int64, id ID, now time.Time) (int64, error) {
	var bucketID int64
	err := tx.NewRaw(`INSERT INTO storage_buckets (user_id, storage_id, kind, bound_name, bytes, key_count, created_at, updated_at)
		VALUES (?, ?, ?, ?, 0, 0, ?, ?)
		ON CONFLICT (user_id, storage_id) DO UPDATE SET updated_at = excluded.updated_at
		RETURNING id`, userID, id.String(), id.Kind, id.Bound, now, now).Scan(ctx, &bucketID)
	if err != nil {
		return 0, fmt.Errorf("buckets: open bucket: %w", err)
	}
	return bucketID, nil
}

// removeIfEmpty deletes a bucket of the user that has no entry left.
func removeIfEmpty(ctx context.Context, tx bun.Tx, userID, bucketID int64) error {
	_, err := tx.NewRaw(`DELETE FROM storage_buckets WHERE user_id = ? AND id = ?
		AND NOT EXISTS (SELECT 1 FROM storage_entries AS e WHERE e.bucket_id = storage_buckets.id)`, userID, bucketID).Exec(ctx)
	if err != nil {
		return fmt.Errorf("buckets: remove empty bucket: %w", err)
	}
	return nil
}

// List returns one page of the keys of o's bucket storageID that start
// with prefix, in key order (bytewise).
func (s *Service) List(ctx context.Context, o storage.Owner, storageID, prefix string, req storage.PageRequest) (storage.Page[KeyInfo], error) {
	if _, err := ParseID(storageID); err != nil {
		return storage.Page[KeyInfo]{}, err
	}
	if err := checkPrefix(prefix); err != nil {
		return storage.Page[KeyInfo]{}, err
	}
	if err := checkCursor(keysCursor, req.Cursor, MaxKeyBytes); err != nil {
		return storage.Page[KeyInfo]{}, err
	}
	q := s.store.Reader.NewSelect().TableExpr("storage_entries AS e").
		Join("JOIN storage_buckets AS b ON b.id = e.bucket_id").
		ColumnExpr("e.entry_key, e.revision, e.bytes").
		Where("b.user_id = ? AND b.storage_id = ? AND e.user_id = ?", o.ID, storageID, o.ID)
	if prefix != "" {
		q = q.Where("e.entry_key >= ?", prefix)
		if end, ok := prefixEnd(prefix); ok {
			q = q.Where("e.entry_key < ?", end)
		}
	}
	page, err := storage.Paginate(ctx, q, storage.Keyset[KeyInfo]{
		Kind: keysCursor, Column: "e.entry_key", Key: func(k *KeyInfo) any { return k.Key },
	}, req)
	if err != nil {
		return page, fmt.Errorf("buckets: list: %w", err)
	}
	return page, nil
}

// The kinds of the listings' cursors.
const (
	keysCursor    = "storage-keys"
	bucketsCursor = "storage-buckets"
)

// checkCursor refuses, as storage.ErrInvalidCursor, a cursor of the
// listing kind whose position is not one such a listing can have issued:
// a number (compared with a text column it is a PostgreSQL type error, and
// on SQLite it sorts before every key, silently restarting the listing),
// or text with NUL (which the SQL layer refuses) or not UTF-8, or longer
// than any key of the listing (max bytes). A cursor is not signed, so its
// position is input like a prefix; it never widens the query, which stays
// the caller's. Cursors this check cannot read are left to
// storage.Paginate, which refuses them.
func checkCursor(kind, cursor string, max int) error {
	if cursor == "" {
		return nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return nil // Paginate refuses it
	}
	var body struct {
		Kind  string          `json:"k"`
		After json.RawMessage `json:"a"`
	}
	if json.Unmarshal(raw, &body) != nil || body.Kind != kind || len(body.After) == 0 {
		return nil // Paginate refuses it
	}
	var after string
	if json.Unmarshal(body.After, &after) != nil || after == "" || len(after) > max ||
		!utf8.ValidString(after) || strings.ContainsRune(after, 0) {
		return storage.ErrInvalidCursor
	}
	return nil
}

// prefixEnd returns the least string greater than every string that
// starts with p, in code point order: p with its last code point
// advanced (trailing maximal code points dropped first). ok is false when
// there is none (p holds nothing but U+10FFFF).
func prefixEnd(p string) (string, bool) {
	for p != "" {
		r, size := utf8.DecodeLastRuneInString(p)
		p = p[:len(p)-size]
		switch {
		case r == utf8.MaxRune:
			continue
		case r == 0xD7FF: // the surrogates are not code points of UTF-8 text
			return p + string(rune(0xE000)), true
		default:
			return p + string(r+1), true
		}
	}
	return "", false
}

// Buckets returns one page of o's buckets, by storage id.
func (s *Service) Buckets(ctx context.Context, o storage.Owner, req storage.PageRequest) (storage.Page[Bucket], error) {
	if err := checkCursor(bucketsCursor, req.Cursor, MaxStorageIDBytes); err != nil {
		return storage.Page[Bucket]{}, err
	}
	q := s.store.Reader.NewSelect().Table("storage_buckets").
		Column("storage_id", "kind", "bytes", "key_count", "created_at", "updated_at").
		Where("user_id = ?", o.ID)
	page, err := storage.Paginate(ctx, q, storage.Keyset[Bucket]{
		Kind: bucketsCursor, Column: "storage_id", Key: func(b *Bucket) any { return b.StorageID },
	}, req)
	if err != nil {
		return page, fmt.Errorf("buckets: list buckets: %w", err)
	}
	for i := range page.Items {
		page.Items[i].CreatedAt, page.Items[i].UpdatedAt = page.Items[i].CreatedAt.UTC(), page.Items[i].UpdatedAt.UTC()
	}
	return page, nil
}

// Usage returns o's use of the budget (its plan's storage bytes when
// the plan sets them).
func (s *Service) Usage(ctx context.Context, o storage.Owner) (Usage, error) {
	u := Usage{MaxKeys: s.cfg.MaxKeys}
	var err error
	if u.MaxBytes, _, err = s.maxBytes(ctx, o.ID); err != nil {
		return u, err
	}
	err = s.store.Reader.NewSelect().Table("storage_usage").Column("bytes", "key_count").
		Where("user_id = ?", o.ID).Scan(ctx, &u.Bytes, &u.Keys)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return u, fmt.Errorf("buckets: usage: %w", err)
	}
	return u, nil
}

// Dropped is what Drop removed.
type Dropped struct {
	Dropped bool  `json:"dropped" jsonschema:"whether the bucket existed"`
	Keys    int64 `json:"keys"`
	Bytes   int64 `json:"bytes"`
}

// Drop deletes o's bucket storageID with every entry, and gives its bytes
// and keys back to the budget.
func (s *Service) Drop(ctx context.Context, o storage.Owner, storageID string) (Dropped, error) {
	if _, err := ParseID(storageID); err != nil {
		return Dropped{}, err
	}
	var d Dropped
	now := time.Now().UTC()
	err := s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if _, err := lockUsage(ctx, tx, o.ID, now); err != nil {
			return err
		}
		var bucketID int64
		err := tx.NewSelect().Table("storage_buckets").Column("id").
			Where("user_id = ? AND storage_id = ?", o.ID, storageID).Scan(ctx, &bucketID)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("buckets: find bucket: %w", err)
		}
		d, err = dropBucket(ctx, tx, o.ID, bucketID, now)
		return err
	})
	return d, err
}

// dropBucket deletes a bucket and its entries inside tx, which holds the
// owner's usage row, and takes what they counted off the owner's counters.
func dropBucket(ctx context.Context, tx bun.Tx, userID, bucketID int64, now time.Time) (Dropped, error) {
	d := Dropped{Dropped: true}
	if err := tx.NewSelect().Table("storage_entries").ColumnExpr("COALESCE(SUM(bytes), 0), COUNT(*)").
		Where("bucket_id = ? AND user_id = ?", bucketID, userID).Scan(ctx, &d.Bytes, &d.Keys); err != nil {
		return d, fmt.Errorf("buckets: size bucket: %w", err)
	}
	if _, err := tx.NewRaw("DELETE FROM storage_entries WHERE bucket_id = ? AND user_id = ?", bucketID, userID).Exec(ctx); err != nil {
		return d, fmt.Errorf("buckets: drop entries: %w", err)
	}
	if _, err := tx.NewRaw("DELETE FROM storage_buckets WHERE id = ? AND user_id = ?", bucketID, userID).Exec(ctx); err != nil {
		return d, fmt.Errorf("buckets: drop bucket: %w", err)
	}
	// Counters that drifted below what the rows held (repaired by
	// Reconcile) stop at zero.
	if _, err := tx.NewRaw(`UPDATE storage_usage SET
		bytes = CASE WHEN bytes > ? THEN bytes - ? ELSE 0 END,
		key_count = CASE WHEN key_count > ? THEN key_count - ? ELSE 0 END, updated_at = ?
		WHERE user_id = ?`, d.Bytes, d.Bytes, d.Keys, d.Keys, now, userID).Exec(ctx); err != nil {
		return d, fmt.Errorf("buckets: release usage: %w", err)
	}
	return d, nil
}

// errMessage is the caller-safe message of a domain error.
func errMessage(err error) string {
	if e, ok := errors.AsType[*capabilities.Error](err); ok {
		return e.Message
	}
	return "invalid"
}
