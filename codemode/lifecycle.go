package codemode

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"
	"gocloud.dev/gcerrors"

	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/storage"
)

// Tables are code mode's user-owned tables, in the order deletion may
// remove them (children first).
var Tables = []storage.Table{
	{Name: "code_runs"},
	{Name: "code_package_jobs"},
	{Name: "code_package_versions"},
	{Name: "code_packages"},
}

// RegisterInventory records code mode's tables and its source blobs: all
// exported with the account (sources as blob chunks) and deleted with it.
// The tables exist whether or not code mode is on, so this is always
// called.
func RegisterInventory(inv *storage.Inventory) error {
	var errs []error
	for _, t := range Tables {
		errs = append(errs, inv.AddTable(t))
	}
	errs = append(errs, inv.AddBlobPrefix(storage.BlobPrefix{Domain: BlobDomain}))
	return errors.Join(errs...)
}

// RetentionOptions are the retention windows of RetentionPolicies; zero
// fields take the defaults of Config.
type RetentionOptions struct {
	KeepVersions int
	MaxRuns      int
	RunAge       time.Duration
}

// RetentionPolicies declares how long code mode's rows live: runs 30 days
// and at most 2,000 per user (the newest), package versions the newest 20
// of each package (with their sources when no other version uses them),
// packages and jobs until deleted. bucket holds the sources.
func RetentionPolicies(bucket interface {
	Delete(ctx context.Context, key string) error
}, o RetentionOptions) []retention.Policy {
	keep := max(o.KeepVersions, 0)
	if keep == 0 {
		keep = DefaultKeepVersions
	}
	maxRuns := o.MaxRuns
	if maxRuns <= 0 {
		maxRuns = DefaultMaxRuns
	}
	age := o.RunAge
	if age <= 0 {
		age = DefaultRunRetention
	}
	runsByAge := retention.Age("code_runs", "started_at", age)
	return []retention.Policy{
		retention.UntilAccountDeleted("code_packages").Because("or until the package is deleted"),
		retention.UntilAccountDeleted("code_package_jobs").Because("a job lives as long as its package's latest version declares it"),
		retention.Custom("code_package_versions", fmt.Sprintf("the newest %d versions of each package are kept; older ones go, with their sources when no kept version uses them", keep),
			func(ctx context.Context, db bun.IDB, now time.Time, limit int) (int64, error) {
				return purgeVersions(ctx, db, bucket, keep, limit)
			}),
		retention.Custom("code_runs", fmt.Sprintf("a run record is kept %d days, and at most the newest %d per user", int(age.Hours()/24), maxRuns),
			func(ctx context.Context, db bun.IDB, now time.Time, limit int) (int64, error) {
				n, err := retention.PurgeAge(ctx, db, runsByAge, now, limit)
				if err != nil || n >= int64(limit) {
					return n, err
				}
				m, err := purgeExcessRuns(ctx, db, maxRuns, limit-int(n))
				return n + m, err
			}),
	}
}

// purgeExcessRuns removes the runs past the newest max of each user.
func purgeExcessRuns(ctx context.Context, db bun.IDB, max, limit int) (int64, error) {
	res, err := db.NewRaw(`DELETE FROM code_runs WHERE id IN (
		SELECT id FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY user_id ORDER BY id DESC) AS n FROM code_runs) AS ranked
		WHERE n > ? LIMIT ?)`, max, limit).Exec(ctx)
	if err != nil {
		return 0, fmt.Errorf("codemode: purge runs: %w", err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}

// purgeVersions removes versions past the newest keep of each package,
// then the sources no remaining version of their owner lists. A source
// left behind by a failure is deleted with the account.
func purgeVersions(ctx context.Context, db bun.IDB, bucket interface {
	Delete(ctx context.Context, key string) error
}, keep, limit int) (int64, error) {
	var old []struct {
		ID       int64  `bun:"id"`
		UserID   int64  `bun:"user_id"`
		Files    string `bun:"files"`
		StableID string `bun:"stable_user_id"`
	}
	err := db.NewRaw(`SELECT r.id, r.user_id, r.files, u.stable_user_id FROM (
		SELECT id, user_id, files, ROW_NUMBER() OVER (PARTITION BY package_id ORDER BY version DESC) AS n FROM code_package_versions) AS r
		JOIN users AS u ON u.id = r.user_id WHERE r.n > ? LIMIT ?`, keep, limit).Scan(ctx, &old)
	if err != nil || len(old) == 0 {
		return 0, err
	}
	ids := make([]int64, 0, len(old))
	byOwner := map[storage.Owner][]versionRow{}
	for _, v := range old {
		ids = append(ids, v.ID)
		o := storage.Owner{ID: v.UserID, StableID: v.StableID}
		byOwner[o] = append(byOwner[o], versionRow{Files: v.Files})
	}
	res, err := db.NewDelete().Model((*versionRow)(nil)).Where("id IN (?)", bun.In(ids)).Exec(ctx)
	if err != nil {
		return 0, fmt.Errorf("codemode: purge versions: %w", err)
	}
	n, _ := res.RowsAffected()
	for o, vs := range byOwner {
		var rest []versionRow
		if err := db.NewSelect().Model(&rest).Column("files").Where("user_id = ?", o.ID).Scan(ctx); err != nil {
			return n, err
		}
		used := map[string]bool{}
		for _, d := range filesDigests(rest) {
			used[d] = true
		}
		for _, d := range filesDigests(vs) {
			if !used[d] {
				if err := bucket.Delete(ctx, storage.BlobKey(o, BlobDomain, d)); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
					return n, err
				}
			}
		}
	}
	return n, nil
}
