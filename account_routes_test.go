package enclave_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/storage"
)

func TestAccountExportJSON(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t, storage.SQLite)
	cookies := map[string]*http.Cookie{}
	for _, name := range []string{"alice", "bob"} {
		u, err := srv.Accounts().Signup(ctx, accounts.SignupInput{Email: name + "@example.com", Username: name, Password: "a long password for " + name})
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		if _, err := srv.Accounts().StartSession(rec, httptest.NewRequest("POST", "/login", nil), u, false); err != nil {
			t.Fatal(err)
		}
		cookies[name] = rec.Result().Cookies()[0]
	}
	get := func(c *http.Cookie) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", "/account/export.json", nil)
		if c != nil {
			req.AddCookie(c)
		}
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		return rec
	}
	if rec := get(nil); rec.Code != http.StatusUnauthorized {
		t.Fatalf("anonymous: %d", rec.Code)
	}
	rec := get(cookies["bob"])
	if rec.Code != 200 || !strings.Contains(rec.Header().Get("Content-Disposition"), "attachment") {
		t.Fatalf("bob: %d %v", rec.Code, rec.Header())
	}
	var m struct {
		SchemaVersion int `json:"schemaVersion"`
		User          struct {
			Username string `json:"username"`
		} `json:"user"`
		Security struct {
			SecretValuesExported bool `json:"secretValuesExported"`
		} `json:"security"`
		Sections []struct {
			Name  string `json:"name"`
			Count int    `json:"count"`
		} `json:"sections"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if m.SchemaVersion != 1 || m.User.Username != "bob" || m.Security.SecretValuesExported || len(m.Sections) == 0 {
		t.Fatalf("bob's manifest: %s", rec.Body)
	}
	if strings.Contains(rec.Body.String(), "alice") {
		t.Fatal("bob's manifest mentions alice")
	}
	forged := *cookies["bob"]
	forged.Value = strings.Replace(forged.Value, "a", "b", 1)
	if rec := get(&forged); rec.Code != http.StatusUnauthorized {
		t.Fatalf("forged cookie: %d", rec.Code)
	}
}
