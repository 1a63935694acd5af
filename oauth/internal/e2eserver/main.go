// Command e2eserver runs a complete enclave server for end-to-end OAuth
// tests with clients written elsewhere (.ci/oauth-client.sh drives it with
// the official TypeScript SDK).
//
// It listens on a loopback port, creates one verified account, registers
// the connected-apps capabilities, and prints one JSON line with the base
// URL and the account's credentials. It serves until stdin closes or it
// gets SIGINT/SIGTERM.
//
// Login and consent are plain forms (fields email and password; buttons
// named decision) rendered by this program's own oauth.LoginConsent, which
// checks passwords with accounts. A client that submits those forms
// headlessly works with the web shell's pages as well.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/oauth"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2eserver:", err)
		os.Exit(1)
	}
}

func run() error {
	dataDir := flag.String("data", "", "data directory (required; use a fresh temporary one)")
	flag.Parse()
	if *dataDir == "" {
		return errors.New("-data is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { // a closed stdin (the driving script ended) stops the server
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	base := "http://" + ln.Addr().String()
	forms := &formLogin{}
	cfg := enclave.Config{
		BaseURL: base,
		DataDir: *dataDir,
		Logger:  slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	cfg.OAuth.LoginConsent = forms
	srv, err := enclave.New(ctx, cfg)
	if err != nil {
		return err
	}
	forms.accounts = srv.Accounts()
	const email, password = "agent-owner@example.test", "correct horse battery staple"
	if _, _, err := srv.Accounts().CreateUser(ctx, accounts.CreateUserInput{
		Email: email, Username: "agentowner", Password: password, Verified: true,
	}); err != nil {
		return err
	}
	ready, _ := json.Marshal(map[string]string{"baseURL": base, "email": email, "password": password})
	fmt.Println(string(ready))
	return srv.Serve(ctx, ln)
}

// formLogin is a minimal oauth.LoginConsent: it keeps no session, so the
// consent form carries the credentials again (as hidden fields) and every
// POST signs in anew.
type formLogin struct {
	accounts *accounts.Service
}

var page = template.Must(template.New("page").Parse(`<!doctype html>
<title>{{.Title}}</title>
<form method="post" action="{{.Action}}">
{{if .Consent}}<p>Allow {{.Req.ClientName}} ({{.Req.RedirectHost}}) to use {{range .Req.Scopes}}{{.}} {{end}}?</p>
<input type="hidden" name="email" value="{{.Email}}"><input type="hidden" name="password" value="{{.Password}}">
<button name="decision" value="approve">Allow</button><button name="decision" value="deny">Deny</button>
{{else}}<input name="email" type="email"><input name="password" type="password"><button>Sign in</button>{{end}}
</form>`))

type pageData struct {
	Title, Action, Email, Password string
	Consent                        bool
	Req                            *oauth.AuthorizeRequest
}

func (f *formLogin) render(w http.ResponseWriter, status int, d pageData) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; form-action 'self'; frame-ancestors 'none'")
	w.Header().Set("X-Frame-Options", "DENY")
	w.WriteHeader(status)
	_ = page.Execute(w, d)
}

func (f *formLogin) Login(w http.ResponseWriter, r *http.Request, req *oauth.AuthorizeRequest) (int64, bool) {
	if r.Method == http.MethodPost {
		u, err := f.accounts.Login(r.Context(), r.PostFormValue("email"), r.PostFormValue("password"))
		if err == nil {
			return u.ID, true
		}
		f.render(w, http.StatusUnauthorized, pageData{Title: "Sign in", Action: req.FormAction, Req: req})
		return 0, false
	}
	f.render(w, http.StatusOK, pageData{Title: "Sign in", Action: req.FormAction, Req: req})
	return 0, false
}

func (f *formLogin) Consent(w http.ResponseWriter, r *http.Request, req *oauth.AuthorizeRequest, _ int64) (bool, bool) {
	switch r.PostFormValue("decision") {
	case "approve":
		return true, true
	case "deny":
		return false, true
	}
	f.render(w, http.StatusOK, pageData{Title: "Allow access", Action: req.FormAction, Consent: true, Req: req,
		Email: r.PostFormValue("email"), Password: r.PostFormValue("password")})
	return false, false
}
