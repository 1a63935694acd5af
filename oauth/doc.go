// Package oauth is enclave's OAuth 2.1 authorization server and the token
// check of its MCP resource server.
//
// It is built on ory/fosite with fosite's storage implemented on bun (SQLite
// and PostgreSQL), and adds what fosite lacks:
//
//   - metadata: RFC 8414 (/.well-known/oauth-authorization-server) and
//     RFC 9728 (/.well-known/oauth-protected-resource[/mcp]);
//   - open dynamic client registration (RFC 7591) with redirect URI rules,
//     idempotent re-registration and reaping of idle clients;
//   - resource indicators (RFC 8707): the only accepted resource is this
//     server's MCP endpoint, which becomes every token's audience;
//   - authorization responses that carry iss (RFC 9207), errors included;
//   - refresh token rotation with reuse detection and a grace window in
//     which a concurrent duplicate exchange gets the same new pair;
//   - per-user grants, remembered consent, and revocation of everything a
//     user holds (password change, reset, deletion).
//   - enterprise-managed authorization: ID-JAGs of trusted identity
//     providers ([EnterpriseOptions]) redeemed with the RFC 7523 JWT bearer
//     grant ([GrantTypeJWTBearer]), their subjects linked to accounts.
//
// Two scopes always exist: mcp, the default, and admin ([ScopeAdmin]), which
// the admin capabilities need and which is granted only to an admin who
// ticks it on the consent page ([ScopedConsent]). An authorization error that
// cannot go back to the client is shown to the person as a page
// ([ErrorPage], [AuthorizeError]), never as JSON or a Basic challenge.
//
// PKCE is S256-only and checked before the login page is shown. Tokens are
// opaque: a random key and its HMAC-SHA512/256 signature; only the signature
// is stored.
//
// Pages are not rendered here: the authorization endpoint asks a
// [LoginConsent] (implemented by the web shell) to sign the user in and to
// ask for consent.
package oauth
