// Package clouddrivers links every cloud driver of gocloud.dev that enclave
// supports, so that a storage URL is all an operator changes to move a store
// to a cloud service. Import it for its side effects:
//
//	import _ "github.com/enclave-mcp/enclave/storage/clouddrivers"
//
// or import only the provider you use: [github.com/enclave-mcp/enclave/storage/clouddrivers/aws],
// [github.com/enclave-mcp/enclave/storage/clouddrivers/gcp] or
// [github.com/enclave-mcp/enclave/storage/clouddrivers/azure]. The drivers
// roughly double a binary's size, so the default enclave binary links none:
// build it with -tags aws, gcp, azure (any of them, comma-separated) or
// -tags full for all three.
//
// Linked schemes:
//   - blob: s3://, gs://, azblob://
//   - KV (docstore): firestore://
//   - queue (pubsub): awssns://, awssqs://, gcppubsub://, azuresb://
//   - keeper (secrets): awskms://, gcpkms://, azurekeyvault://
package clouddrivers

import (
	_ "github.com/enclave-mcp/enclave/storage/clouddrivers/aws"
	_ "github.com/enclave-mcp/enclave/storage/clouddrivers/azure"
	_ "github.com/enclave-mcp/enclave/storage/clouddrivers/gcp"
)
