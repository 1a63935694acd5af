package oauth_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/internal/fuzzseed"
	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// The fuzz targets of this file send arbitrary parameters to each OAuth
// endpoint (authorize, token, register, revoke). The property: no panic,
// no 5xx, a JSON error body where one is JSON, an answer of bounded size.
// Placeholders in the fuzzed text ({client}, {challenge}, {resource},
// {verifier}) are replaced by real values so that the fuzzer gets past the
// first checks. Seeds: testdata/fuzz/<Target>/.

type oauthFuzz struct {
	h                                     http.Handler
	client, challenge, verifier, resource string
}

func newOAuthFuzz(f *testing.F) *oauthFuzz {
	e := newEnv(f, storagetest.Open(f, storage.SQLite))
	conf := e.publicClient()
	mux := http.NewServeMux()
	e.srv.Register(mux)
	verifier := strings.Repeat("v", 43)
	sum := sha256.Sum256([]byte(verifier))
	return &oauthFuzz{h: mux, client: conf.ClientID, verifier: verifier,
		challenge: base64.RawURLEncoding.EncodeToString(sum[:]), resource: e.srv.Resource()}
}

func (o *oauthFuzz) expand(s string) string {
	return strings.NewReplacer("{client}", o.client, "{challenge}", o.challenge, "{verifier}", o.verifier, "{resource}", o.resource).Replace(s)
}

func (o *oauthFuzz) serve(t *testing.T, method, target, contentType, body string, header map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	if strings.ContainsAny(target, " \r\n\x00") || !strings.HasPrefix(target, "/") {
		target = "/" + strings.NewReplacer(" ", "%20", "\r", "%0D", "\n", "%0A", "\x00", "%00").Replace(strings.TrimPrefix(target, "/"))
	}
	req, err := http.NewRequest(method, "http://as.test"+target, strings.NewReader(body))
	if err != nil {
		t.Skip() // not a request a client can send
	}
	req.RemoteAddr = "127.0.0.1:1234"
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range header {
		req.Header[k] = []string{v}
	}
	rec := httptest.NewRecorder()
	start := time.Now()
	o.h.ServeHTTP(rec, req)
	if rec.Code >= 500 {
		t.Fatalf("%s %s: status %d: %s", method, target, rec.Code, rec.Body.String())
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("%s %s: took %s", method, target, d)
	}
	if rec.Body.Len() > 64<<10 {
		t.Fatalf("%s %s: answer of %d bytes", method, target, rec.Body.Len())
	}
	if strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") && !json.Valid(rec.Body.Bytes()) {
		t.Fatalf("%s %s: status %d, invalid JSON: %q", method, target, rec.Code, rec.Body.String())
	}
	return rec
}

// FuzzAuthorize fuzzes the authorization endpoint's query and form.
func FuzzAuthorize(f *testing.F) {
	fuzzseed.Add(f,
		[]any{false, "response_type=code&client_id={client}&redirect_uri=http://127.0.0.1:9/callback&scope=mcp&state=0123456789&code_challenge={challenge}&code_challenge_method=S256&resource={resource}", ""},
		[]any{false, "response_type=code&client_id={client}&redirect_uri=http://127.0.0.1:9/callback&state=x&code_challenge={challenge}&code_challenge_method=plain", ""},
		[]any{false, "response_type=token&client_id={client}", ""},
		[]any{false, "client_id=%ff%fe&redirect_uri=%00", ""},
		[]any{false, "response_type=code&client_id={client}&redirect_uri=http://evil.test/&state=0123456789&code_challenge={challenge}&code_challenge_method=S256", ""},
		[]any{false, "response_type=code&client_id={client}&client_id=other&resource=https://other.test/mcp&resource={resource}", ""},
		[]any{true, "response_type=code&client_id={client}&redirect_uri=http://127.0.0.1:9/callback&scope=mcp&state=0123456789&code_challenge={challenge}&code_challenge_method=S256", "email=x@example.test&password=p"},
		[]any{true, "", "response_type=code&client_id={client}&scope=" + strings.Repeat("a+", 500)},
		[]any{false, "request=eyJhbGciOiJub25lIn0.e30.&client_id={client}", ""},
		[]any{false, ";;;&&&==%", ""},
	)
	o := newOAuthFuzz(f)
	f.Fuzz(func(t *testing.T, post bool, query, form string) {
		query, form = o.expand(query), o.expand(form)
		if post {
			o.serve(t, http.MethodPost, oauth.PathAuthorize+"?"+query, "application/x-www-form-urlencoded", form, nil)
		} else {
			o.serve(t, http.MethodGet, oauth.PathAuthorize+"?"+query, "", "", nil)
		}
	})
}

// FuzzToken fuzzes the token endpoint's form and client authentication.
func FuzzToken(f *testing.F) {
	fuzzseed.Add(f,
		[]any{"grant_type=authorization_code&code=abc&client_id={client}&redirect_uri=http://127.0.0.1:9/callback&code_verifier={verifier}&resource={resource}", ""},
		[]any{"grant_type=refresh_token&refresh_token=ory_rt_x.y&client_id={client}", ""},
		[]any{"grant_type=client_credentials&scope=mcp", "Basic " + base64.StdEncoding.EncodeToString([]byte("{client}:secret"))},
		[]any{"grant_type=password&username=a&password=b", ""},
		[]any{"grant_type=authorization_code&code=&client_id=", "Basic !!!"},
		[]any{"grant_type=refresh_token&refresh_token=" + strings.Repeat("x", 5000), "Basic Og=="},
		[]any{"%zz=1&grant_type", "Bearer abc"},
		[]any{"grant_type=authorization_code&code=a&code=b&client_id={client}&client_id=x", ""},
		[]any{"grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer&assertion=e30.e30.", ""},
	)
	o := newOAuthFuzz(f)
	f.Fuzz(func(t *testing.T, form, auth string) {
		h := map[string]string{}
		if auth = o.expand(auth); auth != "" {
			h["Authorization"] = auth
		}
		o.serve(t, http.MethodPost, oauth.PathToken, "application/x-www-form-urlencoded", o.expand(form), h)
	})
}

// FuzzRegister fuzzes dynamic client registration (RFC 7591) bodies.
func FuzzRegister(f *testing.F) {
	fuzzseed.Add(f,
		[]any{`{"redirect_uris":["http://127.0.0.1:9/callback"],"token_endpoint_auth_method":"none","client_name":"x"}`, "application/json"},
		[]any{`{"redirect_uris":["cursor://cb"],"grant_types":["authorization_code","refresh_token"],"response_types":["code"]}`, "application/json"},
		[]any{`{"redirect_uris":["javascript:alert(1)"]}`, "application/json"},
		[]any{`{"redirect_uris":"http://127.0.0.1/"}`, "application/json"},
		[]any{`{"redirect_uris":[` + strings.Repeat(`"http://127.0.0.1/a",`, 300) + `"http://127.0.0.1/b"]}`, "application/json"},
		[]any{`{"redirect_uris":["http://127.0.0.1/"],"client_name":"\ud800\u0000","logo_uri":"data:x","jwks":{"keys":[{}]}}`, "application/json"},
		[]any{`{"redirect_uris":["http://127.0.0.1/"],"token_endpoint_auth_method":"private_key_jwt","scope":"mcp admin"}`, "application/json"},
		[]any{strings.Repeat("[", 10000), "application/json"},
		[]any{"redirect_uris=http://127.0.0.1/", "application/x-www-form-urlencoded"},
		[]any{"\xff\xfe{", "application/json; charset=latin1"},
		[]any{`null`, ""},
	)
	o := newOAuthFuzz(f)
	f.Fuzz(func(t *testing.T, body, contentType string) {
		rec := o.serve(t, http.MethodPost, oauth.PathRegister, contentType, body, nil)
		if rec.Code == http.StatusCreated {
			var out map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out["client_id"] == "" {
				t.Fatalf("201 without a client id: %s", rec.Body.String())
			}
		}
	})
}

// FuzzRevoke fuzzes token revocation (RFC 7009).
func FuzzRevoke(f *testing.F) {
	fuzzseed.Add(f,
		[]any{"token=abc&client_id={client}", ""},
		[]any{"token=ory_at_x.y&token_type_hint=access_token&client_id={client}", ""},
		[]any{"token=ory_rt_x.y&token_type_hint=refresh_token", "Basic " + base64.StdEncoding.EncodeToString([]byte("{client}:"))},
		[]any{"token=&token_type_hint=nonsense", ""},
		[]any{"token=" + strings.Repeat("%ff", 2000), "Basic ::::"},
		[]any{"", ""},
	)
	o := newOAuthFuzz(f)
	f.Fuzz(func(t *testing.T, form, auth string) {
		h := map[string]string{}
		if auth = o.expand(auth); auth != "" {
			h["Authorization"] = auth
		}
		o.serve(t, http.MethodPost, oauth.PathRevoke, "application/x-www-form-urlencoded", o.expand(form), h)
	})
}
