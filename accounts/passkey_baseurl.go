package accounts

import "net/url"

// ForBaseURL fills the WebAuthn relying party left unset from a server's
// public base URL: its host is the relying party id and its origin the
// one origin passkeys are used from. An unparsable URL changes nothing.
func (c PasskeyConfig) ForBaseURL(baseURL string) PasskeyConfig {
	u, err := url.Parse(baseURL)
	if err != nil {
		return c
	}
	if c.RPID == "" {
		c.RPID = u.Hostname()
	}
	if len(c.Origins) == 0 {
		c.Origins = []string{u.Scheme + "://" + u.Host}
	}
	return c
}
