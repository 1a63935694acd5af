package web_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/web"
)

// The authorization server is built before the web shell (the shell lists
// and revokes its grants), yet the shell renders its sign-in, consent and
// error pages: the server is given a PagesForwarder, which Set later
// points at the shell.
func ExamplePagesForwarder() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "pages-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := storage.Open(ctx, storage.Config{DataDir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if _, err := migrations.Apply(ctx, store.DB); err != nil {
		log.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	acc, err := accounts.New(ctx, store, accounts.Config{Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}

	pages := &web.PagesForwarder{}
	// What oauth.Options.LoginConsent is given, before the shell exists.
	var consent oauth.LoginConsent = pages

	shell, err := web.New(web.Options{Store: store, Accounts: acc, BaseURL: "http://localhost:8080", Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	defer shell.Close(ctx)
	pages.Set(shell)

	// Nobody is signed in: the shell's sign-in form answers, posting back
	// to the authorization request.
	rec := httptest.NewRecorder()
	req := &oauth.AuthorizeRequest{ClientName: "Test Agent", RedirectURI: "http://127.0.0.1:9999/callback", FormAction: "/oauth/authorize?client_id=abc"}
	_, signedIn := consent.Login(rec, httptest.NewRequest("GET", "/oauth/authorize?client_id=abc", nil), req)
	fmt.Println(signedIn, rec.Code, strings.Contains(rec.Body.String(), `action="/oauth/authorize?client_id=abc"`))

	// A request that cannot be redirected gets the shell's error page.
	rec = httptest.NewRecorder()
	pages.AuthorizeError(rec, httptest.NewRequest("GET", "/oauth/authorize", nil),
		&oauth.AuthorizeError{Status: 400, Title: "Unknown app", Message: "This app is not registered here."})
	fmt.Println(rec.Code, strings.Contains(rec.Body.String(), "This app is not registered here."))
	// Output:
	// false 200 true
	// 400 true
}
