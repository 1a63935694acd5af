package capabilities

import (
	"context"
	"errors"
)

// Owner is the owner of the data a capability acts on: the account's
// internal id (the value of every owner column) and its stable id (the
// prefix of every blob and KV key). It has the shape of storage.Owner and
// converts to and from it by assignment, so this package imports no
// storage package.
type Owner = struct {
	ID       int64
	StableID string
}

// OwnerOf resolves a capability's caller to the owner of the data the
// capability acts on. Handlers filter every query by it. enclave's server
// provides one backed by the accounts service (lifecycle.Owners), which
// takes the key that travels on the caller (Caller.OwnerID).
type OwnerOf func(ctx context.Context, c Caller) (Owner, error)

// InputError is implemented by errors of other packages that are the
// caller's mistake (a cursor this server did not issue, a page limit out
// of range): a handler returns them as they are, and Invoke answers them
// as CodeInvalidInput with the sentence InvalidInput returns.
type InputError interface {
	error
	InvalidInput() string
}

// domainError turns an InputError in err's chain into a CodeInvalidInput
// error; any other error passes through.
func domainError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*Error](err); ok {
		return err
	}
	if ie, ok := errors.AsType[InputError](err); ok {
		return &Error{Code: CodeInvalidInput, Message: ie.InvalidInput(), Err: err}
	}
	return err
}
