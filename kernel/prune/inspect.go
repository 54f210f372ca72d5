package prune

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The read-only queries below are the SQL the kernel builds generically from
// a Policy, so that every swept table gets a dry run, a backlog gauge, an
// overrun invariant and a plan check without code of its own. They are
// reviewed like SQL: the table and column are quoted identifiers, the
// predicate is the policy's static code, and every value (window, limit) is a
// bound parameter.

// ErrNotInspectable is returned (wrapped) for a policy without AgeColumn or
// Eligible.
var ErrNotInspectable = errors.New("prune: policy has no AgeColumn/Eligible to inspect")

// Inspectable checks that the kernel can build the policy's read-only
// queries.
func (p Policy) Inspectable() error {
	if err := p.Validate(); err != nil {
		return err
	}
	if strings.TrimSpace(p.AgeColumn) == "" || strings.TrimSpace(p.Eligible) == "" {
		return fmt.Errorf("%w: %s", ErrNotInspectable, p.Table)
	}
	if strings.Contains(p.Eligible, ";") || strings.Contains(p.Eligible, "$") {
		return fmt.Errorf("%w: %s: the predicate must be one static expression without parameters", ErrInvalidPolicy, p.Table)
	}
	return nil
}

// whereAged is the policy's predicate plus the age cutoff at $1 days, by the
// database clock.
func (p Policy) whereAged() string {
	return "(" + p.Eligible + ") AND " + pgx.Identifier{p.AgeColumn}.Sanitize() + " < now() - make_interval(days => $1::int)"
}

func (p Policy) table() string { return pgx.Identifier{p.Table}.Sanitize() }

// Timestamps at the ends of PostgreSQL's range: ages are computed from a
// row's timestamp clamped into them, so a row at -infinity, BC or
// +infinity yields a large but finite age (about 2.1e11 s, or -9.2e12 s for
// the far future) instead of an interval overflow or an Inf that JSON
// cannot carry.
const (
	earliestTimestamp = "'4713-11-24 00:00:00+00 BC'::timestamptz"
	latestTimestamp   = "'294276-12-31 23:59:59+00'::timestamptz"
)

// ageSeconds is the SQL of now() - ts in seconds for a timestamptz
// expression ts, finite over the whole timestamptz range (see
// earliestTimestamp).
// NULL (no row) stays NULL.
func ageSeconds(ts string) string {
	return "(CASE WHEN " + ts + " IS NULL THEN NULL ELSE EXTRACT(EPOCH FROM now()) - EXTRACT(EPOCH FROM LEAST(GREATEST(" +
		ts + ", " + earliestTimestamp + "), " + latestTimestamp + ")) END)::float8"
}

// Eligibility describes the rows older than a number of days that match a
// policy's predicate.
type Eligibility struct {
	// Count is the number of such rows.
	Count int64
	// OldestAge is the age of the oldest such row; nil when there is none.
	// A time.Duration spans ±292 years: an older row (BC, -infinity)
	// saturates it; OldestAgeSeconds has the exact figure.
	OldestAge *time.Duration
	// oldestSecs is the age in seconds as the database computed it.
	oldestSecs *float64
}

// OldestAgeSeconds is the oldest row's age in seconds (exact, finite for
// any timestamp), or nil.
func (e Eligibility) OldestAgeSeconds() *float64 {
	if e.oldestSecs != nil {
		s := *e.oldestSecs
		return &s
	}
	if e.OldestAge == nil {
		return nil
	}
	s := e.OldestAge.Seconds()
	return &s
}

// withAge sets the oldest age from seconds, saturating the Duration.
func (e *Eligibility) withAge(secs *float64) {
	if secs == nil {
		return
	}
	s := *secs
	d := durationOf(s)
	e.OldestAge, e.oldestSecs = &d, &s
}

// durationOf converts seconds to a Duration, saturating at its range
// instead of overflowing (an age of 6,700 years is not -292 years).
func durationOf(secs float64) time.Duration {
	switch ns := secs * float64(time.Second); {
	case ns >= math.MaxInt64:
		return time.Duration(math.MaxInt64)
	case ns <= math.MinInt64:
		return time.Duration(math.MinInt64)
	default:
		return time.Duration(ns)
	}
}

// CountOlderThan counts the policy's rows older than days (by the database
// clock) and finds the oldest one's age. It deletes nothing.
func CountOlderThan(ctx context.Context, db DB, p Policy, days int) (Eligibility, error) {
	if err := p.Inspectable(); err != nil {
		return Eligibility{}, err
	}
	d, err := toInt32(int64(days))
	if err != nil {
		return Eligibility{}, fmt.Errorf("inspect %s: days: %w", p.Table, err)
	}
	q := "SELECT count(*), " + ageSeconds("min("+pgx.Identifier{p.AgeColumn}.Sanitize()+")") + " FROM " +
		p.table() + " WHERE " + p.whereAged()
	var e Eligibility
	var secs *float64
	if err := db.QueryRow(ctx, q, d).Scan(&e.Count, &secs); err != nil {
		return e, fmt.Errorf("inspect %s: %w", p.Table, err)
	}
	e.withAge(secs)
	return e, nil
}

// CountFutureDated counts the policy's rows (matching its predicate) whose
// age column is more than skew ahead of the database clock: a sweep keeps
// them forever, since they never grow old. OldestAge is the age of the row
// furthest in the future (negative). It deletes nothing.
func CountFutureDated(ctx context.Context, db DB, p Policy, skew time.Duration) (Eligibility, error) {
	if err := p.Inspectable(); err != nil {
		return Eligibility{}, err
	}
	col := pgx.Identifier{p.AgeColumn}.Sanitize()
	q := "SELECT count(*), " + ageSeconds("max("+col+")") + " FROM " + p.table() +
		" WHERE (" + p.Eligible + ") AND " + col + " > now() + make_interval(secs => $1::float8)"
	var e Eligibility
	var secs *float64
	if err := db.QueryRow(ctx, q, skew.Seconds()).Scan(&e.Count, &secs); err != nil {
		return e, fmt.Errorf("inspect %s: %w", p.Table, err)
	}
	e.withAge(secs)
	return e, nil
}

// OldestEligibleAge is the age of the oldest row the policy's sweep may
// delete now, or 0 when none is eligible. It reads one index entry when the
// table has the index its sweep needs, so it is cheap enough for every cycle.
func OldestEligibleAge(ctx context.Context, db DB, p Policy) (time.Duration, error) {
	if err := p.Inspectable(); err != nil {
		return 0, err
	}
	w, err := toInt32(int64(p.WindowDays))
	if err != nil {
		return 0, fmt.Errorf("inspect %s: window: %w", p.Table, err)
	}
	q := "SELECT " + ageSeconds("min("+pgx.Identifier{p.AgeColumn}.Sanitize()+")") + " FROM " +
		p.table() + " WHERE " + p.whereAged()
	var secs *float64
	if err := db.QueryRow(ctx, q, w).Scan(&secs); err != nil {
		return 0, fmt.Errorf("inspect %s: %w", p.Table, err)
	}
	if secs == nil {
		return 0, nil
	}
	return durationOf(*secs), nil
}

// DryRun is what a real PruneTable call would do now.
type DryRun struct {
	Eligibility
	// Batches is the number of DELETE statements a real run would take at
	// the full batch size (a run ends on its first short batch, so a
	// multiple of the batch size costs one extra, empty batch). A policy
	// that yields to writers takes more: its first YieldProbe, and any time
	// other sessions write, run at the yield batch size.
	Batches int64
	// WouldCap is true when the eligible rows exceed the cycle cap.
	WouldCap bool
	// PartitionsToDrop and PartitionsToKeep (a range-partitioned table):
	// the old partitions a real run would retire whole (up to its
	// partition cap) and those it would keep because a row in them must
	// stay, read without a lock (a real run checks again under one).
	PartitionsToDrop []string
	PartitionsToKeep []string
	// NotRetired says why no partition is considered (see
	// PartitionReport.NotRetired).
	NotRetired string
}

// Plan reports what a real run would delete, without deleting anything. A
// partitioned table is planned by the same decisions a real run makes
// (planPartitions): the partitions it would drop (their rows counted, in
// the cycle cap), those it would keep, and the batches left for the rest.
func Plan(ctx context.Context, db DB, p Policy) (DryRun, error) {
	if p.WindowDays == 0 {
		return DryRun{}, nil
	}
	e, err := CountOlderThan(ctx, db, p, p.WindowDays)
	if err != nil {
		return DryRun{}, err
	}
	d := DryRun{Eligibility: e, Batches: p.batchesWithin(e.Count, p.cycleCap()), WouldCap: e.Count >= p.cycleCap()}
	if !p.RetirePartitions {
		return d, nil
	}
	pp, err := p.planPartitions(ctx, db, p.cycleCap())
	if err != nil {
		return d, err
	}
	d.PartitionsToDrop, d.PartitionsToKeep, d.NotRetired = pp.drop, pp.keep, pp.notRetired
	if pp.capped { // a real run ends after its partitions: no batch
		d.Batches, d.WouldCap = 0, true
		return d, nil
	}
	rest, capLeft := max(e.Count-pp.dropRows, 0), p.cycleCap()-pp.dropRows
	d.Batches, d.WouldCap = p.batchesWithin(rest, capLeft), pp.dropRows+rest >= p.cycleCap()
	return d, nil
}

// partitionPlan is what a retirement would do now: the old partitions it
// would drop (and their rows) and keep, whether the partition cap would end
// the call, and why none is considered (Report.NotRetired).
type partitionPlan struct {
	drop, keep []string
	dropRows   int64
	capped     bool
	notRetired string
}

// planPartitions decides, without a lock, what Retire decides under one
// (the same order, the same partition and row caps), for the dry run.
func (p Policy) planPartitions(ctx context.Context, db DB, rowCap int64) (partitionPlan, error) {
	var pp partitionPlan
	if p.Eligible == "" || p.AgeColumn == "" {
		return pp, nil
	}
	if yes, err := p.Partitioned(ctx, db); err != nil || !yes {
		return pp, err
	}
	olds, notRetired, err := p.oldPartitions(ctx, db)
	if err != nil {
		return pp, err
	}
	pp.notRetired = notRetired
	limit := p.MaxPartitions
	if limit == 0 {
		limit = DefaultMaxPartitions
	}
	for _, o := range olds {
		if len(pp.drop) >= limit {
			pp.capped = true
			break
		}
		var stay bool
		var rows int64
		// Keep is the policy's reviewed SQL, never input.
		q := "SELECT EXISTS (SELECT 1 FROM " + o.ident() + " WHERE " + p.keepPredicate() + "), (SELECT count(*) FROM " + o.ident() + ")"
		if err := db.QueryRow(ctx, q).Scan(&stay, &rows); err != nil {
			return pp, fmt.Errorf("prune %s: plan partition %s: %w", p.Table, o.name, err)
		}
		if stay {
			pp.keep = append(pp.keep, o.name)
			continue
		}
		if rowCap > 0 && rows > rowCap-pp.dropRows {
			break // over the row cap: the batch loop takes its rows
		}
		pp.drop, pp.dropRows = append(pp.drop, o.name), pp.dropRows+rows
	}
	return pp, nil
}

// batchesWithin is the DELETE statements a run takes for eligible rows
// within capRows rows of the cycle cap.
func (p Policy) batchesWithin(eligible, capRows int64) int64 {
	batch := p.batchSize()
	if capRows <= 0 {
		return 0
	}
	if eligible >= capRows {
		return (capRows + batch - 1) / batch
	}
	return eligible/batch + 1
}

// PlanCheck is the planner's view of a policy's batch selection.
type PlanCheck struct {
	// SeqScan is true when the plan reads the whole table.
	SeqScan bool
	// TableRows is the planner's row estimate of the table (pg_class).
	TableRows float64
	// Plan is the plan as EXPLAIN prints it, one node a line.
	Plan string
}

// ExplainSelection EXPLAINs the statements the policy's sweep actually
// executes for its first batch, without deleting anything: it runs the
// policy's own DeleteBatch against a recording database inside a READ ONLY
// transaction (rolled back), where every statement is EXPLAINed first; a
// read (a keyset sweep's bound query) is then executed too, so the statements
// after it are explained with the arguments the real batch would bind, and a
// write (the DELETE) is only explained, never executed (the read-only
// transaction would refuse it anyway). SeqScan is true when any of the
// statements sequentially scans the policy's table.
func ExplainSelection(ctx context.Context, db DB, p Policy) (PlanCheck, error) {
	var pc PlanCheck
	if err := p.Inspectable(); err != nil {
		return pc, err
	}
	window := p.WindowDays
	if window == 0 {
		window = MaxWindowDays // disabled: explain the shape with any window
	}
	w, err := toInt32(int64(window))
	if err != nil {
		return pc, err
	}
	lim, err := toInt32(p.batchSize())
	if err != nil {
		return pc, err
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return pc, fmt.Errorf("explain %s: begin: %w", p.Table, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "SET TRANSACTION READ ONLY"); err != nil {
		return pc, fmt.Errorf("explain %s: read only: %w", p.Table, err)
	}
	ex := &explainer{tx: tx}
	if _, err := p.DeleteBatch(ctx, ex, BatchParams{WindowDays: w, Limit: lim, Cursor: &Cursor{}}); err != nil {
		return pc, fmt.Errorf("explain %s: %w", p.Table, err)
	}
	if len(ex.plans) == 0 {
		return pc, fmt.Errorf("explain %s: its batch delete ran no statement", p.Table)
	}
	var b strings.Builder
	for _, plan := range ex.plans {
		plan.walk(0, func(depth int, n planNode) {
			fmt.Fprintf(&b, "%s%s", strings.Repeat("  ", depth), n.NodeType)
			if n.IndexName != "" {
				fmt.Fprintf(&b, " using %s", n.IndexName)
			}
			if n.RelationName != "" {
				fmt.Fprintf(&b, " on %s", n.RelationName)
			}
			b.WriteString("\n")
			if n.NodeType == "Seq Scan" && n.RelationName == p.Table {
				pc.SeqScan = true
			}
		})
	}
	pc.Plan = b.String()
	if err := tx.QueryRow(ctx, "SELECT greatest(reltuples, 0)::float8 FROM pg_class WHERE oid = to_regclass($1)", p.table()).Scan(&pc.TableRows); err != nil {
		return pc, fmt.Errorf("explain %s: table estimate: %w", p.Table, err)
	}
	return pc, nil
}

// explainer is the DB a batch delete runs against in ExplainSelection: it
// EXPLAINs every statement (with its arguments, as bound parameters) and
// records the plan; reads are then executed in the read-only transaction,
// writes are not.
type explainer struct {
	tx    pgx.Tx
	plans []planNode
}

func (e *explainer) explain(ctx context.Context, sql string, args []any) error {
	var raw []byte
	if err := e.tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+sql, args...).Scan(&raw); err != nil {
		return fmt.Errorf("explain: %w", err)
	}
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &plans); err != nil {
		return fmt.Errorf("explain: unreadable plan: %w", err)
	}
	if len(plans) == 0 {
		return fmt.Errorf("explain: unreadable plan: no plan in %q", raw)
	}
	e.plans = append(e.plans, plans[0].Plan)
	return nil
}

func (e *explainer) Begin(ctx context.Context) (pgx.Tx, error) { return e.tx.Begin(ctx) }

func (e *explainer) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := e.explain(ctx, sql, args); err != nil {
		return pgconn.CommandTag{}, err
	}
	return pgconn.NewCommandTag("DELETE 0"), nil // explained, not executed
}

func (e *explainer) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := e.explain(ctx, sql, args); err != nil {
		return nil, err
	}
	return e.tx.Query(ctx, sql, args...)
}

func (e *explainer) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := e.explain(ctx, sql, args); err != nil {
		return errRow{err}
	}
	return e.tx.QueryRow(ctx, sql, args...)
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

type planNode struct {
	NodeType     string     `json:"Node Type"`
	RelationName string     `json:"Relation Name"`
	IndexName    string     `json:"Index Name"`
	Plans        []planNode `json:"Plans"`
}

func (n planNode) walk(depth int, fn func(int, planNode)) {
	fn(depth, n)
	for _, c := range n.Plans {
		c.walk(depth+1, fn)
	}
}
