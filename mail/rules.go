package mail

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
)

// MaxRules bounds one user's sender rules.
const MaxRules = 200

// Rule actions.
const (
	RuleAllow = "allow"
	RuleBlock = "block"
)

// Rule is a sender rule: mail from Sender (an address, or "@domain" for a
// whole domain) is kept in the inbox (allow) or put in quarantine
// (block). An address rule wins over its domain's rule.
type Rule struct {
	Sender    string    `json:"sender"`
	Action    string    `json:"action" schema:"enum=allow|block"`
	CreatedAt time.Time `json:"createdAt"`
}

// RuleSetInput is the input of mailRuleSet.
type RuleSetInput struct {
	Sender string `json:"sender" jsonschema:"an address (bob@example.com) or a whole domain (@example.com)"`
	Action string `json:"action" jsonschema:"allow keeps the sender's mail in the inbox; block puts it in quarantine" schema:"enum=allow|block"`
}

// RuleDeleteInput is the input of mailRuleDelete.
type RuleDeleteInput struct {
	Sender string `json:"sender" jsonschema:"the sender of the rule to remove, as mailRuleList shows it"`
}

// RuleListOutput is the output of mailRuleList.
type RuleListOutput struct {
	Rules []Rule `json:"rules"`
}

// checkSender normalises a rule's sender: a lowercase address or
// "@domain", without spaces, quotes or control characters.
func checkSender(s string) (string, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	bad := invalid("sender must be an address (bob@example.com) or a domain (@example.com)")
	if len(s) < 3 || len(s) > 254 || strings.ContainsAny(s, " \t\r\n\"'<>()[],;:\\\x00") {
		return "", bad
	}
	local, dom, ok := strings.Cut(s, "@")
	if !ok || strings.Contains(dom, "@") || !validDomain(dom) {
		return "", bad
	}
	if local != "" && (strings.HasPrefix(local, ".") || strings.HasSuffix(local, ".")) {
		return "", bad
	}
	return s, nil
}

func (s *Service) setRule(ctx context.Context, o storage.Owner, in RuleSetInput) (Rule, error) {
	sender, err := checkSender(in.Sender)
	if err != nil {
		return Rule{}, err
	}
	if in.Action != RuleAllow && in.Action != RuleBlock {
		return Rule{}, invalid("action is allow or block")
	}
	now := s.now().UTC()
	err = s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		res, err := tx.NewRaw("UPDATE mail_rules SET action = ? WHERE user_id = ? AND sender = ?", in.Action, o.ID, sender).Exec(ctx)
		if err != nil {
			return fmt.Errorf("mail: set rule: %w", err)
		}
		if n, _ := res.RowsAffected(); n > 0 {
			return nil
		}
		// The bound is checked inside the transaction that inserts.
		var n int
		if err := tx.NewRaw("SELECT COUNT(*) FROM mail_rules WHERE user_id = ?", o.ID).Scan(ctx, &n); err != nil {
			return fmt.Errorf("mail: count rules: %w", err)
		}
		if n >= MaxRules {
			return capabilities.Errorf(capabilities.CodeConflict, "you have %d sender rules, the most there can be: delete one first", MaxRules)
		}
		_, err = tx.NewRaw("INSERT INTO mail_rules (user_id, sender, action, created_at) VALUES (?, ?, ?, ?) ON CONFLICT (user_id, sender) DO UPDATE SET action = EXCLUDED.action",
			o.ID, sender, in.Action, now).Exec(ctx)
		if err != nil {
			return fmt.Errorf("mail: set rule: %w", err)
		}
		return nil
	})
	if err != nil {
		return Rule{}, err
	}
	var r Rule
	if err := s.store.DB.NewRaw("SELECT sender, action, created_at FROM mail_rules WHERE user_id = ? AND sender = ?", o.ID, sender).Scan(ctx, &r); err != nil {
		return Rule{}, fmt.Errorf("mail: read rule: %w", err)
	}
	r.CreatedAt = r.CreatedAt.UTC()
	return r, nil
}

func (s *Service) listRules(ctx context.Context, o storage.Owner) ([]Rule, error) {
	rules := []Rule{}
	if err := s.store.Reader.NewRaw("SELECT sender, action, created_at FROM mail_rules WHERE user_id = ? ORDER BY sender LIMIT ?", o.ID, MaxRules).Scan(ctx, &rules); err != nil {
		return nil, fmt.Errorf("mail: list rules: %w", err)
	}
	for i := range rules {
		rules[i].CreatedAt = rules[i].CreatedAt.UTC()
	}
	return rules, nil
}

func (s *Service) deleteRule(ctx context.Context, o storage.Owner, sender string) (bool, error) {
	sender, err := checkSender(sender)
	if err != nil {
		return false, err
	}
	res, err := s.store.DB.NewRaw("DELETE FROM mail_rules WHERE user_id = ? AND sender = ?", o.ID, sender).Exec(ctx)
	if err != nil {
		return false, fmt.Errorf("mail: delete rule: %w", err)
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

// ruleFor returns the action of the rule matching from (an address), the
// address rule before the domain rule, or "" without one.
func (s *Service) ruleFor(ctx context.Context, o storage.Owner, from string) (string, error) {
	from = strings.ToLower(from)
	_, dom, ok := strings.Cut(from, "@")
	if !ok || dom == "" {
		return "", nil
	}
	var rules []struct {
		Sender string `bun:"sender"`
		Action string `bun:"action"`
	}
	if err := s.store.Reader.NewRaw("SELECT sender, action FROM mail_rules WHERE user_id = ? AND sender IN (?)", o.ID, bun.In([]string{from, "@" + dom})).Scan(ctx, &rules); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("mail: read rules: %w", err)
	}
	action := ""
	for _, r := range rules {
		if r.Sender == from {
			return r.Action, nil
		}
		action = r.Action
	}
	return action, nil
}

// ruleCapabilities returns mailRuleSet, mailRuleList and mailRuleDelete.
func (s *Service) ruleCapabilities() []capabilities.Capability {
	return []capabilities.Capability{
		capabilities.Define(capabilities.Spec[RuleSetInput, Rule]{
			Name: "mailRuleSet", Domain: "mail", Title: "Set a sender rule",
			Description: fmt.Sprintf("Sets a rule for mail from a sender (an address, or @domain for a whole domain): block puts their mail in quarantine, allow keeps it in the inbox. An address rule wins over its domain's. At most %d rules; setting a sender's rule again replaces it.", MaxRules),
			Annotations: &capabilities.Annotations{Idempotent: true}, Requires: writeOwn,
			Handler: func(ctx context.Context, call *capabilities.Call, in RuleSetInput) (Rule, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return Rule{}, err
				}
				return s.setRule(ctx, o, in)
			},
		}),
		capabilities.Define(capabilities.Spec[struct{}, RuleListOutput]{
			Name: "mailRuleList", Domain: "mail", Title: "List your sender rules",
			Description: "Lists your mail sender rules, by sender.",
			Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true}, Requires: readOwn,
			Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (RuleListOutput, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return RuleListOutput{}, err
				}
				rules, err := s.listRules(ctx, o)
				return RuleListOutput{Rules: rules}, err
			},
		}),
		capabilities.Define(capabilities.Spec[RuleDeleteInput, DeleteOutput]{
			Name: "mailRuleDelete", Domain: "mail", Title: "Delete a sender rule",
			Description: "Removes your rule for a sender; their mail is then treated like anyone's.",
			Annotations: &capabilities.Annotations{Destructive: true, Idempotent: true}, Requires: writeOwn,
			Handler: func(ctx context.Context, call *capabilities.Call, in RuleDeleteInput) (DeleteOutput, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return DeleteOutput{}, err
				}
				ok, err := s.deleteRule(ctx, o, in.Sender)
				return DeleteOutput{Deleted: ok}, err
			},
		}),
	}
}
