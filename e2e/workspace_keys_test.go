package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pquerna/otp/totp"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/workspaces"
)

func workspaceKeyServer() enclavetest.Options {
	return enclavetest.Options{Config: enclave.Config{Workspaces: &workspaces.Options{}}}
}

// sessionInvoke calls a capability as u at the web shell (a session).
func sessionInvoke(t *testing.T, s *enclavetest.Server, u *enclavetest.User, name string, args, out any) error {
	t.Helper()
	c := u.Caller(t)
	c.Session = true
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Registry().Invoke(context.Background(), c, name, raw)
	if err == nil && out != nil {
		b, _ := json.Marshal(res.Structured)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatal(err)
		}
	}
	return err
}

// newWorkspaceKey makes a workspace for u and an owner key for it, with
// extra (the proof of a second factor) in the arguments.
func newWorkspaceKey(t *testing.T, s *enclavetest.Server, u *enclavetest.User, extra map[string]any) (string, workspaces.NewKey) {
	t.Helper()
	var w workspaces.Workspace
	if err := sessionInvoke(t, s, u, "workspaceCreate", map[string]any{"name": "Team of " + u.Username}, &w); err != nil {
		t.Fatal(err)
	}
	args := map[string]any{"workspaceId": w.ID, "name": "agent", "maxRole": "owner", "currentPassword": u.Password}
	for k, v := range extra {
		args[k] = v
	}
	var k workspaces.NewKey
	if err := sessionInvoke(t, s, u, "workspaceKeyCreate", args, &k); err != nil {
		t.Fatalf("create key: %v", err)
	}
	return w.ID, k
}

// keyAnswers reports whether key still reads its workspace, as its owner,
// at /mcp of s; false when /mcp refuses the key with 401.
func keyAnswers(t *testing.T, s *enclavetest.Server, key, ws string) bool {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/mcp", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	readBody(resp)
	if resp.StatusCode == http.StatusUnauthorized {
		return false
	}
	res, err := s.MCP(t, key).Call("workspaceGet", map[string]any{"workspaceId": ws})
	if err != nil || res.IsError || !strings.Contains(string(res.Structured), `"role":"owner"`) {
		t.Fatalf("workspaceGet with the key: %+v %v", res, err)
	}
	return true
}

// Workspace API keys die with the password, as sessions and OAuth grants
// do (issue 24): a password change, a reset, turning off the app, new
// recovery codes and removing a passkey each revoke the account's keys in
// their transaction, and the next request with a key is refused on this
// replica and on another one.
func TestWorkspaceKeysDieWithThePasswordAndFactorChanges(t *testing.T) {
	ctx := context.Background()
	enclavetest.Each(t, workspaceKeyServer(), func(t *testing.T, s *enclavetest.Server) {
		other := s.Replica(t)
		cases := []struct {
			name   string
			before func(u *enclavetest.User) map[string]any // a factor to set up; the proof for the key
			change func(u *enclavetest.User) error
		}{
			{"password change", nil, func(u *enclavetest.User) error {
				return sessionInvoke(t, s, u, "accountPasswordChange", accounts.PasswordChangeInput{Current: u.Password, New: "a changed long password"}, nil)
			}},
			{"password reset", nil, func(u *enclavetest.User) error {
				token, err := s.Accounts().Credentials.NewPasswordResetToken(ctx, u.ID)
				if err != nil {
					return err
				}
				_, _, err = s.Accounts().Credentials.ResetPasswordWithToken(ctx, token, "a reset long password")
				return err
			}},
			{"authenticator app turned off", withTOTP(t, s), func(u *enclavetest.User) error {
				acct, _ := s.Accounts().Identity.UserByID(ctx, u.ID)
				return s.Accounts().SecondFactors.DisableTOTP(ctx, acct, u.Password, recoveryCodes[u.ID][1])
			}},
			{"new recovery codes", withTOTP(t, s), func(u *enclavetest.User) error {
				acct, _ := s.Accounts().Identity.UserByID(ctx, u.ID)
				_, err := s.Accounts().SecondFactors.RegenerateRecoveryCodes(ctx, acct, u.Password, accounts.FactorProof{Code: recoveryCodes[u.ID][1]})
				return err
			}},
			{"passkey removed", nil, func(u *enclavetest.User) error {
				var id int64
				if err := s.Store().DB.NewRaw("INSERT INTO user_passkeys (user_id, credential_id, name, credential, created_at) VALUES (?, ?, 'laptop', '{}', ?) RETURNING id",
					u.ID, "cred-"+u.Username, time.Now().UTC()).Scan(ctx, &id); err != nil {
					return err
				}
				return s.Accounts().SecondFactors.RemovePasskey(ctx, u.ID, id)
			}},
		}
		for i, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				u := s.CreateUser(t, "keys"+string(rune('a'+i)))
				var proof map[string]any
				if tc.before != nil {
					proof = tc.before(u)
				}
				ws, key := newWorkspaceKey(t, s, u, proof)
				if !keyAnswers(t, s, key.Key, ws) || !keyAnswers(t, other, key.Key, ws) {
					t.Fatal("a new key is refused")
				}
				if err := tc.change(u); err != nil {
					t.Fatal(err)
				}
				if keyAnswers(t, s, key.Key, ws) {
					t.Fatalf("after the %s the key still answers", tc.name)
				}
				if keyAnswers(t, other, key.Key, ws) {
					t.Fatalf("after the %s the key still answers on another replica", tc.name)
				}
				var keys workspaces.KeysOutput
				if err := sessionInvoke(t, s, u, "workspaceKeyList", map[string]any{"workspaceId": ws}, &keys); err != nil {
					t.Fatal(err)
				}
				if len(keys.Keys) != 1 || keys.Keys[0].RevokedAt == nil {
					t.Fatalf("the key is not listed as revoked: %+v", keys.Keys)
				}
			})
		}
	})
}

// recoveryCodes holds the recovery codes withTOTP made, by account.
var recoveryCodes = map[int64][]string{}

// withTOTP returns a before func that sets up an authenticator app for the
// account and proves it to the key with a recovery code.
func withTOTP(t *testing.T, s *enclavetest.Server) func(u *enclavetest.User) map[string]any {
	return func(u *enclavetest.User) map[string]any {
		t.Helper()
		_, codes, err := enrolTOTP(context.Background(), s, u)
		if err != nil {
			t.Fatal(err)
		}
		recoveryCodes[u.ID] = codes
		return map[string]any{"code": codes[0]}
	}
}

// Making a workspace API key takes the current password and, when the
// account has a second factor, a fresh proof of it; the owner is mailed.
// Tokens (agents) cannot make keys at all.
func TestWorkspaceKeyCreateNeedsPasswordAndFactor(t *testing.T) {
	ctx := context.Background()
	enclavetest.Each(t, workspaceKeyServer(), func(t *testing.T, s *enclavetest.Server) {
		u := s.CreateUser(t, "maker")
		agent := u.MCP(t) // before the second factor: the OAuth sign-in would ask for it
		var w workspaces.Workspace
		if err := sessionInvoke(t, s, u, "workspaceCreate", map[string]any{"name": "Makers"}, &w); err != nil {
			t.Fatal(err)
		}
		create := func(extra map[string]any) error {
			args := map[string]any{"workspaceId": w.ID, "name": "agent", "maxRole": "viewer"}
			for k, v := range extra {
				args[k] = v
			}
			return sessionInvoke(t, s, u, "workspaceKeyCreate", args, nil)
		}
		wantRefused := func(what string, err error, msg string) {
			t.Helper()
			ce, ok := errors.AsType[*capabilities.Error](err)
			if !ok || ce.Code != capabilities.CodeInvalidInput || !strings.Contains(ce.Message, msg) {
				t.Fatalf("%s: %v", what, err)
			}
		}
		wantRefused("no password", create(nil), "currentPassword")
		wantRefused("a wrong password", create(map[string]any{"currentPassword": "not the password"}), "current password is not correct")
		mailed := func() int {
			n := 0
			for _, m := range s.Web().DevMail().Messages() {
				if m.To == u.Email && strings.Contains(m.Subject, "workspace API key was created") && strings.Contains(m.Text, `"Makers"`) {
					n++
				}
			}
			return n
		}
		if mailed() != 0 {
			t.Fatal("a refused key was mailed about")
		}
		if err := create(map[string]any{"currentPassword": u.Password}); err != nil {
			t.Fatal(err)
		}
		if mailed() != 1 {
			t.Fatal("the owner was not told of the new key")
		}

		// With a second factor, the password is not enough.
		acct, err := s.Accounts().Identity.UserByID(ctx, u.ID)
		if err != nil {
			t.Fatal(err)
		}
		en, err := s.Accounts().SecondFactors.BeginTOTP(ctx, acct, "enclave")
		if err != nil {
			t.Fatal(err)
		}
		first, _ := totp.GenerateCode(en.Secret, time.Now().Add(-30*time.Second))
		codes, err := s.Accounts().SecondFactors.ConfirmTOTP(ctx, acct, first)
		if err != nil {
			t.Fatal(err)
		}
		wantRefused("password alone with a factor", create(map[string]any{"currentPassword": u.Password}), "authenticator app")
		wantRefused("a wrong code", create(map[string]any{"currentPassword": u.Password, "code": "aaaa-bbbb-cccc-dddd"}), "not correct")
		now, _ := totp.GenerateCode(en.Secret, time.Now())
		if err := create(map[string]any{"currentPassword": u.Password, "code": now}); err != nil {
			t.Fatalf("with the app's code: %v", err)
		}
		if err := create(map[string]any{"currentPassword": u.Password, "code": codes[0]}); err != nil {
			t.Fatalf("with a recovery code: %v", err)
		}
		if mailed() != 3 {
			t.Fatalf("%d mails for three keys", mailed())
		}

		// An agent's token cannot make one, whatever it sends.
		res, err := agent.Call("workspaceKeyCreate", map[string]any{"workspaceId": w.ID, "name": "x", "maxRole": "viewer",
			"currentPassword": u.Password, "code": codes[1]})
		if err == nil && !res.IsError {
			t.Fatal("an access token made a workspace key")
		}
	})
}

// A workspace key of an account suspended while its deletion is pending
// reads nothing: suspension wins over deletion in the key's caller, which
// the registry would otherwise let through to the reads a deleting account
// keeps.
func TestWorkspaceKeyOfASuspendedDeletingAccountReadsNothing(t *testing.T) {
	ctx := context.Background()
	s := enclavetest.Start(t, workspaceKeyServer())
	u := s.CreateUser(t, "frozen")
	ws, key := newWorkspaceKey(t, s, u, nil)
	if !keyAnswers(t, s, key.Key, ws) {
		t.Fatal("a new key is refused")
	}
	c := s.MCP(t, key.Key)
	if _, err := s.Accounts().Lifecycle.MarkDeleting(ctx, u.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Accounts().Lifecycle.Suspend(ctx, u.ID); err != nil {
		t.Fatal(err)
	}
	res, err := c.Call("workspaceGet", map[string]any{"workspaceId": ws})
	if err == nil && !res.IsError {
		t.Fatalf("the suspended account's key read its workspace: %s", res.Structured)
	}
	if err == nil && !strings.Contains(string(res.Structured)+res.Text, "suspended") {
		t.Errorf("refused, but not as suspended: %+v", res)
	}
}

// A workspace key dies with its account: once the account is deleted the
// key is refused at /mcp (401), and the refusal goes through the audited,
// counted verifier chain like an OAuth token's (the key's verifier sits
// inside it, so the refusal is counted in enclave_token_refusals_total).
func TestWorkspaceKeyOfADeletedAccountIsRefusedAndCounted(t *testing.T) {
	s := enclavetest.Start(t, workspaceKeyServer())
	u := s.CreateUser(t, "leaving")
	ws, key := newWorkspaceKey(t, s, u, nil)
	if !keyAnswers(t, s, key.Key, ws) {
		t.Fatal("a new key is refused")
	}
	refusals := func() float64 {
		families, err := s.MetricsRegistry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		var n float64
		for _, f := range families {
			if f.GetName() == "enclave_token_refusals_total" {
				for _, m := range f.GetMetric() {
					n += m.GetCounter().GetValue()
				}
			}
		}
		return n
	}
	before := refusals()
	if res, err := s.Lifecycle().Delete(context.Background(), u.Owner()); err != nil || !res.Completed {
		t.Fatalf("delete: %+v, %v", res, err)
	}
	if keyAnswers(t, s, key.Key, ws) {
		t.Fatal("the key of a deleted account still answers")
	}
	if after := refusals(); after <= before {
		t.Fatalf("the refusal of the deleted account's key was not counted: %v then %v", before, after)
	}
}
