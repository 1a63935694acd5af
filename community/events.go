package community

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/enclave-mcp/enclave/codemode"
	"github.com/enclave-mcp/enclave/events"
)

// The community's admin event types. Each is recorded with identifiers
// only; a delivery reloads what it reports (see ListingEvent,
// ActivityEvent, ReportEvent) and is dropped when that is gone.
// community.unpublished and community.deleted carry the listing's id and
// name as they were (the listing no longer exists).
const (
	TypePublished   = "community.published"
	TypeUnpublished = "community.unpublished"
	TypeFeatured    = "community.featured"
	TypeDelisted    = "community.delisted"
	TypeDeleted     = "community.deleted"
	TypeForked      = "community.forked"
	TypeRated       = "community.rated"
	TypeReported    = "community.reported"
)

// Types lists the community's event types.
var Types = []string{TypePublished, TypeUnpublished, TypeFeatured, TypeDelisted, TypeDeleted, TypeForked, TypeRated, TypeReported}

var emptyManifest codemode.Manifest

// ListingEvent is the data of community.published, community.featured and
// community.delisted deliveries: the listing's public fields as they are
// at delivery.
type ListingEvent struct {
	Listing  string `json:"listing"`
	Name     string `json:"name"`
	Package  string `json:"package"`
	Version  int    `json:"version"`
	Author   string `json:"author"`
	Status   string `json:"status"`
	Featured bool   `json:"featured"`
}

// ActivityEvent is the data of community.forked and community.rated
// deliveries: the activity projection (ActivityFields), nothing more.
type ActivityEvent = Activity

// ReportEvent is the data of a community.reported delivery: the report's
// id, the listing's identity, the reporter's username and the reason
// (never the reporter's words: admins read those in the report list).
type ReportEvent struct {
	Report      string    `json:"report"`
	Listing     string    `json:"listing"`
	ListingName string    `json:"listingName"`
	Reporter    string    `json:"reporter"`
	Reason      string    `json:"reason"`
	Status      string    `json:"status"`
	CreatedAt   time.Time `json:"createdAt"`
}

func (s *Service) registerEnrichers() {
	for _, t := range []string{TypePublished, TypeFeatured, TypeDelisted} {
		s.events.Enrich(t, s.listingEvent)
	}
	s.events.Enrich(TypeForked, s.activityEvent)
	s.events.Enrich(TypeRated, s.activityEvent)
	s.events.Enrich(TypeReported, s.reportEvent)
}

func (s *Service) listingEvent(ctx context.Context, e events.Event) (json.RawMessage, bool, error) {
	var ref struct {
		ListingID string `json:"listingId"`
	}
	if err := json.Unmarshal(e.Data, &ref); err != nil || ref.ListingID == "" {
		return nil, false, nil
	}
	var row listingRow
	err := s.store.DB.NewSelect().Model(&row).Where("public_id = ?", ref.ListingID).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	raw, err := json.Marshal(ListingEvent{Listing: row.PublicID, Name: row.Name, Package: row.PackageName, Version: row.PackageVersion,
		Author: row.AuthorUsername, Status: row.Status, Featured: row.FeaturedAt != nil})
	return raw, err == nil, err
}

func (s *Service) activityEvent(ctx context.Context, e events.Event) (json.RawMessage, bool, error) {
	var ref struct {
		Activity string `json:"activity"`
	}
	if err := json.Unmarshal(e.Data, &ref); err != nil || ref.Activity == "" {
		return nil, false, nil
	}
	a, ok, err := s.activityOf(ctx, ref.Activity)
	if err != nil || !ok {
		return nil, false, err
	}
	raw, err := json.Marshal(a)
	return raw, err == nil, err
}

func (s *Service) reportEvent(ctx context.Context, e events.Event) (json.RawMessage, bool, error) {
	var ref struct {
		ReportID string `json:"reportId"`
	}
	if err := json.Unmarshal(e.Data, &ref); err != nil || ref.ReportID == "" {
		return nil, false, nil
	}
	var r adminReportRow
	err := s.reportQuery(s.store.DB).Where("rp.public_id = ?", ref.ReportID).Scan(ctx, &r)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	raw, err := json.Marshal(ReportEvent{Report: r.PublicID, Listing: r.ListingPublicID, ListingName: r.ListingName,
		Reporter: r.Reporter, Reason: r.Reason, Status: r.Status, CreatedAt: r.CreatedAt.UTC()})
	return raw, err == nil, err
}
