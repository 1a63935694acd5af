package migrations

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/uptrace/bun"
)

// ApplyAll applies enclave's migrations and then each of sources in
// order, logging every migration applied, and warns when the database
// holds migrations this binary does not know (a newer release ran).
func ApplyAll(ctx context.Context, db *bun.DB, sources []Source, log *slog.Logger) error {
	res, err := Apply(ctx, db)
	if err != nil {
		return err
	}
	for _, m := range res.Applied {
		log.Info("migration applied", "source", EnclaveSource, "version", m.Version, "name", m.Name)
	}
	for _, src := range sources {
		r, err := ApplySource(ctx, db, src)
		if err != nil {
			return err
		}
		for _, m := range r.Applied {
			log.Info("migration applied", "source", src.Name, "version", m.Version, "name", m.Name)
		}
	}
	if len(res.Unknown) > 0 {
		log.Warn("database has migrations this binary does not know; a newer release migrated it", "versions", res.Unknown)
	}
	return nil
}

// Pending describes what is not applied of enclave's migrations and of
// sources ("enclave: 2 pending, 0 changed; notes: ..."), or "" when the
// schema is current.
func Pending(ctx context.Context, db bun.IDB, sources []Source) (string, error) {
	srcs := append([]Source{{Name: EnclaveSource}}, sources...)
	var behind []string
	for _, src := range srcs {
		var st Status
		var err error
		if src.Name == EnclaveSource && src.FS == nil {
			st, err = EnclaveStatus(ctx, db)
		} else {
			st, err = StatusOf(ctx, db, src)
		}
		if err != nil {
			return "", err
		}
		if !st.Current() {
			behind = append(behind, fmt.Sprintf("%s: %d pending, %d changed", src.Name, len(st.Pending), len(st.Changed)))
		}
	}
	return strings.Join(behind, "; "), nil
}

// CheckStart is a server's check at start-up when it applies no
// migrations itself: it refuses a database that was never migrated, and
// starts on a schema that is behind (its readiness says so) but logs it
// loudly.
func CheckStart(ctx context.Context, db bun.IDB, sources []Source, log *slog.Logger) error {
	st, err := EnclaveStatus(ctx, db)
	if err != nil {
		return err
	}
	if len(st.Applied) == 0 {
		return errors.New("the database has never been migrated and migrations are off: run 'enclave migrate' first")
	}
	behind, err := Pending(ctx, db, sources)
	if err != nil {
		return err
	}
	if behind != "" {
		log.Warn("migrations are pending and NoMigrate is set: run 'enclave migrate'; /readyz answers 503 until then", "pending", behind)
	}
	return nil
}
