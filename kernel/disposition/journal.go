package disposition

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/courtorder"
	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/journal"
	"github.com/craig/retention/kernel/subject"
)

// dispositionEntry is an executed batch as the journal keeps it (ADR-070,
// ADR-073): what a reconcile needs to destroy its rows again on a database
// restored from before it, and to record it again. Cases are named by
// keyed hash (as the certificate names them); times are microseconds and
// dates days since 1970-01-01 (no time makes a round trip through text).
type dispositionEntry struct {
	DispositionID     uuid.UUID                      `json:"disposition_id"`
	ScheduleVersion   string                         `json:"schedule_version"`
	AsOfDays          int64                          `json:"as_of_days"`
	RowLimit          int64                          `json:"row_limit"`
	Rows              int64                          `json:"rows"`
	ProposedBy        string                         `json:"proposed_by"`
	ProposedAtMicros  int64                          `json:"proposed_at_us"`
	ApprovedAtMicros  int64                          `json:"approved_at_us"`
	ExecutedAtMicros  int64                          `json:"executed_at_us"`
	CertificateKey    string                         `json:"certificate_key"`
	RowsDestroyed     int64                          `json:"rows_destroyed"`
	ArchivesRewritten int                            `json:"archives_rewritten"`
	ArchivesPurged    int                            `json:"archives_purged"`
	Cases             []journalCase                  `json:"cases"`
	Groups            map[string][]string            `json:"groups"`
	Archives          []courtorder.SupersededArchive `json:"archives"`
}

// journalCase is one case of a journaled batch.
type journalCase struct {
	Ord           int32       `json:"ord"`
	Series        string      `json:"series"`
	SubjectHash   string      `json:"subject_hash"`
	DayDays       *int64      `json:"day_days,omitempty"`
	Item          string      `json:"item"`
	Authority     string      `json:"authority"`
	DueDays       int64       `json:"due_days"`
	RowsHot       int64       `json:"rows_hot"`
	RowsArchived  int64       `json:"rows_archived"`
	Archives      []uuid.UUID `json:"archives"`
	Outcome       string      `json:"outcome"`
	Reason        string      `json:"reason,omitempty"`
	RowsDestroyed int64       `json:"rows_destroyed"`
}

const secondsPerDay = 86400

func days(d pgtype.Date) int64 { return d.Time.Unix() / secondsPerDay }

func fromDays(n int64) pgtype.Date {
	return pgtype.Date{Time: time.Unix(n*secondsPerDay, 0).UTC(), Valid: true}
}

// journalEntry is run's entry: its cases with their outcome (c), the
// groups of hot rows final destroyed, and its lineage.
func journalEntry(run *batchRun, c certificate, res Executed, final *plan, lineage []queries.ExpungementLineageRow) dispositionEntry {
	d := run.d
	x := dispositionEntry{DispositionID: res.DispositionID, ScheduleVersion: d.ScheduleVersion, AsOfDays: days(d.AsOf), RowLimit: d.RowLimit,
		Rows: d.Rows, ProposedBy: d.ProposedBy, ProposedAtMicros: d.ProposedAt.Time.UnixMicro(), ApprovedAtMicros: c.ApprovedAt.UnixMicro(),
		ExecutedAtMicros: c.ExecutedAt.UnixMicro(), CertificateKey: res.CertificateKey, RowsDestroyed: res.RowsDestroyed,
		ArchivesRewritten: res.ArchivesRewritten, ArchivesPurged: res.ArchivesPurged, Cases: []journalCase{}, Groups: map[string][]string{},
		Archives: courtorder.JournalLineage(lineage)}
	outcome := map[int32]certCase{}
	for _, cc := range c.Cases {
		outcome[cc.ord] = cc
	}
	for _, bc := range run.cases {
		jc := journalCaseOf(bc)
		jc.Outcome, jc.Reason = outcome[bc.Ord].Outcome, outcome[bc.Ord].Reason
		x.Cases = append(x.Cases, jc)
	}
	for series, g := range final.groups {
		for k := range g {
			x.Groups[series] = append(x.Groups[series], hex.EncodeToString([]byte(k)))
		}
		slices.Sort(x.Groups[series])
	}
	return x
}

// Reapply carries out again a journaled batch's execution or rejection
// that a database restore forgot. An execution: each successor the restored ledger lacks is booked again, each
// superseded archive's objects destroyed and stamped again, the hot rows
// of the groups it destroyed that existed at its execution deleted again,
// and the batch and its cases recorded again (by keyed hash).
func (f *Finder) Reapply(ctx context.Context, e journal.Entry, forgotten journal.Forgotten) error {
	switch e.Act {
	case journal.ActDisposition:
	case journal.ActDispositionRejected:
		return f.reapplyRejection(ctx, e)
	default:
		return fmt.Errorf("journal entry %d: %s is not a disposition", e.Seq, e.Act)
	}
	if f.exec == nil || f.exec.Orders == nil {
		return fmt.Errorf("journal entry %d: %w", e.Seq, ErrNoExecution)
	}
	var x dispositionEntry
	if err := json.Unmarshal(e.Detail, &x); err != nil {
		return fmt.Errorf("journal entry %d: %w", e.Seq, err)
	}
	groups := map[string]map[string]int32{}
	for series, keys := range x.Groups {
		groups[series] = map[string]int32{}
		for _, k := range keys {
			raw, err := hex.DecodeString(k)
			if err != nil {
				return fmt.Errorf("journal entry %d: a group: %w", e.Seq, err)
			}
			groups[series][string(raw)] = 0
		}
	}
	executed := time.UnixMicro(x.ExecutedAtMicros).UTC()
	return f.exec.Orders.ReapplyLineage(ctx, e, x.DispositionID, x.Archives, forgotten, func(ctx context.Context, tx pgx.Tx) error {
		p := &plan{groups: groups}
		for series := range groups {
			spec, ok := f.specs[series]
			if !ok {
				return fmt.Errorf("journal entry %d: table %s is not archived by this service", e.Seq, series)
			}
			rows, err := archive.HotRowGroups(ctx, tx, f.key, spec)
			if err != nil {
				return err
			}
			var ids []string
			for _, r := range rows {
				if _, ok := p.owner(series, r.Groups); ok && !r.At.After(executed) {
					ids = append(ids, r.ID)
				}
			}
			if len(ids) > 0 {
				if _, err := tx.Exec(ctx, archive.DeleteByIDSQL(spec), ids); err != nil {
					return fmt.Errorf("delete the disposed hot rows of %s again: %w", spec.Table, err)
				}
			}
		}
		return f.recordAgain(ctx, queries.New(tx), e, x)
	})
}

// recordAgain records a journaled batch and its cases again.
func (f *Finder) recordAgain(ctx context.Context, q *queries.Queries, e journal.Entry, x dispositionEntry) error {
	micros := func(n int64) pgtype.Timestamptz {
		return pgtype.Timestamptz{Time: time.UnixMicro(n).UTC(), Valid: true}
	}
	rewritten, purged := int32(x.ArchivesRewritten), int32(x.ArchivesPurged)
	if err := q.ReapplyDisposition(ctx, queries.ReapplyDispositionParams{DispositionID: pgUUID(x.DispositionID), ScheduleVersion: x.ScheduleVersion,
		AsOf: fromDays(x.AsOfDays), RowLimit: x.RowLimit, Rows: x.Rows, ProposedBy: x.ProposedBy, ProposedAt: micros(x.ProposedAtMicros),
		ApprovedBy: &e.Actor, ApprovedAt: micros(x.ApprovedAtMicros), ExecutedAt: micros(x.ExecutedAtMicros), CertificateKey: &x.CertificateKey,
		RowsDestroyed: &x.RowsDestroyed, ArchivesRewritten: &rewritten, ArchivesPurged: &purged}); err != nil {
		return fmt.Errorf("record batch %s again: %w", x.DispositionID, err)
	}
	return f.casesAgain(ctx, q, e, x.DispositionID, x.Cases)
}

// casesAgain records a journaled batch's cases again (by keyed hash).
func (f *Finder) casesAgain(ctx context.Context, q *queries.Queries, e journal.Entry, id uuid.UUID, cases []journalCase) error {
	for _, c := range cases {
		hash, err := hex.DecodeString(c.SubjectHash)
		if err != nil {
			return fmt.Errorf("journal entry %d: a case: %w", e.Seq, err)
		}
		p := queries.ReapplyDispositionCaseParams{DispositionID: pgUUID(id), Ord: c.Ord, Series: c.Series, SubjectHash: hash,
			ItemID: c.Item, Authority: c.Authority, Due: fromDays(c.DueDays), RowsHot: c.RowsHot, RowsArchived: c.RowsArchived,
			Archives: pgUUIDs(c.Archives), RowsDestroyed: c.RowsDestroyed}
		if c.Outcome != "" {
			p.Outcome = &c.Outcome
		}
		if c.DayDays != nil {
			p.Day = fromDays(*c.DayDays)
		}
		if c.Reason != "" {
			p.OutcomeReason = &c.Reason
		}
		if err := q.ReapplyDispositionCase(ctx, p); err != nil {
			return fmt.Errorf("record batch %s again: a case: %w", id, err)
		}
	}
	return nil
}

// rejectionEntry is a rejected batch as the journal keeps it: enough to
// record it again with its cases (by keyed hash) and the extension that
// keeps them until a day (days since 1970-01-01; nil: none). The reason
// stays local (it may describe a case).
type rejectionEntry struct {
	DispositionID    uuid.UUID     `json:"disposition_id"`
	ScheduleVersion  string        `json:"schedule_version"`
	AsOfDays         int64         `json:"as_of_days"`
	RowLimit         int64         `json:"row_limit"`
	Rows             int64         `json:"rows"`
	ProposedBy       string        `json:"proposed_by"`
	ProposedAtMicros int64         `json:"proposed_at_us"`
	RejectedAtMicros int64         `json:"rejected_at_us"`
	ExtendUntilDays  *int64        `json:"extend_until_days,omitempty"`
	Cases            []journalCase `json:"cases"`
}

// journalRejection appends batch id's rejection to the journal in tx
// (nothing without one).
func (f *Finder) journalRejection(ctx context.Context, tx pgx.Tx, id uuid.UUID, actor string) error {
	if f.exec == nil || f.exec.Journal == nil {
		return nil
	}
	q := queries.New(tx)
	d, err := q.GetDisposition(ctx, pgUUID(id))
	if err != nil {
		return fmt.Errorf("batch %s: %w", id, err)
	}
	cases, err := q.DispositionCases(ctx, pgUUID(id))
	if err != nil {
		return fmt.Errorf("batch %s: %w", id, err)
	}
	x := rejectionEntry{DispositionID: id, ScheduleVersion: d.ScheduleVersion, AsOfDays: days(d.AsOf), RowLimit: d.RowLimit, Rows: d.Rows,
		ProposedBy: d.ProposedBy, ProposedAtMicros: d.ProposedAt.Time.UnixMicro(), RejectedAtMicros: d.RejectedAt.Time.UnixMicro(), Cases: []journalCase{}}
	if d.ExtendUntil.Valid {
		n := days(d.ExtendUntil)
		x.ExtendUntilDays = &n
	}
	for _, c := range cases {
		x.Cases = append(x.Cases, journalCaseOf(c))
	}
	return journal.Append(ctx, tx, journal.ActDispositionRejected, x, actor)
}

// journalCaseOf is a batch's case as a journal entry keeps it.
func journalCaseOf(c queries.DispositionCase) journalCase {
	jc := journalCase{Ord: c.Ord, Series: c.Series, SubjectHash: subject.Hex(c.SubjectHash), Item: c.ItemID, Authority: c.Authority,
		DueDays: days(c.Due), RowsHot: c.RowsHot, RowsArchived: c.RowsArchived, Archives: uuidsOf(c.Archives), RowsDestroyed: c.RowsDestroyed}
	if c.Day.Valid {
		n := days(c.Day)
		jc.DayDays = &n
	}
	return jc
}

// reapplyRejection records a journaled rejection again: the batch, its
// cases and, once, the extension of each.
func (f *Finder) reapplyRejection(ctx context.Context, e journal.Entry) error {
	var x rejectionEntry
	if err := json.Unmarshal(e.Detail, &x); err != nil {
		return fmt.Errorf("journal entry %d: %w", e.Seq, err)
	}
	reason := fmt.Sprintf("restored from the store journal (entry %d)", e.Seq)
	return pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		q := queries.New(tx)
		micros := func(n int64) pgtype.Timestamptz {
			return pgtype.Timestamptz{Time: time.UnixMicro(n).UTC(), Valid: true}
		}
		p := queries.ReapplyRejectionParams{DispositionID: pgUUID(x.DispositionID), ScheduleVersion: x.ScheduleVersion, AsOf: fromDays(x.AsOfDays),
			RowLimit: x.RowLimit, Rows: x.Rows, ProposedBy: x.ProposedBy, ProposedAt: micros(x.ProposedAtMicros), RejectedBy: &e.Actor,
			RejectedAt: micros(x.RejectedAtMicros), Reason: &reason}
		if x.ExtendUntilDays != nil {
			p.ExtendUntil = fromDays(*x.ExtendUntilDays)
		}
		if err := q.ReapplyRejection(ctx, p); err != nil {
			return fmt.Errorf("record batch %s again: %w", x.DispositionID, err)
		}
		if err := f.casesAgain(ctx, q, e, x.DispositionID, x.Cases); err != nil {
			return err
		}
		has, err := q.HasExtensions(ctx, pgUUID(x.DispositionID))
		if err != nil {
			return err
		}
		if x.ExtendUntilDays != nil && !has {
			if _, err := q.ExtendDispositionCases(ctx, queries.ExtendDispositionCasesParams{Until: p.ExtendUntil, Reason: reason, ExtendedBy: e.Actor,
				DispositionID: pgUUID(x.DispositionID)}); err != nil {
				return fmt.Errorf("extend batch %s again: %w", x.DispositionID, err)
			}
		}
		return journal.Adopt(ctx, tx, e)
	})
}
