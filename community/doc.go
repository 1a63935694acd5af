// Package community lets people share the packages their agents built.
//
// An author publishes one version of a saved package (code mode) as a
// public listing: a snapshot of its name, description, readme, manifest and
// sources, kept in a blob under the author's own "community" prefix, with
// the author's username at the time. Anyone signed in may search the
// catalogue (over public fields only), read a listing, rate it (one rating
// per person, 1 to 5, with a note only the rater sees) and report it.
//
// Nobody runs another user's code in place: communityFork copies the
// snapshot into a new package of the caller through code mode's own API,
// and from then on it is the caller's package like any other. A fork keeps
// the listing's public id, name and package name as they were, so its
// provenance survives the listing's unpublishing or its author's deletion;
// the forked package itself is never touched by either.
//
// Admins feature, delist and delete listings, list and resolve reports
// (resolving may delist or delete the listing and ban its author from the
// community's actions), and read an activity projection of forks and
// ratings that carries a pinned allowlist of fields: the listing's public
// id, name and package name, the acting username, the kind, the score and
// the time; never an email, a stable user id, a fork's package or a rating
// note (see ActivityFields).
//
// Ownership: listings belong to their author, forks to the forker, ratings
// to the rater, reports to the reporter and a ban to the banned user; each
// is exported with and deleted with its owner's account (see Tables).
// Deleting an author deletes their listings (and the ratings on them);
// other people's forks stay, with their snapshots.
//
// Events: community.* admin events are published inside the transaction of
// each change with identifiers only; each delivery reloads the listing,
// report or activity row, so data deleted meanwhile is never delivered.
package community
