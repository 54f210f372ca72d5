package courtorder

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/archiveread"
	"github.com/craig/retention/kernel/failpoint"
	"github.com/craig/retention/kernel/intent"
	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/lease"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/kernel/subject"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

func marshal(v any) ([]byte, error) { return json.Marshal(v) }

// execute carries out an approved order, each step idempotent: the
// archives are rewritten (each booked, then its old objects destroyed),
// the hot rows deleted and the subject's keyed hash replaced by the
// commitment, every superseded archive's objects destroyed again (a crash
// between a booking and its destruction), the certificate written, and
// the order completed (its sealed subject and salt erased).
func (o *Orders) execute(ctx context.Context, ord *order) (Executed, error) {
	q := queries.New(o.pool)
	if err := o.noOrphans(ctx, ord); err != nil { // an unbooked copy might hold the subject's rows
		return Executed{}, err
	}
	if err := o.noCopies(ctx, ord); err != nil {
		return Executed{}, err
	}
	n, err := q.CountUnindexed(ctx, o.subjectTables())
	switch {
	case err != nil:
		return Executed{}, fmt.Errorf("unindexed archives: %w", err)
	case n > 0: // booked without the key since the request: it might hold the subject
		return Executed{}, fmt.Errorf("%w: %d archive(s); run `%s archive index-subjects`, then approve again", ErrNotIndexed, n, o.cfg.Service)
	}
	rows, err := o.affected(ctx, o.pool, ord.subject, ord.holds)
	if err != nil {
		return Executed{}, err
	}
	for _, r := range rows {
		if err := o.rewrite(ctx, ord, r); err != nil {
			return Executed{}, err
		}
	}
	hot, err := o.deleteHot(ctx, ord)
	if err != nil {
		return Executed{}, err
	}
	lineage, err := queries.New(o.pool).ExpungementLineage(ctx, pgUUID(ord.id))
	if err != nil {
		return Executed{}, fmt.Errorf("lineage of %s: %w", ord.id, err)
	}
	for _, l := range lineage {
		if err := o.destroy(ctx, l.ManifestKey, l.DataKey); err != nil {
			return Executed{}, err
		}
	}
	cert, removed, err := o.certify(ctx, ord, lineage, hot)
	if err != nil {
		return Executed{}, err
	}
	if err := o.noOrphans(ctx, ord); err != nil { // never report completion while an unbooked copy exists
		return Executed{}, err
	}
	res := Executed{ExpungeID: ord.id, Rewritten: len(lineage), RowsRemoved: removed, CertificateKey: cert,
		Salt: subject.Hex(ord.salt), Commitment: subject.Hex(ord.commitment)}
	if err := o.complete(ctx, ord, res, lineage); err != nil {
		return res, err
	}
	return res, o.cfg.Journal.Done(ctx)
}

// noOrphans destroys every object written and never booked (an archive
// pass or an earlier try of an order killed between its upload and its
// booking: no ledger row names it, so no rewrite would reach it), under
// the archive lease the caller holds, and fails with ErrOrphans while one
// of the order's tables may still exist: the store refused to destroy it,
// or it was destroyed within the late-upload window (an upload a dying
// client sent may still land; ADR-069).
func (o *Orders) noOrphans(ctx context.Context, ord *order) error {
	rep, err := o.cfg.Orphans.Sweep(ctx)
	if err != nil {
		return fmt.Errorf("destroy orphan uploads: %w", err)
	}
	n, err := o.cfg.Orphans.Pending(ctx, o.subjectTables(), ord.id) // its own successors it writes again
	if err != nil {
		return err
	}
	if n > 0 {
		return fmt.Errorf("%w: %d object(s) written and never booked are not destroyed yet, or were destroyed less than %v ago and a late upload may still land (%d refused by the store); approve again then",
			ErrOrphans, n, intent.LateUploadWindow, len(rep.Failed))
	}
	return nil
}

// noCopies destroys, under the archive lease the caller holds, the archive
// objects no ledger row names that copy rows held elsewhere
// (archiveread.DestroyCopiesLeased): after a database restore the journal
// did not see (nothing journaled since the backup), an archive booked after
// the backup and a successor an order's try wrote are such objects, and no
// rewrite would reach them (ADR-069). One it leaves (the only copy of rows
// the restore lost) that holds the subject's rows, or that it cannot read,
// refuses the order with ErrOrphans: `<service> reconcile` puts its rows
// back into their table and destroys it, then the order reaches them. An
// order never writes rows from the store into the database itself.
func (o *Orders) noCopies(ctx context.Context, ord *order) error {
	if o.store == nil {
		return nil
	}
	rep, err := archiveread.New(o.pool, o.store, o.cfg.Service, o.cfg.Tables).DestroyCopiesLeased(ctx, ord.approver)
	if err != nil {
		return fmt.Errorf("destroy copies no ledger row names: %w", err)
	}
	for _, key := range rep.Left {
		table, _, _ := strings.Cut(strings.TrimPrefix(key, store.Prefix+o.cfg.Service+"/"), "/")
		spec, ok := o.spec(table)
		if !ok {
			continue // a table no order reaches
		}
		// Every version: one written over the first may hold the subject.
		_, err := o.store.GetMatching(ctx, key, func(b []byte) bool {
			k, err := o.keep(ctx, uuid.Nil, spec, ord, b)
			return err != nil || k.removed > 0
		})
		if err == nil || !errors.Is(err, store.ErrNoMatchingVersion) && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("%w: %s, which no ledger row names, may hold the subject's rows and holds rows in no other place (a database restore lost them); "+
				"run `%s reconcile` (it puts them back into their table and destroys the object), then approve again", ErrOrphans, key, o.cfg.Service)
		}
	}
	return nil
}

// deleteHot deletes the subject's hot rows of every table (re-checking,
// ordered with hold placements, that no hold the order does not name keeps
// them), replaces its keyed hash by the commitment in the index, the holds,
// the staged events and the lifecycle log (the insert-only log through the expungement's bypass, set
// for this transaction only), and returns the hot rows deleted by every
// call of this order so far.
func (o *Orders) deleteHot(ctx context.Context, ord *order) (int64, error) {
	var total int64
	err := pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		q := queries.New(tx)
		if err := q.LockHoldsShared(ctx, lease.HoldsKey); err != nil {
			return err
		}
		if _, err := o.affected(ctx, tx, ord.subject, ord.holds); err != nil {
			return err // a hold placed since the archives were rewritten keeps the hot rows
		}
		var n int64
		for _, spec := range o.subjectSpecs() {
			tag, err := tx.Exec(ctx, "DELETE FROM "+pgx.Identifier{spec.Table}.Sanitize()+" AS t WHERE "+archive.SubjectMatch(spec, 1), ord.subject.String())
			if err != nil {
				return fmt.Errorf("expunge hot rows of %s: %w", spec.Table, archive.RedactRowValues(err))
			}
			n += tag.RowsAffected()
		}
		var err error
		if total, err = q.AddHotRowsRemoved(ctx, queries.AddHotRowsRemovedParams{Rows: n, ExpungeID: pgUUID(ord.id)}); err != nil {
			return fmt.Errorf("record hot rows removed: %w", err)
		}
		if err := o.replaceHash(ctx, tx, ord); err != nil {
			return err
		}
		failpoint.Inject(failpoint.ExpungeBeforeHotCommit)
		return nil
	})
	return total, err
}

// replaceHash replaces the subject's keyed hash by the commitment wherever
// the service keeps it, and logs that the insert-only bypass was used.
func (o *Orders) replaceHash(ctx context.Context, tx pgx.Tx, ord *order) error {
	q := queries.New(tx)
	rep := queries.ReplaceIndexHashParams{OldHash: ord.hash, NewHash: ord.commitment}
	if _, err := q.ReplaceIndexHash(ctx, rep); err != nil {
		return fmt.Errorf("replace the index's hash: %w", err)
	}
	if _, err := q.ReplaceHoldHash(ctx, queries.ReplaceHoldHashParams(rep)); err != nil {
		return fmt.Errorf("replace the holds' hash: %w", err)
	}
	if err := q.SetExpungeBypass(ctx, ord.id.String()); err != nil {
		return fmt.Errorf("open the insert-only bypass: %w", err)
	}
	// The case's clock and events, and what the archives held of it
	// (ADR-073), are the case's too.
	if _, err := q.ReplaceClockHash(ctx, queries.ReplaceClockHashParams(rep)); err != nil {
		return fmt.Errorf("replace the case clocks' hash: %w", err)
	}
	if _, err := q.ReplaceClockEventHash(ctx, queries.ReplaceClockEventHashParams(rep)); err != nil {
		return fmt.Errorf("replace the case events' hash: %w", err)
	}
	if _, err := q.ForgetSubjectCaseRows(ctx, ord.hash); err != nil {
		return fmt.Errorf("forget the archives' case rows: %w", err)
	}
	if _, err := q.ReplaceDispositionHash(ctx, queries.ReplaceDispositionHashParams{OldHash: ord.hash, NewHash: ord.commitment}); err != nil {
		return fmt.Errorf("replace the disposition batches' hash: %w", err)
	}
	if _, err := q.ReplaceExtensionHash(ctx, queries.ReplaceExtensionHashParams{OldHash: ord.hash, NewHash: ord.commitment}); err != nil {
		return fmt.Errorf("replace the disposition extensions' hash: %w", err)
	}
	hexes := queries.ReplaceLogHashParams{OldHex: subject.Hex(ord.hash), NewHex: subject.Hex(ord.commitment)}
	n, err := q.ReplaceLogHash(ctx, hexes)
	if err != nil {
		return fmt.Errorf("replace the log's hash: %w", err)
	}
	if _, err := q.ReplaceOutboxHash(ctx, queries.ReplaceOutboxHashParams(hexes)); err != nil {
		return fmt.Errorf("replace the staged events' hash: %w", err)
	}
	return o.logOnly(ctx, tx, ord.approver, "insert_only_bypass", map[string]any{"expunge_id": ord.id, "table": "archive_lifecycle_log",
		"rows": n, "why": "the subject's keyed hash replaced by the order's commitment"})
}

// destroy destroys every version of an old archive's objects (the manifest
// first); nothing left is not an error.
func (o *Orders) destroy(ctx context.Context, keys ...string) error {
	for _, key := range keys {
		var err error
		if o.cfg.ObjectLock {
			_, err = o.store.DestroyReleased(ctx, key)
		} else {
			_, err = o.store.DestroyAllVersions(ctx, key)
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("destroy %s: %w", key, err)
		}
		failpoint.Inject(failpoint.ExpungeAfterObjectDestroy)
	}
	return nil
}

// lineageEntry is one superseded archive in the certificate.
type lineageEntry struct {
	ArchiveID    uuid.UUID  `json:"archive_id"`
	Table        string     `json:"table"`
	OldSHA256    string     `json:"old_sha256"`
	OldRecords   int        `json:"old_record_count"`
	NewArchiveID *uuid.UUID `json:"new_archive_id"`
	NewDataKey   *string    `json:"new_data_key"`
	NewSHA256    *string    `json:"new_sha256"`
	NewRecords   int        `json:"new_record_count"`
	RowsRemoved  int        `json:"rows_removed"`
}

// certificate is the expungement's record in the store: the act, its
// lineage and counts, and the commitment in place of the subject.
type certificate struct {
	ExpungeID      uuid.UUID      `json:"expunge_id"`
	Service        string         `json:"service"`
	OrderRef       string         `json:"order_ref"`
	RequestedBy    string         `json:"requested_by"`
	ApprovedBy     string         `json:"approved_by"`
	ExecutedAt     string         `json:"executed_at"`
	Commitment     string         `json:"commitment"`
	CommitmentAlg  string         `json:"commitment_alg"`
	Archives       []lineageEntry `json:"archives"`
	HotRowsRemoved int64          `json:"hot_rows_removed"`
	RowsRemoved    int64          `json:"rows_removed"`
}

// CommitmentAlg says how a certificate's commitment is computed.
const CommitmentAlg = "sha256(\"craig-retention expungement commitment v1\\x00\" || salt || canonical subject)"

// certify writes retention-archives/<service>/expungements/<id>.json
// create-only (one a crashed call wrote stands) and returns its key and
// the rows removed in all.
func (o *Orders) certify(ctx context.Context, ord *order, lineage []queries.ExpungementLineageRow, hot int64) (string, int64, error) {
	c := certificate{ExpungeID: ord.id, Service: o.cfg.Service, OrderRef: ord.orderRef, RequestedBy: ord.requester, ApprovedBy: ord.approver,
		ExecutedAt: ord.at.Format("2006-01-02T15:04:05.999999Z07:00"), Commitment: subject.Hex(ord.commitment), CommitmentAlg: CommitmentAlg,
		Archives: []lineageEntry{}, HotRowsRemoved: hot, RowsRemoved: hot}
	for _, l := range lineage {
		e := lineageEntry{ArchiveID: l.ArchiveID.Bytes, Table: l.TableName, OldSHA256: l.DataSha256, OldRecords: int(l.RecordCount), RowsRemoved: int(l.RecordCount)}
		if l.NewArchiveID.Valid {
			id := uuid.UUID(l.NewArchiveID.Bytes)
			e.NewArchiveID, e.NewDataKey, e.NewSHA256, e.NewRecords = &id, l.NewDataKey, l.NewDataSha256, int(deref(l.NewRecordCount))
			e.RowsRemoved -= e.NewRecords
		}
		c.RowsRemoved += int64(e.RowsRemoved)
		c.Archives = append(c.Archives, e)
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return "", 0, err
	}
	key := store.Prefix + o.cfg.Service + "/expungements/" + ord.id.String() + ".json"
	err = o.store.PutCreate(ctx, key, b, store.ContentTypeJSON)
	if err != nil && !errors.Is(err, store.ErrAlreadyExists) {
		return "", 0, fmt.Errorf("expungement %s: certificate %s: %w", ord.id, key, err)
	}
	return key, c.RowsRemoved, nil
}

// complete records the outcome, erases the order's subject, hash and salt,
// and announces it (the superseded archives as purged for the fleet
// ledger, and the order with its lineage and commitment).
func (o *Orders) complete(ctx context.Context, ord *order, res Executed, lineage []queries.ExpungementLineageRow) error {
	return pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		rewritten := int32(res.Rewritten)
		n, err := queries.New(tx).CompleteExpungement(ctx, queries.CompleteExpungementParams{Rewritten: &rewritten, RowsRemoved: &res.RowsRemoved,
			CertificateKey: &res.CertificateKey, ExpungeID: pgUUID(ord.id)})
		if err != nil || n != 1 {
			return fmt.Errorf("complete expungement %s (%d): %w", ord.id, n, err)
		}
		if err := o.journalExpunge(ctx, tx, ord, lineage); err != nil {
			return err
		}
		old, supersededBy := Superseded(lineage)
		if len(old) > 0 {
			if err := o.announce(ctx, tx, ord.requester, "archive_superseded", map[string]any{"archive_ids": old, "approver": ord.approver,
				"expunge_id": ord.id, "superseded_by": supersededBy, "commitment": res.Commitment, "order_ref": ord.orderRef}); err != nil {
				return err
			}
		}
		o.logger.InfoContext(ctx, "expungement executed", slog.String("expunge_id", ord.id.String()), slog.Int("rewritten", res.Rewritten),
			slog.Int64("rows_removed", res.RowsRemoved), slog.String("certificate", res.CertificateKey))
		return o.announce(ctx, tx, ord.approver, "subject_expunged", map[string]any{"expunge_id": ord.id, "order_ref": ord.orderRef,
			"requested_by": ord.requester, "approver": ord.approver, "commitment": res.Commitment, "archive_ids": old,
			"rows_removed": res.RowsRemoved, "certificate": res.CertificateKey})
	})
}
