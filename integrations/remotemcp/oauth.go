package remotemcp

import (
	"context"
	"crypto/subtle"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/uptrace/bun"
	"golang.org/x/oauth2"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/storage"
)

var resourceMetadataParam = regexp.MustCompile(`resource_metadata="([^"]{1,1000})"`)

// getJSON fetches a metadata document: GET, no redirect, bounded.
func (s *Service) getJSON(ctx context.Context, rawURL string, v any) error {
	if _, err := s.checkURL(rawURL); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.listHTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 256<<10))
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

type resourceMetadata struct {
	Resource             string   `json:"resource"`
	AuthorizationServers []string `json:"authorization_servers"`
	ScopesSupported      []string `json:"scopes_supported"`
}

type asMetadata struct {
	Issuer                        string   `json:"issuer"`
	AuthorizationEndpoint         string   `json:"authorization_endpoint"`
	TokenEndpoint                 string   `json:"token_endpoint"`
	RegistrationEndpoint          string   `json:"registration_endpoint"`
	RevocationEndpoint            string   `json:"revocation_endpoint"`
	CodeChallengeMethodsSupported []string `json:"code_challenge_methods_supported"`
	ClientIDMetadataDocument      bool     `json:"client_id_metadata_document_supported"`
}

// wellKnown inserts a well-known segment between a URL's origin and path
// (RFC 8414 section 3, RFC 9728 section 3).
func wellKnown(raw, name string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	path := strings.TrimSuffix(u.Path, "/")
	u.Path, u.RawQuery, u.RawPath = "/.well-known/"+name+path, "", ""
	return u.String()
}

// discover reads the remote's protected resource metadata and its
// authorization server's metadata, and gets enclave a client id there.
func (s *Service) discover(ctx context.Context, r *serverRow, challenge string) (clientSecret string, err error) {
	fail := func(format string, args ...any) (string, error) {
		return "", unavailable("The server at %s asks for authorization, but "+format+". Nothing was added.", append([]any{r.URL}, args...)...)
	}
	var prmURLs []string
	if m := resourceMetadataParam.FindStringSubmatch(challenge); m != nil {
		prmURLs = append(prmURLs, m[1])
	}
	prmURLs = append(prmURLs, wellKnown(r.URL, "oauth-protected-resource"))
	if u, err := url.Parse(r.URL); err == nil && u.Path != "" && u.Path != "/" {
		u.Path = ""
		prmURLs = append(prmURLs, wellKnown(u.String(), "oauth-protected-resource"))
	}
	var prm resourceMetadata
	for _, p := range prmURLs {
		if err = s.getJSON(ctx, p, &prm); err == nil {
			break
		}
	}
	if err != nil {
		return fail("its protected resource metadata (RFC 9728) could not be read")
	}
	if strings.TrimSuffix(prm.Resource, "/") != strings.TrimSuffix(r.URL, "/") {
		return fail("its protected resource metadata names another resource (%q)", clip(prm.Resource, 200))
	}
	if len(prm.AuthorizationServers) == 0 {
		return fail("its metadata names no authorization server")
	}
	issuer := prm.AuthorizationServers[0]
	if _, err := s.checkURL(issuer); err != nil {
		return fail("its authorization server's URL is not usable (%s)", err)
	}
	var md asMetadata
	if err := s.getJSON(ctx, wellKnown(issuer, "oauth-authorization-server"), &md); err != nil {
		if s.getJSON(ctx, wellKnown(issuer, "openid-configuration"), &md) != nil {
			return fail("its authorization server's metadata (RFC 8414) could not be read")
		}
	}
	if md.Issuer != issuer {
		return fail("its authorization server's metadata names another issuer")
	}
	for _, e := range []string{md.AuthorizationEndpoint, md.TokenEndpoint} {
		if _, err := s.checkURL(e); err != nil {
			return fail("its authorization server's endpoints are not usable (%s)", err)
		}
	}
	if !slices.Contains(md.CodeChallengeMethodsSupported, "S256") {
		return fail("its authorization server does not support PKCE with S256")
	}
	if md.RevocationEndpoint != "" {
		if _, err := s.checkURL(md.RevocationEndpoint); err != nil {
			md.RevocationEndpoint = ""
		}
	}
	r.Issuer, r.AuthEndpoint, r.TokenEndpoint, r.RevokeURL = issuer, md.AuthorizationEndpoint, md.TokenEndpoint, md.RevocationEndpoint
	var scopes []string
	for _, sc := range prm.ScopesSupported {
		if len(scopes) < 32 && len(sc) <= 128 && !strings.ContainsAny(sc, " \t\r\n\"") {
			scopes = append(scopes, sc)
		}
	}
	r.Scopes = strings.Join(scopes, " ")
	switch {
	case md.ClientIDMetadataDocument && strings.HasPrefix(s.base, "https://"):
		r.ClientID = s.ClientMetadataURL(r.PublicID)
	case md.RegistrationEndpoint != "":
		id, secret, err := s.register(ctx, md.RegistrationEndpoint, r.PublicID)
		if err != nil {
			s.log.WarnContext(ctx, "remotemcp: dynamic registration failed", "server", r.URL, "err", describeFailure(err))
			return fail("enclave could not register as a client at its authorization server")
		}
		r.ClientID = id
		return secret, nil
	default:
		return fail("its authorization server supports neither client ID metadata documents nor dynamic client registration")
	}
	return "", nil
}

// register registers enclave at a remote authorization server (RFC 7591)
// for one remote server: its own redirect URI.
func (s *Service) register(ctx context.Context, endpoint, publicID string) (id, secret string, err error) {
	if _, err := s.checkURL(endpoint); err != nil {
		return "", "", err
	}
	body, _ := json.Marshal(s.clientMetadata(publicID, false))
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(string(body)))
	if err != nil {
		return "", "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := s.listHTTP.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return "", "", fmt.Errorf("registration answered HTTP %d", resp.StatusCode)
	}
	var out struct {
		ClientID     string `json:"client_id"`
		ClientSecret string `json:"client_secret"`
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return "", "", err
	}
	if err := json.Unmarshal(b, &out); err != nil || out.ClientID == "" || len(out.ClientID) > 512 || len(out.ClientSecret) > 512 {
		return "", "", errors.New("registration answered no usable client id")
	}
	return out.ClientID, out.ClientSecret, nil
}

// ClientMetadata is a client ID metadata document (and the body of a
// dynamic registration) describing enclave as the client of one remote
// server.
type ClientMetadata struct {
	ClientID                string   `json:"client_id,omitempty"`
	ClientName              string   `json:"client_name"`
	ClientURI               string   `json:"client_uri,omitempty"`
	RedirectURIs            []string `json:"redirect_uris"`
	GrantTypes              []string `json:"grant_types"`
	ResponseTypes           []string `json:"response_types"`
	TokenEndpointAuthMethod string   `json:"token_endpoint_auth_method"`
}

func (s *Service) clientMetadata(publicID string, document bool) ClientMetadata {
	m := ClientMetadata{ClientName: "enclave", RedirectURIs: []string{s.RedirectURL(publicID)},
		GrantTypes: []string{"authorization_code", "refresh_token"}, ResponseTypes: []string{"code"}, TokenEndpointAuthMethod: "none"}
	if document {
		m.ClientID, m.ClientURI = s.ClientMetadataURL(publicID), s.base+"/"
	}
	return m
}

// ClientMetadataURL is the URL of the client ID metadata document enclave
// serves for the remote server with that public id.
func (s *Service) ClientMetadataURL(publicID string) string {
	return s.base + ClientMetadataPath + "/" + url.PathEscape(publicID)
}

// RedirectURL is the consent redirect URI of the remote server with that
// public id.
func (s *Service) RedirectURL(publicID string) string {
	return s.base + CallbackPath + "/" + url.PathEscape(publicID)
}

// ClientDocument returns the client ID metadata document of the remote
// server with that public id, or ErrNotFound. The document is public (an
// authorization server fetches it) and says nothing of its owner: only
// enclave's name and the server's redirect URI.
func (s *Service) ClientDocument(ctx context.Context, publicID string) (ClientMetadata, error) {
	n, err := s.store.Reader.NewSelect().Model((*serverRow)(nil)).Where("public_id = ? AND auth = ?", publicID, AuthOAuth).Count(ctx)
	if err != nil {
		return ClientMetadata{}, err
	}
	if n == 0 {
		return ClientMetadata{}, ErrNotFound
	}
	return s.clientMetadata(publicID, true), nil
}

type stateRow struct {
	bun.BaseModel `bun:"table:remote_mcp_states"`
	StateHash     string    `bun:"state_hash,pk"`
	UserID        int64     `bun:"user_id,notnull"`
	ServerID      int64     `bun:"server_id,notnull"`
	BindingHash   string    `bun:"binding_hash,notnull"`
	KeyID         int64     `bun:"key_id,notnull"`
	Verifier      string    `bun:"verifier_ciphertext,notnull"`
	CreatedAt     time.Time `bun:"created_at,notnull"`
	ExpiresAt     time.Time `bun:"expires_at,notnull"`
}

func (s *Service) oauthConfig(r serverRow, secret string) *oauth2.Config {
	c := &oauth2.Config{ClientID: r.ClientID, ClientSecret: secret, RedirectURL: s.RedirectURL(r.PublicID),
		Endpoint: oauth2.Endpoint{AuthURL: r.AuthEndpoint, TokenURL: r.TokenEndpoint}}
	// In the form (client_secret_post when a registration issued a
	// secret): never the auto-detection, which would send a code twice.
	c.Endpoint.AuthStyle = oauth2.AuthStyleInParams
	if r.Scopes != "" {
		c.Scopes = strings.Fields(r.Scopes)
	}
	return c
}

// ConsentStart begins the consent at the remote server's authorization
// server for the owner's server called name. binding is a secret the
// person's browser keeps for the flow (the web shell's cookie). It returns
// the authorization URL to send the browser to.
func (s *Service) ConsentStart(ctx context.Context, o storage.Owner, name, binding string) (string, error) {
	r, err := s.get(ctx, s.store.Reader, o, name)
	if errors.Is(err, ErrNotFound) {
		return "", capabilities.Errorf(capabilities.CodeNotFound, "You have no remote MCP server named %q.", name)
	}
	if err != nil {
		return "", err
	}
	if r.Auth != AuthOAuth {
		return "", invalid("Server %s needs no consent.", name)
	}
	if len(binding) < 16 {
		return "", invalid("Consent must be started from the account's MCP servers page.")
	}
	state := randomToken(32)
	verifier := oauth2.GenerateVerifier()
	sh := hash(state)
	keyID, sealed, err := s.ring.Seal(stateAD(o.StableID, sh), []byte(verifier))
	if err != nil {
		return "", fmt.Errorf("remotemcp: consent: %w", err)
	}
	now := s.now().UTC()
	row := stateRow{StateHash: sh, UserID: o.ID, ServerID: r.ID, BindingHash: hash(binding), KeyID: keyID, Verifier: sealed, CreatedAt: now, ExpiresAt: now.Add(StateTTL)}
	err = s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewDelete().Model((*stateRow)(nil)).Where("user_id = ? AND expires_at < ?", o.ID, now).Exec(ctx); err != nil {
			return err
		}
		var keep []string
		if err := tx.NewSelect().Model((*stateRow)(nil)).Column("state_hash").Where("user_id = ?", o.ID).
			Order("created_at DESC", "state_hash").Limit(MaxPendingStates-1).Scan(ctx, &keep); err != nil {
			return err
		}
		if len(keep) == MaxPendingStates-1 {
			if _, err := tx.NewDelete().Model((*stateRow)(nil)).Where("user_id = ? AND state_hash NOT IN (?)", o.ID, bun.In(keep)).Exec(ctx); err != nil {
				return err
			}
		}
		_, err := tx.NewInsert().Model(&row).Returning("NULL").Exec(ctx)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("remotemcp: consent: %w", err)
	}
	return s.oauthConfig(r, "").AuthCodeURL(state, oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("resource", r.URL)), nil
}

// Callback is what the remote authorization server sent back.
type Callback struct {
	// Server is the public id named by the callback's path.
	Server           string
	State            string
	Code             string
	Issuer           string
	Error            string
	ErrorDescription string
}

// ConsentFinish completes a consent: the state must be one ConsentStart
// issued to this owner, with the same browser binding, within StateTTL,
// on the callback path of the same server; it is used up whatever
// follows. The code is exchanged with the PKCE verifier, the tokens
// sealed, and the server's tools listed.
func (s *Service) ConsentFinish(ctx context.Context, o storage.Owner, binding string, cb Callback) (Server, error) {
	const stale = "This consent link is not valid (it was used already, expired, or was started in another browser or account). Start again from the MCP servers page."
	if cb.State == "" {
		return Server{}, invalid(stale)
	}
	sh := hash(cb.State)
	var st stateRow
	err := s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if err := tx.NewSelect().Model(&st).Where("state_hash = ?", sh).Scan(ctx); err != nil {
			return err
		}
		res, err := tx.NewDelete().Model((*stateRow)(nil)).Where("state_hash = ?", sh).Exec(ctx)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return sql.ErrNoRows
		}
		return nil
	})
	if errors.Is(err, sql.ErrNoRows) {
		return Server{}, invalid(stale)
	}
	if err != nil {
		return Server{}, fmt.Errorf("remotemcp: consent: %w", err)
	}
	now := s.now().UTC()
	if st.UserID != o.ID || subtle.ConstantTimeCompare([]byte(st.BindingHash), []byte(hash(binding))) != 1 || !now.Before(st.ExpiresAt) {
		s.record(ctx, o, "mcp_server_consent", audit.ResultDenied, "state not bound to this session")
		return Server{}, invalid(stale)
	}
	var r serverRow
	if err := s.store.DB.NewSelect().Model(&r).Where("id = ? AND user_id = ?", st.ServerID, o.ID).Scan(ctx); err != nil {
		return Server{}, invalid(stale)
	}
	if cb.Server != r.PublicID || (cb.Issuer != "" && cb.Issuer != r.Issuer) {
		s.record(ctx, o, "mcp_server_consent", audit.ResultDenied, "server="+r.Name+" callback for another server or issuer")
		return Server{}, invalid(stale)
	}
	if cb.Error != "" {
		msg := "The server's authorization server did not grant access"
		if cb.Error == "access_denied" {
			msg = "You declined access"
		}
		return Server{}, invalid("%s; server %s still waits for consent.", msg, r.Name)
	}
	if cb.Code == "" {
		return Server{}, invalid("No authorization code came back; server %s still waits for consent.", r.Name)
	}
	verifier, err := s.ring.Open(ctx, st.KeyID, st.Verifier, stateAD(o.StableID, sh))
	if err != nil {
		return Server{}, invalid(stale)
	}
	old, err := s.open(ctx, o, r)
	if err != nil {
		return Server{}, err
	}
	secret := old.ClientSecret
	ctx2, cancel := context.WithTimeout(context.WithValue(ctx, oauth2.HTTPClient, s.listHTTP), s.timeout)
	defer cancel()
	tok, err := s.oauthConfig(r, secret).Exchange(ctx2, cb.Code, oauth2.VerifierOption(string(verifier)), oauth2.SetAuthURLParam("resource", r.URL))
	if err == nil {
		err = validateToken(tok)
	}
	if err != nil {
		s.log.WarnContext(ctx, "remotemcp: code exchange failed", "server", r.Name, "err", describeFailure(err))
		s.record(ctx, o, "mcp_server_consent", audit.ResultFailure, "server="+r.Name+" exchange failed")
		return Server{}, unavailable("Server %s's authorization server did not issue a usable token. Try again.", r.Name)
	}
	ts := tokenSet{AccessToken: tok.AccessToken, RefreshToken: tok.RefreshToken, ClientSecret: secret, Expiry: tok.Expiry}
	if err := s.seal(o, &r, ts); err != nil {
		return Server{}, err
	}
	r.Status, r.LastError, r.UpdatedAt = StatusActive, "", now
	if tools, _, err := s.listTools(ctx, r.URL, r.Name, tok.AccessToken); err == nil {
		tb, _ := json.Marshal(tools)
		r.Tools, r.ToolsAt = string(tb), &now
	} else {
		r.LastError = "The tool list could not be read: " + describeFailure(err) + "; refresh the server."
	}
	if _, err := s.store.DB.NewUpdate().Model(&r).Column("status", "last_error", "key_id", "token_ciphertext", "expires_at", "refresh_at", "tools", "tools_at", "updated_at").
		Where("id = ? AND user_id = ?", r.ID, o.ID).Exec(ctx); err != nil {
		return Server{}, fmt.Errorf("remotemcp: consent: %w", err)
	}
	s.changed(o.StableID)
	s.record(ctx, o, "mcp_server_consent", audit.ResultSuccess, "server="+r.Name)
	return s.meta(r), nil
}

func validateToken(t *oauth2.Token) error {
	if t.AccessToken == "" || len(t.AccessToken) > MaxTokenBytes || len(t.RefreshToken) > MaxTokenBytes {
		return errors.New("no usable access token")
	}
	if tt := t.Type(); !strings.EqualFold(tt, "bearer") {
		return errors.New("not a bearer token")
	}
	for _, c := range t.AccessToken {
		if c < 0x21 || c > 0x7e {
			return errors.New("the token has characters a header cannot carry")
		}
	}
	return nil
}

// accessToken returns the server's access token ("" for a server without
// authorization), renewed first when it is due. Renewals of one server
// are serialised in this process, and the row is read again once the
// turn comes: a renewal that another call (or replica) made meanwhile is
// used rather than spending the old refresh token again, which an
// authorization server rotating refresh tokens refuses (invalid_grant),
// and which would expire a server whose token was just renewed.
func (s *Service) accessToken(ctx context.Context, o storage.Owner, r *serverRow) (string, error) {
	if r.Auth != AuthOAuth {
		return "", nil
	}
	if tok, done, err := s.currentToken(ctx, o, r); done {
		return tok, err
	}
	b := s.breakerOf(r.PublicID)
	b.renew.Lock()
	defer b.renew.Unlock()
	if err := s.reload(ctx, o, r); err != nil {
		return "", err
	}
	if tok, done, err := s.currentToken(ctx, o, r); done {
		return tok, err
	}
	ts, err := s.open(ctx, o, *r)
	if err != nil || ts.AccessToken == "" {
		return "", unavailable("Server %s's token cannot be used; finish consent again on the MCP servers page.", r.Name)
	}
	used := r.Token
	ctx2, cancel := context.WithTimeout(context.WithValue(ctx, oauth2.HTTPClient, s.listHTTP), s.timeout)
	defer cancel()
	tok, err := s.oauthConfig(*r, ts.ClientSecret).TokenSource(ctx2, &oauth2.Token{RefreshToken: ts.RefreshToken, Expiry: time.Unix(1, 0)}).Token()
	if err == nil {
		err = validateToken(tok)
	}
	now := s.now().UTC()
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && re.ErrorCode == "invalid_grant" {
			// Another replica may have renewed with this refresh token
			// meanwhile: its token is then the one to use.
			if s.reload(ctx, o, r) == nil && r.Token != used {
				if tok, done, err := s.currentToken(ctx, o, r); done {
					return tok, err
				}
			}
			r.Status, r.LastError, r.UpdatedAt = StatusExpired, "The server's authorization server refused to renew the token; finish consent again.", now
			if _, err := s.store.DB.NewUpdate().Model(r).Column("status", "last_error", "updated_at").
				Where("id = ? AND user_id = ? AND token_ciphertext = ?", r.ID, o.ID, used).Exec(ctx); err != nil {
				s.log.WarnContext(ctx, "remotemcp: recording a refused renewal", "err", err)
			}
			s.changed(o.StableID)
		}
		if r.ExpiresAt != nil && now.Before(*r.ExpiresAt) && r.Status == StatusActive {
			return ts.AccessToken, nil
		}
		return "", unavailable("Server %s's token could not be renewed; finish consent again on the MCP servers page.", r.Name)
	}
	if tok.RefreshToken == "" {
		tok.RefreshToken = ts.RefreshToken
	}
	if err := s.seal(o, r, tokenSet{AccessToken: tok.AccessToken, RefreshToken: tok.RefreshToken, ClientSecret: ts.ClientSecret, Expiry: tok.Expiry}); err != nil {
		return "", err
	}
	r.UpdatedAt = now
	if _, err := s.store.DB.NewUpdate().Model(r).Column("key_id", "token_ciphertext", "expires_at", "refresh_at", "updated_at").Where("id = ? AND user_id = ?", r.ID, o.ID).Exec(ctx); err != nil {
		return "", fmt.Errorf("remotemcp: renew: %w", err)
	}
	return tok.AccessToken, nil
}

// currentToken answers the row's access token when no renewal is due
// (done), or an error when it cannot be used.
func (s *Service) currentToken(ctx context.Context, o storage.Owner, r *serverRow) (tok string, done bool, err error) {
	if r.Status != StatusActive && r.Status != "" {
		return "", true, unavailable("Server %s is not usable now (%s); see the MCP servers page.", r.Name, r.Status)
	}
	ts, err := s.open(ctx, o, *r)
	if err != nil || ts.AccessToken == "" {
		return "", true, unavailable("Server %s's token cannot be used; finish consent again on the MCP servers page.", r.Name)
	}
	if r.RefreshAt != nil && !s.now().Before(*r.RefreshAt) {
		return "", false, nil
	}
	if r.ExpiresAt != nil && !s.now().Before(*r.ExpiresAt) {
		return "", true, unavailable("Server %s's token expired; finish consent again on the MCP servers page.", r.Name)
	}
	return ts.AccessToken, true, nil
}

// reload reads the server's row again, from the primary.
func (s *Service) reload(ctx context.Context, o storage.Owner, r *serverRow) error {
	var fresh serverRow
	if err := s.store.DB.NewSelect().Model(&fresh).Where("id = ? AND user_id = ?", r.ID, o.ID).Scan(ctx); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return unavailable("Server %s was removed.", r.Name)
		}
		return fmt.Errorf("remotemcp: renew: %w", err)
	}
	*r = fresh
	return nil
}

// revoke asks the remote authorization server to revoke the server's
// tokens (RFC 7009), best effort, and reports whether it confirmed.
func (s *Service) revoke(ctx context.Context, o storage.Owner, r serverRow) bool {
	if r.Auth != AuthOAuth || r.RevokeURL == "" || r.KeyID == nil {
		return false
	}
	ts, err := s.open(ctx, o, r)
	if err != nil {
		return false
	}
	ok := true
	for _, t := range []struct{ token, hint string }{{ts.RefreshToken, "refresh_token"}, {ts.AccessToken, "access_token"}} {
		if t.token == "" {
			continue
		}
		form := url.Values{"token": {t.token}, "token_type_hint": {t.hint}, "client_id": {r.ClientID}}
		if ts.ClientSecret != "" {
			form.Set("client_secret", ts.ClientSecret)
		}
		rctx, cancel := context.WithTimeout(ctx, s.timeout)
		req, err := http.NewRequestWithContext(rctx, http.MethodPost, r.RevokeURL, strings.NewReader(form.Encode()))
		if err == nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			var resp *http.Response
			if resp, err = s.listHTTP.Do(req); err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("HTTP %d", resp.StatusCode)
				}
			}
		}
		cancel()
		if err != nil {
			ok = false
		}
	}
	result := audit.ResultSuccess
	if !ok {
		result = audit.ResultFailure
	}
	s.record(ctx, o, "mcp_server_revoke", result, "server="+r.Name)
	return ok
}

// AccessToken returns the current access token of the owner's server
// called name ("" for a server without authorization), renewed first when
// it is due: for an embedder forwarding requests itself. Never show it.
func (s *Service) AccessToken(ctx context.Context, o storage.Owner, name string) (string, error) {
	r, err := s.get(ctx, s.store.Reader, o, name)
	if err != nil {
		return "", err
	}
	return s.accessToken(ctx, o, &r)
}
