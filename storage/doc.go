// Package storage opens every backing store enclave uses from URLs and holds
// the few helpers that all domains share.
//
// A Store bundles:
//
//   - SQL through bun: the authoritative state. sqlite://PATH (the default,
//     <data-dir>/enclave.db) or postgres://… (pgx in simple-protocol mode).
//   - Blob through gocloud.dev/blob: file:// (default <data-dir>/blobs) or mem://.
//   - KV through gocloud.dev/docstore: caches and data with a TTL only; nothing
//     authoritative lives there. mem:// by default.
//   - A queue through gocloud.dev/pubsub: delivery of work that an SQL outbox
//     already recorded. A private in-process queue by default.
//   - A secrets keeper through gocloud.dev/secrets: a local AES key kept in
//     <data-dir>/keeper.key by default, or a cloud KMS.
//
// Only the file, mem and local-key drivers are linked by this package. Import
// package storage/clouddrivers (all three providers) or one of
// storage/clouddrivers/aws, /gcp, /azure to accept S3, GCS, Azure and the
// cloud KMS and queue services by URL; the enclave binary links them when
// built with -tags aws, gcp, azure or full. A URL of a cloud driver the
// program was built without fails [Open] with a [*DriverError] naming the
// build tag.
//
// Shared helpers: [Store.RunInTx] for transactions, [Paginate] for keyset
// pagination with opaque cursors, and account write leases
// ([Store.WriteLease], [CheckWrite], [Store.FenceWriters]), which keep the
// writers of an account from writing after its deletion cleaned up.
package storage
