package oauth

import (
	"errors"
	"net/http"
	"net/url"

	"github.com/ory/fosite"
)

// AuthorizeError is an error of the authorization endpoint that cannot be
// sent back to the client, because the request names no client this
// server knows, or no redirect URI the client registered: the browser is
// on this server's page and a person reads the answer. It is never a
// Basic challenge (a browser would ask for a password) or a JSON body.
type AuthorizeError struct {
	// Status is the HTTP status: 400 for a bad request (an unknown client
	// included), 503 when the server cannot check the request now, 500
	// for a fault of the server.
	Status int
	// Reason says which of the cases it is.
	Reason AuthorizeErrorReason
	// Code is the OAuth error code the request would get were it
	// redirected (RFC 6749 §4.1.2.1): invalid_client, invalid_request,
	// temporarily_unavailable or server_error.
	Code string
	// Title and Message are for the person: what happened, in a heading
	// and a sentence or two that say what to do.
	Title, Message string
}

// AuthorizeErrorReason is the case of an AuthorizeError.
type AuthorizeErrorReason string

// The cases of an AuthorizeError.
const (
	// ErrorUnknownClient: the client_id is not registered here (it was
	// removed after going unused, the server was reset, or it never was).
	ErrorUnknownClient AuthorizeErrorReason = "unknown_client"
	// ErrorBlockedClient: an admin blocked the client.
	ErrorBlockedClient AuthorizeErrorReason = "blocked_client"
	// ErrorClientMetadata: the client_id is the URL of a client metadata
	// document that could not be fetched or is not valid.
	ErrorClientMetadata AuthorizeErrorReason = "client_metadata"
	// ErrorRedirectURI: the redirect_uri is not one the client registered.
	ErrorRedirectURI AuthorizeErrorReason = "redirect_uri"
	// ErrorBadRequest: parameters are missing or malformed before the
	// redirect URI could be trusted (no client_id, an unreadable form).
	ErrorBadRequest AuthorizeErrorReason = "bad_request"
	// ErrorUnavailable: the store could not be read; retrying may work.
	ErrorUnavailable AuthorizeErrorReason = "unavailable"
	// ErrorServer: the server failed or is misconfigured.
	ErrorServer AuthorizeErrorReason = "server_error"
)

// ErrorPage is implemented by a LoginConsent that shows the errors of the
// authorization endpoint that cannot be redirected (package web's Handler
// renders its error page). AuthorizeError writes the whole response with
// e.Status; headers already set on w (Retry-After, Cache-Control) are the
// endpoint's and should be kept. A LoginConsent without it gets a plain
// text answer with the same status and sentence.
type ErrorPage interface {
	AuthorizeError(w http.ResponseWriter, r *http.Request, e *AuthorizeError)
}

// errClientBlocked marks a client an admin blocked: fosite answers it as
// an unknown client, the person's page says what happened.
var errClientBlocked = errors.New("oauth: client blocked by an admin")

// authorizeError describes err, an error of a request that cannot be
// redirected, for the person whose browser made it.
func authorizeError(r *http.Request, ar fosite.AuthorizeRequester, err error) *AuthorizeError {
	rfc := fosite.ErrorToRFC6749Error(err)
	var me *MetadataError
	switch {
	case errors.Is(err, errUnavailable):
		return &AuthorizeError{Status: http.StatusServiceUnavailable, Reason: ErrorUnavailable, Code: fosite.ErrTemporarilyUnavailable.ErrorField,
			Title:   "This server is busy",
			Message: "The server could not check this request just now. Wait a moment, then try connecting again from your app."}
	case rfc.CodeField >= 500:
		return &AuthorizeError{Status: http.StatusInternalServerError, Reason: ErrorServer, Code: fosite.ErrServerError.ErrorField,
			Title:   "Something went wrong",
			Message: "The server could not handle this request. Try again later; if it keeps happening, tell the server's administrator."}
	case errors.As(err, &me):
		return &AuthorizeError{Status: http.StatusBadRequest, Reason: ErrorClientMetadata, Code: fosite.ErrInvalidClient.ErrorField,
			Title: "This app's description could not be used",
			Message: "This app identifies itself with a document published at " + documentHost(r.Form.Get("client_id")) +
				", and this server could not use it: " + me.Reason + ". Nothing was sent to the app. " +
				"Try again in a minute; if it keeps happening, the app's publisher must fix the document."}
	case errors.Is(err, errClientBlocked):
		return &AuthorizeError{Status: http.StatusBadRequest, Reason: ErrorBlockedClient, Code: fosite.ErrInvalidClient.ErrorField,
			Title:   "This app is blocked",
			Message: "An administrator of this server blocked this app, so it cannot connect. Ask the server's administrator if you think that is a mistake."}
	case rfc.ErrorField == fosite.ErrInvalidClient.ErrorField && r.Form.Get("client_id") != "":
		return &AuthorizeError{Status: http.StatusBadRequest, Reason: ErrorUnknownClient, Code: fosite.ErrInvalidClient.ErrorField,
			Title: "This app's registration has expired",
			Message: "This app's registration has expired or is unknown to this server (apps that go unused are removed after a while, " +
				"and a reset server forgets them). Remove this server from your app and add it again: the app then registers anew."}
	case knownClient(ar) && r.Form.Get("redirect_uri") != "" && !redirectRegistered(ar):
		return &AuthorizeError{Status: http.StatusBadRequest, Reason: ErrorRedirectURI, Code: fosite.ErrInvalidRequest.ErrorField,
			Title: "This app's return address does not match",
			Message: "This app asked for the answer to go to an address it did not register with this server, so nothing was sent. " +
				"Remove this server from your app and add it again; if that does not help, the app is misconfigured."}
	}
	return &AuthorizeError{Status: http.StatusBadRequest, Reason: ErrorBadRequest, Code: fosite.ErrInvalidRequest.ErrorField,
		Title: "This link is not valid",
		Message: "The request that opened this page is incomplete or malformed, so this server cannot tell which app is asking " +
			"or where to send you back. Start connecting again from your app."}
}

// documentHost names the host of a client metadata URL for a person.
func documentHost(id string) string {
	if u, err := url.Parse(id); err == nil && u.Hostname() != "" {
		return metadataHost(u)
	}
	return "an address"
}

// knownClient reports whether ar names a registered client (fosite sets an
// empty default client before looking it up).
func knownClient(ar fosite.AuthorizeRequester) bool {
	if ar == nil {
		return false
	}
	c, ok := ar.GetClient().(*Client)
	return ok && c != nil
}

// writeAuthorizePage answers an authorization request that cannot be
// redirected: the LoginConsent's error page when it has one, plain text
// otherwise. Server faults are logged; nothing of err reaches the page.
func (s *Server) writeAuthorizePage(w http.ResponseWriter, r *http.Request, ar fosite.AuthorizeRequester, err error) {
	e := authorizeError(r, ar, err)
	switch e.Reason {
	case ErrorUnavailable:
		s.opts.Logger.WarnContext(r.Context(), "oauth: store unavailable", "path", r.URL.Path, "err", describe(err))
		w.Header().Set("Retry-After", "5")
	case ErrorServer:
		s.opts.Logger.ErrorContext(r.Context(), "oauth: authorize failed", "err", describe(err))
	}
	w.Header().Set("Cache-Control", "no-store")
	if p, ok := s.opts.LoginConsent.(ErrorPage); ok {
		p.AuthorizeError(w, r, e)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(e.Status)
	_, _ = w.Write([]byte(e.Title + "\n\n" + e.Message + "\n"))
}
