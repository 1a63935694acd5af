package quota

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/storage"
)

// PlanTables are the user-owned tables of plans: the plan an admin set
// for an account (who set it left out of exports) and the alerts already
// sent for it.
var PlanTables = []storage.Table{
	{Name: "user_plans", KeyColumn: "user_id", Redact: []string{"set_by"}},
	{Name: "quota_alerts"},
}

// RegisterPlanInventory records the tables of plans: plans itself is
// platform data.
func RegisterPlanInventory(inv *storage.Inventory) error {
	errs := []error{inv.DeclarePlatform("plans", "plans are platform data: names and limits, no owner")}
	for _, t := range PlanTables {
		errs = append(errs, inv.AddTable(t))
	}
	return errors.Join(errs...)
}

// PlanRetentionPolicies declares how long the tables of plans live.
func PlanRetentionPolicies() []retention.Policy {
	return []retention.Policy{
		retention.Kept("plans", "plans are platform data, changed by admins"),
		retention.UntilAccountDeleted("user_plans").Because("or until an admin puts the account on another plan"),
		retention.Age("quota_alerts", "created_at", 14*24*time.Hour).Because("a week's alerts are needed until the week is over"),
	}
}

// UserPlanSetInput is the input of adminUserPlanSet.
type UserPlanSetInput struct {
	Username string `json:"username" jsonschema:"the account's username"`
	Plan     string `json:"plan" jsonschema:"the plan's name (see adminPlanList)"`
}

// UserPlanSetOutput is the output of adminUserPlanSet.
type UserPlanSetOutput struct {
	Username string `json:"username"`
	Plan     string `json:"plan"`
}

// PlanListOutput is the output of adminPlanList.
type PlanListOutput struct {
	Plans []Plan `json:"plans"`
}

// UsageTopInput is the input of adminUsageTop.
type UsageTopInput struct {
	Limit int `json:"limit,omitempty" jsonschema:"how many accounts, 1 to 100 (default 20)" schema:"minimum=1,maximum=100,default=20"`
}

// UsageTopOutput is the output of adminUsageTop.
type UsageTopOutput struct {
	WeekStart string       `json:"weekStart"`
	Accounts  []TopAccount `json:"accounts"`
}

// Capabilities returns usageGet for every user, and for admins
// adminPlanSave, adminPlanList, adminUserPlanSet and adminUsageTop.
func (p *Plans) Capabilities(owners capabilities.OwnerOf) []capabilities.Capability {
	admin := capabilities.Requirement{Role: capabilities.RoleAdmin}
	return []capabilities.Capability{
		capabilities.Define(capabilities.Spec[struct{}, PlanUsage]{
			Name: "usageGet", Domain: "account", Title: "Your usage",
			Description: "Returns your plan and, per meter (code runs, outbound fetches, mails sent and received), today's and this week's use against the plan's daily and weekly limits, and the bytes you store against your storage limit. Days are UTC; weeks run Monday to Sunday, UTC. Counts may trail by a second.",
			Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
			Requires:    capabilities.Requirement{Permissions: []capabilities.Permission{capabilities.ReadUserOwn}},
			Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (PlanUsage, error) {
				o, err := owners(ctx, call.Caller)
				if err != nil {
					return PlanUsage{}, err
				}
				return p.UsageFor(ctx, o.ID)
			},
		}),
		capabilities.Define(capabilities.Spec[Plan, Plan]{
			Name: "adminPlanSave", Domain: "admin", Title: "Create or change a plan",
			Description: "Creates a plan or replaces its limits: per meter a daily and a weekly limit (absent: none), and storage bytes. The plan named default applies to every account no admin put on another plan.",
			Annotations: &capabilities.Annotations{Idempotent: true},
			Requires:    admin,
			Handler: func(ctx context.Context, _ *capabilities.Call, in Plan) (Plan, error) {
				return p.Save(ctx, in)
			},
		}),
		capabilities.Define(capabilities.Spec[struct{}, PlanListOutput]{
			Name: "adminPlanList", Domain: "admin", Title: "List plans",
			Description: "Lists the plans and their limits.",
			Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
			Requires:    admin,
			Handler: func(ctx context.Context, _ *capabilities.Call, _ struct{}) (PlanListOutput, error) {
				ps, err := p.List(ctx)
				return PlanListOutput{Plans: ps}, err
			},
		}),
		capabilities.Define(capabilities.Spec[UserPlanSetInput, UserPlanSetOutput]{
			Name: "adminUserPlanSet", Domain: "admin", Title: "Set an account's plan",
			Description: "Puts an account on a plan; its limits apply within seconds.",
			Annotations: &capabilities.Annotations{Idempotent: true},
			Requires:    admin,
			Handler: func(ctx context.Context, call *capabilities.Call, in UserPlanSetInput) (UserPlanSetOutput, error) {
				by, err := owners(ctx, call.Caller)
				if err != nil {
					return UserPlanSetOutput{}, err
				}
				var id int64
				err = p.store.DB.NewSelect().Table("users").Column("id").Where("username = ?", in.Username).Scan(ctx, &id)
				if errors.Is(err, sql.ErrNoRows) {
					return UserPlanSetOutput{}, capabilities.Errorf(capabilities.CodeNotFound, "no account named %q", in.Username)
				}
				if err != nil {
					return UserPlanSetOutput{}, err
				}
				if err := p.Set(ctx, id, in.Plan, by.ID); err != nil {
					return UserPlanSetOutput{}, err
				}
				return UserPlanSetOutput{Username: in.Username, Plan: in.Plan}, nil
			},
		}),
		capabilities.Define(capabilities.Spec[UsageTopInput, UsageTopOutput]{
			Name: "adminUsageTop", Domain: "admin", Title: "Top accounts by use this week",
			Description: "The accounts with the most metered uses this week (Monday to Sunday, UTC): username, plan and this week's uses per meter. Nothing else about the accounts.",
			Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
			Requires:    admin,
			Handler: func(ctx context.Context, _ *capabilities.Call, in UsageTopInput) (UsageTopOutput, error) {
				n := in.Limit
				if n == 0 {
					n = 20
				}
				if n < 1 || n > 100 {
					return UsageTopOutput{}, capabilities.Errorf(capabilities.CodeInvalidInput, "limit must be 1 to 100")
				}
				top, err := p.Top(ctx, n)
				return UsageTopOutput{WeekStart: WeekStart(p.now()).Format(time.DateOnly), Accounts: top}, err
			},
		}),
	}
}
