package lifecycle_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/courtorder"
	"github.com/craig/retention/kernel/disposition"
	"github.com/craig/retention/kernel/lifecycle"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/schedule"
)

// hostileRecordSchedule: a case's rows fall due 30 days after the later of
// its closure and its newest record.
const hostileRecordSchedule = `version: "r-1"
items:
  - id: CW-R
    series: rule_evaluations
    starts: [record, case.closed]
    retain: P30D
    authority: GRS-2482
`

// archivedOf counts the archived lines of a case a subject fetch returns.
func hArchivedOf(lines []subjectLine) int {
	n := 0
	for _, l := range lines {
		if l.ArchiveID != nil {
			n++
		}
	}
	return n
}

// TestHostileReopenCommittedByAnOlderTransactionPassesTheRewriteRecheck:
// an inbox transaction that began before the last clock change reopens
// case 17 while its batch executes; the archive rewrite's booking waits
// for it on the clocks' lock, and its re-check sees the reopening (the
// stamp counts the case events, which a late commit moves; a time would
// not): nothing of the reopened case is destroyed.
func TestHostileReopenCommittedByAnOlderTransactionPassesTheRewriteRecheck(t *testing.T) {
	t.Parallel()
	h := newAttackDue(t, execSchedule)
	w := h.w
	h.execute(t)

	// The inbox's transaction starts (now() is fixed from here).
	inbox, err := w.db.Pool.Begin(w.ctx)
	require.NoError(t, err)
	defer func() { _ = inbox.Rollback(context.Background()) }()
	_, err = inbox.Exec(w.ctx, `SELECT 1`)
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond)

	// Meanwhile another case's event is applied by hand (its updated_at,
	// the clocks' max, is later than the inbox transaction's start).
	h.event(t, "case.closed", "case:17", h.now.AddDate(0, 0, -60), "Substantiated", "")
	h.event(t, "case.closed", "case:20", h.now.AddDate(0, 0, -1), "Substantiated", "")
	before, _ := w.fetch(t, "case:17")
	require.Positive(t, hArchivedOf(before))
	h.index(t)
	b, err := h.f.Freeze(w.ctx, 0, "ops:rita")
	require.NoError(t, err)
	require.Equal(t, "case:17", b.Items[0].Cases[0].Subject)

	// The inbox applies case 17's reopening (not committed yet).
	_, err = h.clocks.ApplyTx(w.ctx, inbox, schedule.Event{Type: schedule.EventReopened, Case: mustSubject(t, "case:17"), At: time.Now().Add(-time.Minute)}, "inbox")
	require.NoError(t, err)

	type out struct {
		res disposition.Executed
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := h.f.Approve(w.ctx, b.ID, "ops:sam")
		done <- out{res, err}
	}()
	// The booking's re-check waits for the inbox transaction.
	require.Eventually(t, func() bool {
		return count(t, w.ctx, w.db.Pool, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query ILIKE '%LOCK TABLE case_clocks%'`) > 0
	}, 30*time.Second, 20*time.Millisecond)
	require.NoError(t, inbox.Commit(w.ctx))
	r := <-done
	require.NoError(t, r.err)

	var state string
	require.NoError(t, w.db.Pool.QueryRow(w.ctx, `SELECT state FROM case_clocks WHERE subject_hash = $1`, w.key.Hash(mustSubject(t, "case:17"))).Scan(&state))
	require.Equal(t, "reopened", state)
	after, _ := w.fetch(t, "case:17")
	assert.Equal(t, hArchivedOf(before), hArchivedOf(after), "archived rows of the reopened case 17 were destroyed (res %+v)", r.res)
	assert.Equal(t, ns(t, before), ns(t, after), "every row of the reopened case is kept")
	assert.Zero(t, r.res.RowsDestroyed)
}

// TestHostilePartlyDestroyedCaseIsNotAnsweredAsDisposed: under a `record`
// clock, a new record of case 17 arrives while the batch rewrites its
// archives (after the rewrite's plan). The archives are rewritten without
// case 17's rows (they were due at that moment), the hot step finds the
// case no longer due and keeps its hot rows: the certificate reports the
// case partial (not skipped), and a records request about case 17 is told
// that a batch destroyed some of its rows.
func TestHostilePartlyDestroyedCaseIsNotAnsweredAsDisposed(t *testing.T) {
	t.Parallel()
	h := newAttackDue(t, hostileRecordSchedule)
	w := h.w
	w.db.Exec(t, `CREATE TABLE hostile_gate_on (x int)`)
	w.db.Exec(t, `CREATE FUNCTION hostile_gate(v text) RETURNS text LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  IF current_query() LIKE '%craig_ord%' AND EXISTS (SELECT 1 FROM hostile_gate_on) THEN
    PERFORM pg_advisory_lock_shared(777002);
    PERFORM pg_advisory_unlock_shared(777002);
  END IF;
  RETURN v;
END $$`)
	gated := subjectSpec()
	gated.Subjects[0].SQL = "retention_subject('case', hostile_gate(input ->> 'case_id'))"
	orders, err := courtorder.New(w.db.Pool, w.st, courtorder.Config{Service: w.s3.Service, Tables: []archive.TableSpec{gated}, Key: w.key,
		ObjectLock: true, Bookkeep: archive.Bookkeeper{EventType: "rules.evaluations_archived", SourceService: "craig-rules"}.Bookkeep}, slog.New(w.logs))
	require.NoError(t, err)
	h.f.WithExecution(disposition.Execution{Service: w.s3.Service, Orders: orders, Store: w.st,
		Index: func(ctx context.Context) (int64, error) {
			rep, err := w.reader.IndexCaseRows(ctx, 100)
			return rep.Left, err
		}})
	// Case 17: one hot row 50 days old, closed 60 days ago: due 20 days ago.
	w.db.Exec(t, `DELETE FROM rule_evaluations WHERE input ->> 'case_id' IN ('17', 'case-17')`)
	w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output) VALUES (now() - interval '50 days', 'r', '{"case_id": 17, "n": 800}', '{}')`)
	h.event(t, "case.closed", "case:17", h.now.AddDate(0, 0, -60), "Substantiated", "")
	h.index(t)
	b, err := h.f.Freeze(w.ctx, 0, "ops:rita")
	require.NoError(t, err)
	require.Equal(t, "case:17", b.Items[0].Cases[0].Subject)

	gate, err := w.db.Pool.Begin(w.ctx)
	require.NoError(t, err)
	defer func() { _ = gate.Rollback(context.Background()) }()
	_, err = gate.Exec(w.ctx, `SELECT pg_advisory_xact_lock(777002)`)
	require.NoError(t, err)
	w.db.Exec(t, `INSERT INTO hostile_gate_on VALUES (1)`)
	type out struct {
		res disposition.Executed
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := h.f.Approve(w.ctx, b.ID, "ops:sam")
		done <- out{res, err}
	}()
	require.Eventually(t, func() bool {
		return count(t, w.ctx, w.db.Pool, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query ILIKE '%craig_ord%'`) > 0
	}, 60*time.Second, 20*time.Millisecond)
	w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output) VALUES (now(), 'r', '{"case_id": 17, "n": 901}', '{}')`)
	require.NoError(t, gate.Commit(w.ctx))
	r := <-done
	require.NoError(t, r.err)
	_, sum := w.fetch(t, "case:17")
	require.Positive(t, r.res.RowsDestroyed, "the archived rows were due when the archives were rewritten")
	{
		assert.NotEmpty(t, sum.Summary.Disposed, "%d rows of case 17 were destroyed by batch %s; the records request is not told", r.res.RowsDestroyed, b.ID)
		cert, err := h.f.Certificate(w.ctx, b.ID)
		require.NoError(t, err)
		assert.NotContains(t, string(cert), `"outcome": "skipped"`, "a case of which rows were destroyed is reported skipped: %s", cert)
	}
}

// TestHostilePurgeCheckCacheIgnoresANewRecord: the purge's re-check
// (Finder.PurgeCheck, built once per service) computes what is due at each
// archive it destroys: under a `record` clock a new hot row of case 17,
// written after an earlier purge the same day, makes its archived rows not
// due, and the next purge keeps the archive of case 17's rows.
func TestHostilePurgeCheckCacheIgnoresANewRecord(t *testing.T) {
	t.Parallel()
	h := newAttackDue(t, hostileRecordSchedule)
	w := h.w
	w.db.Exec(t, `DELETE FROM rule_evaluations WHERE input ->> 'case_id' IN ('17', 'case-17')`)
	h.event(t, "case.closed", "case:17", h.now.AddDate(0, 0, -60), "Substantiated", "")
	// Another archive purgeable today (rows about no case, 400 days old).
	other := w.archived(t, 400, "CURRENT_DATE - 1")
	h.index(t)
	_, err := h.f.DateArchives(w.ctx)
	require.NoError(t, err)
	a3 := w.arch[2] // {17 x5}
	var until *time.Time
	require.NoError(t, w.db.Pool.QueryRow(w.ctx, `SELECT retention_until FROM archive_ledger WHERE archive_id = $1`, a3).Scan(&until))
	require.NotNil(t, until, "A3 is dated")

	pm, err := metrics.NewPurge(prometheus.NewRegistry())
	require.NoError(t, err)
	mgr, err := lifecycle.New(w.db.Pool, w.st, lifecycle.Config{Service: w.s3.Service, ObjectLock: true, Tables: []string{"rule_evaluations"},
		SubjectKey: w.key, SubjectTables: []string{"rule_evaluations"}, PurgeCheck: h.f.PurgeCheck()}, slog.New(w.logs), pm)
	require.NoError(t, err)
	// This morning's purge takes the other archive (the check caches).
	res, err := mgr.PurgeExactly(w.ctx, []uuid.UUID{other.ArchiveID}, "ops:olga")
	require.NoError(t, err)
	require.Len(t, res.Purged, 1)

	// Case 17 gets a new record today: its rows fall due in 30 days.
	w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output) VALUES (now(), 'r', '{"case_id": 17, "n": 900}', '{}')`)
	due, err := h.f.Find(w.ctx, time.Now(), 0)
	require.NoError(t, err)
	require.Nil(t, caseOf(due, "case:17"), "the listing knows case 17 is not due")
	fresh := h.f.PurgeCheck()
	var ok bool
	require.NoError(t, pgx.BeginFunc(w.ctx, w.db.Pool, func(tx pgx.Tx) error {
		ok, err = fresh(w.ctx, tx, a3)
		return err
	}))
	require.False(t, ok, "a fresh re-check keeps A3")

	res, err = mgr.Purge(w.ctx, 10, false, "ops:olga")
	require.NoError(t, err)
	assert.NotContains(t, res.Purged, a3, "A3 (case 17, newest record today) was purged from the cached re-check")
}

// TestHostileExtensionOfTheGoverningCaseDoesNotKeepAMergedCase: case 18 is
// extended for a hearing (a rejected batch's extend_until, a year ahead);
// case 17 is then merged into 18 and follows its clock. The cases merged
// into one fall due together, and an extension keeps the case: 17 is not
// due before 18, neither listed nor destroyed.
func TestHostileExtensionOfTheGoverningCaseDoesNotKeepAMergedCase(t *testing.T) {
	t.Parallel()
	h := newAttackDue(t, execSchedule)
	w := h.w
	h.execute(t)
	h.index(t)
	h.event(t, "case.closed", "case:18", h.now.AddDate(0, 0, -60), "Substantiated", "")
	b, err := h.f.Freeze(w.ctx, 0, "ops:rita")
	require.NoError(t, err)
	require.Equal(t, "case:18", b.Items[0].Cases[0].Subject)
	until := time.Now().UTC().AddDate(1, 0, 0).Truncate(24 * time.Hour)
	_, err = h.f.Reject(w.ctx, b.ID, "ops:sam", "fair hearing FH-2026-9", &until)
	require.NoError(t, err)

	h.event(t, "case.merged", "case:17", h.now.Add(-time.Minute), "", "case:18")
	before, _ := w.fetch(t, "case:17")
	due, err := h.f.Find(w.ctx, time.Now(), 0)
	require.NoError(t, err)
	require.Nil(t, caseOf(due, "case:18"), "18 is extended")
	if c := caseOf(due, "case:17"); c != nil {
		b2, err := h.f.Freeze(w.ctx, 0, "ops:rita")
		require.NoError(t, err)
		res, err := h.f.Approve(w.ctx, b2.ID, "ops:sam")
		require.NoError(t, err)
		after, _ := w.fetch(t, "case:17")
		t.Errorf("case 17 (merged into 18, extended until %s) is due %s and a batch destroyed %d of its %d rows (%d left)",
			until.Format(time.DateOnly), c.Due, res.RowsDestroyed, len(before), len(after))
	}
}

// TestHostileHotRowCommittedAfterTheHotRecheckIsDeleted: the hot step
// plans from the hot rows one read returns and deletes exactly those: a
// new record of case 17 committed after that read (under a `record` clock
// it makes case 17 not due) is kept. The gate function only widens the
// window (it blocks inside the read, after its snapshot).
func TestHostileHotRowCommittedAfterTheHotRecheckIsDeleted(t *testing.T) {
	t.Parallel()
	w0 := newOrderWorld(t)
	_ = w0
	// A finder whose case expression waits, only in the hot step's
	// HotCaseRows (GROUP BY, under the clocks' SHARE lock), while
	// hostile_gate_on has a row: after that statement's snapshot, before
	// HotRowGroups'.
	gated := subjectSpec()
	gated.Subjects[0].SQL = "retention_subject('case', hostile_gate(input ->> 'case_id'))"
	h := &hostileDue{w: w0}
	{
		w := w0
		w.db.Exec(t, `CREATE TABLE hostile_gate_on (x int)`)
		w.db.Exec(t, `CREATE FUNCTION hostile_gate(v text) RETURNS text LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  IF current_query() LIKE '%t.id::text%' AND EXISTS (SELECT 1 FROM hostile_gate_on)
     AND EXISTS (SELECT 1 FROM pg_locks WHERE pid = pg_backend_pid() AND relation = 'case_clocks'::regclass AND mode = 'ShareLock' AND granted) THEN
    PERFORM pg_advisory_lock_shared(777001);
    PERFORM pg_advisory_unlock_shared(777001);
  END IF;
  RETURN v;
END $$`)
		sch := schedule.New(w.db.Pool, []schedule.Series{{Table: "rule_evaluations"}})
		d, err := schedule.Parse([]byte(hostileRecordSchedule), sch.Series())
		require.NoError(t, err)
		_, err = sch.Propose(w.ctx, d, "ops:alice")
		require.NoError(t, err)
		_, err = sch.Approve(w.ctx, d.Version, "ops:bob", true)
		require.NoError(t, err)
		h.sch, h.clocks, h.now = sch, schedule.NewClocks(w.db.Pool, w.key), time.Now().UTC()
		h.f = disposition.NewFinder(w.db.Pool, w.key, []archive.TableSpec{gated}, sch)
	}
	w := h.w
	h.execute(t)
	// Case 17: one hot row 50 days old, closed 60 days ago: due 20 days ago.
	w.db.Exec(t, `DELETE FROM rule_evaluations WHERE input ->> 'case_id' IN ('17', 'case-17')`)
	w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output) VALUES (now() - interval '50 days', 'r', '{"case_id": 17, "n": 800}', '{}')`)
	h.event(t, "case.closed", "case:17", h.now.AddDate(0, 0, -60), "Substantiated", "")
	h.index(t)
	b, err := h.f.Freeze(w.ctx, 0, "ops:rita")
	require.NoError(t, err)
	require.Equal(t, "case:17", b.Items[0].Cases[0].Subject)

	gate, err := w.db.Pool.Begin(w.ctx)
	require.NoError(t, err)
	defer func() { _ = gate.Rollback(context.Background()) }()
	_, err = gate.Exec(w.ctx, `SELECT pg_advisory_xact_lock(777001)`)
	require.NoError(t, err)
	w.db.Exec(t, `INSERT INTO hostile_gate_on VALUES (1)`)

	type out struct {
		res disposition.Executed
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := h.f.Approve(w.ctx, b.ID, "ops:sam")
		done <- out{res, err}
	}()
	require.Eventually(t, func() bool {
		return count(t, w.ctx, w.db.Pool, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query ILIKE '%t.id::text%'`) > 0
	}, 60*time.Second, 20*time.Millisecond)
	// The hot rows' re-check is done; a new record of case 17 arrives.
	w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output) VALUES (now(), 'r', '{"case_id": 17, "n": 901}', '{}')`)
	require.NoError(t, gate.Commit(w.ctx))
	r := <-done
	require.NoError(t, r.err)
	assert.Equal(t, int64(1), w.db.Count(t, `SELECT count(*) FROM rule_evaluations WHERE input ->> 'n' = '901'`),
		"the record written after the hot re-check (case 17 no longer due) was deleted; res %+v", r.res)
}

// TestHostileExoticTimeZoneNearMidnight: the database's TimeZone is
// Etc/GMT+12 (UTC-12) and DateStyle 'SQL, DMY'. Case 17 closed at 00:00:01
// UTC 29 days ago (a local date 30 days ago) under P30D: due tomorrow in
// UTC, so not listed today; case 18's newest record is 00:00:01 UTC 29 days
// ago under a record clock: not due either. Nothing may be frozen.
func TestHostileExoticTimeZoneNearMidnight(t *testing.T) {
	t.Parallel()
	h := newAttackDue(t, `version: "tz-1"
items:
  - id: CW-TZ
    series: rule_evaluations
    starts: [record, case.closed]
    retain: P30D
    authority: GRS-2482
`)
	w := h.w
	var db string
	require.NoError(t, w.db.Pool.QueryRow(w.ctx, `SELECT current_database()`).Scan(&db))
	w.db.Exec(t, `ALTER DATABASE `+pgx.Identifier{db}.Sanitize()+` SET timezone = 'Etc/GMT+12'`)
	w.db.Exec(t, `ALTER DATABASE `+pgx.Identifier{db}.Sanitize()+` SET datestyle = 'SQL, DMY'`)
	w.db.Pool.Reset()
	var tz string
	require.NoError(t, w.db.Pool.QueryRow(w.ctx, `SHOW timezone`).Scan(&tz))
	// pgsession pins TimeZone=UTC and DateStyle=ISO, YMD in the startup
	// packet: the database's defaults never reach the product's sessions.
	require.Equal(t, "UTC", tz)
	today := time.Now().UTC().Truncate(24 * time.Hour)
	edge := today.AddDate(0, 0, -29).Add(time.Second)
	// Case 17: its rows only archived (400 days old), closed at the edge.
	w.db.Exec(t, `DELETE FROM rule_evaluations WHERE input ->> 'case_id' IN ('17', 'case-17', '18')`)
	h.event(t, "case.closed", "case:17", edge, "x", "")
	// Case 18: closed long ago, its newest record at the edge (hot).
	w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output) VALUES ($1, 'r', '{"case_id": 18, "n": 700}', '{}')`, edge)
	h.event(t, "case.closed", "case:18", today.AddDate(0, 0, -200), "x", "")
	// Rows about no case at the edge (hot).
	w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output) VALUES ($1, 'r', '{"n": 701}', '{}')`, edge)
	h.index(t)
	due, err := h.f.Find(w.ctx, time.Now(), 0)
	require.NoError(t, err)
	assert.Nil(t, caseOf(due, "case:17"), "closed 29 days ago (UTC): not due")
	assert.Nil(t, caseOf(due, "case:18"), "newest record 29 days ago (UTC): not due")
	for _, it := range due.Items {
		for _, c := range it.Cases {
			if c.Subject == "" && c.RowsHot > 0 {
				t.Errorf("rows about no case listed due %s (%+v)", c.Due, c)
			}
		}
	}
	n, err := h.f.DateArchives(w.ctx)
	require.NoError(t, err)
	var early int64
	require.NoError(t, w.db.Pool.QueryRow(w.ctx, `SELECT count(*) FROM archive_ledger WHERE archive_id = $1 AND retention_until <= (now() AT TIME ZONE 'UTC')::date`, w.arch[2]).Scan(&early))
	assert.Zero(t, early, "A3 (case 17 only) dated due today (%d dated)", n)
}

// TestHostileNoCaseNumberLeftAfterExecution: after a batch of case 17 is
// executed, no table (lifecycle log, outbox, journal, batches, clocks)
// holds "case:17" or a sealed-spelling-free mention of it.
func TestHostileNoCaseNumberLeftAfterExecution(t *testing.T) {
	t.Parallel()
	h := newAttackDue(t, execSchedule)
	w := h.w
	h.execute(t)
	h.event(t, "case.closed", "case:17", h.now.AddDate(0, 0, -60), "Substantiated", "")
	h.index(t)
	b, err := h.f.Freeze(w.ctx, 0, "ops:rita")
	require.NoError(t, err)
	_, err = h.f.Approve(w.ctx, b.ID, "ops:sam")
	require.NoError(t, err)
	rows, err := w.db.Pool.Query(w.ctx, `SELECT quote_ident(table_name) FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'`)
	require.NoError(t, err)
	for _, tbl := range must(pgx.CollectRows(rows, pgx.RowTo[string]))(t) {
		assert.Zero(t, w.db.Count(t, `SELECT count(*) FROM `+tbl+` AS t WHERE strpos(t::text, 'case:17') > 0 OR strpos(t::text, 'case-17') > 0`), "table %s", tbl)
	}
	assert.Zero(t, w.db.Count(t, `SELECT count(*) FROM disposition_cases WHERE subject_box IS NOT NULL`))
	w.canaryNowhere(t)
}
