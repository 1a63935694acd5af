package cli

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestEnterpriseIdPFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "idps.json")
	if err := os.WriteFile(file, []byte(`[{"issuer":"https://corp.example","jwksUrl":"https://corp.example/keys","clientIds":["agent"],"emailDomains":["corp.example"]}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`[{"issuer":"http://corp.example","jwksUrl":"https://corp.example/keys"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		issuers []string
		clients int
		domains int
		private bool
		wantErr bool
	}{
		{name: "none"},
		{name: "flag", args: []string{"--enterprise-idp", "issuer=https://idp.example,jwks-url=https://idp.example/jwks"}, issuers: []string{"https://idp.example"}},
		{name: "flag with clients and private", args: []string{"--enterprise-idp", "issuer=https://idp.example,jwks-url=https://idp.example/jwks,client-ids=a b", "--enterprise-idp-allow-private"},
			issuers: []string{"https://idp.example"}, clients: 2, private: true},
		{name: "flag with email domains", args: []string{"--enterprise-idp", "issuer=https://idp.example,jwks-url=https://idp.example/jwks,email-domains=idp.example eu.idp.example"},
			issuers: []string{"https://idp.example"}, domains: 2},
		{name: "file from env and a flag", env: map[string]string{"ENCLAVE_ENTERPRISE_IDPS_FILE": file}, args: []string{"--enterprise-idp", "issuer=https://idp.example,jwks-url=https://idp.example/jwks"},
			issuers: []string{"https://corp.example", "https://idp.example"}, clients: 1, domains: 1},
		{name: "http issuer", args: []string{"--enterprise-idp", "issuer=http://idp.example,jwks-url=https://idp.example/jwks"}, wantErr: true},
		{name: "no jwks url", args: []string{"--enterprise-idp", "issuer=https://idp.example"}, wantErr: true},
		{name: "email domain not a domain", args: []string{"--enterprise-idp", "issuer=https://idp.example,jwks-url=https://idp.example/jwks,email-domains=@idp.example"}, wantErr: true},
		{name: "email domain without a dot", args: []string{"--enterprise-idp", "issuer=https://idp.example,jwks-url=https://idp.example/jwks,email-domains=com"}, wantErr: true},
		{name: "unknown key", args: []string{"--enterprise-idp", "issuer=https://idp.example,jwks=https://idp.example/jwks"}, wantErr: true},
		{name: "bad file", args: []string{"--enterprise-idps-file", bad}, wantErr: true},
		{name: "missing file", args: []string{"--enterprise-idps-file", filepath.Join(t.TempDir(), "none.json")}, wantErr: true},
	} {
		o := &options{}
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		o.register(fs)
		if err := applyEnv(fs, func(k string) string { return tc.env[k] }); err != nil {
			t.Fatal(err)
		}
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		err := o.finish(io.Discard)
		if tc.wantErr {
			if err == nil {
				t.Errorf("%s: no error", tc.name)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		e := o.cfg.OAuth.Enterprise
		var issuers []string
		clients, domains := 0, 0
		for _, idp := range e.IdPs {
			issuers = append(issuers, idp.Issuer)
			clients += len(idp.ClientIDs)
			domains += len(idp.EmailDomains)
		}
		if !slices.Equal(issuers, tc.issuers) || clients != tc.clients || domains != tc.domains || e.AllowPrivate != tc.private {
			t.Errorf("%s: %+v", tc.name, e)
		}
	}
}
