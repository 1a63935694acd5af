package mail_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

func fromMessage(id, from string) []byte {
	return []byte(fmt.Sprintf("From: %s\r\nSubject: s\r\nMessage-ID: <%s>\r\n\r\nbody\r\n", from, id))
}

// Sender rules: block sends a sender's mail (or a domain's) to
// quarantine, an address allow wins over its domain's block, rules are
// the owner's alone, and at most 200.
func TestMailRules(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, mail.Config{})
		alice, bob := e.user("alice"), e.user("bob")
		must[mail.Rule](e, alice, "mailRuleSet", map[string]any{"sender": "@Spam.test", "action": "block"})
		must[mail.Rule](e, alice, "mailRuleSet", map[string]any{"sender": "friend@spam.test", "action": "allow"})
		for _, bad := range []string{"", "spam.test", "a@b@c.test", "\"x\"@spam.test", "a b@spam.test", "x@-bad-.test"} {
			if _, err := call[mail.Rule](e, alice, "mailRuleSet", map[string]any{"sender": bad, "action": "block"}); code(err) != capabilities.CodeInvalidInput {
				t.Errorf("sender %q: %v", bad, err)
			}
		}
		if _, err := call[mail.Rule](e, alice, "mailRuleSet", map[string]any{"sender": "x@y.test", "action": "drop"}); code(err) != capabilities.CodeInvalidInput {
			t.Errorf("action drop: %v", err)
		}
		deliver := func(rcpt, id, from string) {
			t.Helper()
			if _, err := e.svc.Deliver(t.Context(), mail.Delivery{Recipient: rcpt + "@" + domain, Raw: fromMessage(id, from)}); err != nil {
				t.Fatal(err)
			}
		}
		deliver("alice", "1@x", "Spammer <ads@spam.test>")
		deliver("alice", "2@x", "friend@SPAM.test")
		deliver("alice", "3@x", "someone@other.test")
		deliver("bob", "4@x", "ads@spam.test")
		folder := func(c capabilities.Caller, f string) int {
			return len(must[mail.ListOutput](e, c, "mailList", map[string]any{"folder": f}).Messages)
		}
		if folder(alice, "quarantine") != 1 || folder(alice, "inbox") != 2 {
			t.Errorf("alice: quarantine %d, inbox %d; want 1 and 2", folder(alice, "quarantine"), folder(alice, "inbox"))
		}
		if folder(bob, "inbox") != 1 || folder(bob, "quarantine") != 0 {
			t.Error("alice's rule applied to bob's mail")
		}
		if l := must[mail.RuleListOutput](e, bob, "mailRuleList", map[string]any{}); len(l.Rules) != 0 {
			t.Errorf("bob sees rules: %+v", l)
		}
		if d := must[mail.DeleteOutput](e, bob, "mailRuleDelete", map[string]any{"sender": "@spam.test"}); d.Deleted {
			t.Error("bob deleted alice's rule")
		}
		if l := must[mail.RuleListOutput](e, alice, "mailRuleList", map[string]any{}); len(l.Rules) != 2 || l.Rules[0].Sender != "@spam.test" {
			t.Errorf("alice's rules: %+v", l)
		}
		if d := must[mail.DeleteOutput](e, alice, "mailRuleDelete", map[string]any{"sender": "@spam.test"}); !d.Deleted {
			t.Error("not deleted")
		}
		for i := range mail.MaxRules - 1 {
			must[mail.Rule](e, alice, "mailRuleSet", map[string]any{"sender": fmt.Sprintf("s%d@x.test", i), "action": "block"})
		}
		if _, err := call[mail.Rule](e, alice, "mailRuleSet", map[string]any{"sender": "one-more@x.test", "action": "block"}); code(err) != capabilities.CodeConflict {
			t.Errorf("rule %d: %v, want conflict", mail.MaxRules+1, err)
		}
		// Changing an existing rule at the bound still works.
		if r := must[mail.Rule](e, alice, "mailRuleSet", map[string]any{"sender": "s0@x.test", "action": "allow"}); r.Action != "allow" {
			t.Errorf("changed rule: %+v", r)
		}
	})
}

// A message failing sender authentication is quarantined even from an
// allowed sender, and its results are recorded.
func TestMailQuarantineOnFailedAuth(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, mail.Config{Options: mail.Options{Authenticate: func(_ context.Context, in mail.AuthInput) (string, bool) {
			if strings.Contains(string(in.Raw), "forged") {
				return "dkim=fail header.d=bank.test", true
			}
			return "dkim=pass header.d=bank.test", false
		}}})
		alice := e.user("alice")
		must[mail.Rule](e, alice, "mailRuleSet", map[string]any{"sender": "@bank.test", "action": "allow"})
		good, err := e.svc.Deliver(t.Context(), mail.Delivery{Recipient: "alice@" + domain, Raw: fromMessage("g@x", "alerts@bank.test")})
		if err != nil {
			t.Fatal(err)
		}
		bad, err := e.svc.Deliver(t.Context(), mail.Delivery{Recipient: "alice@" + domain, Raw: []byte("From: alerts@bank.test\r\nSubject: forged\r\nMessage-ID: <b@x>\r\n\r\nlog in here\r\n")})
		if err != nil {
			t.Fatal(err)
		}
		q := must[mail.ListOutput](e, alice, "mailList", map[string]any{"folder": "quarantine"})
		if len(q.Messages) != 1 || q.Messages[0].ID != bad.MessageID {
			t.Fatalf("quarantine: %+v", q)
		}
		if m := must[mail.Message](e, alice, "mailRead", map[string]any{"messageId": bad.MessageID}); m.AuthResults != "dkim=fail header.d=bank.test" {
			t.Errorf("recorded results: %q", m.AuthResults)
		}
		if m := must[mail.Message](e, alice, "mailRead", map[string]any{"messageId": good.MessageID}); m.Folder != "inbox" || m.AuthResults != "dkim=pass header.d=bank.test" {
			t.Errorf("good message: %+v", m.Summary)
		}
	})
}
