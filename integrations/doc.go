// Package integrations keeps the accounts people connect at other
// services: enclave is an OAuth client of providers the operator
// configures (Provider: an issuer for discovery, or authorization and
// token URLs; a client id and secret; scopes; and the API hosts the tokens
// may be sent to), and keeps each connection's tokens sealed.
//
// A person may also add their own OAuth app (AddApp, the session-only
// capability connectionAppAdd): a client they registered at a service,
// with its secret sealed and bound to them and the app. Its endpoints and
// API hosts must be public https hosts, discovery and every exchange with
// it go through the egress client, and its flows have their own redirect
// URI (AppCallbackPath + "/" + its name); otherwise a connection to it is
// like one to a provider. RemoveApp disconnects (and revokes) its
// connections.
//
// Connecting happens in the web shell only. Start (the session-only
// capability connectionConnectStart) sends the browser to the provider
// with an authorization-code request carrying a PKCE S256 challenge and a
// random state; the state's hash is stored with the person's account, a
// hash of a secret the browser holds for the flow (a cookie), the sealed
// verifier and an expiry (StateTTL). Finish (connectionConnectFinish),
// on the callback at CallbackPath on the server's own origin, uses the
// state up first, whoever presents it, then requires the same account, the
// same browser and a state not expired, and only then exchanges the code:
// a state fixed by an attacker, a forged callback or a replay connects
// nothing.
//
// Tokens are sealed with the server's key ring (internal/envelope), bound
// to the owner's stable id and the connection's own id, so a ciphertext
// copied to another row does not open. A lane (Schedule) renews access
// tokens RefreshBefore their expiry with the refresh token; Use renews one
// too when it is due. A provider that refuses the refresh marks the
// connection expired, with a sentence saying to connect again.
// Disconnect and account deletion (RevokeAll, a lifecycle hook) revoke
// the tokens at the provider first when it has an RFC 7009 endpoint (best
// effort, each attempt audited), then forget them.
//
// Agents see connections through connectionList (name, provider, scopes,
// status, last use: never a token) and remove one with
// connectionDisconnect. They use one through the outbound gateway
// (capabilities/outbound): the placeholder {{connection:NAME}} becomes
// "Bearer <access token>" only for a request to one of the provider's API
// hosts, and every answer is scrubbed of the token.
//
// Every query carries the owner filter; another user's connection name
// answers exactly like one that does not exist. Exports carry the
// connections' metadata with the sealed tokens redacted, never the
// pending flows.
package integrations
