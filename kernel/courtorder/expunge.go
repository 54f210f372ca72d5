package courtorder

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/identity"
	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/lease"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/subject"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Expungement statuses.
const (
	StatusAwaitingApproval = "awaiting_approval"
	StatusExecuting        = "executing"
	StatusExecuted         = "executed"
)

// Requested is an expunge request's answer (202): the order to approve and
// the archives that hold the subject now.
type Requested struct {
	ExpungeID uuid.UUID   `json:"expunge_id"`
	Archives  []uuid.UUID `json:"archives"`
	// UnparsedRows are the hot rows of the service's subject tables whose
	// declared subject field holds a digit but yields no subject: the
	// order cannot reach them (archive.Subject.Field).
	UnparsedRows int64 `json:"unparsed_rows"`
}

// Executed is an approval's answer (200). Salt is the order's salt, hex:
// returned by the call that completes the order and never again (it is not
// stored); with the subject it opens the certificate's commitment.
type Executed struct {
	ExpungeID      uuid.UUID `json:"expunge_id"`
	Rewritten      int       `json:"rewritten"`
	RowsRemoved    int64     `json:"rows_removed"`
	CertificateKey string    `json:"certificate_key"`
	Salt           string    `json:"salt,omitempty"`
	Commitment     string    `json:"commitment"`
}

// RequestExpunge records an order to expunge s, awaiting a second
// identity's approval (always: an expungement is never single-handed). It
// is refused (nothing recorded) while archives are not indexed by subject,
// and with a *HeldError when an archive holding s is under a hold the
// order does not name (holds).
func (o *Orders) RequestExpunge(ctx context.Context, s subject.Subject, orderRef, reason string, holds []uuid.UUID, actor string) (Requested, error) {
	if err := o.checkExpunge(ctx, orderRef, reason, holds); err != nil {
		return Requested{}, err
	}
	if err := o.cfg.Journal.Check(ctx); err != nil {
		return Requested{}, err
	}
	hash := o.cfg.Key.Hash(s)
	pending, err := queries.New(o.pool).PendingExpungement(ctx, hash)
	switch {
	case err == nil:
		return Requested{}, &PendingError{ExpungeID: pending.Bytes}
	case !errors.Is(err, pgx.ErrNoRows):
		return Requested{}, fmt.Errorf("pending orders: %w", err)
	}
	sealed, err := queries.New(o.pool).SubjectIsSealed(ctx, hash)
	if err != nil {
		return Requested{}, fmt.Errorf("seal of the subject: %w", err)
	}
	archives, err := o.affected(ctx, o.pool, s, holds)
	var held *HeldError
	if errors.As(err, &held) && sealed {
		held.Archives = []uuid.UUID{} // a sealed subject's archives are not named (ADR-067)
	}
	if err != nil {
		return Requested{}, err
	}
	box, err := o.cfg.Key.Box([]byte(s.String()))
	if err != nil {
		return Requested{}, err
	}
	unparsed, err := o.unparsed(ctx)
	if err != nil {
		return Requested{}, err
	}
	req := Requested{ExpungeID: uuid.Must(uuid.NewV7()), Archives: archiveIDs(archives), UnparsedRows: unparsed}
	err = pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		if err := queries.New(tx).InsertExpungement(ctx, queries.InsertExpungementParams{ExpungeID: pgUUID(req.ExpungeID), SubjectHash: hash,
			SubjectBox: box, OrderRef: orderRef, Reason: reason, Holds: pgUUIDs(holds), Archives: pgUUIDs(req.Archives), RequestedBy: actor}); err != nil {
			return fmt.Errorf("record the expungement: %w", err)
		}
		return o.logOnly(ctx, tx, actor, "subject_expunge_requested", map[string]any{"expunge_id": req.ExpungeID, "order_ref": orderRef,
			"reason": reason, "holds": nonNil(holds), "archives": req.Archives, "subject_hash": subject.Hex(hash)})
	})
	if sealed {
		req.Archives = []uuid.UUID{} // recorded, not answered: a sealed subject answers as an unknown one
	}
	return req, err
}

func (o *Orders) checkExpunge(ctx context.Context, orderRef, reason string, holds []uuid.UUID) error {
	if err := o.checkOrder(orderRef, reason); err != nil {
		return err
	}
	if o.store == nil {
		return ErrNoStore
	}
	if len(holds) > MaxNamedHolds {
		return fmt.Errorf("%w: %d holds named, at most %d", ErrInvalid, len(holds), MaxNamedHolds)
	}
	q := queries.New(o.pool)
	active, err := q.ActiveHoldsAmong(ctx, pgUUIDs(holds))
	if err != nil {
		return fmt.Errorf("named holds: %w", err)
	}
	for _, h := range holds {
		if !slices.Contains(uuids(active), h) {
			return fmt.Errorf("%w: hold %s is not an active hold of this service", ErrInvalid, h)
		}
	}
	n, err := q.CountUnindexed(ctx, o.subjectTables())
	if err != nil {
		return fmt.Errorf("unindexed archives: %w", err)
	}
	if n > 0 {
		return fmt.Errorf("%w: %d archive(s); run `%s archive index-subjects` first", ErrNotIndexed, n, o.cfg.Service)
	}
	return nil
}

// unparsed counts the hot rows of the order's tables whose declared subject
// field holds a digit but yields no subject: the order cannot reach them,
// and the requester is told how many there are.
func (o *Orders) unparsed(ctx context.Context) (int64, error) {
	var total int64
	for _, spec := range o.subjectSpecs() {
		q := archive.UnparsedSQL(spec)
		if q == "" {
			continue
		}
		var n int64
		if err := o.pool.QueryRow(ctx, q).Scan(&n); err != nil {
			return 0, fmt.Errorf("unparsed subjects of %s: %w", spec.Table, archive.RedactRowValues(err))
		}
		total += n
	}
	return total, nil
}

// affected lists the unpurged archives the index says hold s; a
// *HeldError when a hold the order does not name (holds) keeps anything of
// s: an archive of it, s itself (a subject hold), or a hot row of it (a
// table hold over the row's age).
func (o *Orders) affected(ctx context.Context, db prune.DB, s subject.Subject, holds []uuid.UUID) ([]queries.ExpungeArchivesRow, error) {
	q := queries.New(db)
	hash := o.cfg.Key.Hash(s)
	rows, err := q.ExpungeArchives(ctx, queries.ExpungeArchivesParams{SubjectHash: hash, Tables: o.subjectTables(), NamedHolds: pgUUIDs(holds)})
	if err != nil {
		return nil, fmt.Errorf("archives of the subject: %w", err)
	}
	var held HeldError
	addHolds := func(ids []uuid.UUID) {
		for _, h := range ids {
			if !slices.Contains(held.Holds, h) {
				held.Holds = append(held.Holds, h)
			}
		}
	}
	for _, r := range rows {
		if len(r.BlockingHolds) > 0 {
			held.Archives = append(held.Archives, r.ArchiveID.Bytes)
			addHolds(uuids(r.BlockingHolds))
		}
	}
	hashes, err := o.hotSubjects(ctx, db, s)
	if err != nil {
		return nil, err
	}
	subj, err := q.SubjectHoldsOf(ctx, queries.SubjectHoldsOfParams{SubjectHashes: append(hashes, hash), NamedHolds: pgUUIDs(holds)})
	if err != nil {
		return nil, fmt.Errorf("holds of the subject: %w", err)
	}
	addHolds(uuids(subj))
	hot, err := o.hotHolds(ctx, db, s, holds)
	if err != nil {
		return nil, err
	}
	addHolds(hot)
	if len(held.Holds) > 0 {
		if held.Archives == nil {
			held.Archives = []uuid.UUID{}
		}
		return nil, &held
	}
	return rows, nil
}

// hotSubjects are the keyed hashes of every subject of s's hot rows (a
// row about s and another subject: a hold on the other keeps the row).
func (o *Orders) hotSubjects(ctx context.Context, db prune.DB, s subject.Subject) ([][]byte, error) {
	var out [][]byte
	for _, spec := range o.subjectSpecs() {
		hs, err := archive.Hashes(ctx, db, o.cfg.Key, spec.Table, archive.SubjectRowsSubjectsSQL(spec), s.String())
		if err != nil {
			return nil, err
		}
		out = append(out, hs...)
	}
	return out, nil
}

// hotHolds are the active table holds, other than holds, whose period
// covers a hot row of s (a table hold keeps the table's rows of its
// period, archived or not yet). The table and its age column are the
// service's own spec, quoted: never input.
func (o *Orders) hotHolds(ctx context.Context, db prune.DB, s subject.Subject, holds []uuid.UUID) ([]uuid.UUID, error) {
	var out []uuid.UUID
	for _, spec := range o.subjectSpecs() {
		age := "t." + pgx.Identifier{spec.AgeColumn}.Sanitize()
		rows, err := db.Query(ctx, `SELECT h.id FROM archive_holds AS h
			WHERE h.released_at IS NULL AND h.table_name = $2 AND NOT (h.id = ANY ($3::uuid[]))
			  AND EXISTS (SELECT 1 FROM `+pgx.Identifier{spec.Table}.Sanitize()+` AS t WHERE `+archive.SubjectMatch(spec, 1)+`
			              AND (h.from_at IS NULL OR `+age+` >= h.from_at) AND (h.to_at IS NULL OR `+age+` < h.to_at))
			ORDER BY h.id`, s.String(), spec.Table, pgUUIDs(holds))
		if err != nil {
			return nil, fmt.Errorf("holds over the hot rows of %s: %w", spec.Table, archive.RedactRowValues(err))
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			return nil, fmt.Errorf("holds over the hot rows of %s: %w", spec.Table, archive.RedactRowValues(err))
		}
		out = append(out, ids...)
	}
	return out, nil
}

func archiveIDs(rows []queries.ExpungeArchivesRow) []uuid.UUID {
	out := []uuid.UUID{}
	for _, r := range rows {
		out = append(out, r.ArchiveID.Bytes)
	}
	return out
}

func nonNil(ids []uuid.UUID) []uuid.UUID {
	if ids == nil {
		return []uuid.UUID{}
	}
	return ids
}

// order is an expungement being executed: what its steps need.
type order struct {
	id         uuid.UUID
	subject    subject.Subject
	hash       []byte
	salt       []byte
	commitment []byte
	orderRef   string
	holds      []uuid.UUID
	requester  string
	approver   string
	at         time.Time
	// removal: a disposition batch's rewrite (nil: an expungement's).
	removal *Removal
}

// Approve executes an expungement as approver (another identity than its
// requester), under the archive lease: every archive that holds the
// subject is rewritten without its rows, the hot rows are deleted, the
// subject's keyed hash is replaced by the order's commitment, and the
// certificate is written. An order that stopped part way (a crash, a
// store that failed) is finished by the next call; a completed order's
// call changes nothing and answers its outcome without the salt.
func (o *Orders) Approve(ctx context.Context, id uuid.UUID, approver string) (Executed, error) {
	var res Executed
	if err := o.cfg.Journal.Check(ctx); err != nil {
		return res, err
	}
	acquired, err := lease.TryRun(ctx, o.pool, o.cfg.LockKey, func(ctx context.Context, _ *pgx.Conn) error {
		ord, done, err := o.start(ctx, id, approver)
		if err != nil || done != nil {
			if done != nil {
				res = *done
			}
			return err
		}
		res, err = o.execute(ctx, ord)
		return err
	})
	if err == nil && !acquired {
		return res, ErrAlreadyRunning
	}
	return res, err
}

// start reads the order and, when it awaits approval, records the approver,
// the sealed salt and the commitment (from then on it resumes): the order
// to execute, or the outcome of one already executed.
func (o *Orders) start(ctx context.Context, id uuid.UUID, approver string) (*order, *Executed, error) {
	if !o.cfg.Key.Valid() {
		return nil, nil, ErrNoSubjectKey
	}
	if o.store == nil {
		return nil, nil, ErrNoStore
	}
	var ord *order
	var done *Executed
	err := pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		q := queries.New(tx)
		row, err := q.GetExpungement(ctx, pgUUID(id))
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("%w: %s", ErrNotFound, id)
		case err != nil:
			return fmt.Errorf("read expungement %s: %w", id, err)
		case identity.Same(row.RequestedBy, approver):
			return fmt.Errorf("%w: %s requested %s", ErrSelfApproval, approver, id)
		case row.Status == StatusExecuted:
			done = &Executed{ExpungeID: id, Rewritten: int(deref(row.Rewritten)), RowsRemoved: deref(row.RowsRemoved),
				CertificateKey: derefS(row.CertificateKey), Commitment: subject.Hex(row.Commitment)}
			return nil
		}
		ord, err = o.open(row)
		if err != nil || row.Status == StatusExecuting {
			return err
		}
		return o.approveOrder(ctx, tx, ord, approver, holdsAllow(ctx, o, tx, ord))
	})
	return ord, done, err
}

// holdsAllow re-checks, at approval, that no hold the order does not name
// keeps anything of the subject (nothing is recorded when one does).
func holdsAllow(ctx context.Context, o *Orders, tx pgx.Tx, ord *order) error {
	_, err := o.affected(ctx, tx, ord.subject, ord.holds)
	return err
}

// approveOrder records the approval: a new salt (sealed), the commitment.
func (o *Orders) approveOrder(ctx context.Context, tx pgx.Tx, ord *order, approver string, holdErr error) error {
	if holdErr != nil {
		return holdErr
	}
	salt, err := subject.NewSalt()
	if err != nil {
		return err
	}
	box, err := o.cfg.Key.Box(salt)
	if err != nil {
		return err
	}
	ord.salt, ord.commitment, ord.approver = salt, subject.Commitment(salt, ord.subject), approver
	n, err := queries.New(tx).StartExpungement(ctx, queries.StartExpungementParams{ApprovedBy: &approver, SaltBox: box, Commitment: ord.commitment, ExpungeID: pgUUID(ord.id)})
	if err != nil || n != 1 {
		return fmt.Errorf("approve expungement %s (%d): %w", ord.id, n, err)
	}
	return o.logOnly(ctx, tx, approver, "subject_expunge_approved", map[string]any{"expunge_id": ord.id, "order_ref": ord.orderRef})
}

// open reads a pending order's sealed subject (and salt, once approved).
func (o *Orders) open(row queries.GetExpungementRow) (*order, error) {
	plain, err := o.cfg.Key.Unbox(row.SubjectBox)
	if err != nil {
		return nil, fmt.Errorf("expungement %s: its subject: %w", uuid.UUID(row.ExpungeID.Bytes), err)
	}
	s, err := subject.Parse(string(plain))
	if err != nil {
		return nil, fmt.Errorf("expungement %s: its subject: %w", uuid.UUID(row.ExpungeID.Bytes), err)
	}
	ord := &order{id: row.ExpungeID.Bytes, subject: s, hash: row.SubjectHash, orderRef: row.OrderRef, holds: uuids(row.Holds),
		requester: row.RequestedBy, approver: derefS(row.ApprovedBy), at: o.now().UTC(), commitment: row.Commitment}
	if row.SaltBox != nil {
		if ord.salt, err = o.cfg.Key.Unbox(row.SaltBox); err != nil {
			return nil, fmt.Errorf("expungement %s: its salt: %w", ord.id, err)
		}
	}
	return ord, nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func derefS(p *string) string { return deref(p) }

// logOnly logs an act of an order in archive_lifecycle_log (no event).
func (o *Orders) logOnly(ctx context.Context, tx pgx.Tx, actor, action string, detail map[string]any) error {
	detail["actor"], detail["at"] = actor, o.now().UTC().Format(time.RFC3339Nano)
	doc, err := marshal(detail)
	if err != nil {
		return err
	}
	if err := queries.New(tx).LogLifecycle(ctx, queries.LogLifecycleParams{Actor: actor, Action: action, Detail: doc}); err != nil {
		return fmt.Errorf("log %s: %w", action, err)
	}
	return nil
}
