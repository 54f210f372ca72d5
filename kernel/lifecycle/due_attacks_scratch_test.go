package lifecycle_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/disposition"
	"github.com/craig/retention/kernel/lifecycle"
	"github.com/craig/retention/kernel/schedule"
	"github.com/craig/retention/kernel/subject"
)

// hostileDue is a due-listing rig on the order world: a schedule put in
// force, clocks, and a finder over the given specs.
type hostileDue struct {
	w      *orderWorld
	sch    *schedule.Schedules
	clocks *schedule.Clocks
	f      *disposition.Finder
	now    time.Time
}

func newAttackDue(t *testing.T, doc string, specs ...archive.TableSpec) *hostileDue {
	t.Helper()
	w := newOrderWorld(t)
	if len(specs) == 0 {
		specs = []archive.TableSpec{subjectSpec()}
	}
	sch := schedule.New(w.db.Pool, []schedule.Series{{Table: "rule_evaluations"}})
	d, err := schedule.Parse([]byte(doc), sch.Series())
	require.NoError(t, err)
	_, err = sch.Propose(w.ctx, d, "ops:alice")
	require.NoError(t, err)
	_, err = sch.Approve(w.ctx, d.Version, "ops:bob", true)
	require.NoError(t, err)
	return &hostileDue{w: w, sch: sch, clocks: schedule.NewClocks(w.db.Pool, w.key),
		f: disposition.NewFinder(w.db.Pool, w.key, specs, sch), now: time.Now().UTC()}
}

func (h *hostileDue) event(t *testing.T, typ, c string, at time.Time, class, into string) {
	t.Helper()
	e := schedule.Event{Type: typ, Case: mustSubject(t, c), At: at, Classification: class}
	if into != "" {
		e.Into = mustSubject(t, into)
	}
	_, err := h.clocks.Apply(h.w.ctx, e, "ops:test")
	require.NoError(t, err)
}

// index indexes the world's archives by case: until then no case they
// may hold is listed.
func (h *hostileDue) index(t *testing.T) {
	t.Helper()
	rep, err := h.w.reader.IndexCaseRows(h.w.ctx, 10)
	require.NoError(t, err)
	require.Zero(t, rep.Left)
}

func (h *hostileDue) unindexed(t *testing.T) int64 {
	return h.w.db.Count(t, `SELECT count(*) FROM archive_ledger WHERE NOT case_rows_indexed AND purged_at IS NULL`)
}

// caseOf finds a case's entry in a listing (nil: not listed).
func caseOf(due disposition.Due, subj string) *disposition.DueCase {
	for _, it := range due.Items {
		for i := range it.Cases {
			if it.Cases[i].Subject == subj {
				return &it.Cases[i]
			}
		}
	}
	return nil
}

// twoCaseSpec: a rule evaluation may be about two cases (input.case_id
// and input.other_case_id) and about a person (input.person_id).
func twoCaseSpec() archive.TableSpec {
	s := subjectSpec()
	s.Subjects = append(s.Subjects,
		archive.Subject{Kind: subject.Case, SQL: "retention_subject('case', input ->> 'other_case_id')"},
		archive.Subject{Kind: subject.Person, SQL: "retention_subject('person', input ->> 'person_id')"})
	return s
}

const hostileCW12U = `version: "h-1"
items:
  - id: CW-12
    series: rule_evaluations
    starts: [record, case.closed]
    retain: P1Y
    authority: GRS-2482
  - id: CW-12U
    series: rule_evaluations
    when: {classification: Unsubstantiated}
    starts: case.closed
    retain: P30D
    authority: Missouri CW manual 2.5
`

// TestAttackRowOfTwoCasesListedWhileOneIsOpen: a hot row about case 18
// (closed unsubstantiated 60 days ago: due under CW-12U) and case 99
// (open: never due under CW-12, which waits for a closure) is listed as
// due with case 18. The row's other case keeps it: it is not due.
func TestAttackRowOfTwoCasesListedWhileOneIsOpen(t *testing.T) {
	t.Parallel()
	h := newAttackDue(t, hostileCW12U, twoCaseSpec())
	h.index(t)
	h.w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
		VALUES (now() - interval '20 days', 'r', '{"case_id": 18, "other_case_id": 99, "n": 500}', '{}')`)
	h.event(t, schedule.EventClosed, "case:18", h.now.AddDate(0, 0, -60), "Unsubstantiated", "")

	due, err := h.f.Find(h.w.ctx, h.now, h.unindexed(t))
	require.NoError(t, err)
	require.Nil(t, caseOf(due, "case:99"), "case 99 is open")
	b := caseOf(due, "case:18")
	require.NotNil(t, b, "case 18's own rows are due")
	// Case 18 has one hot row of its own (10 days old) and the shared one.
	require.Equal(t, int64(1), b.RowsHot, "the row also about case 99 (open, not due) is listed as due with case 18")
}

// TestAttackHoldOnTheOtherSubjectOfAHotRow: a subject hold on case 99 (or
// on person 5) covers the hot row that is also about case 18; case 18's
// listing must report it (and a batch must not freeze case 18).
func TestAttackHoldOnTheOtherSubjectOfAHotRow(t *testing.T) {
	t.Parallel()
	h := newAttackDue(t, hostileCW12U, twoCaseSpec())
	h.index(t)
	h.w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
		VALUES (now() - interval '20 days', 'r', '{"case_id": 18, "other_case_id": 99, "person_id": 5, "n": 500}', '{}')`)
	h.event(t, schedule.EventClosed, "case:18", h.now.AddDate(0, 0, -60), "Unsubstantiated", "")
	h.event(t, schedule.EventClosed, "case:99", h.now.AddDate(0, 0, -60), "Unsubstantiated", "")

	var missed []string
	for _, held := range []string{"case:99", "person:5"} {
		hold, err := h.w.mgr.PlaceHold(h.w.ctx, lifecycle.HoldRequest{Title: "hearing", Reason: "hearing on " + held, Subjects: []string{held}}, "ops:carol")
		require.NoError(t, err)
		due, err := h.f.Find(h.w.ctx, h.now, h.unindexed(t))
		require.NoError(t, err)
		b := caseOf(due, "case:18")
		require.NotNil(t, b)
		if !slices.Contains(b.Holds, hold.ID) {
			missed = append(missed, held)
		}
		if held == "person:5" {
			// The hold on person 5 still active: a batch must not take case 18.
			batch, err := h.f.Freeze(h.w.ctx, 0, "ops:rita")
			if err == nil {
				for _, it := range batch.Items {
					for _, c := range it.Cases {
						if c.Subject == "case:18" {
							missed = append(missed, "frozen into batch "+batch.ID.String()+" despite the hold on person:5")
						}
					}
				}
			}
		}
		_, err = h.w.mgr.ReleaseHold(h.w.ctx, hold.ID, "hearing over", "ops:carol")
		require.NoError(t, err)
	}
	require.Empty(t, missed, "holds covering a hot row of case 18 that case 18's listing does not report")
}

// TestAttackUnindexedArchiveNewerThanHotRows: case 18's only hot row is
// 500 days old (a late arrival), its archived rows (not yet indexed) 400
// days old. Under "record, P14M" the case falls due ~26 days from now;
// before the archives are indexed the listing dates case 18 by its hot row
// alone and lists it as due today (ADR-073: an archive not yet indexed
// keeps its cases off the listing, never early).
func TestAttackUnindexedArchiveNewerThanHotRows(t *testing.T) {
	t.Parallel()
	h := newAttackDue(t, `version: "h-2"
items:
  - id: R-14
    series: rule_evaluations
    starts: record
    retain: P14M
    authority: GRS-1
`)
	h.w.db.Exec(t, `DELETE FROM rule_evaluations WHERE retention_subject('case', input ->> 'case_id') = 'case:18'`)
	h.w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
		VALUES (now() - interval '500 days', 'r', '{"case_id": 18, "n": 600}', '{}')`)
	require.Equal(t, int64(4), h.unindexed(t))

	due, err := h.f.Find(h.w.ctx, h.now, h.unindexed(t))
	require.NoError(t, err)
	b := caseOf(due, "case:18")
	require.Nil(t, b, "case 18 listed as due %v (rows_hot %v) while its unindexed archives hold newer rows of it", dueOf(b), rowsOf(b))

	// Indexed, the truth: not due.
	rep, err := h.w.reader.IndexCaseRows(h.w.ctx, 10)
	require.NoError(t, err)
	due, err = h.f.Find(h.w.ctx, h.now, rep.Left)
	require.NoError(t, err)
	require.Nil(t, caseOf(due, "case:18"))
}

func dueOf(c *disposition.DueCase) string {
	if c == nil {
		return ""
	}
	return c.Due
}

func rowsOf(c *disposition.DueCase) int64 {
	if c == nil {
		return 0
	}
	return c.RowsHot
}

// TestAttackMergedCaseDueBeforeItsSurvivor: under CW-12 (the later of
// the record and the closure, plus a year) case 17, merged into case 18,
// has only archived rows 400 days old; case 18 closed 800 days ago and has
// a record 10 days old, so the merged case is due in ~355 days. Case 17's
// rows follow case 18's clock, yet they are listed as due today, dated by
// case 17's own newest record.
func TestAttackMergedCaseDueBeforeItsSurvivor(t *testing.T) {
	t.Parallel()
	h := newAttackDue(t, hostileCW12U)
	h.w.db.Exec(t, `DELETE FROM rule_evaluations WHERE retention_subject('case', input ->> 'case_id') = 'case:17'`)
	_, err := h.w.reader.IndexCaseRows(h.w.ctx, 10)
	require.NoError(t, err)
	h.event(t, schedule.EventClosed, "case:18", h.now.AddDate(0, 0, -800), "substantiated", "")
	h.event(t, schedule.EventMerged, "case:17", h.now.AddDate(0, 0, -5), "", "case:18")

	due, err := h.f.Find(h.w.ctx, h.now, 0)
	require.NoError(t, err)
	require.Nil(t, caseOf(due, "case:18"), "case 18's newest record is 10 days old")
	a := caseOf(due, "case:17")
	require.Nil(t, a, "case 17 (merged into 18) listed as due %v with %v archived rows while case 18 is not due", dueOf(a), archivedOf(a))
}

func archivedOf(c *disposition.DueCase) int64 {
	if c == nil {
		return 0
	}
	return c.RowsArchived
}

// TestAttackLeapDayAndMonthEnd: a row about no case on 2024-02-29
// under P1Y, and one on 2025-01-31 under P1M (one world each). PostgreSQL's
// date + interval clamps to the month's end and lists both as due on
// 2025-02-28; Go's AddDate (and the conservative reading of "never early")
// dates them 2025-03-01 and 2025-03-03.
func TestAttackLeapDayAndMonthEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		retain, row, asOf string
	}{
		{"P1Y", "2024-02-29 12:00:00+00", "2025-02-28"},
		{"P1M", "2025-01-31 12:00:00+00", "2025-02-28"},
	} {
		t.Run(tc.retain, func(t *testing.T) {
			h := newAttackDue(t, `version: "h-3"
items:
  - id: R
    series: rule_evaluations
    starts: record
    retain: `+tc.retain+`
    authority: GRS-1
`)
			h.w.db.Exec(t, `DELETE FROM rule_evaluations`)
			h.w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output) VALUES ($1::timestamptz, 'r', '{"n": 1}', '{}')`, tc.row)
			rowAt, err := time.Parse("2006-01-02 15:04:05-07", tc.row)
			require.NoError(t, err)
			p, err := schedule.ParsePeriod(tc.retain)
			require.NoError(t, err)
			goDue := rowAt.UTC().Truncate(24*time.Hour).AddDate(0, p.Months, p.Days)
			asOf, err := time.Parse(time.DateOnly, tc.asOf)
			require.NoError(t, err)
			due, err := h.f.Find(h.w.ctx, asOf, h.unindexed(t))
			require.NoError(t, err)
			var listed []string
			for _, it := range due.Items {
				for _, c := range it.Cases {
					if c.Subject == "" {
						listed = append(listed, c.Due)
					}
				}
			}
			require.Empty(t, listed, "a row of %s under %s listed as due on %v, as of %s; time.AddDate dates it %s",
				tc.row, tc.retain, listed, tc.asOf, goDue.Format(time.DateOnly))
		})
	}
}

// TestAttackSessionTimeZoneAndDateStyle: with every session of the
// database in Pacific/Honolulu and DateStyle SQL, DMY, a closure at 23:30
// UTC-10 (09:30 UTC the next day) and a row about no case at the same
// instant fall due by their UTC day, never a day early.
func TestAttackSessionTimeZoneAndDateStyle(t *testing.T) {
	t.Parallel()
	h := newAttackDue(t, hostileCW12U)
	h.index(t)
	h.w.db.Exec(t, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET timezone = %L', current_database(), 'Pacific/Honolulu');
		EXECUTE format('ALTER DATABASE %I SET datestyle = %L', current_database(), 'SQL, DMY'); END $$`)
	h.w.db.Pool.Reset()
	var tz string
	require.NoError(t, h.w.db.Pool.QueryRow(h.w.ctx, `SHOW timezone`).Scan(&tz))
	require.Equal(t, "UTC", tz, "pgsession pins the session's TimeZone over the database's")
	h.w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output) VALUES ('2025-06-01 23:30:00-10', 'r', '{"n": 1}', '{}')`)
	at, err := time.Parse(time.RFC3339, "2025-06-01T23:30:00-10:00")
	require.NoError(t, err)
	h.event(t, schedule.EventClosed, "case:18", at, "Unsubstantiated", "")
	for _, tc := range []struct {
		asOf     string
		subjects []string
	}{{"2025-07-01", nil}, {"2025-07-02", []string{"case:18"}}, {"2026-06-01", []string{"case:18"}}, {"2026-06-02", []string{"case:18", ""}}} {
		asOf, err := time.Parse(time.DateOnly, tc.asOf)
		require.NoError(t, err)
		due, err := h.f.Find(h.w.ctx, asOf, h.unindexed(t))
		require.NoError(t, err)
		var got []string
		for _, it := range due.Items {
			for _, c := range it.Cases {
				got = append(got, c.Subject)
			}
		}
		require.ElementsMatch(t, tc.subjects, got, "as of %s", tc.asOf)
	}
}

// TestAttackMergeCycleNeverDue: 17 merged into 18 and 18 into 17 (a
// cycle), 18 having been closed long ago: neither is due; 18 then reopened
// and 17 merged into it: 17 is not due.
func TestAttackMergeCycleNeverDue(t *testing.T) {
	t.Parallel()
	h := newAttackDue(t, hostileCW12U)
	_, err := h.w.reader.IndexCaseRows(h.w.ctx, 10)
	require.NoError(t, err)
	h.event(t, schedule.EventClosed, "case:18", h.now.AddDate(0, 0, -800), "Unsubstantiated", "")
	h.event(t, schedule.EventClosed, "case:17", h.now.AddDate(0, 0, -800), "Unsubstantiated", "")
	h.event(t, schedule.EventMerged, "case:17", h.now.AddDate(0, 0, -10), "", "case:018")
	h.event(t, schedule.EventMerged, "case:18", h.now.AddDate(0, 0, -9), "", "case:17")
	due, err := h.f.Find(h.w.ctx, h.now, 0)
	require.NoError(t, err)
	require.Empty(t, due.Items)
	h.event(t, schedule.EventReopened, "case:18", h.now.AddDate(0, 0, -8), "", "")
	due, err = h.f.Find(h.w.ctx, h.now, 0)
	require.NoError(t, err)
	require.Empty(t, due.Items)
}

// TestAttackCaseSpelledInFullwidthDigits: a row whose case_id is "１７"
// (fullwidth digits: a person reads case 17) or "1\u200b7" names a case no
// expression reads: with the case field declared (as every service
// declares it), it is never due, not a row about no case due a year after
// its own date.
func TestAttackCaseSpelledInFullwidthDigits(t *testing.T) {
	t.Parallel()
	spec := subjectSpec()
	spec.Subjects[0].Field = "input ->> 'case_id'"
	h := newAttackDue(t, hostileCW12U, spec)
	h.w.db.Exec(t, `DELETE FROM rule_evaluations`)
	h.w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
		VALUES (now() - interval '400 days', 'r', '{"case_id": "１７", "n": 1}', '{}'), (now() - interval '400 days', 'r', '{"case_id": "1\u200b7", "n": 2}', '{}')`)
	due, err := h.f.Find(h.w.ctx, h.now, h.unindexed(t))
	require.NoError(t, err)
	var listed []string
	for _, it := range due.Items {
		for _, c := range it.Cases {
			listed = append(listed, c.Subject+"@"+c.Due)
		}
	}
	require.Empty(t, listed, "rows of case 17 (open), spelled in fullwidth digits or with a zero-width space, listed as due about no case")
}
