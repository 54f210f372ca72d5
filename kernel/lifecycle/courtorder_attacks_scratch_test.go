package lifecycle_test

// Attacks on court orders (ADR-067): each asserts the behaviour an attack
// holds the orders to.

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/archiveread"
	"github.com/craig/retention/kernel/courtorder"
	"github.com/craig/retention/kernel/lifecycle"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/kernel/subject"
)

func (w *orderWorld) hotCount(t *testing.T, c string) int64 {
	t.Helper()
	return w.db.Count(t, `SELECT count(*) FROM rule_evaluations WHERE retention_subject('case', input ->> 'case_id') = $1`, c)
}

func (w *orderWorld) status(t *testing.T, id uuid.UUID) string {
	t.Helper()
	var s string
	require.NoError(t, w.db.Pool.QueryRow(w.ctx, `SELECT status FROM expungements WHERE expunge_id = $1`, id).Scan(&s))
	return s
}

// H1: a subject hold on a subject whose rows are all hot (no archive yet)
// does not block an expungement the order does not name it in; the held
// rows are deleted and the hold is rewritten to name the commitment, so it
// no longer holds the subject's future archives.
func TestOrderAttackHotOnlySubjectHold(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
		VALUES (now() - interval '5 days', 'r', jsonb_build_object('case_id', 55, 'note', 'held-evidence'), '{}')`)
	h, err := w.mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "case 55 litigation", Reason: "subpoena", Subjects: []string{"case:55"}}, "ops:carol")
	require.NoError(t, err)
	c55 := mustSubject(t, "case:55")
	_, err = w.orders.RequestExpunge(w.ctx, c55, "JV-55", "order", nil, "ops:alice")
	var held *courtorder.HeldError
	require.ErrorAs(t, err, &held, "a hold on the subject keeps its hot rows")
	require.Equal(t, []uuid.UUID{h.ID}, held.Holds)
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM expungements`))
	// A table hold over a hot row of the subject keeps it too.
	_, err = w.mgr.ReleaseHold(w.ctx, h.ID, "hearing closed", "ops:carol")
	require.NoError(t, err)
	th, err := w.mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "audit", Reason: "federal audit", Table: ptr("rule_evaluations"),
		From: ptr(time.Now().Add(-10 * 24 * time.Hour))}, "ops:carol")
	require.NoError(t, err)
	_, err = w.orders.RequestExpunge(w.ctx, c55, "JV-55", "order", nil, "ops:alice")
	require.ErrorAs(t, err, &held)
	require.Equal(t, []uuid.UUID{th.ID}, held.Holds)
	req, err := w.orders.RequestExpunge(w.ctx, c55, "JV-55", "order names the audit hold", []uuid.UUID{th.ID}, "ops:alice")
	require.NoError(t, err)
	res, err := w.orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
	require.NoError(t, err)
	require.Equal(t, int64(1), res.RowsRemoved)
	require.Zero(t, w.hotCount(t, "case:55"))
	var hashes [][]byte
	require.NoError(t, w.db.Pool.QueryRow(w.ctx, `SELECT subject_hashes FROM archive_holds WHERE id = $1`, h.ID).Scan(&hashes))
	require.Len(t, hashes, 1)
}

func TestOrderAttackHoldBetweenRequestAndApproval(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	a := mustSubject(t, "case:17")
	req, err := w.orders.RequestExpunge(w.ctx, a, "JV-1", "order", nil, "ops:alice")
	require.NoError(t, err)
	tbl := "rule_evaluations"
	_, err = w.mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "t", Reason: "r", Table: &tbl}, "ops:carol")
	require.NoError(t, err)
	before := w.db.Count(t, `SELECT count(*) FROM rule_evaluations`)
	_, err = w.orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
	var held *courtorder.HeldError
	require.ErrorAs(t, err, &held)
	require.Equal(t, courtorder.StatusAwaitingApproval, w.status(t, req.ExpungeID))
	require.Equal(t, before, w.db.Count(t, `SELECT count(*) FROM rule_evaluations`))
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM archive_ledger WHERE purged_at IS NOT NULL`))
}

// H3: two approvals of one order race; and an approval races another
// order's approval.
func TestOrderAttackConcurrentApprovals(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	bBefore, _ := w.fetch(t, "case:18")
	req, err := w.orders.RequestExpunge(w.ctx, mustSubject(t, "case:17"), "JV-1", "order", nil, "ops:alice")
	require.NoError(t, err)
	var wg sync.WaitGroup
	res := make([]courtorder.Executed, 4)
	errs := make([]error, 4)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], errs[i] = w.orders.Approve(w.ctx, req.ExpungeID, []string{"ops:bob", "ops:carol", "ops:dana", "ops:erin"}[i])
		}()
	}
	wg.Wait()
	salts := 0
	for i := range 4 {
		if errs[i] != nil && !errors.Is(errs[i], courtorder.ErrAlreadyRunning) {
			t.Errorf("approval %d: %v", i, errs[i])
		}
		if res[i].Salt != "" {
			salts++
		}
	}
	if salts > 1 {
		t.Errorf("FINDING: the salt was returned %d times", salts)
	}
	for w.status(t, req.ExpungeID) != courtorder.StatusExecuted {
		_, err := w.orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
		if err != nil && !errors.Is(err, courtorder.ErrAlreadyRunning) {
			t.Fatal(err)
		}
	}
	bAfter, _ := w.fetch(t, "case:18")
	require.Equal(t, ns(t, bBefore), ns(t, bAfter))
	rows, _ := w.fetch(t, "case:17")
	require.Empty(t, rows)
}

// H4: A then B: B's rows are in successors of A's order; a third subject's
// rows survive both, byte for byte.
func TestOrderAttackSecondGeneration(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	for n := 1; n <= 5; n++ {
		c := "19"
		if n%2 == 0 {
			c = "18"
		}
		w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
			VALUES (now() - interval '300 days' + make_interval(mins => $1), 'r', jsonb_build_object('case_id', $2::text, 'n', 200 + $1), '{}')`, n, c)
	}
	// and one row of 17 with 19 in the same archive
	rep, err := w.eng.RunPass(w.ctx, 10)
	require.NoError(t, err)
	require.NoError(t, rep.Err())
	c19Before, _ := w.fetch(t, "case:19")
	require.Len(t, c19Before, 3)
	for _, s := range []string{"case:17", "case:18"} {
		req, err := w.orders.RequestExpunge(w.ctx, mustSubject(t, s), "JV-"+s, "order", nil, "ops:alice")
		require.NoError(t, err)
		_, err = w.orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
		require.NoError(t, err, s)
		rows, sum := w.fetch(t, s)
		require.Empty(t, rows, s)
		require.Zero(t, sum.Summary.PurgedArchives, s)
	}
	c19After, _ := w.fetch(t, "case:19")
	require.Len(t, c19After, 3)
	for i := range c19Before {
		require.JSONEq(t, string(c19Before[i].Row), string(c19After[i].Row))
	}
	vr, err := w.reader.Verify(w.ctx, true, 0)
	require.NoError(t, err)
	require.Zero(t, vr.Failed, "%+v", vr)
	for _, l := range c19After {
		var r struct {
			ID uuid.UUID `json:"id"`
		}
		require.NoError(t, jsonUnmarshal(l.Row, &r))
		_, err := w.reader.Row(w.ctx, "rule_evaluations", r.ID, "ops:dana")
		require.NoError(t, err)
	}
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM rule_evaluations WHERE retention_subject('case', input ->> 'case_id') IN ('case:17','case:18')`))
}

// H5: a database in another TimeZone and DateStyle: expunge A and read B
// back by id, range and subject, identical.
func TestOrderAttackTimeZoneDateStyle(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	bBefore, _ := w.fetch(t, "case:18")
	var before bytes.Buffer
	from, to := time.Now().AddDate(-2, 0, 0), time.Now().Add(time.Hour)
	_, err := w.reader.Range(w.ctx, &before, "rule_evaluations", from, to, "ops:dana")
	require.NoError(t, err)
	w.db.Exec(t, `ALTER DATABASE `+w.db.Name+` SET TimeZone = 'Pacific/Kiritimati'`)
	w.db.Exec(t, `ALTER DATABASE `+w.db.Name+` SET DateStyle = 'SQL, DMY'`)
	w.db.Exec(t, `ALTER DATABASE `+w.db.Name+` SET IntervalStyle = 'sql_standard'`)
	w.db.Pool.Reset()
	var tz string
	require.NoError(t, w.db.Pool.QueryRow(w.ctx, `SHOW TimeZone`).Scan(&tz))
	t.Logf("session TimeZone after ALTER DATABASE: %s (pgsession pins it)", tz)
	req, err := w.orders.RequestExpunge(w.ctx, mustSubject(t, "case:17"), "JV-1", "order", nil, "ops:alice")
	require.NoError(t, err)
	_, err = w.orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
	require.NoError(t, err)
	bAfter, _ := w.fetch(t, "case:18")
	require.Equal(t, ns(t, bBefore), ns(t, bAfter))
	var after bytes.Buffer
	_, err = w.reader.Range(w.ctx, &after, "rule_evaluations", from, to, "ops:dana")
	require.NoError(t, err)
	require.NotContains(t, after.String(), canary)
	require.Equal(t, bytes.Count(before.Bytes(), []byte(`"case_id": 18`)), bytes.Count(after.Bytes(), []byte(`"case_id": 18`)))
	// narrow windows around each B row: each is still found by range
	for _, l := range bAfter {
		if l.Source != "archive" {
			continue
		}
		var r struct {
			ID          uuid.UUID `json:"id"`
			EvaluatedAt time.Time `json:"evaluated_at"`
		}
		require.NoError(t, jsonUnmarshal(l.Row, &r))
		var out bytes.Buffer
		s, err := w.reader.Range(w.ctx, &out, "rule_evaluations", r.EvaluatedAt, r.EvaluatedAt.Add(time.Microsecond), "ops:dana")
		require.NoError(t, err)
		if s.ArchivedRows != 1 {
			t.Errorf("FINDING: B row %s at %s not found by a 1µs range read after the rewrite (%d)", r.ID, r.EvaluatedAt, s.ArchivedRows)
		}
		_, err = w.reader.Row(w.ctx, "rule_evaluations", r.ID, "ops:dana")
		require.NoError(t, err)
	}
	vr, err := w.reader.Verify(w.ctx, true, 0)
	require.NoError(t, err)
	require.Zero(t, vr.Failed, "%+v", vr)
}

// H6: an archive whose object is corrupt (every version replaced) when the
// order runs: nothing it could not rewrite is destroyed, the rest resumes.
func TestOrderAttackCorruptArchiveDuringExpunge(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	req, err := w.orders.RequestExpunge(w.ctx, mustSubject(t, "case:17"), "JV-1", "order", nil, "ops:alice")
	require.NoError(t, err)
	// corrupt A4 (the last the order rewrites)
	keys := w.ledgerKeys(t, w.arch[3])
	var dataKey string
	for _, k := range keys {
		if bytes.HasSuffix([]byte(k), []byte(".ndjson")) {
			dataKey = k
		}
	}
	_, err = w.st.DestroyAllVersions(w.ctx, dataKey)
	require.NoError(t, err)
	require.NoError(t, w.st.PutCreate(w.ctx, dataKey, []byte("{\"id\": \"00000000-0000-0000-0000-000000000000\"}\n"), store.ContentTypeNDJSON))
	_, err = w.orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
	require.ErrorIs(t, err, archiveread.ErrCorrupt, "answered as archive_corrupt, naming it")
	n, err := w.st.VersionCount(w.ctx, dataKey)
	require.NoError(t, err)
	require.Positive(t, n, "the corrupt archive is not destroyed")
	var purged bool
	require.NoError(t, w.db.Pool.QueryRow(w.ctx, `SELECT purged_at IS NOT NULL FROM archive_ledger WHERE archive_id = $1`, w.arch[3]).Scan(&purged))
	require.False(t, purged)
	t.Logf("status after failure: %s; hot A rows %d", w.status(t, req.ExpungeID), w.hotCount(t, "case:17"))
}

// H7: a sealed subject's A-only archive still appears in a range read's
// summary (archives), and a sealed row is 404 by id from hot and archive.
func TestOrderAttackSealedRangeSummary(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	_, err := w.orders.Seal(w.ctx, mustSubject(t, "case:17"), "S-1", "r", "ops:alice")
	require.NoError(t, err)
	var out bytes.Buffer
	sum, err := w.reader.Range(w.ctx, &out, "rule_evaluations", time.Now().AddDate(-5, 0, 0), time.Now().Add(time.Hour), "ops:dana")
	require.NoError(t, err)
	for _, id := range sum.Archives {
		if id == w.arch[2] {
			t.Errorf("FINDING(low): range summary lists archive %s, which holds only sealed rows", id)
		}
	}
	// expunge while sealed
	req, err := w.orders.RequestExpunge(w.ctx, mustSubject(t, "case:17"), "JV-1", "order", nil, "ops:alice")
	require.NoError(t, err)
	res, err := w.orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
	require.NoError(t, err)
	var sealedHash []byte
	require.NoError(t, w.db.Pool.QueryRow(w.ctx, `SELECT subject_hash FROM subject_seals`).Scan(&sealedHash))
	require.Equal(t, hex.EncodeToString(w.key.Hash(mustSubject(t, "case:17"))), hex.EncodeToString(sealedHash), "the seal outlives the rows")
	require.NotEmpty(t, res.Commitment)
	// a new row about case 17 after the order: is it still sealed?
	w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
		VALUES (now() - interval '1 day', 'r', jsonb_build_object('case_id', 17, 'note', 'new'), '{}')`)
	rows, _ := w.fetch(t, "case:17")
	if len(rows) > 0 {
		t.Errorf("FINDING(medium): the seal on case:17 was silently lifted by the expungement: a new row of case:17 reads without sealed access")
	}
	_ = subject.Hex
	_ = archiveread.ErrNotFound
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// allTablesHolding counts, per table, the rows whose text holds needle.
func (w *orderWorld) allTablesHolding(t *testing.T, needle string) map[string]int64 {
	t.Helper()
	rows, err := w.db.Pool.Query(w.ctx, `SELECT quote_ident(table_name) FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'`)
	require.NoError(t, err)
	tbls, err := pgxCollectStrings(rows)
	require.NoError(t, err)
	out := map[string]int64{}
	for _, tbl := range tbls {
		if n := w.db.Count(t, `SELECT count(*) FROM `+tbl+` AS t WHERE strpos(t::text, $1) > 0`, needle); n > 0 {
			out[tbl] = n
		}
	}
	return out
}

// H8: two orders for one subject; the first completes: does the database
// still keep the subject's keyed hash (and its sealed spelling)?
func TestOrderAttackTwoOrdersSameSubject(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	a := mustSubject(t, "case:17")
	hashA := subject.Hex(w.key.Hash(a))
	// a released subject hold on A and a subject read of A before the order
	h, err := w.mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "t", Reason: "r", Subjects: []string{"case:17"}}, "ops:carol")
	require.NoError(t, err)
	_, err = w.mgr.ReleaseHold(w.ctx, h.ID, "done", "ops:carol")
	require.NoError(t, err)
	first, err := w.orders.RequestExpunge(w.ctx, a, "JV-1", "order", nil, "ops:alice")
	require.NoError(t, err)
	_, err = w.orders.RequestExpunge(w.ctx, mustSubject(t, "CASE:0017"), "JV-1-dup", "duplicate filing", nil, "ops:erin")
	var pending *courtorder.PendingError
	require.ErrorAs(t, err, &pending, "one order about a subject at a time")
	require.Equal(t, first.ExpungeID, pending.ExpungeID)
	_, err = w.orders.Approve(w.ctx, first.ExpungeID, "ops:bob")
	require.NoError(t, err)
	require.Empty(t, w.allTablesHolding(t, hashA), "after the order completed, the database keeps A's keyed hash nowhere")
}

func TestOrderAttackTwoSubjectRow(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	spec := subjectSpec()
	spec.Subjects = append(spec.Subjects, archiveSubject("retention_subject('case', input ->> 'other_case')"))
	w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
		VALUES (now() - interval '5 days', 'r', jsonb_build_object('case_id', 18, 'other_case', '017', 'note', 'joint'), '{}')`)
	orders, err := courtorder.New(w.db.Pool, w.st, courtorder.Config{Service: w.s3.Service, Tables: []archiveTableSpec{spec}, Key: w.key,
		ObjectLock: true, Bookkeep: bookkeeper()}, slogNew(w.logs))
	require.NoError(t, err)
	req, err := orders.RequestExpunge(w.ctx, mustSubject(t, "case:17"), "JV-1", "order", nil, "ops:alice")
	require.NoError(t, err)
	_, err = orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
	require.NoError(t, err)
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM rule_evaluations WHERE input ->> 'note' = 'joint'`),
		"a row about the expunged subject goes, whatever else it is about (ADR-067)")
}

type archiveTableSpec = archive.TableSpec

func archiveSubject(sql string) archive.Subject { return archive.Subject{Kind: subject.Case, SQL: sql} }

func bookkeeper() archive.BookkeepFunc {
	return archive.Bookkeeper{EventType: "rules.evaluations_archived", SourceService: "craig-rules"}.Bookkeep
}

func slogNew(h slog.Handler) *slog.Logger { return slog.New(h) }

func pgxCollectStrings(rows pgx.Rows) ([]string, error) {
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// H10: the old archive's manifest (not its data) was altered in the store
// (every version): the rewrite copies its fields into the successor's
// booking without checking them against the ledger.
func TestOrderAttackTamperedManifest(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	bBefore, _ := w.fetch(t, "case:18")
	var mkey string
	require.NoError(t, w.db.Pool.QueryRow(w.ctx, `SELECT manifest_key FROM archive_ledger WHERE archive_id = $1`, w.arch[0]).Scan(&mkey))
	raw, err := w.st.Get(w.ctx, mkey)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	t.Logf("manifest keys: %v", keysOf(m))
	// table kept (a foreign table fails the booking by accident)
	m["hot_window_days"] = 1
	m["store_bucket"] = "elsewhere"
	m["bucket"] = "elsewhere"
	doc, err := json.Marshal(m)
	require.NoError(t, err)
	_, err = w.st.DestroyAllVersions(w.ctx, mkey)
	require.NoError(t, err)
	require.NoError(t, w.st.PutCreate(w.ctx, mkey, doc, store.ContentTypeJSON))
	req, err := w.orders.RequestExpunge(w.ctx, mustSubject(t, "case:17"), "JV-1", "order", nil, "ops:alice")
	require.NoError(t, err)
	_, err = w.orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
	require.NoError(t, err)
	var tbl, bucket string
	var hot int32
	require.NoError(t, w.db.Pool.QueryRow(w.ctx, `SELECT table_name, store_bucket, hot_window_days FROM archive_ledger WHERE supersedes = $1`, w.arch[0]).Scan(&tbl, &bucket, &hot))
	t.Logf("successor of A1 booked as table=%s bucket=%s hot_window_days=%d", tbl, bucket, hot)
	if tbl != "rule_evaluations" || bucket == "elsewhere" || hot != 90 {
		t.Errorf("FINDING: the successor's ledger row takes the tampered manifest's fields (table=%s bucket=%s hot=%d)", tbl, bucket, hot)
	}
	bAfter, _ := w.fetch(t, "case:18")
	if len(ns(t, bAfter)) != len(ns(t, bBefore)) {
		t.Errorf("FINDING: B lost rows: %v -> %v", ns(t, bBefore), ns(t, bAfter))
	}
}

func keysOf(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// H11: the table's subject declaration changes (a service restart marks
// its archives unindexed) between the request and the approval: the
// approval does not re-check the index and misses the rows found only by
// the new declaration; the backfill then puts A's keyed hash back and A's
// row reads again.
func TestOrderAttackDeclarationChangeBetweenRequestAndApproval(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
		VALUES (now() - interval '300 days', 'r', jsonb_build_object('case_id', 18, 'other_case', 17, 'note', 'joint'), '{}')`)
	rep, err := w.eng.RunPass(w.ctx, 10)
	require.NoError(t, err)
	require.NoError(t, rep.Err())
	two := subjectSpec()
	two.Subjects = append(two.Subjects, archiveSubject("retention_subject('case', input ->> 'other_case')"))
	orders, err := courtorder.New(w.db.Pool, w.st, courtorder.Config{Service: w.s3.Service, Tables: []archiveTableSpec{two}, Key: w.key,
		ObjectLock: true, Bookkeep: bookkeeper()}, slogNew(w.logs))
	require.NoError(t, err)
	req, err := orders.RequestExpunge(w.ctx, mustSubject(t, "case:17"), "JV-1", "order", nil, "ops:alice")
	require.NoError(t, err)
	// restart with the new declaration
	_, err = archive.SyncSubjectDeclarations(w.ctx, w.db.Pool, []archive.TableSpec{two})
	require.NoError(t, err)
	t.Logf("unindexed now: %d", w.db.Count(t, `SELECT count(*) FROM archive_ledger WHERE NOT subjects_indexed AND purged_at IS NULL`))
	_, err = orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
	require.ErrorIs(t, err, courtorder.ErrNotIndexed, "an archive that might hold the subject is unindexed")
	reader := archiveread.New(w.db.Pool, w.st, w.s3.Service, []archive.TableSpec{two}).WithSubjectKey(w.key)
	_, _, err = reader.IndexSubjects(w.ctx, 100, "ops:dana")
	require.NoError(t, err)
	_, err = orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
	require.NoError(t, err)
	var out bytes.Buffer
	_, err = reader.Subject(w.ctx, &out, mustSubject(t, "case:17"), "ops:dana")
	require.NoError(t, err)
	require.NotContains(t, out.String(), "joint")
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM archive_subjects WHERE subject_hashes @> ARRAY[$1::bytea]`, w.key.Hash(mustSubject(t, "case:17"))))
}
