package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/internal/cli"
)

// TestMain runs main itself when the test binary is started as a child
// process by a test (ENCLAVE_TEST_RUN_MAIN=1): the same signal handling and
// exit status as the real binary.
func TestMain(m *testing.M) {
	if os.Getenv("ENCLAVE_TEST_RUN_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

var (
	banner     = regexp.MustCompile(`MCP endpoint: (http://127\.0\.0\.1:\d+)/mcp`)
	formAction = regexp.MustCompile(`<form[^>]*method="post"[^>]*action="([^"]*/oauth/authorize[^"]*)"`)
)

// oauthToken runs the OAuth flow a real agent runs against base (register,
// authorize with PKCE through the sign-in and consent pages, exchange) and
// returns the access token.
func oauthToken(t *testing.T, base, email, password string) string {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	redirect := "http://127.0.0.1:53682/callback"
	resp, err := http.Post(base+"/oauth/register", "application/json", strings.NewReader(`{"client_name":"Shutdown Test","redirect_uris":["`+redirect+`"],"token_endpoint_auth_method":"none"}`))
	if err != nil {
		t.Fatal(err)
	}
	var client struct {
		ClientID string `json:"client_id"`
	}
	json.NewDecoder(resp.Body).Decode(&client)
	resp.Body.Close()
	verifier := "a-verifier-of-at-least-forty-three-characters-0123456789"
	sum := sha256.Sum256([]byte(verifier))
	q := url.Values{"response_type": {"code"}, "client_id": {client.ClientID}, "redirect_uri": {redirect},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"},
		"state": {"state-0123456789"}, "scope": {"mcp"}, "resource": {base + "/mcp"}}
	read := func(resp *http.Response) string {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return string(b)
	}
	post := func(action string, form url.Values) *http.Response {
		req, _ := http.NewRequest("POST", base+html.UnescapeString(action), strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", base)
		resp, err := browser.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp, err = browser.Get(base + "/oauth/authorize?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	m := formAction.FindStringSubmatch(read(resp))
	if m == nil {
		t.Fatal("no sign-in form")
	}
	m = formAction.FindStringSubmatch(read(post(m[1], url.Values{"email": {email}, "password": {password}})))
	if m == nil {
		t.Fatal("no consent form")
	}
	resp = post(m[1], url.Values{"decision": {"approve"}})
	read(resp)
	loc, _ := url.Parse(resp.Header.Get("Location"))
	resp, err = http.PostForm(base+"/oauth/token", url.Values{"grant_type": {"authorization_code"}, "code": {loc.Query().Get("code")},
		"redirect_uri": {redirect}, "client_id": {client.ClientID}, "code_verifier": {verifier}, "resource": {base + "/mcp"}})
	if err != nil {
		t.Fatal(err)
	}
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	json.NewDecoder(resp.Body).Decode(&tok)
	resp.Body.Close()
	if tok.AccessToken == "" {
		t.Fatalf("token: %d", resp.StatusCode)
	}
	return tok.AccessToken
}

func mcpPost(t *testing.T, base, token, session, body string) (string, int) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/mcp", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.Header.Get("Mcp-Session-Id"), resp.StatusCode
}

// SIGTERM with an open MCP GET stream: the process ends the stream, exits
// 0, and does so within 2 s (not after the 15 s shutdown timeout).
func TestSIGTERMWithOpenStream(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the binary")
	}
	dir := t.TempDir()
	env := append(os.Environ(), "ENCLAVE_DATA_DIR="+dir, "ENCLAVE_LOG_LEVEL=warn")
	var out, errOut strings.Builder
	code := cli.Main(context.Background(), []string{"user", "create", "--email", "sam@example.com", "--username", "sam", "--password-stdin", "--verified"},
		&cli.Env{Stdin: strings.NewReader("a long password for sam\n"), Stdout: &out, Stderr: &errOut, Getenv: func(k string) string {
			if k == "ENCLAVE_DATA_DIR" {
				return dir
			}
			return ""
		}})
	if code != 0 {
		t.Fatalf("user create: %d %s", code, errOut.String())
	}

	cmd := exec.Command(os.Args[0], "serve", "--addr", "127.0.0.1:0")
	cmd.Env = append(env, "ENCLAVE_TEST_RUN_MAIN=1")
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	defer func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-exited
		}
	}()
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	var base string
	for base == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the server exited before serving")
			}
			if m := banner.FindStringSubmatch(l); m != nil {
				base = m[1]
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no banner")
		}
	}
	go func() {
		for range lines {
		}
	}()

	token := oauthToken(t, base, "sam@example.com", "a long password for sam")
	session, status := mcpPost(t, base, token, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if status != 200 || session == "" {
		t.Fatalf("initialize: %d", status)
	}
	mcpPost(t, base, token, session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	req, _ := http.NewRequest("GET", base+"/mcp", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Mcp-Session-Id", session)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET stream: %v %v", resp, err)
	}
	defer resp.Body.Close()
	streamEnded := make(chan struct{})
	go func() { io.Copy(io.Discard, resp.Body); close(streamEnded) }()
	time.Sleep(200 * time.Millisecond)

	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v (want status 0)", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the process did not exit within 2 s of SIGTERM with an open GET stream")
	}
	t.Logf("exited %v after SIGTERM", time.Since(start))
	select {
	case <-streamEnded:
	case <-time.After(time.Second):
		t.Fatal("the client's stream did not end")
	}
}
