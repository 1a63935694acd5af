package main

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/enclavetest"
)

// The example's page works in a real server: signed out it leads to the
// sign-in page; signed in it shows the form in the branded layout, and
// the greeting comes from the capability run as the person.
func TestGreetingsPage(t *testing.T) {
	cfg := config()
	cfg.DataDir = ""
	s := enclavetest.Start(t, enclavetest.Options{Config: cfg, Setup: setup})
	ann := s.CreateUser(t, "ann")

	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := c.Get(s.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	post := func(path string, form url.Values) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, s.URL+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", s.URL)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	if code, body := get("/greet"); code != http.StatusOK || !strings.Contains(body, `action="/login"`) {
		t.Fatalf("signed out: %d, want the sign-in page", code)
	}
	if code, _ := post("/login", url.Values{"email": {ann.Email}, "password": {ann.Password}}); code != http.StatusOK {
		t.Fatalf("sign in: %d", code)
	}
	code, body := get("/greet")
	if code != http.StatusOK || !strings.Contains(body, "<title>Greetings · Greeter</title>") || !strings.Contains(body, `src="/brand/logo.svg"`) {
		t.Fatalf("page: %d %s", code, body)
	}
	if code, body := get("/account"); code != http.StatusOK || !strings.Contains(body, `<a href="/greet">Greetings</a>`) {
		t.Fatalf("account nav: %d", code)
	}
	code, body = post("/greet", url.Values{"name": {"Grace <3"}})
	if code != http.StatusOK || !strings.Contains(body, `<p id="greeting">Hello, Grace &lt;3, from ann!</p>`) {
		t.Fatalf("greet: %d %s", code, body)
	}
	if code, body := post("/greet", url.Values{"name": {""}}); code != http.StatusUnprocessableEntity || !strings.Contains(body, "Enter a name to greet.") {
		t.Fatalf("empty name: %d", code)
	}
	resp, err := http.Get(s.URL + "/brand/logo.svg")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "image/svg+xml" {
		t.Fatalf("logo: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}
