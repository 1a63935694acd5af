package oauth

import (
	"net/http"

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
