package cli

import (
	"flag"
	"io"
	"testing"
)

// --site-name, --site-description and --site-accent (or ENCLAVE_SITE_*)
// reach the server's configuration; the name defaults to "enclave".
func TestSiteFlags(t *testing.T) {
	for _, tc := range []struct {
		args               []string
		env                map[string]string
		name, desc, accent string
	}{
		{nil, nil, "enclave", "", ""},
		{[]string{"--site-name", "Acme Agents", "--site-description", "Tools for the Acme team.", "--site-accent", "#ffcc00"}, nil, "Acme Agents", "Tools for the Acme team.", "#ffcc00"},
		{nil, map[string]string{"ENCLAVE_SITE_NAME": "Acme", "ENCLAVE_SITE_DESCRIPTION": "Ours."}, "Acme", "Ours.", ""},
	} {
		o := &options{}
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		o.register(fs)
		if err := applyEnv(fs, func(k string) string { return tc.env[k] }); err != nil {
			t.Fatal(err)
		}
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if err := o.finish(io.Discard); err != nil {
			t.Fatal(err)
		}
		if o.cfg.SiteName != tc.name || o.cfg.SiteDescription != tc.desc || o.cfg.AccentColor != tc.accent {
			t.Errorf("args %v env %v: site %q %q %q", tc.args, tc.env, o.cfg.SiteName, o.cfg.SiteDescription, o.cfg.AccentColor)
		}
	}
}
