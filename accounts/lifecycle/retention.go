package lifecycle

import (
	"context"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/storage"
)

// unverifiedPerRun bounds the account deletions of one retention run.
const unverifiedPerRun = 50

// RetentionOptions are the inputs of Service.RetentionPolicies.
type RetentionOptions struct {
	// AllowUnverified is set when unverified accounts may work (hold
	// tokens, own data): they are accounts in use, never purged as
	// abandoned sign-ups.
	AllowUnverified bool
	// Record is told each purged account's outcome (see PurgeRequest).
	Record func(ctx context.Context, o storage.Owner, out PurgeOutcome)
}

// RetentionPolicies declares the retention of the users table (abandoned
// sign-ups are deleted through PurgeUnverified, a bounded pass per
// retention run) and of the write leases the deletion waits for.
func (s *Service) RetentionPolicies(o RetentionOptions) []retention.Policy {
	users := retention.Custom("users", "an account opened on the sign-up page that never verified an address is deleted 7 days after sign-up, through account deletion (its email and username become free); every other account is kept until it is deleted",
		func(ctx context.Context, _ bun.IDB, now time.Time, limit int) (int64, error) {
			rep, err := s.PurgeUnverified(ctx, PurgeRequest{Now: now, Limit: min(limit, unverifiedPerRun), Record: o.Record})
			if err != nil {
				return 0, err
			}
			return int64(rep.Purged), rep.Errs
		})
	if o.AllowUnverified {
		users = retention.Kept("users", "every account stays until it is deleted, verified or not: Config.OAuth.AllowUnverifiedEmail lets unverified accounts work")
	}
	return []retention.Policy{
		users,
		retention.Age("account_write_leases", "expires_at", time.Hour).Because("a running call's write lease; a call that ended without releasing it (a crash) leaves one that has expired"),
	}
}

// AuditPurge returns the Record function of a purge pass (the retention
// lane's or adminUnverifiedAccountPurgeRun's) that audits each account's
// outcome in log: purged, or failed with the failure's class and what
// happens next.
func AuditPurge(log *audit.Log) func(ctx context.Context, o storage.Owner, out PurgeOutcome) {
	return func(ctx context.Context, o storage.Owner, out PurgeOutcome) {
		ev := audit.Event{Category: audit.CategoryAccount, Action: "unverified_account_purged", Result: audit.ResultSuccess, UserHash: log.HashUser(o.StableID)}
		switch out.Outcome {
		case PurgePurged:
		case PurgeReleased:
			ev.Action, ev.Result, ev.Reason = "unverified_account_purge_failed", audit.ResultFailure, out.Failure+"; retried after "+out.RetryAt.UTC().Format(time.RFC3339)
		case PurgeFailed:
			ev.Action, ev.Result, ev.Reason = "unverified_account_purge_failed", audit.ResultFailure, out.Failure+"; retried by deletion-resume"
			if strings.HasPrefix(out.Failure, "claim ") {
				ev.Reason = out.Failure + "; retried by the next pass"
			}
		default:
			return
		}
		_ = log.Record(ctx, ev)
	}
}
