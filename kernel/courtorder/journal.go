package courtorder

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/journal"
	"github.com/craig/retention/kernel/lease"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/kernel/subject"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// sealEntry is a seal or an unseal as the journal keeps it (ADR-070): the
// subject's keyed hash, never the subject; the reason stays local.
type sealEntry struct {
	SubjectHash string `json:"subject_hash"`
	OrderRef    string `json:"order_ref"`
}

// expungeEntry is an executed expungement as the journal keeps it: what a
// reconcile needs to carry it out again on a restored database. The
// subject is sealed under the subject key (a database restored from before
// the order has nothing else to find its hot rows by).
type expungeEntry struct {
	ExpungeID   uuid.UUID           `json:"expunge_id"`
	OrderRef    string              `json:"order_ref"`
	RequestedBy string              `json:"requested_by"`
	Commitment  string              `json:"commitment"`
	Subject     []byte              `json:"subject"`
	Archives    []SupersededArchive `json:"archives"`
}

// SupersededArchive is one archive an act (an expungement, a disposition
// batch) superseded, as its journal entry records it.
type SupersededArchive struct {
	ArchiveID            uuid.UUID  `json:"archive_id"`
	Table                string     `json:"table"`
	DataKey              string     `json:"data_key"`
	ManifestKey          string     `json:"manifest_key"`
	SuccessorID          *uuid.UUID `json:"successor_id"`
	SuccessorManifestKey *string    `json:"successor_manifest_key"`
	// Retention is the superseded archive's retention date, which its
	// successor inherits (nil in entries written before it was recorded).
	Retention *retentionRecord `json:"retention,omitempty"`
}

// secondsPerDay converts a date (midnight UTC) to days since 1970-01-01.
const secondsPerDay = 86400

// retentionRecord is a retention date as days since 1970-01-01 (no date
// makes a round trip through text); UntilDays nil: none.
type retentionRecord struct {
	UntilDays *int64 `json:"until_days"`
}

// journal appends an act to the journal in tx (nothing without one).
func (o *Orders) journal(ctx context.Context, tx pgx.Tx, act journal.Act, detail any, actor string) error {
	if o.cfg.Journal == nil {
		return nil
	}
	return journal.Append(ctx, tx, act, detail, actor)
}

// journalExpunge appends an executed order to the journal in tx.
func (o *Orders) journalExpunge(ctx context.Context, tx pgx.Tx, ord *order, lineage []queries.ExpungementLineageRow) error {
	if o.cfg.Journal == nil {
		return nil
	}
	box, err := o.cfg.Key.Box([]byte(ord.subject.String()))
	if err != nil {
		return err
	}
	e := expungeEntry{ExpungeID: ord.id, OrderRef: ord.orderRef, RequestedBy: ord.requester, Commitment: subject.Hex(ord.commitment),
		Subject: box, Archives: JournalLineage(lineage)}
	return journal.Append(ctx, tx, journal.ActExpunge, e, ord.approver)
}

// JournalLineage is an act's lineage as its journal entry records it.
func JournalLineage(lineage []queries.ExpungementLineageRow) []SupersededArchive {
	out := []SupersededArchive{}
	for _, l := range lineage {
		a := SupersededArchive{ArchiveID: l.ArchiveID.Bytes, Table: l.TableName, DataKey: l.DataKey, ManifestKey: l.ManifestKey,
			SuccessorManifestKey: l.NewManifestKey, Retention: &retentionRecord{}}
		if l.RetentionUntil.Valid {
			days := l.RetentionUntil.Time.Unix() / secondsPerDay
			a.Retention.UntilDays = &days
		}
		if l.NewArchiveID.Valid {
			id := uuid.UUID(l.NewArchiveID.Bytes)
			a.SuccessorID = &id
		}
		out = append(out, a)
	}
	return out
}

// Reapply re-applies a journaled seal, unseal or expungement that a
// database restore forgot, and adopts the entry; an entry already applied
// changes nothing. An expungement is carried out again: each successor the
// restored ledger lacks is booked again from its objects, each superseded
// archive stamped again and its objects destroyed again, the subject's hot
// rows deleted again and its keyed hash replaced by the commitment again.
// forgotten is what the entries the database lacks destroyed and wrote: a
// successor one of them destroyed since is not booked (its holds are
// carried to its id, so its own successor inherits them), and a successor
// booked again takes its retention from the archive its line descends
// from that the ledger books.
func (o *Orders) Reapply(ctx context.Context, e journal.Entry, forgotten journal.Forgotten) error {
	switch e.Act {
	case journal.ActSeal, journal.ActUnseal:
		var s sealEntry
		if err := json.Unmarshal(e.Detail, &s); err != nil {
			return fmt.Errorf("journal entry %d: %w", e.Seq, err)
		}
		hash, err := hex.DecodeString(s.SubjectHash)
		if err != nil {
			return fmt.Errorf("journal entry %d: %w", e.Seq, err)
		}
		return pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
			q := queries.New(tx)
			if e.Act == journal.ActSeal {
				_, err = q.SealSubject(ctx, queries.SealSubjectParams{SubjectHash: hash, OrderRef: s.OrderRef,
					Reason: fmt.Sprintf("restored from the store journal (entry %d)", e.Seq), SealedBy: e.Actor})
			} else {
				_, err = q.UnsealSubject(ctx, hash)
			}
			if err != nil {
				return fmt.Errorf("journal entry %d (%s): %w", e.Seq, e.Act, err)
			}
			return journal.Adopt(ctx, tx, e)
		})
	case journal.ActExpunge:
		var x expungeEntry
		if err := json.Unmarshal(e.Detail, &x); err != nil {
			return fmt.Errorf("journal entry %d: %w", e.Seq, err)
		}
		return o.reapplyExpunge(ctx, e, x, forgotten)
	}
	return fmt.Errorf("journal entry %d: %s is not a court order", e.Seq, e.Act)
}

// reapplyExpunge carries out a journaled expungement again.
func (o *Orders) reapplyExpunge(ctx context.Context, e journal.Entry, x expungeEntry, forgotten journal.Forgotten) error {
	if !o.cfg.Key.Valid() || o.store == nil {
		return fmt.Errorf("journal entry %d: an expungement is re-applied with the subject key and the store", e.Seq)
	}
	plain, err := o.cfg.Key.Unbox(x.Subject)
	if err != nil {
		return fmt.Errorf("journal entry %d: open the subject (the key it was sealed under?): %w", e.Seq, err)
	}
	s, err := subject.Parse(string(plain))
	if err != nil {
		return fmt.Errorf("journal entry %d: %w", e.Seq, err)
	}
	commitment, err := hex.DecodeString(x.Commitment)
	if err != nil {
		return fmt.Errorf("journal entry %d: %w", e.Seq, err)
	}
	ord := &order{id: x.ExpungeID, subject: s, hash: o.cfg.Key.Hash(s), commitment: commitment, orderRef: x.OrderRef,
		requester: x.RequestedBy, approver: e.Actor, at: e.Time()}
	return o.ReapplyLineage(ctx, e, x.ExpungeID, x.Archives, forgotten, func(ctx context.Context, tx pgx.Tx) error {
		q := queries.New(tx)
		at := pgtype.Timestamptz{Time: e.Time(), Valid: true}
		for _, spec := range o.subjectSpecs() {
			if _, err := tx.Exec(ctx, "DELETE FROM "+pgx.Identifier{spec.Table}.Sanitize()+" AS t WHERE "+archive.SubjectMatch(spec, 1), s.String()); err != nil {
				return fmt.Errorf("expunge hot rows of %s again: %w", spec.Table, archive.RedactRowValues(err))
			}
		}
		if err := o.replaceHash(ctx, tx, ord); err != nil {
			return err
		}
		ids := make([]uuid.UUID, 0, len(x.Archives))
		for _, a := range x.Archives {
			ids = append(ids, a.ArchiveID)
		}
		if err := q.ReapplyExpungement(ctx, queries.ReapplyExpungementParams{ExpungeID: pgUUID(x.ExpungeID), Commitment: commitment, OrderRef: x.OrderRef,
			Reason: fmt.Sprintf("restored from the store journal (entry %d)", e.Seq), Archives: pgUUIDs(ids), RequestedBy: x.RequestedBy,
			ApprovedBy: &e.Actor, ExecutedAt: at}); err != nil {
			return fmt.Errorf("record expungement %s: %w", x.ExpungeID, err)
		}
		return nil
	})
}

// ReapplyLineage re-applies a journaled act's lineage (entry e, act id):
// each successor the restored ledger lacks is booked again from its
// objects, the superseded archives' objects destroyed again, and, in one
// transaction under the holds lock, each superseded archive stamped again
// (its holds carried to a successor a later act destroyed), then more
// run, then the entry adopted.
func (o *Orders) ReapplyLineage(ctx context.Context, e journal.Entry, id uuid.UUID, archives []SupersededArchive, forgotten journal.Forgotten,
	more func(ctx context.Context, tx pgx.Tx) error) error {
	destroyedSince, err := o.rebookAll(ctx, e, archives, forgotten)
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		q := queries.New(tx)
		if err := q.LockHoldsShared(ctx, lease.HoldsKey); err != nil {
			return err
		}
		at := pgtype.Timestamptz{Time: e.Time(), Valid: true}
		for _, a := range archives {
			if _, err := q.ReapplySuperseded(ctx, queries.ReapplySupersededParams{PurgedAt: at, PurgedBy: &e.Actor, ExpungeID: pgUUID(id),
				SupersededBy: pgUUIDPtr(a.SuccessorID), ArchiveID: pgUUID(a.ArchiveID)}); err != nil {
				return fmt.Errorf("stamp %s superseded: %w", a.ArchiveID, err)
			}
		}
		for _, a := range destroyedSince {
			if _, err := q.AddHoldArchive(ctx, queries.AddHoldArchiveParams{Successor: pgUUID(*a.SuccessorID), Predecessor: pgUUID(a.ArchiveID)}); err != nil {
				return fmt.Errorf("carry holds to %s: %w", *a.SuccessorID, err)
			}
		}
		if err := more(ctx, tx); err != nil {
			return err
		}
		return journal.Adopt(ctx, tx, e)
	})
}

// rebookAll books each successor of archives the restored ledger lacks again and
// destroys the superseded archives' objects again; it returns the archives
// whose successor a later act destroyed (their holds are carried to its id).
func (o *Orders) rebookAll(ctx context.Context, e journal.Entry, archives []SupersededArchive, forgotten journal.Forgotten) ([]SupersededArchive, error) {
	var destroyedSince []SupersededArchive
	for _, a := range archives {
		gone, err := o.rebookSuccessor(ctx, a, forgotten)
		if err != nil {
			return nil, fmt.Errorf("journal entry %d: %w", e.Seq, err)
		}
		if gone {
			destroyedSince = append(destroyedSince, a)
		}
		if err := o.destroy(ctx, a.ManifestKey, a.DataKey); err != nil {
			return nil, fmt.Errorf("journal entry %d: %w", e.Seq, err)
		}
	}
	return destroyedSince, nil
}

// rebookSuccessor books an expungement's successor again when the
// restored ledger lacks it: its manifest and data read from the store
// (the data checked against the manifest's sha256), booked like the
// rewrite booked it. Without it the successor's rows (other subjects')
// would be an orphan no ledger row names. It reports gone when a later
// forgotten act destroyed the successor (it is not booked).
func (o *Orders) rebookSuccessor(ctx context.Context, a SupersededArchive, forgotten journal.Forgotten) (gone bool, err error) {
	if a.SuccessorID == nil || a.SuccessorManifestKey == nil {
		return false, nil
	}
	q := queries.New(o.pool)
	has, err := q.LedgerHas(ctx, pgUUID(*a.SuccessorID))
	if err != nil || has {
		return false, err
	}
	known := func(id uuid.UUID) (bool, error) { return q.LedgerHas(ctx, pgUUID(id)) }
	journaled := func(id uuid.UUID) (bool, error) { // booked, or superseded by a journaled order
		has, err := known(id)
		return has || forgotten.Superseded[id], err
	}
	f, err := o.store.GetMatching(ctx, *a.SuccessorManifestKey, func(b []byte) bool {
		var m RewrittenManifest
		return json.Unmarshal(b, &m) == nil && m.ArchiveID == *a.SuccessorID
	})
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrNoMatchingVersion) {
		if forgotten.Destroyed[*a.SuccessorManifestKey] {
			return true, nil // a later act the restore forgot destroyed it (it rewrote or purged it)
		}
		// Gone: destroyed as a copy of rows hot again (an archive booked
		// after the backup), which only an archive whose line neither the
		// restored ledger nor the journal knows can be.
		if _, ok, kerr := forgotten.Ancestor(a.ArchiveID, journaled); kerr != nil || !ok {
			return false, kerr
		}
	}
	if err != nil {
		return false, fmt.Errorf("successor %s: its manifest: %w", *a.SuccessorID, err)
	}
	var m RewrittenManifest
	if err := json.Unmarshal(f.Data, &m); err != nil {
		return false, fmt.Errorf("successor %s: its manifest: %w", *a.SuccessorID, err)
	}
	k, err := o.successorDocs(ctx, m)
	if err != nil {
		return false, fmt.Errorf("successor %s: its data: %w", *a.SuccessorID, err)
	}
	if _, ok := o.spec(m.Table); !ok {
		return false, errors.New("successor " + a.SuccessorID.String() + ": table " + m.Table + " is not archived by this service")
	}
	root, _, err := forgotten.Ancestor(a.ArchiveID, known)
	if err != nil {
		return false, err
	}
	l := lineage{of: a.ArchiveID, retention: root}
	if days, ok := forgotten.Retention[*a.SuccessorID]; ok {
		l.recorded, l.days = true, days
	}
	return false, pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		q := queries.New(tx)
		if err := q.LockHoldsShared(ctx, lease.HoldsKey); err != nil {
			return err
		}
		// An intent a backup taken mid-order brought back: the objects are
		// booked now, never an orphan's.
		if _, err := q.ClearUploadIntents(ctx, []string{m.DataKey, m.ManifestKey}); err != nil {
			return err
		}
		return o.bookSuccessor(ctx, tx, l, &m, k)
	})
}

// successorDocs reads a successor's data (checked against its manifest's
// sha256) as its lines.
func (o *Orders) successorDocs(ctx context.Context, m RewrittenManifest) (kept, error) {
	var k kept
	d, err := o.store.GetMatching(ctx, m.DataKey, store.SHA256Matches(m.DataSHA256))
	if err != nil {
		return k, err
	}
	sc := bufio.NewScanner(bytes.NewReader(d.Data))
	sc.Buffer(nil, len(d.Data)+1)
	for sc.Scan() {
		k.docs = append(k.docs, sc.Text())
	}
	return k, sc.Err()
}
