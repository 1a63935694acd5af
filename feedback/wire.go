package feedback

import (
	"context"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/storage"
)

// Config is what Wire needs: the service's Options and the account
// deletions it is plugged into.
type Config struct {
	Options
	// Deletions, when set, clear a deleted account's name as reviewer
	// from other people's feedback in the transaction that deletes its
	// rows (lifecycle.Service); its own feedback goes with its rows.
	Deletions interface{ AddTxHooks(...lifecycle.TxHook) }
}

// Wire plugs platform feedback into a server: it builds the service
// (registering its mail job kind) and makes every account's deletion
// clear the account's name as reviewer from the feedback it reviewed
// (ClearReviewer), counted under "sql:platform_feedback.reviewed_by" in
// the deletion's result.
func Wire(cfg Config) (*Service, error) {
	svc, err := New(cfg.Options)
	if err != nil {
		return nil, err
	}
	if cfg.Deletions != nil {
		cfg.Deletions.AddTxHooks(lifecycle.TxHook{Name: "clear feedback reviewer", Updated: "sql:platform_feedback.reviewed_by",
			Run: func(ctx context.Context, tx bun.Tx, o storage.Owner) (int64, error) {
				return ClearReviewer(ctx, tx, o.ID)
			}})
	}
	return svc, nil
}
