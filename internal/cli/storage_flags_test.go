package cli

import (
	"flag"
	"io"
	"testing"

	"github.com/enclave-mcp/enclave/buckets"
)

func TestStorageFlags(t *testing.T) {
	for _, tc := range []struct {
		args           []string
		env            map[string]string
		maxBytes, keys int64
		wantErr        bool
	}{
		{nil, nil, buckets.DefaultMaxBytes, buckets.DefaultMaxKeys, false},
		{[]string{"--storage-max-bytes", "1048576", "--storage-max-keys", "500"}, nil, 1 << 20, 500, false},
		{[]string{"--storage-max-bytes", "250MiB"}, nil, 250 << 20, buckets.DefaultMaxKeys, false},
		{nil, map[string]string{"ENCLAVE_STORAGE_MAX_BYTES": "2GiB", "ENCLAVE_STORAGE_MAX_KEYS": "7"}, 2 << 30, 7, false},
		{[]string{"--storage-max-bytes", "512KiB"}, nil, 512 << 10, buckets.DefaultMaxKeys, false},
		{[]string{"--storage-max-bytes", "0"}, nil, 0, 0, true},
		{[]string{"--storage-max-keys", "-1"}, nil, 0, 0, true},
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
		if err != nil {
			t.Fatalf("args %v env %v: %v", tc.args, tc.env, err)
		}
		if o.cfg.Buckets.MaxBytes != tc.maxBytes || o.cfg.Buckets.MaxKeys != tc.keys {
			t.Errorf("args %v env %v: %d bytes, %d keys; want %d, %d", tc.args, tc.env, o.cfg.Buckets.MaxBytes, o.cfg.Buckets.MaxKeys, tc.maxBytes, tc.keys)
		}
	}
	var b byteSize
	for _, bad := range []string{"", "ten", "5TB", "-1MiB", "1.5MiB", "99999999999GiB"} {
		if err := b.Set(bad); err == nil {
			t.Errorf("%q accepted as %d", bad, b)
		}
	}
	b = 100 << 20
	if b.String() != "100MiB" {
		t.Errorf("String %q", b.String())
	}
}
