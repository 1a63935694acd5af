package community

import (
	"errors"

	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/storage"
)

// Tables are the community's user-owned tables, in the order deletion may
// remove them (children first). Each is exported with its owner's
// account, except the search text (derived) and the moderation fields of
// reports and bans (the admins' own notes).
var Tables = []storage.Table{
	{Name: "community_ratings"},
	{Name: "community_reports", Redact: []string{"resolved_by", "resolution"}},
	{Name: "community_forks"},
	{Name: "community_bans", Redact: []string{"banned_by"}},
	{Name: "community_listings", Redact: []string{"search_text"}},
}

// RegisterInventory records the community's tables and the snapshot blobs
// of listings (under the author's "community" prefix). The tables exist
// whether or not the community is on, so this is always called.
func RegisterInventory(inv *storage.Inventory) error {
	var errs []error
	for _, t := range Tables {
		errs = append(errs, inv.AddTable(t))
	}
	errs = append(errs, inv.AddBlobPrefix(storage.BlobPrefix{Domain: BlobDomain}))
	return errors.Join(errs...)
}

// RetentionPolicies declares how long the community's rows live: until
// their owner removes them or deletes the account.
func RetentionPolicies() []retention.Policy {
	return []retention.Policy{
		retention.UntilAccountDeleted("community_listings").Because("or until the author unpublishes it or an admin deletes it"),
		retention.UntilAccountDeleted("community_forks").Because("the provenance of the forker's package; it outlives the listing"),
		retention.UntilAccountDeleted("community_ratings").Because("or until the listing is removed"),
		retention.UntilAccountDeleted("community_reports").Because("moderation history of the reporter's reports"),
		retention.UntilAccountDeleted("community_bans").Because("a ban lasts as long as the account"),
	}
}
