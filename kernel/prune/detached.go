package prune

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Kernel-built SQL of the detached-partition record (transport migrations
// 00005, 00008): the detach transaction records what it detached, with its
// bounds; the drop's transaction, or the one attaching it again, forgets
// it. Every value is a parameter.
const (
	recordDetached = `INSERT INTO retention_detached_partitions (table_oid, schema_name, table_name, parent, lower_bound, upper_bound, bound_known)
VALUES (to_regclass($1)::oid, $2, $3, $4, $5, $6, true)
ON CONFLICT (table_oid) DO UPDATE SET schema_name = EXCLUDED.schema_name, table_name = EXCLUDED.table_name, parent = EXCLUDED.parent,
    lower_bound = EXCLUDED.lower_bound, upper_bound = EXCLUDED.upper_bound, bound_known = true, detached_at = now()`
	forgetDetached = `DELETE FROM retention_detached_partitions WHERE parent = $1 AND schema_name = $2 AND table_name = $3`
	// strandedOf lists the tables this policy's retirement detached that
	// still exist and are no longer partitions (a drop a crash or a busy
	// lock left undone), oldest first, each with whether its upper bound is
	// at or before the cutoff: only what the kernel itself recorded, never
	// a table that merely carries its comment. One that is not (the window
	// widened since its detach) is attached again, never left out of sight.
	strandedOf = `
SELECT r.schema_name, r.table_name, r.lower_bound, r.upper_bound, r.bound_known,
       r.upper_bound <= now() - make_interval(days => $2::int) AS old
FROM retention_detached_partitions r
JOIN pg_catalog.pg_class c ON c.oid = r.table_oid AND c.relname = r.table_name AND c.relkind = 'r' AND NOT c.relispartition
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace AND n.nspname = r.schema_name
WHERE r.parent = $1
ORDER BY r.upper_bound`
	// forgetGone forgets recorded tables that no longer exist (dropped by
	// hand): nothing is left to drop.
	forgetGone = `DELETE FROM retention_detached_partitions r
WHERE r.parent = $1 AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = r.table_oid AND c.relname = r.table_name)`
	// attachStatement renders, on the server, the ATTACH PARTITION that
	// puts a detached table back with its own bounds (DDL takes no
	// parameters: the bounds are rendered by the server from the typed
	// values, in a transaction whose TimeZone and DateStyle boundSettings
	// pinned, and read back by it alike). A NULL lower bound is MINVALUE.
	attachStatement = `SELECT format('ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM (%s) TO (%L)',
    to_regclass($1), to_regclass($2), coalesce(quote_literal($3::timestamptz), 'MINVALUE'), $4::timestamptz)`
)

// dropStranded finishes the drops a previous call left undone, within the
// call's partition and row caps.
func (r *retireRun) dropStranded(ctx context.Context) error {
	p := r.p
	window, err := toInt32(int64(p.WindowDays))
	if err != nil {
		return err
	}
	if _, err := r.db.Exec(ctx, forgetGone, p.Table); err != nil {
		return fmt.Errorf("prune %s: detached tables: %w", p.Table, err)
	}
	rows, err := r.db.Query(ctx, strandedOf, p.Table, window)
	if err != nil {
		return fmt.Errorf("prune %s: list detached tables: %w", p.Table, err)
	}
	stranded, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (detachedPartition, error) {
		d := detachedPartition{rows: -1}
		var old bool
		err := row.Scan(&d.o.schema, &d.o.name, &d.o.lower, &d.o.upper, &d.o.boundKnown, &old)
		d.young = !old
		return d, err
	})
	if err != nil {
		return fmt.Errorf("prune %s: list detached tables: %w", p.Table, err)
	}
	// Within the caps: a chunk at a time, as many as the partition cap
	// leaves; a table attached again, kept or failed frees its place.
	for len(stranded) > 0 {
		if r.full() {
			r.rep.Capped = true
			return nil
		}
		n := min(len(stranded), r.maxPartitions-r.taken)
		r.detached, stranded = stranded[:n], stranded[n:]
		r.taken += n
		if _, err := r.dropDetached(ctx); err != nil {
			return err
		}
	}
	return nil
}

// dropDetached drops the tables the call detached (or found detached), in
// one transaction (one commit flush for all of them), after checking once
// more, under ACCESS EXCLUSIVE, that each is still sealed or, if not, that
// no row of it must stay, counting its rows (no writer of the parent
// reaches them; one writing to one by name meets the seal). Each table
// runs under a savepoint: one whose lock is not granted in time is left
// detached for the next call (Busy: busy is then true); one holding a row
// that must stay (Kept), more rows than the cap leaves (the batch loop
// takes them), younger than the cutoff (Reattached) or whose DROP fails
// otherwise (Failed) is attached again; the others still go.
func (r *retireRun) dropDetached(ctx context.Context) (busy bool, err error) {
	if len(r.detached) == 0 {
		return false, nil
	}
	set := r.detached
	r.detached = nil
	p := r.p
	tx, err := beginReadCommitted(ctx, r.db)
	if err != nil {
		return false, fmt.Errorf("prune %s: drop: begin: %w", p.Table, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	rep := PartitionReport{DroppedRows: r.rep.DroppedRows}
	if r.returned == nil {
		r.returned = map[string]bool{}
	}
	left := r.rowCap - r.rep.DroppedRows
	for _, d := range set {
		outcome, rows, ferr := r.dropOne(ctx, tx, d, left)
		if ferr != nil && outcome != retiredFailed {
			return false, ferr
		}
		left -= rows
		busy = r.tally(&rep, d, outcome, rows, ferr) || busy
	}
	if err := commitDestroyed(ctx, tx); err != nil {
		return false, fmt.Errorf("prune %s: drop: commit: %w", p.Table, err)
	}
	r.rep.Dropped, r.rep.DroppedRows = append(r.rep.Dropped, rep.Dropped...), rep.DroppedRows
	r.rep.Kept, r.rep.Busy = append(r.rep.Kept, rep.Kept...), append(r.rep.Busy, rep.Busy...)
	r.rep.Failed, r.rep.Reattached = append(r.rep.Failed, rep.Failed...), append(r.rep.Reattached, rep.Reattached...)
	return busy, nil
}

// tally records one table's outcome in the drop set's report and frees its
// place under the partition cap when it is no longer off the table (or
// gone); it reports whether the table was busy.
func (r *retireRun) tally(rep *PartitionReport, d detachedPartition, outcome retirement, rows int64, ferr error) (busy bool) {
	name := d.o.name
	switch outcome {
	case retiredDropped:
		rep.Dropped, rep.DroppedRows = append(rep.Dropped, name), rep.DroppedRows+rows
		return false
	case retiredBusy:
		rep.Busy = append(rep.Busy, name)
		return true
	case retiredKept:
		rep.Kept = append(rep.Kept, name)
	case retiredReturned:
		rep.Reattached = append(rep.Reattached, name)
	case retiredFailed:
		rep.Failed = append(rep.Failed, PartitionFailure{Partition: name, Err: ferr})
	}
	r.taken--
	if outcome != retiredGone {
		r.returned[name] = true
	}
	return false
}

// dropOne is one table of dropDetached, under its own savepoint; left is
// the rows the call may still remove (when it has a cap). An error that is
// not retiredFailed's is the call's.
func (r *retireRun) dropOne(ctx context.Context, tx pgx.Tx, d detachedPartition, left int64) (retirement, int64, error) {
	p, o := r.p, d.o
	if _, err := tx.Exec(ctx, "SAVEPOINT retention_drop"); err != nil {
		return 0, 0, fmt.Errorf("prune %s: drop %s: %w", p.Table, o.name, err)
	}
	outcome := retiredReturned // younger than the cutoff: attached again, unread
	var dropErr error
	if !d.young {
		var rows int64
		var err error
		if outcome, rows, dropErr, err = r.dropChecked(ctx, tx, d, left); err != nil {
			return 0, 0, err
		}
		if outcome == retiredDropped {
			return outcome, rows, nil
		}
	}
	if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT retention_drop"); err != nil {
		return 0, 0, fmt.Errorf("prune %s: drop %s: %w", p.Table, o.name, err)
	}
	switch outcome {
	case retiredKept, retiredCapped, retiredFailed, retiredReturned:
		// It must not stay detached, out of the service's sight: attach it
		// again (its rows then go by the batch loop, or stay).
		busy, aerr := r.reattach(ctx, tx, o)
		switch {
		case busy:
			return retiredBusy, 0, nil // still detached, sealed, recorded: the next call
		case aerr != nil:
			return retiredFailed, 0, joinFailure(dropErr, aerr)
		}
	}
	return outcome, 0, dropErr
}

// dropChecked locks, checks and counts the table and drops it when nothing
// in it must stay and its rows fit the cap (the savepoint released). A
// DROP refused for another reason than a lock is retiredFailed, with that
// refusal as dropErr; err is the call's.
func (r *retireRun) dropChecked(ctx context.Context, tx pgx.Tx, d detachedPartition, left int64) (outcome retirement, rows int64, dropErr, err error) {
	p, o := r.p, d.o
	c, err := p.recheck(ctx, tx, d, r.lockTimeout)
	outcome, rows, err = c.outcome(p, o, err)
	if err != nil || outcome != retiredDropped {
		return outcome, 0, nil, err
	}
	if r.rowCap > 0 && rows > left {
		return retiredCapped, 0, nil, nil
	}
	b := &pgx.Batch{}
	b.Queue(forgetDetached, p.Table, o.schema, o.name)
	b.Queue("DROP TABLE " + o.ident())
	b.Queue("RELEASE SAVEPOINT retention_drop")
	derr := tx.SendBatch(ctx, b).Close()
	if derr == nil {
		return retiredDropped, rows, nil, nil
	}
	if outcome, _, err = lockOutcome(p, o, derr); err != nil {
		return retiredFailed, 0, fmt.Errorf("prune %s: drop %s: %w", p.Table, o.name, derr), nil
	}
	return outcome, 0, nil, nil
}

// recheck takes ACCESS EXCLUSIVE on a detached table and checks that it is
// still one (a table attached again meanwhile is not this retirement's to
// drop) and still sealed (sealName): then it holds the rows its detach
// counted (rows < 0, a stranded table's, are counted) and none that must
// stay. One that is not sealed is checked and counted again, in one scan.
// The first pipeline is one round trip; an unsealed table takes another.
func (p Policy) recheck(ctx context.Context, tx pgx.Tx, d detachedPartition, lockTimeout time.Duration) (c check, err error) {
	o := d.o
	var sealed bool
	b := &pgx.Batch{}
	lockFirst(b, o, lockTimeout, "on")
	b.Queue(stillDetached, o.ident()).QueryRow(c.scanStill)
	b.Queue(isSealed, o.ident(), sealName).QueryRow(func(row pgx.Row) error { return row.Scan(&sealed) })
	if err := tx.SendBatch(ctx, b).Close(); err != nil || c.gone {
		return c, err
	}
	switch {
	case sealed && d.rows >= 0:
		c.rows = d.rows
		return c, nil
	case sealed:
		return c, tx.QueryRow(ctx, "SELECT count(*) FROM "+o.ident()).Scan(&c.rows)
	}
	return c, tx.QueryRow(ctx, "SELECT count(*), coalesce(bool_or("+p.keepPredicate()+"), false) FROM "+o.ident()).Scan(&c.rows, &c.keep)
}

// joinFailure is a drop's failure and its re-attach's, the latter named.
func joinFailure(dropErr, attachErr error) error {
	if dropErr == nil {
		return attachErr
	}
	return fmt.Errorf("%w; %w", dropErr, attachErr)
}

// reattach attaches a detached table to the policy's table again with the
// bounds its record kept, unseals, unmarks and forgets it, under a
// savepoint of the drop's transaction. Rows of its range that landed in
// the parent's default partition meanwhile (written through the parent
// while it was detached) are moved into it first: the ATTACH would be
// refused otherwise, and they belong to it. A lock not granted in time
// leaves it detached, sealed and recorded for the next call (busy); any
// other failure too, with the error. A table recorded without its lower
// bound (before transport migration 00008) cannot be: it is left for an
// operator.
func (r *retireRun) reattach(ctx context.Context, tx pgx.Tx, o oldPartition) (busy bool, err error) {
	p := r.p
	if !o.boundKnown {
		return false, fmt.Errorf("prune %s: %s left detached: its record predates its lower bound (attach it by hand)", p.Table, o.name)
	}
	if _, err := tx.Exec(ctx, "SAVEPOINT retention_attach"); err != nil {
		return false, fmt.Errorf("prune %s: attach %s again: %w", p.Table, o.name, err)
	}
	err = r.attachSteps(ctx, tx, o)
	if err == nil {
		_, err = tx.Exec(ctx, "RELEASE SAVEPOINT retention_attach")
	}
	if err == nil {
		return false, nil
	}
	_, _ = tx.Exec(ctx, "ROLLBACK TO SAVEPOINT retention_attach")
	if outcome, _, lerr := lockOutcome(p, o, err); lerr == nil && outcome == retiredBusy {
		return true, nil
	}
	return false, fmt.Errorf("prune %s: attach %s again: %w", p.Table, o.name, err)
}

// defaultPartition names the parent's default partition (” when it has
// none); tableColumns lists a table's columns a row copy writes (not
// dropped, not generated), in order. Kernel-built catalog SQL; the tables
// are parameters.
const (
	defaultPartition = `SELECT coalesce((SELECT pt.partdefid::regclass::text FROM pg_catalog.pg_partitioned_table pt
    WHERE pt.partrelid = to_regclass($1) AND pt.partdefid <> 0), '')`
	tableColumns = `SELECT coalesce(array_agg(attname::text ORDER BY attnum), '{}') FROM pg_catalog.pg_attribute
    WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped AND attgenerated = ''`
)

func (r *retireRun) attachSteps(ctx context.Context, tx pgx.Tx, o oldPartition) error {
	p := r.p
	var stmt, def string
	var cols []string
	b := &pgx.Batch{}
	b.Queue("SELECT set_config('lock_timeout', $1, true)", serverMillis(r.lockTimeout))
	b.Queue(boundSettings)
	b.Queue("ALTER TABLE " + o.ident() + " DROP CONSTRAINT IF EXISTS " + sealName)
	b.Queue(attachStatement, pgx.Identifier{p.Table}.Sanitize(), o.ident(), o.lower, o.upper).QueryRow(func(row pgx.Row) error {
		return row.Scan(&stmt)
	})
	b.Queue(defaultPartition, pgx.Identifier{p.Table}.Sanitize()).QueryRow(func(row pgx.Row) error { return row.Scan(&def) })
	b.Queue(tableColumns, pgx.Identifier{p.Table}.Sanitize()).QueryRow(func(row pgx.Row) error { return row.Scan(&cols) })
	b.Queue(forgetDetached, p.Table, o.schema, o.name)
	b.Queue("COMMENT ON TABLE " + o.ident() + " IS NULL")
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	if def != "" && len(cols) > 0 {
		if _, err := tx.Exec(ctx, moveFromDefault(def, o, p.AgeColumn, cols), o.lower, o.upper); err != nil {
			return fmt.Errorf("move the default partition's rows of its range: %w", err)
		}
	}
	_, err := tx.Exec(ctx, stmt)
	return err
}

// moveFromDefault moves the rows of a range, [$1, $2) ($1 NULL: from
// MINVALUE), from the default partition def (a regclass rendering, already
// quoted) into the detached table o, whole rows, column by column. Kernel-
// built SQL: identifiers quoted, bounds parameters.
func moveFromDefault(def string, o oldPartition, ageColumn string, cols []string) string {
	quoted := make([]string, len(cols))
	for i, c := range cols {
		quoted[i] = pgx.Identifier{c}.Sanitize()
	}
	list, age := strings.Join(quoted, ", "), pgx.Identifier{ageColumn}.Sanitize()
	return "WITH moved AS (DELETE FROM " + def + " WHERE ($1::timestamptz IS NULL OR " + age + " >= $1) AND " + age + " < $2::timestamptz RETURNING " + list + ")" +
		" INSERT INTO " + o.ident() + " (" + list + ") OVERRIDING SYSTEM VALUE SELECT " + list + " FROM moved"
}
