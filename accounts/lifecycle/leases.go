package lifecycle

import (
	"context"
	"errors"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
)

// WriteLeasesTable is how account write leases (storage.Store.WriteLease)
// appear in the inventory: rows of the account's running calls, deleted
// with it. They are operational state with nothing of the person's in
// them (a random token, a capability's name, two times), so they are left
// out of exports, which would otherwise page by the token.
var WriteLeasesTable = storage.Table{Name: "account_write_leases", KeyColumn: "token", SkipExport: true}

// WriteLeases returns the registry's write lease
// (capabilities.Options.WriteLease) over store: every call that may write
// holds a write lease on its caller's account (resolved with owners) while
// it runs, which a deletion of the account waits for (see Service.Delete).
// A call whose account is being deleted is refused with
// CodeAccountDeleting; a call whose lease was ended by the deletion is
// cancelled and, when it fails, answers CodeAccountDeleting instead of
// whatever its cancelled writes returned. A call made from within another
// call of the same account uses the lease of the outer one.
func WriteLeases(store *storage.Store, owners capabilities.OwnerOf) func(ctx context.Context, c capabilities.Caller, name string) (context.Context, func() error, error) {
	return func(ctx context.Context, c capabilities.Caller, name string) (context.Context, func() error, error) {
		o, err := owners(ctx, c)
		if err != nil {
			return nil, nil, err
		}
		leased, release, err := store.WriteLease(ctx, storage.Owner(o), name)
		if err != nil {
			return nil, nil, leaseError(err)
		}
		return leased, func() error {
			lost := storage.CheckWrite(leased)
			release()
			if errors.Is(lost, storage.ErrWriteFenced) || errors.Is(lost, storage.ErrWriteLeaseExpired) {
				return leaseError(lost)
			}
			return nil // released as planned, or the caller went away
		}, nil
	}
}

// leaseError is what a call answers when its account's write lease is
// refused or ended early.
func leaseError(err error) error {
	switch {
	case errors.Is(err, storage.ErrWriteFenced):
		return &capabilities.Error{Code: capabilities.CodeAccountDeleting, Message: "this account is being deleted: the call was stopped and writes nothing more", Err: err}
	case errors.Is(err, storage.ErrWriteLeaseExpired):
		// The database did not answer the lease's renewals: the call stops
		// like any other whose storage failed.
		return &capabilities.Error{Code: capabilities.CodeInternal, Message: "internal error", Err: err}
	}
	return err
}
