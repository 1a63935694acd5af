package oauth_test

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// unstorable are values no text column can hold (PostgreSQL refuses them,
// SQLite cuts the statement at the NUL): sent where the server looks a
// token up, they must be unknown tokens, on both databases.
var unstorable = []string{"\x00", "ory_rt_a.\x00", "ory_ac_a.b\x00c", "ory_at_a.\xff\xfe", "x." + strings.Repeat("\xff", 10)}

// A code or token value an attacker makes up so that its lookup fails in
// SQL is an unknown token: not a 500 at the token endpoint, and not a 503
// temporarily_unavailable at revocation (an outage answer the client would
// retry forever, and that hides the request from the refusal counts).
func TestUnstorableTokenIsUnknown(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st)
		conf, _, tok := e.signIn()
		for _, v := range unstorable {
			code := e.exchange(conf, v, nil)
			if code.Status != http.StatusBadRequest || code.Error != "invalid_grant" {
				t.Errorf("code %q: %d %s", v, code.Status, code.Error)
			}
			ref := e.token(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {v}, "client_id": {conf.ClientID}})
			if ref.Status != http.StatusBadRequest || ref.Error != "invalid_grant" {
				t.Errorf("refresh token %q: %d %s", v, ref.Status, ref.Error)
			}
			for _, hint := range []string{"", "access_token", "refresh_token"} {
				form := url.Values{"token": {v}, "client_id": {conf.ClientID}}
				if hint != "" {
					form.Set("token_type_hint", hint)
				}
				resp := e.do(http.MethodPost, e.ts.URL+"/oauth/revoke", form)
				body, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != http.StatusOK {
					t.Errorf("revoke %q (hint %q): %d %s", v, hint, resp.StatusCode, body)
				}
			}
		}
		// The real tokens still work.
		if r := e.refresh(conf, tok.RefreshToken); r.Status != http.StatusOK {
			t.Fatalf("refresh after the probes: %d %s", r.Status, r.Error)
		}
	})
}

// Client metadata with a NUL character is invalid metadata (400), not a
// failed insert (500).
func TestRegisterRefusesNUL(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st)
		for _, field := range []string{"client_name", "client_uri", "logo_uri", "software_id", "software_version"} {
			value := "x\u0000y"
			if strings.HasSuffix(field, "_uri") {
				value = "https://example.test/\u0000"
			}
			code, out := e.register(map[string]any{
				"redirect_uris":              []string{"http://127.0.0.1:9/callback"},
				"token_endpoint_auth_method": "none",
				field:                        value,
			})
			if code != http.StatusBadRequest || out["error"] != "invalid_client_metadata" {
				t.Errorf("%s with a NUL: %d %v", field, code, out)
			}
		}
	})
}

// A grant or client id taken from a URL path (/account/apps/{id}/revoke,
// /admin/clients/{id}/block) that no text column can hold is an unknown
// grant or client, not an SQL failure.
func TestUnstorableGrantAndClientIDsAreUnknown(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st)
		_, uid, _ := e.signIn()
		for _, id := range []string{"\x00", "a\x00b", "\xff\xfe"} {
			if err := e.srv.RevokeGrant(t.Context(), uid, id); !errors.Is(err, oauth.ErrGrantNotFound) {
				t.Errorf("revoke grant %q: %v", id, err)
			}
			if _, err := e.srv.SetClientBlocked(t.Context(), id, true); !errors.Is(err, oauth.ErrClientNotFound) {
				t.Errorf("block client %q: %v", id, err)
			}
		}
	})
}
