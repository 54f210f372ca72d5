package courtorder

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

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

// Supersession is what a rewritten archive's manifest says it replaces.
type Supersession struct {
	ArchiveID   uuid.UUID `json:"archive_id"`
	OldSHA256   string    `json:"old_sha256"`
	NewSHA256   string    `json:"new_sha256"`
	RowsRemoved int       `json:"rows_removed"`
	// ExpungeID is the act that rewrote it: a court order, or a
	// disposition batch (then DispositionID names it too).
	ExpungeID     uuid.UUID  `json:"expunge_id"`
	DispositionID *uuid.UUID `json:"disposition_id,omitempty"`
	OrderRef      string     `json:"order_ref"`
	Commitment    string     `json:"commitment,omitempty"`
	RewrittenAt   time.Time  `json:"rewritten_at"`
}

// RewrittenManifest is a rewritten archive's manifest: an archive manifest
// (read like any) that also names what it supersedes.
type RewrittenManifest struct {
	archive.Manifest
	Supersedes Supersession `json:"supersedes"`
}

// kept is an archive's lines without the subject's, with what its new
// ledger row is computed from.
type kept struct {
	docs    []string
	removed int
	rows    []archive.Row
}

// rewrite removes the subject's rows from one archive: the lines kept are
// written as a new create-only archive (deterministic id and key, so a
// retry finds its own objects), read back and verified, booked with the
// old archive stamped superseded in one transaction, and only then are
// the old objects destroyed. An archive all of whose rows were the
// subject's is stamped superseded by none.
func (o *Orders) rewrite(ctx context.Context, ord *order, old queries.ExpungeArchivesRow) error {
	oldID := uuid.UUID(old.ArchiveID.Bytes)
	spec, ok := o.spec(old.TableName)
	if !ok {
		return fmt.Errorf("archive %s: table %s is not archived by this service", oldID, old.TableName)
	}
	f, err := o.store.GetMatching(ctx, old.DataKey, store.SHA256Matches(old.DataSha256))
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrNoMatchingVersion):
		return &archiveread.CorruptError{ArchiveID: oldID, Key: old.DataKey, Err: err}
	case err != nil:
		return fmt.Errorf("archive %s: read %s: %w", oldID, old.DataKey, err)
	}
	k, err := o.keep(ctx, oldID, spec, ord, f.Data)
	if err != nil {
		return fmt.Errorf("archive %s: %w", oldID, err)
	}
	if k.removed == 0 {
		return nil // the index named it, its lines do not hold the subject: nothing to remove
	}
	var m *RewrittenManifest
	if len(k.docs) > 0 {
		if m, err = o.writeSuccessor(ctx, ord, old, spec, k); err != nil {
			return err
		}
	}
	if err := o.book(ctx, ord, old, m, k); err != nil {
		return err
	}
	failpoint.Inject(failpoint.ExpungeAfterBookCommit)
	return o.destroy(ctx, old.ManifestKey, old.DataKey)
}

// keep splits an archive's lines into those kept and the subject's (a line
// any of whose subjects is the order's), as the table's own expressions
// read them.
func (o *Orders) keep(ctx context.Context, archiveID uuid.UUID, spec archive.TableSpec, ord *order, data []byte) (kept, error) {
	var docs []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, len(data)+1)
	for sc.Scan() {
		docs = append(docs, sc.Text())
	}
	rows, err := o.pool.Query(ctx, archive.DocOrdSubjectsSQL(spec), docs)
	if err != nil {
		return kept{}, fmt.Errorf("subjects of its lines: %w", err)
	}
	type ordSubject struct {
		Ord     int64
		Subject string
	}
	subs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ordSubject])
	if err != nil {
		return kept{}, fmt.Errorf("subjects of its lines: %w", err)
	}
	drop := map[int]bool{}
	for _, s := range subs {
		if p, err := subject.Parse(s.Subject); err == nil && p == ord.subject {
			drop[int(s.Ord)] = true
		}
	}
	if ord.removal != nil { // a batch's lines are those its predicate names
		if drop, err = ord.removal.Drop(ctx, archiveID, spec, docs); err != nil {
			return kept{}, err
		}
	}
	var k kept
	for i, d := range docs {
		if drop[i+1] {
			k.removed++
		} else {
			k.docs = append(k.docs, d)
		}
	}
	if len(k.docs) == 0 {
		return k, nil
	}
	k.rows, err = o.rowsOf(ctx, spec, k.docs)
	return k, err
}

// rowsOf reads the id and age of each kept line (for the new manifest's
// ranges), in the lines' order.
func (o *Orders) rowsOf(ctx context.Context, spec archive.TableSpec, docs []string) ([]archive.Row, error) {
	rows, err := o.pool.Query(ctx, archive.DocIDAgeSQL(spec), docs)
	if err != nil {
		return nil, fmt.Errorf("ids of its lines: %w", err)
	}
	defer rows.Close()
	out := make([]archive.Row, 0, len(docs))
	for rows.Next() {
		var ord int64
		var r archive.Row
		if err := rows.Scan(&ord, &r.ID, &r.At); err != nil {
			return nil, err
		}
		r.Doc = docs[ord-1]
		out = append(out, r)
	}
	return out, rows.Err()
}

// successorID is the rewritten archive's id: the same for every try of one
// order on one archive (a retry finds the objects a crashed try wrote).
func successorID(expungeID, oldID uuid.UUID) uuid.UUID {
	return uuid.NewSHA1(expungeID, oldID[:])
}

// writeSuccessor writes the kept lines and their manifest create-only
// (objects a crashed try left are accepted when they are the same), then
// reads the data back and checks its sha256.
func (o *Orders) writeSuccessor(ctx context.Context, ord *order, old queries.ExpungeArchivesRow, spec archive.TableSpec, k kept) (*RewrittenManifest, error) {
	oldID := uuid.UUID(old.ArchiveID.Bytes)
	m, err := o.oldManifest(ctx, old)
	if err != nil {
		return nil, err
	}
	id := successorID(ord.id, oldID)
	keys, err := store.NewArchiveKeys(o.cfg.Service, spec.Table, old.ArchivedAt.Time, id.String())
	if err != nil {
		return nil, err
	}
	data := archive.EncodeNDJSON(k.rows)
	firstID, lastID, firstAt, lastAt := archive.Range(k.rows)
	m.ArchiveID, m.RecordCount, m.DataKey, m.ManifestKey, m.DataSHA256 = id, len(k.rows), keys.Data, keys.Manifest, archive.SHA256Hex(data)
	m.FirstRecordID, m.LastRecordID, m.FirstRecordAt, m.LastRecordAt = firstID, lastID, firstAt.UTC(), lastAt.UTC()
	m.Supersedes = Supersession{ArchiveID: oldID, OldSHA256: old.DataSha256, NewSHA256: m.DataSHA256, RowsRemoved: k.removed,
		ExpungeID: ord.id, OrderRef: ord.orderRef, Commitment: subject.Hex(ord.commitment), RewrittenAt: ord.at}
	work := intent.WorkExpungement
	if ord.removal != nil {
		work, m.Supersedes.DispositionID = intent.WorkDisposition, &ord.id
	}
	if err := intent.Record(ctx, o.pool, work, ord.id, spec.Table, ord.approver, m.DataKey, m.ManifestKey); err != nil {
		return nil, fmt.Errorf("archive %s: %w", oldID, err) // known before written (ADR-069): the booking clears it
	}
	if err := o.putOnce(ctx, m.DataKey, data, store.ContentTypeNDJSON, m.DataSHA256); err != nil {
		return nil, err
	}
	doc, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := o.putOnce(ctx, m.ManifestKey, doc, store.ContentTypeJSON, ""); err != nil {
		return nil, err
	}
	failpoint.Inject(failpoint.ExpungeAfterPut)
	if _, err := o.store.GetMatching(ctx, m.DataKey, store.SHA256Matches(m.DataSHA256)); err != nil {
		return nil, fmt.Errorf("archive %s: its rewrite %s does not read back as written: %w", oldID, m.DataKey, err)
	}
	return &m, nil
}

// oldManifest is the rewritten archive's manifest as the ledger knows it:
// the newest stored version that names the archive, its data sha256 and
// table (an overwritten manifest is not trusted), with every fact the
// ledger records taken from the ledger; only its columns come from it.
func (o *Orders) oldManifest(ctx context.Context, old queries.ExpungeArchivesRow) (RewrittenManifest, error) {
	oldID := uuid.UUID(old.ArchiveID.Bytes)
	var m RewrittenManifest
	f, err := o.store.GetMatching(ctx, old.ManifestKey, func(b []byte) bool {
		var v archive.Manifest
		return json.Unmarshal(b, &v) == nil && v.ArchiveID == oldID && v.DataSHA256 == old.DataSha256 && v.Table == old.TableName
	})
	if err != nil {
		return m, &archiveread.CorruptError{ArchiveID: oldID, Key: old.ManifestKey, Err: err}
	}
	if err := json.Unmarshal(f.Data, &m.Manifest); err != nil {
		return m, fmt.Errorf("archive %s: its manifest: %w", oldID, err)
	}
	m.Format, m.Service, m.Table = archive.Format, o.cfg.Service, old.TableName
	m.Endpoint, m.Bucket, m.HotWindowDays = old.StoreEndpoint, old.StoreBucket, int(old.HotWindowDays)
	m.ArchivedAt, m.ArchivedBy = old.ArchivedAt.Time.UTC(), old.ArchivedBy
	m.Fingerprint = archive.Fingerprint(m.Columns)
	return m, nil
}

// putOnce puts an object create-only; an object already there is accepted
// when it is a crashed try's (data: the same sha256; a manifest: any, the
// data it names is checked).
func (o *Orders) putOnce(ctx context.Context, key string, data []byte, contentType, sha string) error {
	var err error
	if sha != "" {
		err = o.store.PutCreateSHA256(ctx, key, data, contentType, sha)
	} else {
		err = o.store.PutCreate(ctx, key, data, contentType)
	}
	if errors.Is(err, store.ErrAlreadyExists) && sha != "" {
		_, err = o.store.GetMatching(ctx, key, store.SHA256Matches(sha))
	} else if errors.Is(err, store.ErrAlreadyExists) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

// book books the successor (the service's own bookkeeping: ledger row,
// fleet event), indexes it, carries the holds that named the old archive
// by id over to it, and stamps the old archive superseded, in one
// transaction ordered with hold placements; an archive covered by a hold
// the order does not name stops it (nothing booked).
func (o *Orders) book(ctx context.Context, ord *order, old queries.ExpungeArchivesRow, m *RewrittenManifest, k kept) error {
	oldID := uuid.UUID(old.ArchiveID.Bytes)
	return pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		q := queries.New(tx)
		if err := q.LockHoldsShared(ctx, lease.HoldsKey); err != nil {
			return err
		}
		if err := o.recheck(ctx, tx, ord, oldID); err != nil {
			return err
		}
		lock, err := q.LockLedgerRow(ctx, old.ArchiveID)
		if err != nil || lock.PurgedAt.Valid {
			return err // stamped meanwhile: nothing to do
		}
		var next *uuid.UUID
		if m != nil {
			if err := intent.Clear(ctx, tx, m.DataKey, m.ManifestKey); err != nil {
				return err
			}
			if err := o.bookSuccessor(ctx, tx, lineage{of: oldID, retention: oldID}, m, k); err != nil {
				return err
			}
			next = &m.ArchiveID
		}
		var nextPG = pgUUIDPtr(next)
		n, err := q.SupersedeArchive(ctx, queries.SupersedeArchiveParams{PurgedBy: &ord.approver, ExpungeID: pgUUID(ord.id), SupersededBy: nextPG, ArchiveID: old.ArchiveID})
		if err != nil || n != 1 {
			return fmt.Errorf("stamp %s superseded (%d): %w", oldID, n, err)
		}
		detail := map[string]any{"expunge_id": ord.id, "archive_id": oldID, "superseded_by": next, "old_sha256": old.DataSha256,
			"rows_removed": k.removed, "commitment": subject.Hex(ord.commitment)}
		if m != nil {
			detail["new_sha256"] = m.DataSHA256
		}
		if err := o.logOnly(ctx, tx, ord.approver, "archive_superseded", detail); err != nil {
			return err
		}
		failpoint.Inject(failpoint.ExpungeBeforeBookCommit)
		return nil
	})
}

// recheck re-checks, in a booking's transaction under the holds lock, that
// the order may still remove its lines: no hold it does not name keeps the
// subject (an expungement), or the batch's own re-check (a disposition).
func (o *Orders) recheck(ctx context.Context, tx pgx.Tx, ord *order, archiveID uuid.UUID) error {
	if ord.removal != nil {
		return ord.removal.Recheck(ctx, tx, archiveID)
	}
	_, err := o.affected(ctx, tx, ord.subject, ord.holds)
	return err
}

// lineage is what a successor supersedes, and the booked archive whose
// retention date it keeps: the one it supersedes, or, booked again after a
// restore with that one destroyed since, the one its line descends from.
type lineage struct {
	of, retention uuid.UUID
	// recorded and days: the retention date the journal recorded for the
	// successor (days since 1970-01-01; nil: none), taken when the ledger
	// books no archive of its line.
	recorded bool
	days     *int64
}

// bookSuccessor books the rewritten archive in tx: the ledger row (with
// the retention date of its line), its subject index, the id holds carried
// over, and, when a hold covers it under Object Lock, its objects locked.
func (o *Orders) bookSuccessor(ctx context.Context, tx pgx.Tx, l lineage, m *RewrittenManifest, k kept) error {
	oldID := l.of
	q := queries.New(tx)
	if err := o.cfg.Bookkeep(ctx, tx, m.Manifest, m.ArchivedBy); err != nil {
		return fmt.Errorf("book %s: %w", m.ArchiveID, err)
	}
	var days *int32
	if l.days != nil {
		d := int32(*l.days) // a date's days since 1970: far inside int32
		days = &d
	}
	if n, err := q.MarkSuccessor(ctx, queries.MarkSuccessorParams{Supersedes: pgUUID(oldID), RetentionOf: pgUUID(l.retention),
		RetentionRecorded: l.recorded, RetentionDays: days, ArchiveID: pgUUID(m.ArchiveID)}); err != nil || n != 1 {
		return fmt.Errorf("lineage of %s (%d rows): %w", m.ArchiveID, n, err)
	}
	spec, _ := o.spec(m.Table)
	hashes, err := archive.Hashes(ctx, tx, o.cfg.Key, spec.Table, archive.DocSubjectsSQL(spec), k.docs)
	if err != nil {
		return err
	}
	if _, err := q.AddHoldArchive(ctx, queries.AddHoldArchiveParams{Successor: pgUUID(m.ArchiveID), Predecessor: pgUUID(oldID)}); err != nil {
		return fmt.Errorf("carry holds to %s: %w", m.ArchiveID, err)
	}
	held, err := archive.IndexSubjects(ctx, tx, m.ArchiveID, hashes, true)
	if err != nil {
		return err
	}
	if held.LegalHold && o.cfg.ObjectLock {
		for _, key := range []string{m.DataKey, m.ManifestKey} {
			if err := o.store.SetLegalHold(ctx, key, true); err != nil {
				return fmt.Errorf("lock %s: %w", key, err)
			}
		}
	}
	return nil
}
