package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
)

// The unverified sign-up purge's bounds.
const (
	// PurgeBatch is the default and largest number of accounts one purge
	// pass takes.
	PurgeBatch = 50
	// PurgeRetryBase is how long an account whose purge failed before
	// anything was removed waits before the next attempt; the wait doubles
	// with each further failure, up to PurgeRetryMax.
	PurgeRetryBase = time.Hour
	PurgeRetryMax  = 24 * time.Hour
)

// The outcomes of one account in a purge pass (PurgeOutcome.Outcome).
const (
	// PurgePurged: the account is deleted.
	PurgePurged = "purged"
	// PurgeFailed: the deletion failed after removing some of the
	// account's data; the account stays marked deleting and the
	// deletion-resume lane finishes it.
	PurgeFailed = "failed"
	// PurgeReleased: the deletion failed before anything was removed; the
	// claim is lifted and the account waits until RetryAt.
	PurgeReleased = "released"
	// PurgeSkipped: verified, suspended, granted admin or deleted between
	// the listing and the claim.
	PurgeSkipped = "skipped"
	// PurgeWouldPurge: a dry run's preview of a claim.
	PurgeWouldPurge = "would_purge"
)

// PurgeRequest is one pass of the unverified sign-up purge.
type PurgeRequest struct {
	// Now is the time of the pass. Default time.Now.
	Now time.Time
	// Limit bounds the accounts taken, 1 to PurgeBatch (default).
	Limit int
	// DryRun lists the accounts the pass would claim, claiming none.
	DryRun bool
	// Record, when set, is told each account's outcome (not in a dry
	// run): write the audit row there. It is best-effort: it returns
	// nothing, and the report is the authoritative answer.
	Record func(ctx context.Context, o storage.Owner, out PurgeOutcome)
}

// PurgeOutcome is what a purge pass did with one account. It names the
// account by stable user id only: never its email or username.
type PurgeOutcome struct {
	UserID  string `json:"userId"`
	Outcome string `json:"outcome" schema:"enum=purged|failed|released|skipped|would_purge"`
	// Attempts counts the purge's claims of the account, this one
	// included (in a dry run: the earlier ones).
	Attempts int `json:"attempts"`
	// Failure is the class of the failure (a deletion stage), for failed
	// and released accounts; in a dry run, the last recorded one.
	Failure string `json:"failure,omitempty"`
	// RetryAt is when a released account may be claimed again.
	RetryAt *time.Time `json:"retryAt,omitempty"`
}

// PurgeReport is the result of a purge pass.
type PurgeReport struct {
	DryRun   bool           `json:"dryRun"`
	Accounts []PurgeOutcome `json:"accounts"`
	Purged   int            `json:"purged"`
	Failed   int            `json:"failed"`
	// Errs joins the failures of the pass's deletions, for the lane that
	// runs it; the outcomes say the same per account.
	Errs error `json:"-"`
}

// PurgeUnverified runs one pass of the unverified sign-up purge: it takes
// up to req.Limit accounts opened on the sign-up page that never verified
// an address within accounts.UnverifiedWindow, those never attempted
// first, then earlier failures by oldest attempt, skipping accounts whose
// retry time has not come (accounts.Lifecycle.UnverifiedCandidates). Each
// is claimed with a conditional UPDATE that loses to a concurrent
// verification (accounts.Lifecycle.ClaimUnverified), then deleted like any
// other account. A deletion that fails before anything is removed lifts
// the claim and schedules a retry with a growing wait; one that fails
// midway keeps the claim for the deletion-resume lane. Either way the
// failure's class is recorded on the account and given to req.Record.
// The error is only for a pass that could not list its candidates.
func (s *Service) PurgeUnverified(ctx context.Context, req PurgeRequest) (PurgeReport, error) {
	now := req.Now
	if now.IsZero() {
		now = time.Now()
	}
	limit := req.Limit
	if limit <= 0 || limit > PurgeBatch {
		limit = PurgeBatch
	}
	cutoff := now.Add(-accounts.UnverifiedWindow)
	report := PurgeReport{DryRun: req.DryRun, Accounts: []PurgeOutcome{}}
	cands, err := s.accounts.Lifecycle.UnverifiedCandidates(ctx, cutoff, limit)
	if err != nil {
		return report, fmt.Errorf("lifecycle: purge unverified: %w", err)
	}
	var errs []error
	for _, c := range cands {
		u := c.User
		if req.DryRun {
			report.Accounts = append(report.Accounts, PurgeOutcome{UserID: u.StableID, Outcome: PurgeWouldPurge, Attempts: c.Attempts, Failure: c.LastFailure})
			continue
		}
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
		o := storage.Owner{ID: u.ID, StableID: u.StableID}
		out := PurgeOutcome{UserID: u.StableID, Attempts: c.Attempts + 1}
		claimed, err := s.accounts.Lifecycle.ClaimUnverified(ctx, u.ID, cutoff)
		switch {
		case err != nil:
			// Nothing is claimed: the account stays a candidate.
			out.Outcome, out.Attempts, out.Failure = PurgeFailed, c.Attempts, failureClass(err, "claim")
			errs = append(errs, fmt.Errorf("claim unverified account %d: %w", u.ID, err))
		case !claimed:
			out.Outcome, out.Attempts = PurgeSkipped, c.Attempts
		default:
			res, err := s.Delete(ctx, o)
			if err == nil {
				out.Outcome = PurgePurged
				report.Purged++
				break
			}
			out.Failure = failureClass(err, "delete")
			errs = append(errs, fmt.Errorf("delete unverified account %d: %w", u.ID, err))
			report.Failed++
			// A background context: the outcome is recorded also when
			// the pass's own context ended the deletion.
			bg := context.WithoutCancel(ctx)
			if removedNothing(res) {
				retry := now.Add(purgeRetryWait(out.Attempts)).UTC()
				if released, rerr := s.accounts.Lifecycle.ReleaseUnverifiedClaim(bg, u.ID, out.Failure, retry); rerr != nil {
					errs = append(errs, rerr)
				} else if released {
					out.Outcome, out.RetryAt = PurgeReleased, &retry
					break
				}
			}
			out.Outcome = PurgeFailed
			if rerr := s.accounts.Lifecycle.RecordUnverifiedPurgeFailure(bg, u.ID, out.Failure); rerr != nil {
				errs = append(errs, rerr)
			}
		}
		report.Accounts = append(report.Accounts, out)
		if req.Record != nil && out.Outcome != PurgeSkipped {
			req.Record(context.WithoutCancel(ctx), o, out)
		}
	}
	report.Errs = errors.Join(errs...)
	return report, nil
}

// removedNothing reports whether a failed deletion's partial result
// removed nothing: it stopped before any surface was cleaned (marking,
// hooks, which remove no data), or every surface it reached had nothing.
func removedNothing(res DeletionResult) bool {
	for _, n := range res.Deleted {
		if n > 0 {
			return false
		}
	}
	return true
}

// purgeRetryWait is the wait after the attempts-th failed attempt.
func purgeRetryWait(attempts int) time.Duration {
	d := PurgeRetryBase
	for i := 1; i < attempts && d < PurgeRetryMax; i++ {
		d *= 2
	}
	return min(d, PurgeRetryMax)
}

// failureClass names a purge failure for the account row and the audit
// log: the deletion's stage (FailureClass), or step for a failure outside
// a deletion stage. Never the cause's text.
func failureClass(err error, step string) string {
	if _, ok := errors.AsType[*DeleteError](err); ok {
		return FailureClass(err)
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return step + " (timed out)"
	case errors.Is(err, context.Canceled):
		return step + " (cancelled)"
	}
	return step + " (failed)"
}

// PurgeRunInput is the input of adminUnverifiedAccountPurgeRun.
type PurgeRunInput struct {
	DryRun bool `json:"dryRun,omitempty" jsonschema:"list the accounts the pass would claim, claiming and deleting none"`
	Limit  int  `json:"limit,omitempty" jsonschema:"at most this many accounts, 1 to 50 (default 50)" schema:"minimum=1,maximum=50"`
}

// PurgeCapability returns adminUnverifiedAccountPurgeRun, for the admin
// role only: one pass of the unverified sign-up purge on demand (see
// PurgeUnverified), or with dryRun the accounts it would claim. record is
// PurgeRequest.Record. The answer names accounts by stable user id only.
func (s *Service) PurgeCapability(record func(ctx context.Context, o storage.Owner, out PurgeOutcome)) capabilities.Capability {
	return capabilities.Define(capabilities.Spec[PurgeRunInput, PurgeReport]{
		Name: "adminUnverifiedAccountPurgeRun", Domain: "admin", Title: "Purge unverified sign-ups now",
		Description: "Runs one pass of the purge of accounts opened on the sign-up page that never verified their email within 7 days: accounts never attempted first, then earlier failures, skipping those waiting to be retried. " +
			"Each account is deleted with everything it owns. With dryRun, lists the accounts the pass would claim and changes nothing. Answers each account's outcome by stable user id, never emails or usernames. Admins only.",
		Annotations: &capabilities.Annotations{Destructive: true},
		Requires:    capabilities.Requirement{Role: capabilities.RoleAdmin, InteractiveOnly: true},
		Handler: func(ctx context.Context, _ *capabilities.Call, in PurgeRunInput) (PurgeReport, error) {
			if in.Limit < 0 || in.Limit > PurgeBatch {
				return PurgeReport{}, capabilities.Errorf(capabilities.CodeInvalidInput, "limit must be between 1 and %d", PurgeBatch)
			}
			return s.PurgeUnverified(ctx, PurgeRequest{Limit: in.Limit, DryRun: in.DryRun, Record: record})
		},
	})
}
