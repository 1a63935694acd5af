// Package gcp links the Google Cloud drivers of gocloud.dev, so that
// enclave's stores accept their URLs. Import it for its side effects:
//
//	import _ "github.com/enclave-mcp/enclave/storage/clouddrivers/gcp"
//
// The enclave binary links it when built with -tags gcp (or -tags full).
//
// Linked schemes: gs:// (blob), firestore:// (KV), gcppubsub:// (queue),
// gcpkms:// (keeper).
package gcp

import (
	_ "gocloud.dev/blob/gcsblob"
	_ "gocloud.dev/docstore/gcpfirestore"
	_ "gocloud.dev/pubsub/gcppubsub"
	_ "gocloud.dev/secrets/gcpkms"
)
