// Package failpoint marks the steps of the archive engine, the purge, the
// sweep, the court orders and the disposition batches where the fault suite (faults/, `go tool mage test:faults`)
// kills the process: right after an object put, inside a transaction
// before its commit, after it.
//
// In a production build Inject is an empty function: the suite builds the
// service binaries with `-tags failpoints`, and only there does Inject read
// CRAIG_FAILPOINT (the point's name) and CRAIG_FAILPOINT_HIT (which hit of
// it fires, default 1) and SIGKILL its own process when they match.
package failpoint

// The failpoints, in the order their steps run.
const (
	// ArchiveAfterDataPut: the batch's data object is in the store, its
	// manifest is not, nothing is deleted.
	ArchiveAfterDataPut = "archive.after_data_put"
	// ArchiveAfterManifestPut: both objects are in the store, the delete
	// transaction has not begun.
	ArchiveAfterManifestPut = "archive.after_manifest_put"
	// ArchiveBeforeCommit: the rows are deleted and the ledger row written
	// inside the transaction, which has not committed.
	ArchiveBeforeCommit = "archive.before_commit"
	// ArchiveAfterCommit: the batch is archived and committed.
	ArchiveAfterCommit = "archive.after_commit"
	// PurgeAfterManifestDelete: an archive's manifest is destroyed, its
	// data is not, its ledger row is locked and unstamped.
	PurgeAfterManifestDelete = "purge.after_manifest_delete"
	// PurgeAfterDataDelete: both objects are destroyed, the stamp is not
	// written.
	PurgeAfterDataDelete = "purge.after_data_delete"
	// PurgeBeforeStampCommit: the stamp is written in the transaction,
	// which has not committed.
	PurgeBeforeStampCommit = "purge.before_stamp_commit"
	// SweepAfterBatch: a sweep batch's DELETE has committed.
	SweepAfterBatch = "sweep.after_batch"
	// ExpungeAfterPut: a rewritten archive's data and manifest are in the
	// store, nothing is booked.
	ExpungeAfterPut = "expunge.after_put"
	// ExpungeBeforeBookCommit: the rewritten archive is booked and the old
	// one stamped superseded inside the transaction, which has not
	// committed.
	ExpungeBeforeBookCommit = "expunge.before_book_commit"
	// ExpungeAfterBookCommit: the booking committed; the old objects are
	// not destroyed.
	ExpungeAfterBookCommit = "expunge.after_book_commit"
	// ExpungeAfterObjectDestroy: one old object's versions are destroyed.
	ExpungeAfterObjectDestroy = "expunge.after_object_destroy"
	// ExpungeBeforeHotCommit: the hot rows are deleted and the hash
	// replaced inside the transaction, which has not committed.
	ExpungeBeforeHotCommit = "expunge.before_hot_commit"
	// A disposition batch's rewrite of an archive is an expungement's
	// (the four points above fire in it too); then:
	// DispositionBeforeHotCommit: the batch's due hot rows are deleted
	// inside the transaction, which has not committed.
	DispositionBeforeHotCommit = "disposition.before_hot_commit"
	// DispositionBeforeComplete: the certificate is written; the batch is
	// not recorded executed.
	DispositionBeforeComplete = "disposition.before_complete"
)

// All lists every failpoint.
func All() []string {
	return []string{ArchiveAfterDataPut, ArchiveAfterManifestPut, ArchiveBeforeCommit, ArchiveAfterCommit,
		PurgeAfterManifestDelete, PurgeAfterDataDelete, PurgeBeforeStampCommit, SweepAfterBatch,
		ExpungeAfterPut, ExpungeBeforeBookCommit, ExpungeAfterBookCommit, ExpungeAfterObjectDestroy, ExpungeBeforeHotCommit,
		DispositionBeforeHotCommit, DispositionBeforeComplete}
}

// Environment variables a failpoints build reads.
const (
	EnvPoint = "CRAIG_FAILPOINT"
	EnvHit   = "CRAIG_FAILPOINT_HIT"
	// EnvPoll and EnvSweepEvery shorten serve's worker cadence (its tick,
	// and the ticks between two sweeps) so the replica scenario runs a
	// hundred sweep cycles in seconds; a Go duration and a count.
	EnvPoll       = "CRAIG_FAILPOINT_POLL"
	EnvSweepEvery = "CRAIG_FAILPOINT_SWEEP_EVERY"
)
