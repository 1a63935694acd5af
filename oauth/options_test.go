package oauth

import (
	"slices"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/storage"
)

func TestOptions(t *testing.T) {
	st := &storage.Store{}
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{"no store", Options{BaseURL: "https://as.example"}, "Store is required"},
		{"relative base", Options{Store: st, BaseURL: "as.example"}, "BaseURL"},
		{"base with query", Options{Store: st, BaseURL: "https://as.example/?x=1"}, "BaseURL"},
		{"ftp base", Options{Store: st, BaseURL: "ftp://as.example"}, "BaseURL"},
		{"short secret", Options{Store: st, BaseURL: "https://as.example", HMACSecret: []byte("short")}, "32 bytes"},
		{"bad scope", Options{Store: st, BaseURL: "https://as.example", Scopes: []string{"two words"}}, "scope"},
		{"http private scheme", Options{Store: st, BaseURL: "https://as.example", PrivateURISchemes: []string{"http"}}, "not allowed"},
		{"javascript private scheme", Options{Store: st, BaseURL: "https://as.example", PrivateURISchemes: []string{"JavaScript:"}}, "not allowed"},
		{"negative lifetime", Options{Store: st, BaseURL: "https://as.example", AccessTokenLifetime: -1}, "positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.opts.withDefaults()
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err %v, want one mentioning %q", err, tt.wantErr)
			}
		})
	}
	t.Run("defaults", func(t *testing.T) {
		schemes := []string{"Cursor:"}
		o, err := Options{Store: st, BaseURL: "https://as.example/", Scopes: []string{"notes", "mcp", "notes"}, PrivateURISchemes: schemes}.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		if o.BaseURL != "https://as.example" || o.AccessTokenLifetime != DefaultAccessTokenLifetime || o.RefreshTokenLifetime != DefaultRefreshTokenLifetime ||
			o.RefreshGracePeriod != DefaultRefreshGracePeriod || o.ClientIdleTTL != DefaultClientIdleTTL || o.ReregistrationWindow != DefaultReregistrationWindow {
			t.Errorf("defaults: %+v", o)
		}
		if !slices.Equal(o.Scopes, []string{"mcp", "admin", "notes"}) || !slices.Equal(o.PrivateURISchemes, []string{"cursor"}) {
			t.Errorf("scopes %v schemes %v", o.Scopes, o.PrivateURISchemes)
		}
		if schemes[0] != "Cursor:" {
			t.Error("withDefaults changed the caller's slice")
		}
	})
}
