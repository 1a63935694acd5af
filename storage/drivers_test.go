package storage_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/storage"
)

// This test binary links no cloud driver (package storage links only the
// file, mem and local-key ones), as the default enclave binary: every cloud
// URL must fail before anything opens, naming the build tag that links it.
func TestCloudURLWithoutDriver(t *testing.T) {
	if got := storage.CloudProviders(); len(got) != 0 {
		t.Fatalf("CloudProviders() = %v in a program that imports no cloud driver", got)
	}
	for _, tc := range []struct {
		name     string
		cfg      storage.Config
		kind     string
		provider string
	}{
		{"s3 blob", storage.Config{BlobURL: "s3://bucket?region=us-east-1"}, "blob", "aws"},
		{"gcs blob", storage.Config{BlobURL: "gs://bucket"}, "blob", "gcp"},
		{"azure blob", storage.Config{BlobURL: "azblob://container"}, "blob", "azure"},
		{"firestore KV", storage.Config{KVURL: "firestore://projects/p/databases/(default)/documents/c"}, "KV", "gcp"},
		{"sqs queue", storage.Config{QueueURL: "awssqs://sqs.us-east-1.amazonaws.example/1/q"}, "queue", "aws"},
		{"sns topic", storage.Config{QueueURL: "awssns:///arn:aws:sns:us-east-1:1:t", QueueSubscriptionURL: "mem://x"}, "queue", "aws"},
		{"pubsub subscription", storage.Config{QueueURL: "mem://x", QueueSubscriptionURL: "gcppubsub://projects/p/subscriptions/s"}, "queue subscription", "gcp"},
		{"service bus", storage.Config{QueueURL: "azuresb://topic"}, "queue", "azure"},
		{"aws kms", storage.Config{KeeperURL: "awskms://alias/k"}, "keeper", "aws"},
		{"gcp kms", storage.Config{KeeperURL: "gcpkms://projects/p/locations/l/keyRings/r/cryptoKeys/k"}, "keeper", "gcp"},
		{"key vault", storage.Config{KeeperURL: "azurekeyvault://vault.example/keys/k"}, "keeper", "azure"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.cfg.DataDir = dir
			s, err := storage.Open(context.Background(), tc.cfg)
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded without the driver")
			}
			var de *storage.DriverError
			if !errors.As(err, &de) {
				t.Fatalf("error %v (%T) is not a *storage.DriverError", err, err)
			}
			if de.Kind != tc.kind || de.Provider != tc.provider {
				t.Fatalf("DriverError{Kind: %q, Provider: %q}, want %q, %q", de.Kind, de.Provider, tc.kind, tc.provider)
			}
			for _, want := range []string{"-tags " + tc.provider, "-tags full", "storage/clouddrivers/" + tc.provider, de.Scheme + "://"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			// Checked before anything opened: no database file.
			if _, err := os.Stat(filepath.Join(dir, "enclave.db")); err == nil {
				t.Error("the database was opened before the URLs were checked")
			}
		})
	}
}

// A scheme no enclave driver provides keeps gocloud's own error.
func TestUnknownSchemeIsNotADriverError(t *testing.T) {
	s, err := storage.Open(context.Background(), storage.Config{DataDir: t.TempDir(), KeeperURL: "nope://k"})
	if err == nil {
		s.Close()
		t.Fatal("Open succeeded")
	}
	var de *storage.DriverError
	if errors.As(err, &de) {
		t.Fatalf("an unknown scheme gave a DriverError: %v", err)
	}
}
