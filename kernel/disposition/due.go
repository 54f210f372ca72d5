// Package disposition finds the records a schedule makes due and reviews
// their destruction (ADR-073): each case's rows, hot and archived, fall
// due together under the item of the schedule in force that covers them,
// from the case's clock and its newest record; rows about no case use
// their own date.
package disposition

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/schedule"
	"github.com/craig/retention/kernel/subject"
)

// ErrNoSchedule: no version of the schedule is in force, so nothing is
// due by it (archive.retention.<table>_days dates archives as before).
var ErrNoSchedule = errors.New("disposition: no records schedule is in force")

// Finder computes what is due on one service.
type Finder struct {
	pool      *pgxpool.Pool
	key       subject.Key
	specs     map[string]archive.TableSpec
	schedules *schedule.Schedules
	exec      *Execution
}

// NewFinder returns the finder of a service archiving specs, its cases
// hashed with key.
func NewFinder(pool *pgxpool.Pool, key subject.Key, specs []archive.TableSpec, schedules *schedule.Schedules) *Finder {
	m := map[string]archive.TableSpec{}
	for _, s := range specs {
		m[s.Table] = s
	}
	return &Finder{pool: pool, key: key, specs: m, schedules: schedules}
}

// DueCase is one case's rows of one series due under an item (or, with no
// Subject, the rows about no case of one day).
type DueCase struct {
	// Subject is the case (case:<n>) for the reviewers; "" for rows
	// about no case.
	Subject      string      `json:"subject"`
	SubjectHash  string      `json:"subject_hash"`
	Series       string      `json:"series"`
	Due          string      `json:"due"`
	RowsHot      int64       `json:"rows_hot"`
	RowsArchived int64       `json:"rows_archived"`
	Archives     []uuid.UUID `json:"archives"`
	// Holds are the active holds that keep some of its rows: it is not
	// destroyed while one is active.
	Holds []uuid.UUID `json:"holds"`
	// Batch is the undecided disposition batch that holds it, if any.
	Batch *uuid.UUID `json:"disposition_id"`

	hash []byte
	day  *time.Time // the day of rows about no case
	box  []byte
}

// DueItem is what is due under one item of the schedule.
type DueItem struct {
	Item      string    `json:"item"`
	Series    string    `json:"series"`
	Authority string    `json:"authority"`
	Action    string    `json:"action"`
	Retain    string    `json:"retain"`
	Rows      int64     `json:"rows"`
	Cases     []DueCase `json:"cases"`
}

// Due is what the schedule in force makes due on a day.
type Due struct {
	Version string    `json:"version"`
	AsOf    string    `json:"as_of"`
	Items   []DueItem `json:"items"`
	// Unindexed counts the archives whose case rows are not indexed yet:
	// none of their rows is listed (never early), and the listing says so.
	Unindexed int64 `json:"unindexed_archives"`
}

// Find lists what is due on asOf's UTC day under the version in force.
func (f *Finder) Find(ctx context.Context, asOf time.Time, unindexed int64) (Due, error) {
	return f.find(ctx, f.pool, asOf, unindexed)
}

// find is Find on db (a transaction: Freeze's, under its lock).
func (f *Finder) find(ctx context.Context, db prune.DB, asOf time.Time, unindexed int64) (Due, error) {
	d, err := f.dueRows(ctx, db, asOf, nil)
	if err != nil {
		return Due{}, err
	}
	out := Due{Version: d.version.Version, AsOf: d.day.Format(time.DateOnly), Items: []DueItem{}, Unindexed: unindexed}
	if err := f.gather(&out, d.rows, d.items, d.hot); err != nil {
		return Due{}, err
	}
	return out, nil
}

// dueGroups are the groups due on a day under a version, as DueCases
// returns them.
type dueGroups struct {
	version *schedule.Version
	day     time.Time
	items   map[string]schedule.Item
	hot     map[string]string
	rows    []queries.DueCasesRow
}

// dueRows computes the groups due on asOf's UTC day under the version in
// force, on db; given, when it has a series, are that series' hot facts
// (else they are read from its table).
func (f *Finder) dueRows(ctx context.Context, db prune.DB, asOf time.Time, given map[string][]archive.CaseRows) (dueGroups, error) {
	v, err := f.schedules.InForce(ctx)
	if err != nil {
		return dueGroups{}, err
	}
	if v == nil {
		return dueGroups{}, ErrNoSchedule
	}
	d := dueGroups{version: v, day: asOf.UTC().Truncate(24 * time.Hour)}
	p := queries.DueCasesParams{AsOf: pgtype.Date{Time: d.day, Valid: true}}
	if d.items, err = itemParams(&p, v); err != nil {
		return dueGroups{}, err
	}
	if d.hot, err = f.hotParams(ctx, db, &p, given); err != nil {
		return dueGroups{}, err
	}
	if d.rows, err = queries.New(db).DueCases(ctx, p); err != nil {
		return dueGroups{}, fmt.Errorf("due cases: %w", err)
	}
	return d, nil
}

// itemParams puts the version's items into p, and returns them by id.
func itemParams(p *queries.DueCasesParams, v *schedule.Version) (map[string]schedule.Item, error) {
	items := map[string]schedule.Item{}
	for _, it := range v.Document.Items {
		per, err := schedule.ParsePeriod(it.Retain)
		if err != nil {
			return nil, fmt.Errorf("schedule %s item %s: %w", v.Version, it.ID, err)
		}
		class := ""
		if it.When != nil {
			class = strings.TrimSpace(it.When.Classification)
		}
		items[it.ID] = it
		p.ItemIds, p.ItemSeries, p.ItemClasses = append(p.ItemIds, it.ID), append(p.ItemSeries, it.Series), append(p.ItemClasses, class)
		p.ItemRecord = append(p.ItemRecord, it.Starts.Has(schedule.ClockRecord))
		p.ItemClosed = append(p.ItemClosed, it.Starts.Has(schedule.ClockCaseClosed))
		p.ItemMonths, p.ItemDays = append(p.ItemMonths, int32(per.Months)), append(p.ItemDays, int32(per.Days))
		p.ItemPermanent = append(p.ItemPermanent, per.Permanent)
	}
	return items, nil
}

// hotParams puts the hot rows' facts of the items' series into p, and
// returns the hot cases by hash.
func (f *Finder) hotParams(ctx context.Context, db prune.DB, p *queries.DueCasesParams, given map[string][]archive.CaseRows) (map[string]string, error) {
	hot := map[string]string{}
	seen := map[string]bool{}
	for _, series := range p.ItemSeries {
		spec, ok := f.specs[series]
		if !ok || seen[series] {
			continue
		}
		seen[series] = true
		facts, ok := given[series]
		if !ok {
			var err error
			if facts, err = archive.HotCaseRows(ctx, db, f.key, spec); err != nil {
				return nil, err
			}
		}
		for _, c := range facts {
			if !c.Case.IsZero() {
				hot[string(c.Hash)] = c.Case.String()
			}
			day := time.Time{}
			if len(c.Hash) == 0 {
				day = c.Newest
			}
			hot[hotKey(series, c.Hash, day)] = ""
			p.HotSeries, p.HotHashes, p.HotOthers = append(p.HotSeries, series), append(p.HotHashes, c.Hash), append(p.HotOthers, c.Others)
			p.HotOldest = append(p.HotOldest, pgtype.Date{Time: c.Oldest, Valid: true})
			p.HotNewest = append(p.HotNewest, pgtype.Date{Time: c.Newest, Valid: true})
			p.HotCounts = append(p.HotCounts, c.Rows)
		}
	}
	return hot, nil
}

// hotKey marks, in the hot map, that series has hot rows of the case hash
// (for rows about no case, of day).
func hotKey(series string, hash []byte, day time.Time) string {
	k := "\x00hot\x00" + series + "\x00" + string(hash)
	if len(hash) == 0 {
		k += "\x00" + day.Format(time.DateOnly)
	}
	return k
}

// gather lists a case's groups (its rows with the same other subjects) as
// one case: its due rows, the latest of their dates, every archive and
// hold.
func (f *Finder) gather(out *Due, rows []queries.DueCasesRow, items map[string]schedule.Item, hot map[string]string) error {
	itemAt := map[string]int{}
	caseAt := map[string]int{}
	for _, r := range rows {
		it := items[r.ItemID]
		ii, ok := itemAt[r.ItemID]
		if !ok {
			ii = len(out.Items)
			itemAt[r.ItemID] = ii
			out.Items = append(out.Items, DueItem{Item: it.ID, Series: it.Series, Authority: it.Authority, Action: string(it.ActionOrDefault()),
				Retain: it.Retain, Cases: []DueCase{}})
		}
		di := &out.Items[ii]
		k := r.ItemID + "\x00" + r.Series + "\x00" + string(r.SubjectHash) + "\x00" + r.Day.Time.String()
		ci, ok := caseAt[k]
		if !ok {
			c, err := f.newCase(r, hot)
			if err != nil {
				return err
			}
			ci = len(di.Cases)
			caseAt[k] = ci
			di.Cases = append(di.Cases, c)
		}
		c := &di.Cases[ci]
		if d := r.Due.Time.Format(time.DateOnly); d > c.Due {
			c.Due = d
		}
		c.RowsHot += r.HotRows
		c.RowsArchived += r.ArchivedRows
		c.Archives = union(c.Archives, uuidsOf(r.Archives))
		c.Holds = union(c.Holds, uuidsOf(r.Holds))
		di.Rows += r.HotRows + r.ArchivedRows
	}
	return nil
}

// newCase is a listed case as its first group names it.
func (f *Finder) newCase(r queries.DueCasesRow, hot map[string]string) (DueCase, error) {
	c := DueCase{Series: r.Series, Archives: []uuid.UUID{}, Holds: []uuid.UUID{}, hash: r.SubjectHash, box: r.SubjectBox}
	if r.OpenBatch.Valid {
		id := uuid.UUID(r.OpenBatch.Bytes)
		c.Batch = &id
	}
	if r.Day.Valid {
		d := r.Day.Time
		c.day = &d
	}
	if len(r.SubjectHash) == 0 {
		return c, nil
	}
	c.SubjectHash = subject.Hex(r.SubjectHash)
	if s, ok := hot[string(r.SubjectHash)]; ok {
		c.Subject = s
	} else if len(r.SubjectBox) > 0 {
		plain, err := f.key.Unbox(r.SubjectBox)
		if err != nil {
			return c, fmt.Errorf("the case of %s: %w", c.SubjectHash, err)
		}
		c.Subject = string(plain)
	}
	return c, nil
}

// union adds to a the ids of b it lacks, sorted.
func union(a, b []uuid.UUID) []uuid.UUID {
	for _, id := range b {
		if !slices.Contains(a, id) {
			a = append(a, id)
		}
	}
	slices.SortFunc(a, func(x, y uuid.UUID) int { return bytes.Compare(x[:], y[:]) })
	return a
}

func uuidsOf(in []pgtype.UUID) []uuid.UUID {
	out := make([]uuid.UUID, 0, len(in))
	for _, u := range in {
		out = append(out, u.Bytes)
	}
	return out
}
