package oauth

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/ory/fosite"
)

// The authorization response is a 303 to the registered redirect URI with
// the response's parameters added to the query the URI already has, and
// neither it nor the response headers are cached.
func TestWriteAuthorizeResponse(t *testing.T) {
	redirect, err := url.Parse("http://127.0.0.1:9/cb?app=1&state=stale")
	if err != nil {
		t.Fatal(err)
	}
	ar := fosite.NewAuthorizeRequest()
	ar.RedirectURI = redirect
	resp := fosite.NewAuthorizeResponse()
	resp.AddParameter("code", "c0de")
	resp.AddParameter("state", "s1")
	resp.AddParameter("iss", "https://enclave.example")
	resp.AddHeader("X-Test", "yes")

	rec := httptest.NewRecorder()
	writeAuthorizeResponse(rec, ar, resp)

	if rec.Code != http.StatusSeeOther {
		t.Fatalf("status %d, want 303", rec.Code)
	}
	if got := rec.Header().Get("Cache-Control"); got != "no-store" {
		t.Errorf("Cache-Control %q, want no-store", got)
	}
	if got := rec.Header().Get("Pragma"); got != "no-cache" {
		t.Errorf("Pragma %q, want no-cache", got)
	}
	if got := rec.Header().Get("X-Test"); got != "yes" {
		t.Errorf("the response's own header X-Test is %q, want yes", got)
	}
	loc, err := url.Parse(rec.Header().Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	if loc.Scheme != "http" || loc.Host != "127.0.0.1:9" || loc.Path != "/cb" || loc.Fragment != "" {
		t.Errorf("Location %s, want the redirect URI", loc)
	}
	want := url.Values{"app": {"1"}, "code": {"c0de"}, "state": {"s1"}, "iss": {"https://enclave.example"}}
	if got := loc.Query(); got.Encode() != want.Encode() {
		t.Errorf("Location query %s, want %s", got.Encode(), want.Encode())
	}
	if redirect.RawQuery != "app=1&state=stale" {
		t.Errorf("the request's redirect URI changed to %s", redirect)
	}
}

// A registered redirect URI whose query already names the response's
// parameters, several times or percent-encoded, cannot smuggle a second
// value of them to the client: each response parameter has exactly the
// server's value, and the client's own parameters are kept.
func TestWriteAuthorizeResponseOverridesRegisteredParameters(t *testing.T) {
	redirect, err := url.Parse("https://app.example/cb?code=evil&code=evil2&%69ss=https%3A%2F%2Fattacker.example&st%61te=x&keep=1")
	if err != nil {
		t.Fatal(err)
	}
	ar := fosite.NewAuthorizeRequest()
	ar.RedirectURI = redirect
	resp := fosite.NewAuthorizeResponse()
	resp.AddParameter("code", "c0de")
	resp.AddParameter("state", "s1")
	resp.AddParameter("iss", "https://enclave.example")
	rec := httptest.NewRecorder()
	writeAuthorizeResponse(rec, ar, resp)
	loc, err := url.Parse(rec.Header().Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	q := loc.Query()
	for k, want := range map[string]string{"code": "c0de", "state": "s1", "iss": "https://enclave.example", "keep": "1"} {
		if got := q[k]; len(got) != 1 || got[0] != want {
			t.Errorf("%s = %q, want only %q (Location %s)", k, got, want, loc)
		}
	}
	if loc.Host != "app.example" || loc.Fragment != "" || rec.Body.Len() != 0 {
		t.Errorf("Location %s, body %q", loc, rec.Body)
	}
}
