package federation

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ProviderConfig is an operator's description of a sign-in provider, as
// given by the --sign-in-provider flag or in the file of
// --sign-in-providers-file. The names google, github and microsoft are
// presets: they need only the client id and secret (and, for microsoft,
// the tenant). Any other name is a generic OpenID Connect provider found
// at its issuer.
type ProviderConfig struct {
	Name             string   `json:"name"`
	Label            string   `json:"label,omitempty"`
	Issuer           string   `json:"issuer,omitempty"`
	Tenant           string   `json:"tenant,omitempty"`
	ClientID         string   `json:"clientId"`
	ClientSecretFile string   `json:"clientSecretFile,omitempty"`
	Scopes           []string `json:"scopes,omitempty"`
	TrustMFA         bool     `json:"trustMfa,omitempty"`
}

// Provider resolves c (presets, the secret file) into a Provider.
func (c ProviderConfig) Provider() (Provider, error) {
	secret := ""
	if c.ClientSecretFile != "" {
		b, err := os.ReadFile(c.ClientSecretFile)
		if err != nil {
			return Provider{}, fmt.Errorf("federation: sign-in provider %s: client secret: %w", c.Name, err)
		}
		secret = strings.TrimSpace(string(b))
	}
	var p Provider
	switch {
	case c.Name == "google" && c.Issuer == "":
		p = Google(c.ClientID, secret)
	case c.Name == "github" && c.Issuer == "":
		p = GitHub(c.ClientID, secret)
	case c.Name == "microsoft" && c.Issuer == "":
		if c.Tenant == "" {
			return Provider{}, fmt.Errorf("federation: sign-in provider microsoft: give tenant=<tenant id or domain>")
		}
		p = Microsoft(c.Tenant, c.ClientID, secret)
	default:
		if c.Issuer == "" {
			return Provider{}, fmt.Errorf("federation: sign-in provider %s: give issuer=URL (or use a preset name: google, github, microsoft)", c.Name)
		}
		p = Provider{Name: c.Name, Kind: KindOIDC, Issuer: c.Issuer, ClientID: c.ClientID, ClientSecret: secret}
	}
	if c.Label != "" {
		p.Label = c.Label
	}
	if len(c.Scopes) > 0 {
		p.Scopes = append([]string(nil), c.Scopes...)
	}
	p.TrustMFA = c.TrustMFA
	return p, nil
}

// ParseProviderFlag parses a --sign-in-provider value:
// NAME=issuer=URL,client-id=ID[,client-secret-file=FILE][,label=TEXT][,scopes=A B][,tenant=T][,trust-mfa=true].
func ParseProviderFlag(v string) (Provider, error) {
	name, rest, ok := strings.Cut(v, "=")
	if !ok {
		return Provider{}, fmt.Errorf("federation: --sign-in-provider %q: want NAME=key=value,...", v)
	}
	c := ProviderConfig{Name: strings.TrimSpace(name)}
	for kv := range strings.SplitSeq(rest, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, val, ok := strings.Cut(kv, "=")
		if !ok {
			return Provider{}, fmt.Errorf("federation: --sign-in-provider %s: %q is not key=value", c.Name, kv)
		}
		val = strings.TrimSpace(val)
		switch strings.TrimSpace(k) {
		case "issuer":
			c.Issuer = val
		case "client-id":
			c.ClientID = val
		case "client-secret-file":
			c.ClientSecretFile = val
		case "label":
			c.Label = val
		case "scopes":
			c.Scopes = strings.Fields(val)
		case "tenant":
			c.Tenant = val
		case "trust-mfa":
			b, err := strconv.ParseBool(val)
			if err != nil {
				return Provider{}, fmt.Errorf("federation: --sign-in-provider %s: trust-mfa=%q: want true or false", c.Name, val)
			}
			c.TrustMFA = b
		default:
			return Provider{}, fmt.Errorf("federation: --sign-in-provider %s: unknown key %q (want issuer, client-id, client-secret-file, label, scopes, tenant or trust-mfa)", c.Name, k)
		}
	}
	return c.Provider()
}

// LoadProviders reads a JSON file holding an array of ProviderConfig.
func LoadProviders(path string) ([]Provider, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("federation: %w", err)
	}
	var cs []ProviderConfig
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cs); err != nil {
		return nil, fmt.Errorf("federation: %s: %w", path, err)
	}
	out := make([]Provider, 0, len(cs))
	for _, c := range cs {
		p, err := c.Provider()
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}
