package oauth

import (
	"net/http"
	"slices"

	"github.com/ory/fosite"
)

func (s *Server) serveToken(w http.ResponseWriter, r *http.Request) {
	// A refresh that detects reuse revokes its grant: the revocation is
	// announced after its transaction and before the answer (revoked).
	ctx, revoked := s.collectRevocations(r.Context())
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		s.writeError(w, r, fosite.ErrInvalidRequest.WithHint("The request body could not be parsed."))
		return
	}
	if err := s.checkResources(r.PostForm); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.resolveClient(ctx, r, clientIDOf(r)); err != nil {
		s.writeError(w, r, resolveError(err))
		return
	}
	ar, err := s.provider.NewAccessRequest(ctx, r, &session{})
	revoked()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := documentStillListsRedirect(ar); err != nil {
		s.writeError(w, r, err)
		return
	}
	resp, err := s.provider.NewAccessResponse(ctx, ar)
	revoked()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.provider.WriteAccessResponse(ctx, w, ar, resp)
}

// serveRevoke is RFC 7009: revoking either token of a grant ends the grant.
// An unknown token is not an error.
func (s *Server) serveRevoke(w http.ResponseWriter, r *http.Request) {
	ctx, revoked := s.collectRevocations(r.Context())
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		s.writeError(w, r, fosite.ErrInvalidRequest.WithHint("The request body could not be parsed."))
		return
	}
	if err := s.resolveClient(ctx, r, clientIDOf(r)); err != nil {
		s.writeError(w, r, resolveError(err))
		return
	}
	err := s.provider.NewRevocationRequest(ctx, r)
	revoked() // committed: caches drop the grant before the client hears back
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
}

// documentStillListsRedirect refuses a code whose redirect URI the
// client's metadata document, as (re)fetched for this request, no longer
// lists: its publisher stopped vouching for that URI. fosite has already
// checked that the URI is the one of the authorization request. (A code
// requested without a redirect_uri went to the document's only URI then;
// the token request names none, so there is nothing to compare.)
func documentStillListsRedirect(ar fosite.AccessRequester) error {
	c, ok := ar.GetClient().(*Client)
	if !ok || c.MetadataHost == "" || !ar.GetGrantTypes().ExactOne("authorization_code") {
		return nil
	}
	if raw := ar.GetRequestForm().Get("redirect_uri"); raw != "" && !slices.Contains(c.RedirectURIs, raw) {
		return fosite.ErrInvalidGrant.WithHint("The client's metadata document no longer lists the redirect_uri this code was issued for.")
	}
	return nil
}
