// Package aws links the Amazon Web Services drivers of gocloud.dev, so that
// enclave's stores accept their URLs. Import it for its side effects:
//
//	import _ "github.com/enclave-mcp/enclave/storage/clouddrivers/aws"
//
// The enclave binary links it when built with -tags aws (or -tags full).
//
// Linked schemes: s3:// (blob), awssns:// and awssqs:// (queue), awskms://
// (keeper).
package aws

import (
	_ "gocloud.dev/blob/s3blob"
	_ "gocloud.dev/pubsub/awssnssqs"
	_ "gocloud.dev/secrets/awskms"
)
