package cli

import (
	"flag"
	"io"
	"testing"
)

func TestEmbeddingsFlags(t *testing.T) {
	for _, tc := range []struct {
		args                []string
		env                 map[string]string
		url, model, keyFile string
		wantErr             bool
	}{
		{nil, nil, "", "", "", false},
		{[]string{"--embeddings-url", "https://api.example.com/v1", "--embeddings-model", "m", "--embeddings-key-file", "/run/key"}, nil,
			"https://api.example.com/v1", "m", "/run/key", false},
		{nil, map[string]string{"ENCLAVE_EMBEDDINGS_URL": "http://127.0.0.1:9000/v1", "ENCLAVE_EMBEDDINGS_MODEL": "local", "ENCLAVE_EMBEDDINGS_KEY_FILE": "/k"},
			"http://127.0.0.1:9000/v1", "local", "/k", false},
		{[]string{"--embeddings-url", "https://api.example.com/v1"}, nil, "", "", "", true},
		{[]string{"--embeddings-model", "m"}, nil, "", "", "", true},
		{[]string{"--embeddings-key-file", "/k"}, nil, "", "", "", true},
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
				t.Errorf("args %v: no error", tc.args)
			}
			continue
		}
		e := o.cfg.Memory.Embeddings
		if err != nil || e.URL != tc.url || e.Model != tc.model || e.KeyFile != tc.keyFile {
			t.Errorf("args %v env %v: %+v %v", tc.args, tc.env, e, err)
		}
	}
}
