// Package azure links the Microsoft Azure drivers of gocloud.dev, so that
// enclave's stores accept their URLs. Import it for its side effects:
//
//	import _ "github.com/enclave-mcp/enclave/storage/clouddrivers/azure"
//
// The enclave binary links it when built with -tags azure (or -tags full).
//
// Linked schemes: azblob:// (blob), azuresb:// (queue), azurekeyvault://
// (keeper).
package azure

import (
	_ "gocloud.dev/blob/azureblob"
	_ "gocloud.dev/pubsub/azuresb"
	_ "gocloud.dev/secrets/azurekeyvault"
)
