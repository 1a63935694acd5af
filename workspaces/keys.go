package workspaces

import "context"

// apiKey is a workspace API key as a call carries it: the key's id, the
// workspace it covers, the account that made it and the highest role it
// grants.
type apiKey struct {
	ID          int64
	WorkspaceID string
	UserID      int64
	MaxRole     Role
}

type keyCtx struct{}

// withKey marks ctx as a call authenticated by workspace API key k.
func withKey(ctx context.Context, k apiKey) context.Context {
	return context.WithValue(ctx, keyCtx{}, k)
}

// keyFrom returns the workspace API key a call came with.
func keyFrom(ctx context.Context) (apiKey, bool) {
	k, ok := ctx.Value(keyCtx{}).(apiKey)
	return k, ok
}
