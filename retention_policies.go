package enclave

import (
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/capabilities/idempotency"
	"github.com/enclave-mcp/enclave/capabilities/secrets"
	"github.com/enclave-mcp/enclave/codemode"
	"github.com/enclave-mcp/enclave/events"
	"github.com/enclave-mcp/enclave/features"
	"github.com/enclave-mcp/enclave/feedback"
	"github.com/enclave-mcp/enclave/internal/callercache"
	"github.com/enclave-mcp/enclave/internal/envelope"
	"github.com/enclave-mcp/enclave/internal/lanes"
	"github.com/enclave-mcp/enclave/internal/metrics"
	"github.com/enclave-mcp/enclave/internal/outbox"
	"github.com/enclave-mcp/enclave/internal/ratelimit"
	"github.com/enclave-mcp/enclave/mcp/sqlsessions"
	"github.com/enclave-mcp/enclave/mcp/sqltasks"
	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/quota"
	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/workspaces"
)

// newRetention collects the retention declarations of the core's tables:
// each package that owns a table declares its policy (one line: Age,
// UntilAccountDeleted, Kept or Custom), and the root only gathers them.
// Optional domains add theirs when they are assembled. A table without a
// policy fails TestRetentionCoversTheSchema; docs/data.md is generated
// from the set. The order is the purge order of a run: the users first
// (an account's deletion takes its rows with it), OAuth grants after their
// tokens and clients after their grants.
func (s *Server) newRetention() (*retention.Set, error) {
	set := retention.NewSet()
	for _, ps := range [][]retention.Policy{
		s.lifecycle.RetentionPolicies(lifecycle.RetentionOptions{
			AllowUnverified: s.cfg.OAuth.AllowUnverifiedEmail,
			Record:          lifecycle.AuditPurge(s.audit),
		}),
		accounts.RetentionPolicies(),
		secrets.RetentionPolicies(),
		quota.RetentionPolicies(),
		idempotency.RetentionPolicies(),
		sqltasks.RetentionPolicies(),
		sqlsessions.RetentionPolicies(),
		callercache.RetentionPolicies(),
		outbox.RetentionPolicies(s.cfg.JobRetention),
		events.RetentionPolicies(),
		feedback.RetentionPolicies(),
		oauth.RetentionPolicies(s.cfg.OAuth.ClientIdleTTL),
		audit.RetentionPolicies(),
		metrics.RetentionPolicies(),
		ratelimit.RetentionPolicies(),
		envelope.RetentionPolicies(),
		lanes.RetentionPolicies(),
		features.RetentionPolicies(),
		migrations.RetentionPolicies(),
		workspaces.RetentionPolicies(),
		// Code mode's tables exist whether or not it is on.
		codemode.RetentionPolicies(s.store.Bucket, s.cfg.CodeMode.Retention()),
	} {
		if err := set.Add(ps...); err != nil {
			return nil, err
		}
	}
	return set, nil
}
