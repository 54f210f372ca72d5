package disposition

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/subject"
)

// plan is what a batch destroys at one moment: the groups of rows (by
// series and group key) of its cases that are due now under the version
// it was frozen under, unheld, under the same item; each owned by the
// case (its ord in the batch) it is destroyed for.
type plan struct {
	f      *Finder
	id     uuid.UUID
	stamp  queries.DispositionStampRow
	groups map[string]map[string]int32
	// archives are the archives holding a row of a group.
	archives []uuid.UUID
	// skipped says why a case of the batch is not destroyed.
	skipped map[int32]string
	// lines counts, per archive, the lines of each case its rewrite drops
	// (recorded in the rewrite's booking).
	lines map[uuid.UUID]map[int32]int64
	// gone are the cases not due now of which no row is left (hot or
	// archived): destroyed by an earlier step of the batch when it
	// recorded rows of them.
	gone map[int32]bool
	// kept are the destroyed cases of which rows are left after the hot
	// step: rows they share with a case outside the batch.
	kept map[int32]bool
}

// plan computes what run destroys now, on db; given, when it has a series,
// are that series' hot facts as the caller read them (else they are read
// from its table).
func (f *Finder) plan(ctx context.Context, db prune.DB, run *batchRun, given map[string][]archive.CaseRows) (*plan, error) {
	q := queries.New(db)
	stamp, err := q.DispositionStamp(ctx)
	if err != nil {
		return nil, fmt.Errorf("what a batch depends on: %w", err)
	}
	p := &plan{f: f, id: run.d.DispositionID.Bytes, stamp: stamp, groups: map[string]map[string]int32{}, skipped: map[int32]string{}, lines: map[uuid.UUID]map[int32]int64{},
		gone: map[int32]bool{}, kept: map[int32]bool{}}
	d, err := f.dueRows(ctx, db, time.Now(), given)
	if err != nil {
		return nil, err
	}
	if d.version.Version != run.d.ScheduleVersion {
		for _, c := range run.cases {
			p.skipped[c.Ord] = "version " + d.version.Version + " of the schedule came in force after the batch was frozen under " + run.d.ScheduleVersion
		}
		return p, nil
	}
	byKey := map[string]queries.DispositionCase{}
	for _, c := range run.cases {
		byKey[caseKey(c.Series, c.SubjectHash, c.Day)] = c
	}
	for _, r := range p.classify(d.rows, byKey) {
		c := byKey[caseKey(r.Series, r.SubjectHash, r.Day)]
		if _, skip := p.skipped[c.Ord]; skip {
			continue
		}
		if p.groups[r.Series] == nil {
			p.groups[r.Series] = map[string]int32{}
		}
		day := time.Time{}
		if r.Day.Valid {
			day = r.Day.Time
		}
		p.groups[r.Series][archive.GroupKey(r.SubjectHash, r.Others, day)] = c.Ord
		p.archives = union(p.archives, uuidsOf(r.Archives))
	}
	for _, c := range run.cases {
		if _, skip := p.skipped[c.Ord]; skip || p.destroys(c.Ord) {
			continue
		}
		p.skipped[c.Ord] = "not due on " + d.day.Format(time.DateOnly) + " under version " + d.version.Version
		left, err := caseLeft(ctx, q, d, c)
		if err != nil {
			return nil, err
		}
		p.gone[c.Ord] = !left
	}
	return p, nil
}

// caseLeft says whether rows of a batch's case are left, hot or in an
// unpurged archive (or an archive not indexed by case, which may hold
// some).
func caseLeft(ctx context.Context, q *queries.Queries, d dueGroups, c queries.DispositionCase) (bool, error) {
	if _, ok := d.hot[hotKey(c.Series, c.SubjectHash, dayOf(c.Day))]; ok {
		return true, nil
	}
	left, err := q.ArchivedCaseLeft(ctx, queries.ArchivedCaseLeftParams{Series: c.Series, SubjectHash: c.SubjectHash, Day: c.Day})
	if err != nil {
		return false, fmt.Errorf("rows of a case left: %w", err)
	}
	return left == nil || *left, nil // NULL: unknown, so left
}

// classify returns the due groups of the batch's cases (byKey) that no
// hold keeps, under the case's item, and records as skipped the cases
// with a held group (a case is disposed as a unit) or another item.
func (p *plan) classify(rows []queries.DueCasesRow, byKey map[string]queries.DispositionCase) []queries.DueCasesRow {
	held := map[int32][]string{}
	var due []queries.DueCasesRow
	for _, r := range rows {
		c, ok := byKey[caseKey(r.Series, r.SubjectHash, r.Day)]
		switch {
		case !ok:
		case len(r.Holds) > 0:
			for _, h := range uuidsOf(r.Holds) {
				held[c.Ord] = append(held[c.Ord], h.String())
			}
		case r.ItemID != c.ItemID:
			p.skipped[c.Ord] = "its rows now fall under item " + r.ItemID
		default:
			due = append(due, r)
		}
	}
	for ord, ids := range held {
		slices.Sort(ids)
		p.skipped[ord] = "held by " + strings.Join(slices.Compact(ids), ", ")
	}
	return due
}

// destroys says whether the plan destroys rows of the case ord.
func (p *plan) destroys(ord int32) bool {
	for _, g := range p.groups {
		for _, o := range g {
			if o == ord {
				return true
			}
		}
	}
	return false
}

// owner is the case a row of series (in the groups keys: one per case it
// is about) is destroyed for; false: the row is kept. A row about several
// cases is destroyed only when every one of them is destroyed by the plan:
// it is each case's record, and a case outside the batch (under review,
// under another item) keeps it until its own batch.
func (p *plan) owner(series string, keys []string) (int32, bool) {
	var owner int32
	for i, k := range keys {
		ord, ok := p.groups[series][k]
		if !ok {
			return 0, false
		}
		if i == 0 {
			owner = ord
		}
	}
	return owner, len(keys) > 0
}

// drop selects an archive's lines the plan destroys and counts them per
// case.
func (p *plan) drop(ctx context.Context, archiveID uuid.UUID, spec archive.TableSpec, docs []string) (map[int]bool, error) {
	rows, err := archive.DocRowGroups(ctx, p.f.pool, p.f.key, spec, docs)
	if err != nil {
		return nil, err
	}
	out, counts := map[int]bool{}, map[int32]int64{}
	for _, r := range rows {
		if ord, ok := p.owner(spec.Table, r.Groups); ok {
			var n int
			if _, err := fmt.Sscan(r.ID, &n); err != nil {
				return nil, fmt.Errorf("line ordinal %q: %w", r.ID, err)
			}
			out[n] = true
			counts[ord]++
		}
	}
	if archiveID != uuid.Nil {
		p.lines[archiveID] = counts
	}
	return out, nil
}

// recheck is the re-check of each rewrite's booking: under the clocks'
// lock (the caller holds the holds lock), nothing what is due depends on
// changed since the plan (else errChanged: it is computed again), and the
// lines the rewrite drops are recorded to their cases.
func (p *plan) recheck() func(ctx context.Context, tx pgx.Tx, archiveID uuid.UUID) error {
	return func(ctx context.Context, tx pgx.Tx, archiveID uuid.UUID) error {
		q := queries.New(tx)
		if err := q.LockClocksShare(ctx); err != nil {
			return err
		}
		now, err := q.DispositionStamp(ctx)
		if err != nil {
			return fmt.Errorf("what a batch depends on: %w", err)
		}
		if !sameStamp(now, p.stamp) {
			return errChanged
		}
		for ord, n := range p.lines[archiveID] {
			if _, err := q.AddDispositionCaseRows(ctx, queries.AddDispositionCaseRowsParams{Rows: n, DispositionID: pgUUID(p.id), Ord: ord}); err != nil {
				return fmt.Errorf("record the rows destroyed: %w", err)
			}
		}
		return nil
	}
}

func sameStamp(a, b queries.DispositionStampRow) bool {
	return a == b
}

// Outcomes of a batch's case.
const (
	outcomeDestroyed = "destroyed"
	outcomePartial   = "partial"
	outcomeSkipped   = "skipped"
)

// certificate is a batch's proof of disposition: the act, its schedule
// version and items with their authority, the counts per item and table,
// the archives rewritten and purged with their lineage, who proposed and
// approved and when, and the cases by keyed hash only.
type certificate struct {
	DispositionID     uuid.UUID     `json:"disposition_id"`
	Service           string        `json:"service"`
	ScheduleVersion   string        `json:"schedule_version"`
	AsOf              string        `json:"as_of"`
	ProposedBy        string        `json:"proposed_by"`
	ProposedAt        time.Time     `json:"proposed_at"`
	ApprovedBy        string        `json:"approved_by"`
	ApprovedAt        time.Time     `json:"approved_at"`
	ExecutedAt        time.Time     `json:"executed_at"`
	Items             []certItem    `json:"items"`
	Archives          []certArchive `json:"archives"`
	ArchivesRewritten int           `json:"archives_rewritten"`
	ArchivesPurged    int           `json:"archives_purged"`
	HotRowsRemoved    int64         `json:"hot_rows_removed"`
	RowsRemoved       int64         `json:"rows_removed"`
	Cases             []certCase    `json:"cases"`
	SubjectHashAlg    string        `json:"subject_hash_alg"`
}

// SubjectHashAlg says how a certificate's case hashes are computed.
const SubjectHashAlg = "HMAC-SHA256 of the canonical subject (case:<n>) under the service's subject key"

type certItem struct {
	Item      string           `json:"item"`
	Series    string           `json:"series"`
	Authority string           `json:"authority"`
	Cases     int              `json:"cases"`
	Rows      map[string]int64 `json:"rows"`
}

type certArchive struct {
	ArchiveID    uuid.UUID  `json:"archive_id"`
	Table        string     `json:"table"`
	OldSHA256    string     `json:"old_sha256"`
	OldRecords   int        `json:"old_record_count"`
	Purged       bool       `json:"purged"`
	NewArchiveID *uuid.UUID `json:"new_archive_id"`
	NewDataKey   *string    `json:"new_data_key"`
	NewSHA256    *string    `json:"new_sha256"`
	NewRecords   int        `json:"new_record_count"`
	RowsRemoved  int        `json:"rows_removed"`
}

type certCase struct {
	SubjectHash   string  `json:"subject_hash"`
	Day           *string `json:"day,omitempty"`
	Series        string  `json:"series"`
	Item          string  `json:"item"`
	Due           string  `json:"due"`
	Outcome       string  `json:"outcome"`
	Reason        string  `json:"reason,omitempty"`
	RowsDestroyed int64   `json:"rows_destroyed"`
	ord           int32
}

// certificate computes the batch's certificate from its cases' recorded
// rows, the final plan (the cases destroyed) and the lineage.
func (f *Finder) certificate(run *batchRun, final *plan, lineage []queries.ExpungementLineageRow) certificate {
	d := run.d
	c := certificate{DispositionID: d.DispositionID.Bytes, Service: f.exec.Service, ScheduleVersion: d.ScheduleVersion, AsOf: d.AsOf.Time.Format(time.DateOnly),
		ProposedBy: d.ProposedBy, ProposedAt: d.ProposedAt.Time.UTC(), ApprovedBy: run.approver, ApprovedAt: d.ApprovedAt.Time.UTC(),
		ExecutedAt: time.Now().UTC().Truncate(time.Microsecond), Items: []certItem{}, Archives: []certArchive{}, Cases: []certCase{}, SubjectHashAlg: SubjectHashAlg}
	itemAt := map[string]int{}
	for _, bc := range run.cases {
		cc := certCase{SubjectHash: subject.Hex(bc.SubjectHash), Series: bc.Series, Item: bc.ItemID, Due: bc.Due.Time.Format(time.DateOnly),
			Outcome: outcomeDestroyed, RowsDestroyed: bc.RowsDestroyed, ord: bc.Ord}
		if bc.Day.Valid {
			s := bc.Day.Time.Format(time.DateOnly)
			cc.Day = &s
		}
		switch why, skip := final.skipped[bc.Ord]; {
		case !skip && final.kept[bc.Ord]:
			cc.Outcome, cc.Reason = outcomePartial, "rows it shares with a case outside the batch are kept until that case's own disposition"
		case skip && bc.RowsDestroyed > 0 && final.gone[bc.Ord]: // destroyed whole by the archive rewrites
		case skip && bc.RowsDestroyed > 0:
			cc.Outcome, cc.Reason = outcomePartial, why
		case skip:
			cc.Outcome, cc.Reason = outcomeSkipped, why
		}
		c.RowsRemoved += bc.RowsDestroyed
		c.Cases = append(c.Cases, cc)
		i, ok := itemAt[bc.ItemID]
		if !ok {
			i = len(c.Items)
			itemAt[bc.ItemID] = i
			c.Items = append(c.Items, certItem{Item: bc.ItemID, Series: bc.Series, Authority: bc.Authority, Rows: map[string]int64{}})
		}
		if cc.Outcome == outcomeDestroyed {
			c.Items[i].Cases++
		}
		c.Items[i].Rows[bc.Series] += bc.RowsDestroyed
	}
	var archived int64
	for _, l := range lineage {
		a := certArchive{ArchiveID: l.ArchiveID.Bytes, Table: l.TableName, OldSHA256: l.DataSha256, OldRecords: int(l.RecordCount),
			RowsRemoved: int(l.RecordCount), Purged: !l.NewArchiveID.Valid}
		if l.NewArchiveID.Valid {
			id := uuid.UUID(l.NewArchiveID.Bytes)
			a.NewArchiveID, a.NewDataKey, a.NewSHA256, a.NewRecords = &id, l.NewDataKey, l.NewDataSha256, int(deref(l.NewRecordCount))
			a.RowsRemoved -= a.NewRecords
			c.ArchivesRewritten++
		} else {
			c.ArchivesPurged++
		}
		archived += int64(a.RowsRemoved)
		c.Archives = append(c.Archives, a)
	}
	c.HotRowsRemoved = c.RowsRemoved - archived
	return c
}

func marshalIndent(v any) ([]byte, error) { return json.MarshalIndent(v, "", "  ") }
