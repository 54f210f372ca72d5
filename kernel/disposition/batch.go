package disposition

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/lease"
	"github.com/craig/retention/kernel/schedule"
	"github.com/craig/retention/kernel/subject"
)

// DefaultLimit is a batch's bound in rows (hot and archived) when the
// request names none: a day's review for one records officer (a few
// hundred cases of a few dozen rows), and a batch whose execution rewrites
// each archive it touches once and finishes in minutes, so a crash or a
// restart costs little to resume.
const DefaultLimit = 10_000

// MaxLimit bounds a requested limit: more than a million rows is no
// review a person can do.
const MaxLimit = 1_000_000

// Statuses of a batch.
const (
	StatusProposed  = "proposed"
	StatusExecuting = "executing"
	StatusExecuted  = "executed"
	StatusRejected  = "rejected"
)

// Refusals of a batch call.
var (
	// ErrNothingDue: no case is due, unheld and outside every open batch.
	ErrNothingDue = errors.New("disposition: nothing is due that no hold keeps and no open batch holds")
	// ErrNotFound: no such batch.
	ErrNotFound = errors.New("disposition: no such batch")
	// ErrNotAwaiting: the batch is not awaiting a decision.
	ErrNotAwaiting = errors.New("disposition: the batch is not awaiting a decision")
	// ErrInvalid: a malformed request (a limit, a reason, a date).
	ErrInvalid = errors.New("disposition: invalid request")
	// ErrScheduleChanged: another schedule version came in force while the
	// batch was computed; freeze again.
	ErrScheduleChanged = errors.New("disposition: the schedule in force changed while the batch was computed")
)

// BatchCase is one case of a batch: its subject (case:<n>) for the
// reviewers until the batch is executed, then only its keyed hash.
type BatchCase struct {
	Subject      string      `json:"subject,omitempty"`
	SubjectHash  string      `json:"subject_hash"`
	Day          *string     `json:"day,omitempty"`
	Due          string      `json:"due"`
	RowsHot      int64       `json:"rows_hot"`
	RowsArchived int64       `json:"rows_archived"`
	Archives     []uuid.UUID `json:"archives"`
}

// BatchItem is what a batch holds under one item.
type BatchItem struct {
	Item      string      `json:"item"`
	Series    string      `json:"series"`
	Authority string      `json:"authority"`
	Rows      int64       `json:"rows"`
	Cases     []BatchCase `json:"cases"`
}

// Batch is a frozen disposition batch.
type Batch struct {
	ID              uuid.UUID   `json:"disposition_id"`
	Status          string      `json:"status"`
	ScheduleVersion string      `json:"schedule_version"`
	AsOf            string      `json:"as_of"`
	Limit           int64       `json:"limit"`
	Rows            int64       `json:"rows"`
	ProposedBy      string      `json:"proposed_by"`
	ProposedAt      time.Time   `json:"proposed_at"`
	ApprovedBy      *string     `json:"approved_by"`
	ApprovedAt      *time.Time  `json:"approved_at"`
	ExecutedAt      *time.Time  `json:"executed_at"`
	RejectedBy      *string     `json:"rejected_by"`
	RejectedAt      *time.Time  `json:"rejected_at"`
	RejectReason    *string     `json:"reject_reason"`
	ExtendUntil     *string     `json:"extend_until"`
	Items           []BatchItem `json:"items"`
	// Held are the due cases a hold kept out of the batch (at its
	// freeze only).
	Held []DueCase `json:"held,omitempty"`
}

// Freeze records, as proposed by actor, a batch of what is due today
// under the version in force, bounded by limit rows (0: DefaultLimit): the
// due cases in the listing's order (item, due date) that no hold keeps
// and no undecided batch holds, while they fit (a first case larger than
// the limit is a batch alone: a case is disposed whole). Call it after the
// archives are indexed by case (DueNow).
func (f *Finder) Freeze(ctx context.Context, limit int64, actor string) (Batch, error) {
	return f.freeze(ctx, limit, actor, false)
}

// AutoDestroy executes what items whose action is destroy make due, with
// no reviewer (records.auto_destroy): a batch frozen as AutoProposer and
// approved as AutoApprover, up to DefaultLimit rows a call, after
// finishing its batches a call left undecided or executing. Nothing due:
// a zero Executed and no error.
func (f *Finder) AutoDestroy(ctx context.Context) (Executed, error) {
	if f.exec == nil {
		return Executed{}, ErrNoExecution
	}
	if err := f.exec.Journal.Check(ctx); err != nil {
		return Executed{}, err // nothing frozen on a database behind the journal
	}
	stopped, err := queries.New(f.pool).ExecutingDispositions(ctx, AutoProposer)
	if err != nil {
		return Executed{}, fmt.Errorf("batches left executing: %w", err)
	}
	for _, id := range stopped { // finished first: a call that stopped part way (or between freeze and approval)
		if res, err := f.Approve(ctx, id.Bytes, AutoApprover); err != nil {
			return res, err
		}
	}
	b, err := f.freeze(ctx, DefaultLimit, AutoProposer, true)
	if errors.Is(err, ErrNothingDue) {
		return Executed{}, nil
	}
	if err != nil {
		return Executed{}, err
	}
	return f.Approve(ctx, b.ID, AutoApprover)
}

// freeze is Freeze; onlyDestroy takes only items whose action is destroy.
func (f *Finder) freeze(ctx context.Context, limit int64, actor string, onlyDestroy bool) (Batch, error) {
	if f.exec != nil {
		if err := f.exec.Journal.Check(ctx); err != nil {
			return Batch{}, err // what a restore forgot (a reopening, an extension) is not seen yet
		}
	}
	switch {
	case limit == 0:
		limit = DefaultLimit
	case limit < 0 || limit > MaxLimit:
		return Batch{}, fmt.Errorf("%w: limit must be 1..%d rows", ErrInvalid, MaxLimit)
	}
	id := uuid.Must(uuid.NewV7())
	var held []DueCase
	err := pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		q := queries.New(tx)
		if err := q.LockDispositions(ctx, lease.DispositionKey); err != nil {
			return err
		}
		// Ordered with hold placements (as a booking is): a hold placed
		// meanwhile is seen, or waits for the batch.
		if err := q.LockHoldsShared(ctx, lease.HoldsKey); err != nil {
			return err
		}
		// What is due is read under the locks, in the batch's transaction:
		// two freezes never take one case.
		due, err := f.find(ctx, tx, time.Now(), 0)
		if err != nil {
			return err
		}
		v, err := f.schedules.InForce(ctx)
		if err != nil {
			return err
		}
		if v == nil || v.Version != due.Version {
			return ErrScheduleChanged
		}
		open, err := q.OpenDispositionCases(ctx)
		if err != nil {
			return fmt.Errorf("open batches: %w", err)
		}
		var picked []chosen
		if onlyDestroy {
			due.Items = slices.DeleteFunc(due.Items, func(it DueItem) bool { return it.Action != string(schedule.ActionDestroy) })
		}
		picked, held = pick(due, open, limit)
		if len(picked) == 0 {
			return ErrNothingDue
		}
		return f.record(ctx, q, id, due, picked, limit, len(held), actor)
	})
	if err != nil {
		return Batch{}, err
	}
	b, err := f.Get(ctx, id)
	if err != nil {
		return Batch{}, err
	}
	b.Held = held
	return b, nil
}

// chosen is a due case taken into a batch, with its item.
type chosen struct {
	item, authority string
	c               DueCase
	day             pgtype.Date
}

// pick takes the due cases in the listing's order that no hold keeps
// (returned apart) and no open batch holds, while they fit in limit rows
// (a first case larger than the limit alone).
func pick(due Due, open []queries.OpenDispositionCasesRow, limit int64) (picked []chosen, held []DueCase) {
	taken := map[string]bool{}
	for _, o := range open {
		taken[caseKey(o.Series, o.SubjectHash, o.Day)] = true
	}
	var rows int64
	for _, it := range due.Items {
		for _, c := range it.Cases {
			day := pgtype.Date{}
			if c.day != nil {
				day = pgtype.Date{Time: *c.day, Valid: true}
			}
			switch {
			case len(c.Holds) > 0:
				held = append(held, c)
				continue
			case taken[caseKey(c.Series, c.hash, day)]:
				continue
			case len(picked) > 0 && rows+c.RowsHot+c.RowsArchived > limit:
				continue
			}
			picked = append(picked, chosen{item: it.Item, authority: it.Authority, c: c, day: day})
			rows += c.RowsHot + c.RowsArchived
		}
	}
	return picked, held
}

// record writes the batch and its cases (each case sealed under the
// subject key) and logs its proposal.
func (f *Finder) record(ctx context.Context, q *queries.Queries, id uuid.UUID, due Due, picked []chosen, limit int64, held int, actor string) error {
	asOf, err := time.Parse(time.DateOnly, due.AsOf)
	if err != nil {
		return err
	}
	var rows int64
	for _, p := range picked {
		rows += p.c.RowsHot + p.c.RowsArchived
	}
	if err := q.InsertDisposition(ctx, queries.InsertDispositionParams{DispositionID: pgUUID(id), ScheduleVersion: due.Version,
		AsOf: pgtype.Date{Time: asOf, Valid: true}, RowLimit: limit, Rows: rows, ProposedBy: actor}); err != nil {
		return fmt.Errorf("batch: %w", err)
	}
	for ord, p := range picked {
		box := p.c.box
		if len(box) == 0 && p.c.Subject != "" {
			if box, err = f.key.Box([]byte(p.c.Subject)); err != nil {
				return err
			}
		}
		dueDay, err := time.Parse(time.DateOnly, p.c.Due)
		if err != nil {
			return err
		}
		if err := q.InsertDispositionCase(ctx, queries.InsertDispositionCaseParams{DispositionID: pgUUID(id), Ord: int32(ord), Series: p.c.Series,
			SubjectHash: p.c.hash, SubjectBox: box, Day: p.day, ItemID: p.item, Authority: p.authority, Due: pgtype.Date{Time: dueDay, Valid: true},
			RowsHot: p.c.RowsHot, RowsArchived: p.c.RowsArchived, Archives: pgUUIDs(p.c.Archives)}); err != nil {
			return fmt.Errorf("batch case: %w", err)
		}
	}
	return logAct(ctx, q, actor, "disposition_proposed", map[string]any{"disposition_id": id, "schedule_version": due.Version,
		"cases": len(picked), "rows": rows, "limit": limit, "held": held})
}

// caseKey identifies a case of a series (or a day of its rows about no
// case).
func caseKey(series string, hash []byte, day pgtype.Date) string {
	k := series + "\x00" + string(hash)
	if day.Valid {
		k += "\x00" + day.Time.Format(time.DateOnly)
	}
	return k
}

// Get reads a batch: its cases by subject for the reviewers until it is
// executed, then by keyed hash only.
func (f *Finder) Get(ctx context.Context, id uuid.UUID) (Batch, error) {
	q := queries.New(f.pool)
	d, err := q.GetDisposition(ctx, pgUUID(id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Batch{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return Batch{}, fmt.Errorf("batch %s: %w", id, err)
	}
	cases, err := q.DispositionCases(ctx, pgUUID(id))
	if err != nil {
		return Batch{}, fmt.Errorf("batch %s: %w", id, err)
	}
	b := Batch{ID: id, Status: d.Status, ScheduleVersion: d.ScheduleVersion, AsOf: d.AsOf.Time.Format(time.DateOnly), Limit: d.RowLimit, Rows: d.Rows,
		ProposedBy: d.ProposedBy, ProposedAt: d.ProposedAt.Time.UTC(), ApprovedBy: d.ApprovedBy, ApprovedAt: timePtr(d.ApprovedAt),
		ExecutedAt: timePtr(d.ExecutedAt), RejectedBy: d.RejectedBy, RejectedAt: timePtr(d.RejectedAt), RejectReason: d.RejectReason, Items: []BatchItem{}}
	if d.ExtendUntil.Valid {
		s := d.ExtendUntil.Time.Format(time.DateOnly)
		b.ExtendUntil = &s
	}
	for _, c := range cases {
		if n := len(b.Items); n == 0 || b.Items[n-1].Item != c.ItemID || b.Items[n-1].Series != c.Series {
			b.Items = append(b.Items, BatchItem{Item: c.ItemID, Series: c.Series, Authority: c.Authority, Cases: []BatchCase{}})
		}
		it := &b.Items[len(b.Items)-1]
		bc := BatchCase{SubjectHash: subject.Hex(c.SubjectHash), Due: c.Due.Time.Format(time.DateOnly), RowsHot: c.RowsHot,
			RowsArchived: c.RowsArchived, Archives: uuidsOf(c.Archives)}
		if c.Day.Valid {
			s := c.Day.Time.Format(time.DateOnly)
			bc.Day = &s
		}
		if len(c.SubjectBox) > 0 && d.Status != StatusExecuted {
			plain, err := f.key.Unbox(c.SubjectBox)
			if err != nil {
				return Batch{}, fmt.Errorf("batch %s: a case: %w", id, err)
			}
			bc.Subject = string(plain)
		}
		it.Rows += c.RowsHot + c.RowsArchived
		it.Cases = append(it.Cases, bc)
	}
	return b, nil
}

// Reject returns a proposed batch to the schedule, with actor's reason;
// with extendUntil (a day after today, within a hundred years) every case
// of the batch is kept until that day (an extension for a hearing or an
// audit, recorded), else its cases are due again at once.
func (f *Finder) Reject(ctx context.Context, id uuid.UUID, actor, reason string, extendUntil *time.Time) (Batch, error) {
	today := time.Now().UTC().Truncate(24 * time.Hour)
	if extendUntil != nil && (!extendUntil.After(today) || extendUntil.After(today.AddDate(100, 0, 0))) {
		return Batch{}, fmt.Errorf("%w: extend_until must be a day after today and within a hundred years", ErrInvalid)
	}
	if f.exec != nil {
		if err := f.exec.Journal.Check(ctx); err != nil {
			return Batch{}, err
		}
	}
	err := pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		q := queries.New(tx)
		if err := q.LockDispositions(ctx, lease.DispositionKey); err != nil {
			return err
		}
		until := pgtype.Date{}
		if extendUntil != nil {
			until = pgtype.Date{Time: *extendUntil, Valid: true}
		}
		n, err := q.RejectDisposition(ctx, queries.RejectDispositionParams{RejectedBy: &actor, Reason: &reason, ExtendUntil: until, DispositionID: pgUUID(id)})
		if err != nil {
			return fmt.Errorf("reject %s: %w", id, err)
		}
		if n == 0 {
			if _, err := q.GetDisposition(ctx, pgUUID(id)); errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("%w: %s", ErrNotFound, id)
			}
			return fmt.Errorf("%w: %s", ErrNotAwaiting, id)
		}
		var extended int64
		if extendUntil != nil {
			if extended, err = q.ExtendDispositionCases(ctx, queries.ExtendDispositionCasesParams{Until: until, Reason: reason, ExtendedBy: actor,
				DispositionID: pgUUID(id)}); err != nil {
				return fmt.Errorf("extend %s: %w", id, err)
			}
		}
		if err := f.journalRejection(ctx, tx, id, actor); err != nil {
			return err
		}
		detail := map[string]any{"disposition_id": id, "reason": reason, "cases_extended": extended}
		if extendUntil != nil {
			detail["extend_until"] = extendUntil.Format(time.DateOnly)
		}
		return logAct(ctx, q, actor, "disposition_rejected", detail)
	})
	if err != nil {
		return Batch{}, err
	}
	if f.exec != nil {
		if err := f.exec.Journal.Done(ctx); err != nil {
			return Batch{}, err
		}
	}
	return f.Get(ctx, id)
}

func logAct(ctx context.Context, q *queries.Queries, actor, action string, detail map[string]any) error {
	raw, err := json.Marshal(detail)
	if err != nil {
		return err
	}
	return q.LogLifecycle(ctx, queries.LogLifecycleParams{Actor: actor, Action: action, Detail: raw})
}

func pgUUID(id uuid.UUID) pgtype.UUID { return pgtype.UUID{Bytes: id, Valid: true} }

func pgUUIDs(ids []uuid.UUID) []pgtype.UUID {
	out := make([]pgtype.UUID, len(ids))
	for i, id := range ids {
		out[i] = pgUUID(id)
	}
	return out
}

func timePtr(t pgtype.Timestamptz) *time.Time {
	if !t.Valid {
		return nil
	}
	u := t.Time.UTC()
	return &u
}
