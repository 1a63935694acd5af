package storage

import (
	"fmt"
	"net/url"
	"slices"

	"gocloud.dev/blob"
	"gocloud.dev/docstore"
	"gocloud.dev/pubsub"
	"gocloud.dev/secrets"
)

// store kinds, as named in errors.
const (
	kindBlob         = "blob"
	kindKV           = "KV"
	kindTopic        = "queue"
	kindSubscription = "queue subscription"
	kindKeeper       = "keeper"
)

// cloudScheme is a URL scheme of a cloud driver that this package does not
// link: package storage/clouddrivers/<provider> does, and the enclave
// binary does with -tags <provider>.
type cloudScheme struct {
	scheme, provider, kind string
}

var cloudSchemes = []cloudScheme{
	{"s3", "aws", kindBlob},
	{"awssns", "aws", kindTopic},
	{"awssqs", "aws", kindTopic},
	{"awskms", "aws", kindKeeper},
	{"gs", "gcp", kindBlob},
	{"firestore", "gcp", kindKV},
	{"gcppubsub", "gcp", kindTopic},
	{"gcpkms", "gcp", kindKeeper},
	{"azblob", "azure", kindBlob},
	{"azuresb", "azure", kindTopic},
	{"azurekeyvault", "azure", kindKeeper},
}

// linked reports whether gocloud's default URL mux for kind has a driver
// for scheme.
func linked(kind, scheme string) bool {
	switch kind {
	case kindBlob:
		return blob.DefaultURLMux().ValidBucketScheme(scheme)
	case kindKV:
		return docstore.DefaultURLMux().ValidCollectionScheme(scheme)
	case kindTopic:
		return pubsub.DefaultURLMux().ValidTopicScheme(scheme)
	case kindSubscription:
		return pubsub.DefaultURLMux().ValidSubscriptionScheme(scheme)
	case kindKeeper:
		return secrets.DefaultURLMux().ValidKeeperScheme(scheme)
	}
	return false
}

// DriverError is the error of [Open] for a URL whose cloud driver the
// program was built without. Its message names the build tag and the
// package that link it.
type DriverError struct {
	Kind     string // "blob", "KV", "queue", "queue subscription" or "keeper"
	Scheme   string // the URL's scheme, e.g. "s3"
	Provider string // "aws", "gcp" or "azure": the build tag and the driver package's name
}

func (e *DriverError) Error() string {
	return fmt.Sprintf("storage: the %s URL scheme %s:// needs the %s cloud drivers, which this program was built without: "+
		"build enclave with -tags %s (or -tags full), or import github.com/enclave-mcp/enclave/storage/clouddrivers/%s",
		e.Kind, e.Scheme, e.Provider, e.Provider, e.Provider)
}

// checkDriver returns a *DriverError when raw, the URL of a store of kind,
// names a cloud driver that is not linked. Any other URL passes: gocloud's
// own error describes a scheme nobody provides.
func checkDriver(kind, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return nil
	}
	for _, c := range cloudSchemes {
		if c.scheme == u.Scheme && !linked(c.kind, c.scheme) {
			return &DriverError{Kind: kind, Scheme: u.Scheme, Provider: c.provider}
		}
	}
	return nil
}

// checkDrivers checks every store URL of c before anything is opened.
func (c Config) checkDrivers() error {
	for _, u := range []struct{ kind, raw string }{
		{kindBlob, c.BlobURL}, {kindKV, c.KVURL}, {kindTopic, c.QueueURL},
		{kindSubscription, c.QueueSubscriptionURL}, {kindKeeper, c.KeeperURL},
	} {
		if err := checkDriver(u.kind, u.raw); err != nil {
			return err
		}
	}
	return nil
}

// CloudProviders returns the cloud providers ("aws", "azure", "gcp") whose
// drivers this program links, sorted: those whose every scheme above has a
// driver in gocloud's default URL muxes.
func CloudProviders() []string {
	missing := map[string]bool{}
	all := map[string]bool{}
	for _, c := range cloudSchemes {
		all[c.provider] = true
		if !linked(c.kind, c.scheme) {
			missing[c.provider] = true
		}
	}
	var out []string
	for p := range all {
		if !missing[p] {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}
