// Package adminaudit records in the audit log the calls of admin
// capabilities and people's account actions, whatever the transport (MCP,
// web shell, CLI): who acted (a keyed hash), from which client network,
// with what outcome and, bounded and quoted, on what.
package adminaudit

import (
	"cmp"
	"context"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/internal/clientnet"
)

// Recorder writes the rows. Its zero value is not usable: Log is needed.
type Recorder struct {
	Log *audit.Log
	// StableIDByUsername finds the account a plan change names, whose
	// keyed hash the row holds (never the username: the row outlives the
	// account).
	StableIDByUsername func(ctx context.Context, username string) (string, error)
}

// adminActions names the audit action of each admin capability whose
// calls Admin records: who acted, from which address, on which client or
// flag.
var adminActions = map[string]string{
	"adminOAuthClientBlock":          "admin_client_block",
	"adminOAuthClientUnblock":        "admin_client_unblock",
	"adminOAuthClientBlockHost":      "admin_client_host_block",
	"adminOAuthClientUnblockHost":    "admin_client_host_unblock",
	"adminInviteCreate":              "admin_invite_create",
	"adminInviteRevoke":              "admin_invite_revoke",
	"adminFeatureSet":                "admin_feature_set",
	"adminWebhookCreate":             "admin_webhook_create",
	"adminWebhookDelete":             "admin_webhook_delete",
	"adminFeedbackUpdate":            "admin_feedback_update",
	"adminFeedbackGet":               "admin_feedback_get",
	"adminUnverifiedAccountPurgeRun": "admin_unverified_purge_run",
}

// communityActions names the audit action of each admin moderation and
// plan capability: who acted, from which address, on which listing,
// report, account or plan.
var communityActions = map[string]string{
	"adminCommunityFeature":       "admin_community_feature",
	"adminCommunityDelist":        "admin_community_delist",
	"adminCommunityDelete":        "admin_community_delete",
	"adminCommunityReportResolve": "admin_community_report_resolve",
	"adminUserPlanSet":            "admin_user_plan_set",
	"adminPlanSave":               "admin_plan_save",
}

// Admin wraps the handlers of the admin capabilities it knows among caps
// so that every call that reaches them (the registry let it through) is
// recorded with the acting admin's hash and, for a client block, the
// client's id; for a feature flag change, Reason says which flag and what
// it became ("beta on", "beta on for role admin", "beta off"). Other
// capabilities are returned as they are.
func (r Recorder) Admin(caps []capabilities.Capability) []capabilities.Capability {
	for i := range caps {
		if action, ok := adminActions[caps[i].Name]; ok && caps[i].Handler != nil {
			caps[i].Handler = r.wrap(caps[i].Handler, action, adminReason)
		}
	}
	return caps
}

// Community wraps the community's moderation and the plans' admin
// capabilities among caps like Admin: the row names the listing, report,
// account (hashed) or plan the call named.
func (r Recorder) Community(caps []capabilities.Capability) []capabilities.Capability {
	for i := range caps {
		if action, ok := communityActions[caps[i].Name]; ok && caps[i].Handler != nil {
			caps[i].Handler = r.wrap(caps[i].Handler, action, r.communityReason)
		}
	}
	return caps
}

// wrap records every call of next with the reason reason derives from
// its arguments.
func (r Recorder) wrap(next capabilities.Handler, action string, reason func(ctx context.Context, action string, args json.RawMessage) (string, string)) capabilities.Handler {
	return func(ctx context.Context, call *capabilities.Call, args json.RawMessage) (capabilities.Result, error) {
		res, err := next(ctx, call, args)
		result := audit.ResultSuccess
		if err != nil || res.IsError {
			result = audit.ResultFailure
		}
		e := audit.Event{Category: audit.CategoryAccount, Action: action, Result: result, IPHash: r.Log.HashIP(clientnet.Addr(ctx))}
		e.Reason, e.ClientID = reason(ctx, action, args)
		if call != nil && call.Caller.UserID != "" {
			e.UserHash = r.Log.HashUser(call.Caller.UserID)
		}
		_ = r.Log.Record(ctx, e)
		return res, err
	}
}

// adminReason is the reason and client id of an admin call's row.
func adminReason(_ context.Context, action string, args json.RawMessage) (reason, clientID string) {
	var in struct {
		ClientID string `json:"clientId"`
		Name     string `json:"name"`
		Enabled  bool   `json:"enabled"`
		Role     string `json:"role"`
		ID       string `json:"id"`
		DryRun   bool   `json:"dryRun"`
		Host     string `json:"host"`
	}
	_ = json.Unmarshal(args, &in)
	if len(in.ClientID) <= 256 {
		clientID = in.ClientID
	}
	switch {
	case action == "admin_feature_set":
		reason = featureChange(in.Name, in.Enabled, in.Role)
	case strings.HasPrefix(action, "admin_feedback_") && in.ID != "" && len(in.ID) <= 64:
		// Which submission the admin read or changed; the id is not
		// validated yet (an unknown one is audited too), so it is quoted
		// unless plain, like a feature flag's name.
		reason = "feedback " + auditName(in.ID)
	case strings.HasPrefix(action, "admin_client_host_") && len(in.Host) <= 256:
		reason = "host " + auditName(in.Host)
	case action == "admin_unverified_purge_run" && in.DryRun:
		reason = "dry run"
	}
	return reason, clientID
}

// communityReason is the reason of a moderation or plan call's row.
func (r Recorder) communityReason(ctx context.Context, _ string, args json.RawMessage) (string, string) {
	var in struct {
		Listing  string `json:"listing"`
		Report   string `json:"report"`
		Username string `json:"username"`
		Plan     string `json:"plan"`
		Name     string `json:"name"`
	}
	_ = json.Unmarshal(args, &in)
	switch {
	case in.Listing != "" && len(in.Listing) <= 64:
		return "listing " + auditName(in.Listing), ""
	case in.Report != "" && len(in.Report) <= 64:
		return "report " + auditName(in.Report), ""
	case in.Username != "" && len(in.Username) <= 64 && len(in.Plan) <= 64:
		// The account as a keyed hash (as every identifier in the log),
		// never its username: the row outlives the account.
		var stable string
		if r.StableIDByUsername != nil {
			stable, _ = r.StableIDByUsername(ctx, in.Username)
		}
		return "user " + cmp.Or(r.Log.HashUser(stable), "(none)") + " plan " + auditName(in.Plan), ""
	case in.Name != "" && len(in.Name) <= 64:
		return "plan " + auditName(in.Name), ""
	}
	return "", ""
}

// Account records the outcome of a person's account action
// (accounts.AccountOptions.Audit: a username change, a request to release
// a former address): the account's and the client address's hashes, and
// for a failure its code.
func (r Recorder) Account(ctx context.Context, u accounts.User, action string, ok bool, reason string) {
	e := audit.Event{Category: audit.CategoryAccount, Action: action, Result: audit.ResultSuccess, Reason: reason,
		UserHash: r.Log.HashUser(u.StableID), IPHash: r.Log.HashIP(clientnet.Addr(ctx))}
	if !ok {
		e.Result = audit.ResultFailure
	}
	_ = r.Log.Record(ctx, e)
}

// Workspace records a workspace key's creation or revocation
// (workspaces.Config.Audit).
func (r Recorder) Workspace(ctx context.Context, action, userID, detail string) {
	_ = r.Log.Record(ctx, audit.Event{
		Category: audit.CategoryAccount, Action: action, Result: audit.ResultSuccess,
		Reason: detail, UserHash: r.Log.HashUser(userID), IPHash: r.Log.HashIP(clientnet.Addr(ctx)),
	})
}

// featureChange describes a feature flag change for the audit log,
// bounded so that a refused call's oversized arguments are not stored.
func featureChange(name string, enabled bool, role string) string {
	if len(name) > 128 || len(role) > 128 {
		return "flag name or role too long"
	}
	// A refused call's name or role is not validated: quote anything that
	// is not a plain name, so no control or format character (a line
	// break, an escape, a bidi override) reaches the log as it is.
	name, role = auditName(name), auditName(role)
	d := name + " off"
	if enabled {
		d = name + " on"
		if role != "" {
			d += " for role " + role
		}
	}
	return d
}

// auditName returns s when it is printable ASCII without quotes or
// backslashes, else s quoted in ASCII with Go escapes.
func auditName(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c >= 0x7f || c == '"' || c == '\\' {
			return strconv.QuoteToASCII(s)
		}
	}
	return s
}
