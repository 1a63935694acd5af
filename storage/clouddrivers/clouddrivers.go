// Package clouddrivers links the cloud drivers of gocloud.dev, so that a
// storage URL is all an operator changes to move a store to a cloud service.
// Import it for its side effects:
//
//	import _ "github.com/enclave-mcp/enclave/storage/clouddrivers"
//
// The enclave binary does. Embedders who only need the embedded defaults can
// leave it out and keep their binaries small.
//
// Linked schemes:
//   - blob: s3://, gs://, azblob://
//   - KV (docstore): firestore://
//   - queue (pubsub): awssns://, awssqs://, gcppubsub://, azuresb://
//   - keeper (secrets): awskms://, gcpkms://, azurekeyvault://
package clouddrivers

import (
	_ "gocloud.dev/blob/azureblob"
	_ "gocloud.dev/blob/gcsblob"
	_ "gocloud.dev/blob/s3blob"
	_ "gocloud.dev/docstore/gcpfirestore"
	_ "gocloud.dev/pubsub/awssnssqs"
	_ "gocloud.dev/pubsub/azuresb"
	_ "gocloud.dev/pubsub/gcppubsub"
	_ "gocloud.dev/secrets/awskms"
	_ "gocloud.dev/secrets/azurekeyvault"
	_ "gocloud.dev/secrets/gcpkms"
)
