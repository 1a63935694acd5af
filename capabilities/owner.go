package capabilities

import (
	"context"
	"errors"

	"github.com/enclave-mcp/enclave/storage"
)

// OwnerOf resolves a capability's caller to the owner of the data the
// capability acts on: the account's internal id (the value of every owner
// column) and its stable id (the prefix of every blob and KV key). Handlers
// filter every query by it. enclave's server provides one backed by the
// accounts service (lifecycle.Owners).
type OwnerOf func(ctx context.Context, c Caller) (storage.Owner, error)

// Page turns the cursor and limit of a list capability's input into a
// storage.PageRequest, refusing a limit outside 0..storage.MaxPageLimit (0
// means the default) with CodeInvalidInput.
func Page(cursor string, limit int) (storage.PageRequest, error) {
	if limit < 0 || limit > storage.MaxPageLimit {
		return storage.PageRequest{}, Errorf(CodeInvalidInput, "limit must be between 1 and %d", storage.MaxPageLimit)
	}
	return storage.PageRequest{Cursor: cursor, Limit: limit}, nil
}

// PageError maps a listing's error for the caller: a cursor this server did
// not issue for this listing is the caller's mistake (CodeInvalidInput);
// anything else passes through.
func PageError(err error) error {
	if errors.Is(err, storage.ErrInvalidCursor) {
		return &Error{Code: CodeInvalidInput, Message: "cursor is not one this listing issued; start again without a cursor", Err: err}
	}
	return err
}
