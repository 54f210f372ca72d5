package prune

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
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

// Eligibility describes the rows older than a number of days that match a
// policy's predicate.
type Eligibility struct {
	// Count is the number of such rows.
	Count int64
	// OldestAge is the age of the oldest such row; nil when there is none.
	OldestAge *time.Duration
}

// OldestAgeSeconds is OldestAge in seconds, or nil.
func (e Eligibility) OldestAgeSeconds() *float64 {
	if e.OldestAge == nil {
		return nil
	}
	s := e.OldestAge.Seconds()
	return &s
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
	q := "SELECT count(*), EXTRACT(EPOCH FROM now() - min(" + pgx.Identifier{p.AgeColumn}.Sanitize() + "))::float8 FROM " +
		p.table() + " WHERE " + p.whereAged()
	var e Eligibility
	var secs *float64
	if err := db.QueryRow(ctx, q, d).Scan(&e.Count, &secs); err != nil {
		return e, fmt.Errorf("inspect %s: %w", p.Table, err)
	}
	if secs != nil {
		age := time.Duration(*secs * float64(time.Second))
		e.OldestAge = &age
	}
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
	q := "SELECT EXTRACT(EPOCH FROM now() - min(" + pgx.Identifier{p.AgeColumn}.Sanitize() + "))::float8 FROM " +
		p.table() + " WHERE " + p.whereAged()
	var secs *float64
	if err := db.QueryRow(ctx, q, w).Scan(&secs); err != nil {
		return 0, fmt.Errorf("inspect %s: %w", p.Table, err)
	}
	if secs == nil {
		return 0, nil
	}
	return time.Duration(*secs * float64(time.Second)), nil
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
}

// Plan reports what a real run would delete, without deleting anything.
func Plan(ctx context.Context, db DB, p Policy) (DryRun, error) {
	if p.WindowDays == 0 {
		return DryRun{}, nil
	}
	e, err := CountOlderThan(ctx, db, p, p.WindowDays)
	if err != nil {
		return DryRun{}, err
	}
	return DryRun{Eligibility: e, Batches: p.batchesFor(e.Count), WouldCap: e.Count >= p.cycleCap()}, nil
}

func (p Policy) batchesFor(eligible int64) int64 {
	batch, capRows := p.batchSize(), p.cycleCap()
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

// ExplainSelection EXPLAINs the policy's batch selection (the same predicate,
// cutoff and LIMIT as the delete's inner SELECT) without running it.
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
	q := "EXPLAIN (FORMAT JSON) SELECT ctid FROM " + p.table() + " WHERE " + p.whereAged() + " LIMIT $2::int"
	var raw []byte
	if err := db.QueryRow(ctx, q, w, lim).Scan(&raw); err != nil {
		return pc, fmt.Errorf("explain %s: %w", p.Table, err)
	}
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &plans); err != nil {
		return pc, fmt.Errorf("explain %s: unreadable plan: %w", p.Table, err)
	}
	if len(plans) == 0 {
		return pc, fmt.Errorf("explain %s: unreadable plan: no plan in %q", p.Table, raw)
	}
	var b strings.Builder
	plans[0].Plan.walk(0, func(depth int, n planNode) {
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
	pc.Plan = b.String()
	if err := db.QueryRow(ctx, "SELECT greatest(reltuples, 0)::float8 FROM pg_class WHERE oid = to_regclass($1)", p.table()).Scan(&pc.TableRows); err != nil {
		return pc, fmt.Errorf("explain %s: table estimate: %w", p.Table, err)
	}
	return pc, nil
}

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
