package clouddrivers_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/storage"
	_ "github.com/enclave-mcp/enclave/storage/clouddrivers"
)

// Importing the package links every provider, and their URLs pass the
// storage package's driver check.
func TestLinksEveryProvider(t *testing.T) {
	if got, want := storage.CloudProviders(), []string{"aws", "azure", "gcp"}; !slices.Equal(got, want) {
		t.Fatalf("CloudProviders() = %v, want %v", got, want)
	}
	// An Azure blob URL without an account fails in the driver itself,
	// without any network: not for want of a driver.
	t.Setenv("AZURE_STORAGE_ACCOUNT", "")
	s, err := storage.Open(context.Background(), storage.Config{DataDir: t.TempDir(), BlobURL: "azblob://container"})
	if err == nil {
		s.Close()
		t.Fatal("Open succeeded without an Azure account")
	}
	var de *storage.DriverError
	if errors.As(err, &de) || !strings.Contains(err.Error(), "azureblob") {
		t.Fatalf("a linked driver's URL did not reach the driver: %v", err)
	}
}
