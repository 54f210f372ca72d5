package disposition

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/courtorder"
	"github.com/craig/retention/kernel/failpoint"
	"github.com/craig/retention/kernel/identity"
	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/journal"
	"github.com/craig/retention/kernel/lease"
	"github.com/craig/retention/kernel/store"
)

// Refusals of an approval.
var (
	// ErrSelfApproval: the batch's proposer cannot approve it.
	ErrSelfApproval = errors.New("disposition: a batch is approved by another identity than its proposer")
	// ErrBusy: another call holds the archive lease (an archive pass, an
	// order, another batch); call again.
	ErrBusy = errors.New("disposition: the archive lease is held by other work; approve again")
	// ErrNoExecution: the service executes no batch (no store).
	ErrNoExecution = errors.New("disposition: this service has no archive store to execute a batch with")
	// errChanged: a hold, a clock, an extension or the schedule changed
	// while a batch executed: what is due is computed again.
	errChanged = errors.New("disposition: the holds, clocks, extensions or schedule changed while the batch executed")
)

// Execution is what a finder needs to execute approved batches.
type Execution struct {
	// Service names the certificate's key segment and the events.
	Service string
	// Orders rewrites the archives (a court order's rewrite, ADR-072) and
	// announces the acts.
	Orders *courtorder.Orders
	// Store holds the certificates.
	Store *store.Store
	// Index indexes the case rows of every archive not yet indexed and
	// returns how many are left (a batch's cases in one are not due).
	Index func(ctx context.Context) (left int64, err error)
	// Journal: an approval is refused while the database is behind the
	// store's journal (nil: none).
	Journal *journal.Journal
	// LockKey is the archive lease (0: lease.ArchiveKey).
	LockKey int64
	// Executed counts the rows destroyed by table and item
	// (retention_disposition_executed_rows_total); nil: not counted.
	Executed *prometheus.CounterVec
}

// WithExecution lets f execute approved batches.
func (f *Finder) WithExecution(x Execution) *Finder {
	if x.LockKey == 0 {
		x.LockKey = lease.ArchiveKey
	}
	f.exec = &x
	return f
}

// Executed is the outcome of an approval.
type Executed struct {
	DispositionID     uuid.UUID `json:"disposition_id"`
	Status            string    `json:"status"`
	RowsDestroyed     int64     `json:"rows_destroyed"`
	ArchivesRewritten int       `json:"archives_rewritten"`
	ArchivesPurged    int       `json:"archives_purged"`
	CasesDestroyed    int       `json:"cases_destroyed"`
	// CasesPartial are the cases some rows of which were destroyed before
	// they stopped being due (counted in CasesSkipped too).
	CasesPartial   int    `json:"cases_partial"`
	CasesSkipped   int    `json:"cases_skipped"`
	CertificateKey string `json:"certificate_key"`
}

// maxReplans bounds how often one call computes what is due again when a
// hold, a clock or the schedule changes under it; then it stops and the
// next call goes on.
const maxReplans = 3

// Approve executes a proposed batch as approver (another identity than
// its proposer), under the archive lease (ADR-073): each archive holding a
// due row of its cases is rewritten once without them (purged whole when
// every row is due), the hot rows are deleted, the certificate is written
// create-only and the batch is announced. What is due is computed again
// at execution under the schedule in force: a case no longer due (a
// hold, a reopening, an extension) is skipped and reported, not an error
// for the rest. A batch that stopped part way is finished by the next
// call; an executed batch's call changes nothing and answers its outcome.
func (f *Finder) Approve(ctx context.Context, id uuid.UUID, approver string) (Executed, error) {
	x := f.exec
	if x == nil || x.Orders == nil || x.Store == nil {
		return Executed{}, ErrNoExecution
	}
	if err := x.Journal.Check(ctx); err != nil {
		return Executed{}, err
	}
	var res Executed
	acquired, err := lease.TryRun(ctx, f.pool, x.LockKey, func(ctx context.Context, _ *pgx.Conn) error {
		b, done, err := f.start(ctx, id, approver)
		if err != nil || done != nil {
			if done != nil {
				res = *done
			}
			return err
		}
		res, err = f.execute(ctx, b)
		return err
	})
	if err == nil && !acquired {
		return res, ErrBusy
	}
	return res, err
}

// batchRun is a batch being executed.
type batchRun struct {
	d     queries.Disposition
	cases []queries.DispositionCase
	// approver is the identity the execution is attributed to.
	approver string
}

// start reads the batch and, when proposed, records its approval (from
// then on every call finishes it): the batch to execute, or the outcome
// of one executed.
func (f *Finder) start(ctx context.Context, id uuid.UUID, approver string) (*batchRun, *Executed, error) {
	var run *batchRun
	var done *Executed
	err := pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		q := queries.New(tx)
		if err := q.LockDispositions(ctx, lease.DispositionKey); err != nil {
			return err
		}
		d, err := q.GetDisposition(ctx, pgUUID(id))
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("%w: %s", ErrNotFound, id)
		case err != nil:
			return fmt.Errorf("batch %s: %w", id, err)
		case identity.Same(d.ProposedBy, approver):
			return fmt.Errorf("%w: %s proposed %s", ErrSelfApproval, approver, id)
		case d.Status == StatusExecuted:
			cases, err := q.DispositionCases(ctx, pgUUID(id))
			if err != nil {
				return fmt.Errorf("batch %s: %w", id, err)
			}
			done = executedOf(d, cases)
			return nil
		case d.Status == StatusRejected:
			return fmt.Errorf("%w: %s was rejected", ErrNotAwaiting, id)
		case d.Status == StatusProposed:
			v, err := f.schedules.InForce(ctx)
			if err != nil {
				return err
			}
			if v == nil || v.Version != d.ScheduleVersion {
				return fmt.Errorf("%w: batch %s was frozen under version %s; reject it and freeze again", ErrScheduleChanged, id, d.ScheduleVersion)
			}
			if n, err := q.StartDisposition(ctx, queries.StartDispositionParams{ApprovedBy: &approver, DispositionID: pgUUID(id)}); err != nil || n != 1 {
				return fmt.Errorf("approve %s (%d): %w", id, n, err)
			}
			if err := logAct(ctx, q, approver, "disposition_approved", map[string]any{"disposition_id": id, "schedule_version": d.ScheduleVersion}); err != nil {
				return err
			}
			if d, err = q.GetDisposition(ctx, pgUUID(id)); err != nil { // its approval as recorded
				return fmt.Errorf("batch %s: %w", id, err)
			}
		}
		cases, err := q.DispositionCases(ctx, pgUUID(id))
		if err != nil {
			return fmt.Errorf("batch %s: %w", id, err)
		}
		run = &batchRun{d: d, cases: cases, approver: *d.ApprovedBy}
		return nil
	})
	return run, done, err
}

// executedOf is an executed batch's outcome as recorded.
func executedOf(d queries.Disposition, cases []queries.DispositionCase) *Executed {
	e := &Executed{DispositionID: d.DispositionID.Bytes, Status: d.Status, RowsDestroyed: deref(d.RowsDestroyed),
		ArchivesRewritten: int(deref(d.ArchivesRewritten)), ArchivesPurged: int(deref(d.ArchivesPurged)), CertificateKey: deref(d.CertificateKey)}
	for _, c := range cases {
		e.count(deref(c.Outcome))
	}
	return e
}

// count adds a case of outcome to the outcome's counts.
func (e *Executed) count(outcome string) {
	switch outcome {
	case outcomeDestroyed:
		e.CasesDestroyed++
	case outcomePartial:
		e.CasesPartial++
		e.CasesSkipped++
	default:
		e.CasesSkipped++
	}
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// execute carries out an approved batch, each step idempotent.
func (f *Finder) execute(ctx context.Context, run *batchRun) (Executed, error) {
	x := f.exec
	id := uuid.UUID(run.d.DispositionID.Bytes)
	if err := f.rewriteAll(ctx, run); err != nil {
		return Executed{}, err
	}
	final, err := f.deleteHot(ctx, run)
	if err != nil {
		return Executed{}, err
	}
	lineage, err := x.Orders.DestroySuperseded(ctx, id, run.approver)
	if err != nil {
		return Executed{}, err
	}
	cases, err := queries.New(f.pool).DispositionCases(ctx, pgUUID(id))
	if err != nil {
		return Executed{}, fmt.Errorf("batch %s: %w", id, err)
	}
	run.cases = cases
	cert := f.certificate(run, final, lineage)
	key, err := f.certify(ctx, id, cert)
	if err != nil {
		return Executed{}, err
	}
	res := Executed{DispositionID: id, Status: StatusExecuted, RowsDestroyed: cert.RowsRemoved, ArchivesRewritten: cert.ArchivesRewritten,
		ArchivesPurged: cert.ArchivesPurged, CertificateKey: key}
	failpoint.Inject(failpoint.DispositionBeforeComplete)
	for _, c := range cert.Cases {
		res.count(c.Outcome)
	}
	if err := f.complete(ctx, run, cert, res, final, lineage); err != nil {
		return res, err
	}
	if x.Executed != nil {
		for _, it := range cert.Items {
			for table, n := range it.Rows {
				x.Executed.WithLabelValues(table, it.Item).Add(float64(n))
			}
		}
	}
	return res, x.Journal.Done(ctx)
}

// rewriteAll rewrites every archive holding a due row of the batch's
// cases, computing what is due again when something it depends on
// changes under it.
func (f *Finder) rewriteAll(ctx context.Context, run *batchRun) error {
	id := uuid.UUID(run.d.DispositionID.Bytes)
	for try := 0; ; try++ {
		if _, err := f.exec.Index(ctx); err != nil {
			return err
		}
		p, err := f.plan(ctx, f.pool, run, nil)
		if err != nil {
			return err
		}
		r := courtorder.Removal{ID: id, Actor: run.approver, Ref: "disposition " + id.String(), Drop: p.drop, Recheck: p.recheck()}
		err = f.exec.Orders.Rewrite(ctx, r, p.archives)
		switch {
		case err == nil:
			// The successors are indexed by case before the hot rows'
			// plan: an archive not indexed keeps its cases (never early).
			_, err := f.exec.Index(ctx)
			return err
		case errors.Is(err, errChanged) && try < maxReplans:
			continue
		default:
			return err
		}
	}
}

// deleteHot deletes the hot rows of the batch's due cases in one
// transaction that re-checks what is due under the holds lock and the
// clocks' lock (ordered with hold placements and case events), records
// each case's rows, and returns the plan it deleted by: the cases it
// destroys. The plan is made from the hot rows one read returned, and
// exactly those of them are deleted: a row committed after that read
// (a new record of a case) is neither counted nor deleted.
func (f *Finder) deleteHot(ctx context.Context, run *batchRun) (*plan, error) {
	var final *plan
	err := pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		q := queries.New(tx)
		if err := q.LockHoldsShared(ctx, lease.HoldsKey); err != nil {
			return err
		}
		if err := q.LockClocksShare(ctx); err != nil {
			return err
		}
		read, given := map[string][]archive.RowGroups{}, map[string][]archive.CaseRows{}
		for _, c := range run.cases {
			spec, ok := f.specs[c.Series]
			if _, done := read[c.Series]; !ok || done {
				continue
			}
			rows, err := archive.HotRowGroups(ctx, tx, f.key, spec)
			if err != nil {
				return err
			}
			read[c.Series], given[c.Series] = rows, archive.FactsOf(rows)
		}
		p, err := f.plan(ctx, tx, run, given)
		if err != nil {
			return err
		}
		counts := map[int32]int64{}
		for series, rows := range read {
			if err := deleteRows(ctx, tx, f.specs[series], p, rows, counts); err != nil {
				return err
			}
		}
		if err := addDestroyed(ctx, q, run, counts); err != nil {
			return err
		}
		if err := keptRows(ctx, q, run, p, read); err != nil {
			return err
		}
		final = p
		failpoint.Inject(failpoint.DispositionBeforeHotCommit)
		return nil
	})
	return final, err
}

// deleteRows deletes, of rows (spec's hot rows as read), those of the
// plan's groups, counting them per case.
func deleteRows(ctx context.Context, tx pgx.Tx, spec archive.TableSpec, p *plan, rows []archive.RowGroups, counts map[int32]int64) error {
	var ids []string
	for _, r := range rows {
		if ord, ok := p.owner(spec.Table, r.Groups); ok {
			ids = append(ids, r.ID)
			counts[ord]++
		}
	}
	if len(ids) == 0 {
		return nil
	}
	tag, err := tx.Exec(ctx, archive.DeleteByIDSQL(spec), ids)
	if err != nil {
		return fmt.Errorf("delete the due hot rows of %s: %w", spec.Table, err)
	}
	if tag.RowsAffected() != int64(len(ids)) {
		return fmt.Errorf("delete the due hot rows of %s: %d of %d deleted", spec.Table, tag.RowsAffected(), len(ids))
	}
	return nil
}

// keptRows marks, in p, the cases it destroys of which rows are left: hot
// rows read and not deleted (shared with a case outside the batch), or
// archived ones the rewrites kept for the same reason.
func keptRows(ctx context.Context, q *queries.Queries, run *batchRun, p *plan, read map[string][]archive.RowGroups) error {
	hotLeft := map[string]bool{}
	for series, rows := range read {
		for _, r := range rows {
			if _, ok := p.owner(series, r.Groups); ok {
				continue // deleted
			}
			for _, k := range r.Groups {
				hotLeft[series+"\x00"+k] = true
			}
		}
	}
	for _, c := range run.cases {
		if !p.destroys(c.Ord) {
			continue
		}
		for k, ord := range p.groups[c.Series] {
			if ord == c.Ord && hotLeft[c.Series+"\x00"+k] {
				p.kept[c.Ord] = true
			}
		}
		if p.kept[c.Ord] {
			continue
		}
		left, err := q.ArchivedCaseLeft(ctx, queries.ArchivedCaseLeftParams{Series: c.Series, SubjectHash: c.SubjectHash, Day: c.Day})
		if err != nil {
			return fmt.Errorf("rows of a case left: %w", err)
		}
		p.kept[c.Ord] = left == nil || *left
	}
	return nil
}

// addDestroyed adds rows destroyed to the batch's cases (by ord).
func addDestroyed(ctx context.Context, q *queries.Queries, run *batchRun, counts map[int32]int64) error {
	for ord, n := range counts {
		if _, err := q.AddDispositionCaseRows(ctx, queries.AddDispositionCaseRowsParams{Rows: n, DispositionID: run.d.DispositionID, Ord: ord}); err != nil {
			return fmt.Errorf("record the rows destroyed: %w", err)
		}
	}
	return nil
}

// certify writes retention-archives/<service>/dispositions/<id>.json
// create-only (one a crashed call wrote stands) and returns its key.
func (f *Finder) certify(ctx context.Context, id uuid.UUID, c certificate) (string, error) {
	b, err := marshalIndent(c)
	if err != nil {
		return "", err
	}
	key := CertificateKey(f.exec.Service, id)
	err = f.exec.Store.PutCreate(ctx, key, b, store.ContentTypeJSON)
	if err != nil && !errors.Is(err, store.ErrAlreadyExists) {
		return "", fmt.Errorf("batch %s: certificate %s: %w", id, key, err)
	}
	return key, nil
}

// CertificateKey is where a batch's certificate is written.
func CertificateKey(service string, id uuid.UUID) string {
	return store.Prefix + service + "/dispositions/" + id.String() + ".json"
}

// complete records each case's outcome (erasing its sealed spelling), the
// batch executed, and announces it: the superseded archives for the fleet
// ledger, and the batch.
func (f *Finder) complete(ctx context.Context, run *batchRun, c certificate, res Executed, final *plan, lineage []queries.ExpungementLineageRow) error {
	id := res.DispositionID
	return pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		q := queries.New(tx)
		if err := q.LockDispositions(ctx, lease.DispositionKey); err != nil {
			return err
		}
		for _, cc := range c.Cases {
			p := queries.SetDispositionCaseOutcomeParams{Outcome: &cc.Outcome, RowsDestroyed: cc.RowsDestroyed, DispositionID: pgUUID(id), Ord: cc.ord}
			if cc.Reason != "" {
				p.OutcomeReason = &cc.Reason
			}
			if _, err := q.SetDispositionCaseOutcome(ctx, p); err != nil {
				return fmt.Errorf("batch %s: a case's outcome: %w", id, err)
			}
		}
		rewritten, purged := int32(res.ArchivesRewritten), int32(res.ArchivesPurged)
		n, err := q.CompleteDisposition(ctx, queries.CompleteDispositionParams{ExecutedAt: pgtype.Timestamptz{Time: c.ExecutedAt, Valid: true}, CertificateKey: &res.CertificateKey, RowsDestroyed: &res.RowsDestroyed,
			ArchivesRewritten: &rewritten, ArchivesPurged: &purged, DispositionID: pgUUID(id)})
		if err != nil || n != 1 {
			return fmt.Errorf("complete batch %s (%d): %w", id, n, err)
		}
		if f.exec.Journal != nil {
			if err := journal.Append(ctx, tx, journal.ActDisposition, journalEntry(run, c, res, final, lineage), run.approver); err != nil {
				return err
			}
		}
		old, supersededBy := courtorder.Superseded(lineage)
		if len(old) > 0 {
			if err := f.exec.Orders.Announce(ctx, tx, run.approver, "archive_superseded", map[string]any{"archive_ids": old, "approver": run.approver,
				"expunge_id": id, "disposition_id": id, "superseded_by": supersededBy, "order_ref": "disposition " + id.String()}); err != nil {
				return err
			}
		}
		return f.exec.Orders.Announce(ctx, tx, run.approver, "disposition_executed", map[string]any{"disposition_id": id,
			"schedule_version": run.d.ScheduleVersion, "proposed_by": run.d.ProposedBy, "approver": run.approver, "archive_ids": old,
			"rows_removed": res.RowsDestroyed, "cases_destroyed": res.CasesDestroyed, "cases_skipped": res.CasesSkipped,
			"certificate": res.CertificateKey, "executed_at": c.ExecutedAt.Format(time.RFC3339Nano)})
	})
}

// ErrNoCertificate: the batch is not executed (it has no certificate).
var ErrNoCertificate = errors.New("disposition: the batch is not executed: it has no certificate")

// Certificate reads an executed batch's certificate from the store: the
// newest version of its create-only object.
func (f *Finder) Certificate(ctx context.Context, id uuid.UUID) ([]byte, error) {
	if f.exec == nil || f.exec.Store == nil {
		return nil, ErrNoExecution
	}
	d, err := queries.New(f.pool).GetDisposition(ctx, pgUUID(id))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	case err != nil:
		return nil, fmt.Errorf("batch %s: %w", id, err)
	case d.Status != StatusExecuted || d.CertificateKey == nil:
		return nil, fmt.Errorf("%w: %s is %s", ErrNoCertificate, id, d.Status)
	}
	b, err := f.exec.Store.Get(ctx, *d.CertificateKey)
	if err != nil {
		return nil, fmt.Errorf("batch %s: certificate %s: %w", id, *d.CertificateKey, err)
	}
	return b, nil
}
