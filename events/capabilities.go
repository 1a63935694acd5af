package events

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"

	"github.com/enclave-mcp/enclave/capabilities"
)

// WebhookCreateInput is the input of adminWebhookCreate.
type WebhookCreateInput struct {
	URL         string   `json:"url" jsonschema:"the https URL to POST events to; never a private, loopback or link-local address" schema:"format=uri"`
	Events      []string `json:"events,omitempty" jsonschema:"the event types to receive (such as user.created); empty means every type" schema:"maxItems=32"`
	Description string   `json:"description,omitempty" jsonschema:"a note for admins, at most 200 bytes"`
}

// WebhookCreateOutput is the new subscription and its signing secret,
// shown this once.
type WebhookCreateOutput struct {
	Webhook Webhook `json:"webhook"`
	Secret  string  `json:"secret"`
}

// WebhookListOutput is the caller's subscriptions.
type WebhookListOutput struct {
	Webhooks []Webhook `json:"webhooks"`
}

// WebhookRef names one subscription.
type WebhookRef struct {
	ID string `json:"id" jsonschema:"the subscription id (id in adminWebhookList)"`
}

// WebhookDeleteOutput says the subscription is gone.
type WebhookDeleteOutput struct {
	Deleted bool `json:"deleted"`
}

// callerID resolves the caller's users.id.
func (b *Bus) callerID(ctx context.Context, call *capabilities.Call) (int64, error) {
	var id int64
	err := b.opts.Store.DB.NewSelect().Table("users").Column("id").Where("stable_user_id = ?", call.Caller.UserID).Scan(ctx, &id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, capabilities.Errorf(capabilities.CodeNotFound, "no such account")
	}
	return id, err
}

// originOnly returns the scheme and host of a target URL, with "/…" for an
// elided path or query: chat services put a token in their webhook URLs,
// which only the admin's web page shows in full.
func originOnly(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	origin := u.Scheme + "://" + u.Host
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return origin + "/…"
	}
	return origin + "/"
}

func inputError(err error) error {
	if ie := (*InputError)(nil); errors.As(err, &ie) {
		return capabilities.Errorf(capabilities.CodeInvalidInput, "%s", ie.Msg)
	}
	return err
}

// WebhookCapabilities returns adminWebhookCreate, adminWebhookList and
// adminWebhookDelete, for the admin role only. Each admin sees and deletes
// only their own subscriptions. adminWebhookCreate answers with the
// signing secret, so it is session-only: the secret reaches the admin on
// the signed-in web page, never an agent.
func (b *Bus) WebhookCapabilities() []capabilities.Capability {
	admin := capabilities.Requirement{Role: capabilities.RoleAdmin}
	return []capabilities.Capability{
		capabilities.Define(capabilities.Spec[WebhookCreateInput, WebhookCreateOutput]{
			Name: "adminWebhookCreate", Domain: "admin", Title: "Create a webhook subscription",
			Description: "Subscribes an https URL to admin events. Each request is signed with a secret returned only in this answer. Admins only, on the web page.",
			Annotations: &capabilities.Annotations{},
			Requires:    capabilities.Requirement{Role: capabilities.RoleAdmin, SessionOnly: true},
			Handler: func(ctx context.Context, call *capabilities.Call, in WebhookCreateInput) (WebhookCreateOutput, error) {
				id, err := b.callerID(ctx, call)
				if err != nil {
					return WebhookCreateOutput{}, err
				}
				w, secret, err := b.CreateWebhook(ctx, id, in.URL, in.Events, in.Description)
				if err != nil {
					return WebhookCreateOutput{}, inputError(err)
				}
				return WebhookCreateOutput{Webhook: w, Secret: secret}, nil
			},
		}),
		capabilities.Define(capabilities.Spec[struct{}, WebhookListOutput]{
			Name: "adminWebhookList", Domain: "admin", Title: "List your webhook subscriptions",
			Description: "Lists your webhook subscriptions with their state: active, or disabled with the reason, failures in a row and the last error. Never the secrets; outside the web page a target shows its origin only (its path and query may hold a token). Admins only.",
			Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
			Requires:    admin,
			Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (WebhookListOutput, error) {
				id, err := b.callerID(ctx, call)
				if err != nil {
					return WebhookListOutput{}, err
				}
				ws, err := b.Webhooks(ctx, id)
				if !call.Caller.Session {
					for i := range ws {
						ws[i].URL = originOnly(ws[i].URL)
					}
				}
				return WebhookListOutput{Webhooks: ws}, err
			},
		}),
		capabilities.Define(capabilities.Spec[WebhookRef, WebhookDeleteOutput]{
			Name: "adminWebhookDelete", Domain: "admin", Title: "Delete a webhook subscription",
			Description: "Deletes one of your webhook subscriptions; deliveries still waiting are dropped. Admins only.",
			Annotations: &capabilities.Annotations{Destructive: true, Idempotent: true},
			Requires:    admin,
			Handler: func(ctx context.Context, call *capabilities.Call, in WebhookRef) (WebhookDeleteOutput, error) {
				if in.ID == "" || len(in.ID) > 64 {
					return WebhookDeleteOutput{}, capabilities.Errorf(capabilities.CodeInvalidInput, "id is required")
				}
				id, err := b.callerID(ctx, call)
				if err != nil {
					return WebhookDeleteOutput{}, err
				}
				err = b.DeleteWebhook(ctx, id, in.ID)
				if errors.Is(err, ErrWebhookNotFound) {
					return WebhookDeleteOutput{}, capabilities.Errorf(capabilities.CodeNotFound, "you have no webhook subscription %q", in.ID)
				}
				if err != nil {
					return WebhookDeleteOutput{}, fmt.Errorf("events: %w", err)
				}
				return WebhookDeleteOutput{Deleted: true}, nil
			},
		}),
	}
}
