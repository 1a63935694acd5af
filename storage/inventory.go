package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/uptrace/bun"
	"gocloud.dev/blob"
	"gocloud.dev/docstore"
	"gocloud.dev/gcerrors"
)

// Owner identifies the user whose data an inventory operation touches: ID
// is users.id (the value of every owner column), StableID the stable user id
// that starts every blob and KV key the user owns.
type Owner struct {
	ID       int64
	StableID string
}

// Table registers an SQL table whose rows belong to users.
type Table struct {
	// Name is the table name.
	Name string
	// OwnerColumn holds the owner's users.id. Default "user_id".
	OwnerColumn string
	// KeyColumn is a unique column that orders export pages. Default "id".
	KeyColumn string
	// Redact lists columns that exports replace with RedactedValue:
	// secret values, password and token hashes, anything credential-like.
	Redact []string
	// SkipExport leaves the table out of exports (it is still deleted with
	// the account): for rows that are nothing but credentials, such as
	// one-time token hashes, which have no other unique key to page by.
	SkipExport bool
	// SizeColumn, for a table whose rows may be large (stored documents),
	// names an integer column holding each row's size in bytes: an export
	// page then ends once its rows reach MaxExportPageBytes (with at least
	// one row), so that a page of a thousand large rows is never read at
	// once.
	SizeColumn string
}

// MaxExportPageBytes bounds an export page of a table with a SizeColumn.
const MaxExportPageBytes = 4 << 20

// BlobPrefix registers the blob keys of one domain: every key a user owns
// in it starts with "<stableID>/<Domain>/" (see BlobKey).
type BlobPrefix struct {
	Domain string
}

// KVPrefix registers the KV keys of one domain: every key a user owns in it
// starts with "<stableID>:<Domain>:" (see KVKey).
type KVPrefix struct {
	Domain string
}

// Custom registers a surface with its own export and deletion, for data
// that is neither rows with an owner column nor prefixed keys.
type Custom struct {
	Name string
	// Count returns how many items the owner has (for the export manifest).
	Count func(ctx context.Context, o Owner) (int64, error)
	// Export returns one page of the owner's items after cursor.
	Export func(ctx context.Context, o Owner, cursor string, limit int) (items []any, next string, err error)
	// Delete removes everything the owner has; missing data is not an error.
	Delete func(ctx context.Context, o Owner) (int64, error)
}

// RedactedValue replaces redacted columns in exports.
const RedactedValue = "[redacted]"

// Inventory is the list of every place user-owned data lives. Each domain
// registers its surfaces at assembly; export and deletion walk the list, and
// Check proves against the live schema that no owned table is missing.
// Registration is safe for concurrent use; it normally happens before
// serving.
type Inventory struct {
	mu       sync.RWMutex
	tables   []Table
	blobs    []BlobPrefix
	kv       []KVPrefix
	custom   []Custom
	platform map[string]string // table → why it holds no user data
}

// NewInventory returns an empty inventory.
func NewInventory() *Inventory {
	return &Inventory{platform: map[string]string{}}
}

var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)
var domainName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// AddTable registers a user-owned table.
func (inv *Inventory) AddTable(t Table) error {
	if t.OwnerColumn == "" {
		t.OwnerColumn = "user_id"
	}
	if t.KeyColumn == "" {
		t.KeyColumn = "id"
	}
	for _, name := range append([]string{t.Name, t.OwnerColumn, t.KeyColumn}, t.Redact...) {
		if !identifier.MatchString(name) {
			return fmt.Errorf("storage: inventory table %q: bad identifier %q", t.Name, name)
		}
	}
	if slices.Contains(t.Redact, t.OwnerColumn) || slices.Contains(t.Redact, t.KeyColumn) {
		return fmt.Errorf("storage: inventory table %q: the owner and key columns cannot be redacted", t.Name)
	}
	if credentialColumn(t.KeyColumn) && !t.SkipExport {
		return fmt.Errorf("storage: inventory table %q: key column %s looks like a credential and would appear in export cursors; set SkipExport or choose another key", t.Name, t.KeyColumn)
	}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if _, ok := inv.platform[t.Name]; ok {
		return fmt.Errorf("storage: inventory table %q is declared platform-owned", t.Name)
	}
	for _, have := range inv.tables {
		if have.Name == t.Name {
			return fmt.Errorf("storage: inventory table %q registered twice", t.Name)
		}
	}
	t.Redact = slices.Clone(t.Redact)
	inv.tables = append(inv.tables, t)
	return nil
}

// AddTables registers user-owned tables, in order (AddTable each); it
// reports every refusal at once.
func (inv *Inventory) AddTables(tables ...Table) error {
	var errs []error
	for _, t := range tables {
		errs = append(errs, inv.AddTable(t))
	}
	return errors.Join(errs...)
}

// DeclarePlatform records that table holds platform data, not any user's,
// even if it has a column that looks like an owner column; reason says why.
func (inv *Inventory) DeclarePlatform(table, reason string) error {
	if !identifier.MatchString(table) || reason == "" {
		return fmt.Errorf("storage: platform table %q: want a table name and a reason", table)
	}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	for _, have := range inv.tables {
		if have.Name == table {
			return fmt.Errorf("storage: table %q is registered as user-owned", table)
		}
	}
	inv.platform[table] = reason
	return nil
}

// AddBlobPrefix registers a domain's blob keys.
func (inv *Inventory) AddBlobPrefix(p BlobPrefix) error {
	if !domainName.MatchString(p.Domain) {
		return fmt.Errorf("storage: blob domain %q: want a lowercase name", p.Domain)
	}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if slices.Contains(inv.blobs, p) {
		return fmt.Errorf("storage: blob domain %q registered twice", p.Domain)
	}
	inv.blobs = append(inv.blobs, p)
	return nil
}

// AddKVPrefix registers a domain's KV keys.
func (inv *Inventory) AddKVPrefix(p KVPrefix) error {
	if !domainName.MatchString(p.Domain) {
		return fmt.Errorf("storage: KV domain %q: want a lowercase name", p.Domain)
	}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if slices.Contains(inv.kv, p) {
		return fmt.Errorf("storage: KV domain %q registered twice", p.Domain)
	}
	inv.kv = append(inv.kv, p)
	return nil
}

// AddCustom registers a surface with its own export and deletion.
func (inv *Inventory) AddCustom(c Custom) error {
	if !domainName.MatchString(c.Name) || c.Count == nil || c.Export == nil || c.Delete == nil {
		return fmt.Errorf("storage: custom surface %q: want a lowercase name and Count, Export and Delete", c.Name)
	}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	for _, have := range inv.custom {
		if have.Name == c.Name {
			return fmt.Errorf("storage: custom surface %q registered twice", c.Name)
		}
	}
	inv.custom = append(inv.custom, c)
	return nil
}

// Tables returns the registered tables in registration order.
func (inv *Inventory) Tables() []Table {
	inv.mu.RLock()
	defer inv.mu.RUnlock()
	out := slices.Clone(inv.tables)
	for i := range out {
		out[i].Redact = slices.Clone(out[i].Redact)
	}
	return out
}

// Table returns the registered table called name.
func (inv *Inventory) Table(name string) (Table, bool) {
	for _, t := range inv.Tables() {
		if t.Name == name {
			return t, true
		}
	}
	return Table{}, false
}

// BlobPrefixes, KVPrefixes and Customs return the other registrations.
func (inv *Inventory) BlobPrefixes() []BlobPrefix {
	inv.mu.RLock()
	defer inv.mu.RUnlock()
	return slices.Clone(inv.blobs)
}

func (inv *Inventory) KVPrefixes() []KVPrefix {
	inv.mu.RLock()
	defer inv.mu.RUnlock()
	return slices.Clone(inv.kv)
}

func (inv *Inventory) Customs() []Custom {
	inv.mu.RLock()
	defer inv.mu.RUnlock()
	return slices.Clone(inv.custom)
}

// PlatformTables returns the declared platform tables and why.
func (inv *Inventory) PlatformTables() map[string]string {
	inv.mu.RLock()
	defer inv.mu.RUnlock()
	return maps.Clone(inv.platform)
}

// BlobKey returns the key of a user's blob in a domain:
// "<stableID>/<domain>/<name>".
func BlobKey(o Owner, domain, name string) string {
	return o.StableID + "/" + domain + "/" + name
}

// KVKey returns the key of a user's KV document in a domain:
// "<stableID>:<domain>:<name>".
func KVKey(o Owner, domain, name string) string {
	return o.StableID + ":" + domain + ":" + name
}

func blobPrefix(o Owner, domain string) string { return o.StableID + "/" + domain + "/" }
func kvPrefix(o Owner, domain string) string   { return o.StableID + ":" + domain + ":" }

// isOwnerColumn says whether a column name marks rows as owned by a user.
func isOwnerColumn(name string) bool { return name == "user_id" || strings.HasSuffix(name, "_user_id") }

// Check compares the inventory with the live schema of db and reports every
// problem at once: a table with an owner-like column (user_id or
// *_user_id) that is neither registered nor declared platform-owned, and a
// registration naming a table or column that does not exist.
func (inv *Inventory) Check(ctx context.Context, db *bun.DB) error {
	cols, err := liveColumns(ctx, db)
	if err != nil {
		return err
	}
	inv.mu.RLock()
	defer inv.mu.RUnlock()
	var problems []string
	registered := map[string]Table{}
	for _, t := range inv.tables {
		registered[t.Name] = t
		have, ok := cols[t.Name]
		if !ok {
			problems = append(problems, fmt.Sprintf("registered table %s does not exist", t.Name))
			continue
		}
		for _, c := range append([]string{t.OwnerColumn, t.KeyColumn}, t.Redact...) {
			if !slices.Contains(have, c) {
				problems = append(problems, fmt.Sprintf("registered column %s.%s does not exist", t.Name, c))
			}
		}
	}
	for table, reason := range inv.platform {
		if _, ok := cols[table]; !ok {
			problems = append(problems, fmt.Sprintf("platform table %s (%s) does not exist", table, reason))
		}
	}
	for table, columns := range cols {
		if _, ok := registered[table]; ok {
			continue
		}
		if _, ok := inv.platform[table]; ok {
			continue
		}
		for _, c := range columns {
			if isOwnerColumn(c) {
				problems = append(problems, fmt.Sprintf("table %s has owner column %s but is not in the inventory (register it, or declare it platform-owned)", table, c))
			}
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return fmt.Errorf("storage: inventory does not match the schema:\n  %s", strings.Join(problems, "\n  "))
	}
	return nil
}

// liveColumns returns table → column names of the current schema.
func liveColumns(ctx context.Context, db *bun.DB) (map[string][]string, error) {
	var rows []struct {
		Table  string `bun:"table_name"`
		Column string `bun:"column_name"`
	}
	var q string
	switch db.Dialect().Name().String() {
	case "sqlite":
		// Ordinary tables only: a full-text index (an FTS5 virtual table
		// and its shadow tables) is an index, like PostgreSQL's GIN.
		q = `SELECT l.name AS table_name, p.name AS column_name
			FROM pragma_table_list l JOIN pragma_table_info(l.name) p
			WHERE l.schema = 'main' AND l.type = 'table' AND l.name NOT LIKE 'sqlite_%'`
	default:
		q = `SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema()`
	}
	if err := db.NewRaw(q).Scan(ctx, &rows); err != nil {
		return nil, fmt.Errorf("storage: read schema: %w", err)
	}
	out := map[string][]string{}
	for _, r := range rows {
		out[r.Table] = append(out[r.Table], r.Column)
	}
	return out, nil
}

// CountRows counts the owner's rows in table t.
func CountRows(ctx context.Context, db bun.IDB, t Table, o Owner) (int64, error) {
	n, err := db.NewSelect().TableExpr("?", bun.Ident(t.Name)).Where("? = ?", bun.Ident(t.OwnerColumn), o.ID).Count(ctx)
	if err != nil {
		return 0, fmt.Errorf("storage: count %s: %w", t.Name, err)
	}
	return int64(n), nil
}

// ExportRows returns one page of the owner's rows in table t, ordered by
// its key column, with redacted columns replaced by RedactedValue. As a
// safety net, columns whose names say they hold credentials (containing
// "hash", "secret", "ciphertext" or "password") are redacted even when the
// registration forgot them. Values are as the driver returns them.
func ExportRows(ctx context.Context, db bun.IDB, t Table, o Owner, req PageRequest) (Page[map[string]any], error) {
	if t.SkipExport {
		return Page[map[string]any]{}, fmt.Errorf("storage: table %s is not exported", t.Name)
	}
	owned := func() *bun.SelectQuery {
		return db.NewSelect().TableExpr("?", bun.Ident(t.Name)).Where("? = ?", bun.Ident(t.OwnerColumn), o.ID)
	}
	ks := Keyset[map[string]any]{
		Kind:   "export:" + t.Name,
		Column: t.KeyColumn,
		Key:    func(row *map[string]any) any { return cursorKey((*row)[t.KeyColumn]) },
	}
	if t.SizeColumn != "" {
		// Read the sizes of the page's rows first, and shorten the page
		// to the rows that fit MaxExportPageBytes.
		sizes, err := Paginate(ctx, owned().Column(t.KeyColumn, t.SizeColumn), ks, req)
		if err != nil {
			return Page[map[string]any]{}, err
		}
		var total int64
		for i, row := range sizes.Items {
			if total += sizeOf(row[t.SizeColumn]); total > MaxExportPageBytes && i > 0 {
				req.Limit = i
				break
			}
		}
	}
	page, err := Paginate(ctx, owned(), ks, req)
	if err != nil {
		return page, err
	}
	for _, row := range page.Items {
		for c := range row {
			if slices.Contains(t.Redact, c) || credentialColumn(c) {
				row[c] = RedactedValue
			}
		}
		for k, v := range row {
			if b, ok := v.([]byte); ok && k != t.KeyColumn {
				row[k] = string(b) // text columns may come back as bytes
			}
		}
	}
	return page, nil
}

// sizeOf reads a size column's value as the driver returned it.
func sizeOf(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case int32:
		return int64(n)
	case int:
		return int64(n)
	case float64:
		return int64(n)
	case []byte:
		i, _ := strconv.ParseInt(string(n), 10, 64)
		return i
	case string:
		i, _ := strconv.ParseInt(n, 10, 64)
		return i
	}
	return 0
}

// credentialColumn says whether a column name suggests a credential.
func credentialColumn(name string) bool {
	for _, w := range []string{"hash", "secret", "ciphertext", "password"} {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}

// cursorKey normalizes a key column value for a cursor.
func cursorKey(v any) any {
	switch v := v.(type) {
	case int64:
		return v
	case int:
		return int64(v)
	case int32:
		return int64(v)
	case []byte:
		return string(v)
	case string:
		return v
	default:
		return fmt.Sprint(v)
	}
}

// DeleteRows deletes the owner's rows from every registered table inside
// tx, newest registration first (so children registered after their
// parents go first), and returns the count per table.
func (inv *Inventory) DeleteRows(ctx context.Context, tx bun.Tx, o Owner) (map[string]int64, error) {
	tables := inv.Tables()
	out := make(map[string]int64, len(tables))
	for i := len(tables) - 1; i >= 0; i-- {
		t := tables[i]
		// In chunks, so that memory stays flat however many rows the owner
		// has; all in the one transaction.
		for {
			chunk := tx.NewSelect().TableExpr("?", bun.Ident(t.Name)).Column(t.KeyColumn).
				Where("? = ?", bun.Ident(t.OwnerColumn), o.ID).Limit(int64(deleteChunk))
			res, err := tx.NewDelete().TableExpr("?", bun.Ident(t.Name)).
				Where("? = ?", bun.Ident(t.OwnerColumn), o.ID).
				Where("? IN (?)", bun.Ident(t.KeyColumn), chunk).Exec(ctx)
			if err != nil {
				return out, fmt.Errorf("storage: delete from %s: %w", t.Name, err)
			}
			n, _ := res.RowsAffected()
			out[t.Name] += n
			if n < int64(deleteChunk) {
				break
			}
		}
	}
	return out, nil
}

// deleteChunk is how many rows one DELETE of DeleteRows removes.
var deleteChunk = 10000

// ListBlobs returns the keys of the owner's blobs in domain d, in key order.
func ListBlobs(ctx context.Context, b *blob.Bucket, o Owner, d BlobPrefix) ([]string, error) {
	var keys []string
	it := b.List(&blob.ListOptions{Prefix: blobPrefix(o, d.Domain)})
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return keys, fmt.Errorf("storage: list blobs %s: %w", d.Domain, err)
		}
		if !obj.IsDir {
			keys = append(keys, obj.Key)
		}
	}
	sort.Strings(keys)
	return keys, nil
}

// DeleteBlobs deletes every blob of the owner in domain d. Blobs already
// gone are not an error; it returns how many it deleted.
func DeleteBlobs(ctx context.Context, b *blob.Bucket, o Owner, d BlobPrefix) (int64, error) {
	keys, err := ListBlobs(ctx, b, o, d)
	// A blob deleted by a concurrent deletion of the same account between
	// being listed and being read fails some listings (fileblob) with
	// NotFound: list again, the deleted blob is then gone.
	for try := 0; try < 3 && gcerrors.Code(err) == gcerrors.NotFound; try++ {
		keys, err = ListBlobs(ctx, b, o, d)
	}
	if err != nil {
		return 0, err
	}
	var n int64
	for _, k := range keys {
		err := b.Delete(ctx, k)
		if gcerrors.Code(err) == gcerrors.NotFound {
			continue
		}
		if err != nil {
			return n, fmt.Errorf("storage: delete blob in %s: %w", d.Domain, err)
		}
		n++
	}
	return n, nil
}

// DeleteKV deletes every KV document of the owner in domain p, found by a
// range query on the key field.
func DeleteKV(ctx context.Context, c *docstore.Collection, o Owner, p KVPrefix) (int64, error) {
	prefix := kvPrefix(o, p.Domain)
	it := c.Query().Where(KVKeyField, ">=", prefix).Where(KVKeyField, "<", prefix+"\xff").Get(ctx, KVKeyField)
	defer it.Stop()
	var keys []string
	for {
		doc := map[string]any{}
		err := it.Next(ctx, doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("storage: list KV %s: %w", p.Domain, err)
		}
		if k, ok := doc[KVKeyField].(string); ok && strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	var n int64
	for _, k := range keys {
		err := c.Delete(ctx, map[string]any{KVKeyField: k})
		if gcerrors.Code(err) == gcerrors.NotFound {
			continue
		}
		if err != nil {
			return n, fmt.Errorf("storage: delete KV in %s: %w", p.Domain, err)
		}
		n++
	}
	return n, nil
}
