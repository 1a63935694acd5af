package cli

import (
	"flag"
	"io"
	"testing"
)

func TestWorkspacesFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		on   bool
	}{
		{nil, nil, false},
		{[]string{"--workspaces"}, nil, true},
		{nil, map[string]string{"ENCLAVE_WORKSPACES": "true"}, true},
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
		if got := o.cfg.Workspaces != nil; got != tc.on {
			t.Errorf("args %v env %v: workspaces on = %v, want %v", tc.args, tc.env, got, tc.on)
		}
	}
}
