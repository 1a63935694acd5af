// Package buckets keeps per-user storage buckets: small key/value stores of
// JSON values that agents, code runs, packages and package jobs keep state
// in, with an atomic byte budget per user.
//
// A bucket is addressed by its owner and a storage id. The owner always
// comes from the caller (Config.Owners), never from input: the same
// storage id of two users names two buckets, and no input, cursor or
// prefix reaches another user's. Storage ids are stable strings in one of
// these forms (changing a form would strand the buckets of the old one):
//
//	exec:<runId>            the scratch state of one execute run (runId as
//	                        code mode issues it: letters, digits, '_', '-')
//	package:<name>          the durable state of a saved package, shared by
//	                        its exports and jobs (name: a package name)
//	job:<package>:<job>     the state of one package job
//	<name>                  a bucket the user names: 1 to 64 letters,
//	                        digits, '.', '_' and '-', starting with a
//	                        letter or digit (no ':')
//
// Keys are 1 to 512 bytes of UTF-8 without NUL; they sort bytewise (in
// code point order) and list by prefix. A value is any JSON value of at
// most 1 MiB, stored as sent. Every entry has a revision, the owner's write
// counter at the write that set it; it is never reused, so a
// compare-and-set (storageSet with ifRevision; 0 means "must not exist")
// cannot mistake a recreated key for the one it read. storageTransact
// applies up to 100 sets and deletes of one bucket all or nothing.
//
// Each user has a budget: Options.MaxBytes of keys and values (default 100
// MiB) and Options.MaxKeys keys (default 100,000) across all their
// buckets. The counters live in one row per user, reserved in the write's
// own transaction by an UPDATE that checks the limit itself, so concurrent
// writers can never together exceed it; a refused write changes nothing
// and answers capabilities.CodeQuotaExceeded. Service.Reconcile (the
// "storage-reconcile" schedule) recomputes the counters from the rows and
// corrects any drift.
//
// The tables are in the ownership inventory: entries are exported page by
// page (bounded memory for any bucket size) and deleted with the account.
// Buckets bound to a code run or a package (exec:, package:, job:) are
// removed by retention once their run record or package is gone; the
// others stay until dropped (storageDrop) or the account is deleted.
package buckets
