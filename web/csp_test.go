package web

import (
	"strings"
	"testing"
)

// The authorization pages widen form-action by one source expression,
// derived from the validated redirect URI and reduced to what CSP can
// express; anything that could break out of the expression gives no
// widening at all.
func TestFormActionSource(t *testing.T) {
	tests := []struct{ uri, want string }{
		{"http://127.0.0.1:53682/callback", "http://127.0.0.1:53682"},
		{"http://127.0.0.1/callback", "http://127.0.0.1"},
		{"http://localhost:8976/oauth/callback?x=1", "http://localhost:8976"},
		{"http://LocalHost:8976/cb", "http://localhost:8976"},
		{"https://client.example/cb", "https://client.example"},
		{"https://client.example:8443/a/b", "https://client.example:8443"},
		{"https://xn--bcher-kva.example/cb", "https://xn--bcher-kva.example"},
		// CSP has no syntax for IPv6 literals: any host on that port.
		{"http://[::1]:33418/", "http://*:33418"},
		{"http://[::1]/cb", "http://*:80"},
		{"https://[::1]/cb", "https://*:443"},
		// Not for any other IPv6 literal: the wildcard would allow every
		// origin of the scheme.
		{"https://[2001:db8::1]/cb", ""},
		{"https://[2001:db8::1]:8443/cb", ""},
		{"http://[::ffff:127.0.0.1]:8080/cb", ""},
		{"http://[::]:8080/cb", ""},
		// Private-use schemes (RFC 8252 §7.1) become scheme-sources.
		{"cursor://anysphere.cursor-retrieval/oauth/callback", "cursor:"},
		{"vscode://vscode.github-authentication/did-authenticate", "vscode:"},
		{"com.example.app:/oauth2redirect", "com.example.app:"},
		// Nothing that could break the policy.
		{"https://a;b.example/cb", ""},
		{"https://a'b.example/cb", ""},
		{"https://a,b.example/cb", ""},
		{"https://a b.example/cb", ""},
		{"https://*.example/cb", ""},
		{"https://bücher.example/cb", "https://xn--bcher-kva.example"},
		{"https://b%C3%BCcher.example/cb", "https://xn--bcher-kva.example"},
		{"https://client.example./cb", ""},
		{"https://-client.example/cb", ""},
		{"http://[::1%25lo]:80/cb", ""},
		{"https:///cb", ""},
		{"javascript:alert(1)", ""},
		{"data:text/html,x", ""},
		{"https://user@client.example/cb", ""},
		{"https://client.example/cb#frag", ""},
		{"/relative", ""},
		{"", ""},
		{"%zz", ""},
	}
	for _, tt := range tests {
		if got := formActionSource(tt.uri); got != tt.want {
			t.Errorf("formActionSource(%q) = %q, want %q", tt.uri, got, tt.want)
		}
		policy := authorizePolicy(tt.uri)
		want := ContentSecurityPolicy
		if tt.want != "" {
			want = strings.Replace(ContentSecurityPolicy, "form-action 'self';", "form-action 'self' "+tt.want+";", 1)
		}
		if policy != want {
			t.Errorf("authorizePolicy(%q) = %q, want %q", tt.uri, policy, want)
		}
		// Whatever the URI, the policy keeps its directives.
		if n := strings.Count(policy, ";"); n != strings.Count(ContentSecurityPolicy, ";") {
			t.Errorf("authorizePolicy(%q) has %d directives separators", tt.uri, n)
		}
	}
}
