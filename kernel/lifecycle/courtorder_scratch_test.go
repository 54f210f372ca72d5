package lifecycle_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/archiveread"
	"github.com/craig/retention/kernel/courtorder"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/lifecycle"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/kernel/subject"
)

// canary is written into every row of subject A (case 17); after A is
// expunged it must be nowhere: no row of any table, no object version, no
// log line.
const canary = "CANARY-ZX81-SPECTRUM"

// orderWorld: subjects A (case 17, its rows carry the canary) and B (case
// 18) sharing archives. Four archives of five aged rows:
// A1 {A,B,A,B,B}, A2 {B×5}, A3 {A×5}, A4 {B,A,B,B,B}; hot: A (as 17 and
// "case-17") and B.
type orderWorld struct {
	*subjectWorld
	orders *courtorder.Orders
	logs   *kerneltest.LogRecorder
	arch   []uuid.UUID
}

func newOrderWorld(t *testing.T) *orderWorld {
	t.Helper()
	w := &orderWorld{subjectWorld: &subjectWorld{world: newWorldLocked(t, 0, true), key: testKey(t)}, logs: &kerneltest.LogRecorder{}}
	isA := map[int]bool{1: true, 3: true, 11: true, 12: true, 13: true, 14: true, 15: true, 17: true}
	for n := 1; n <= 20; n++ {
		c, note := "18", "b"
		if isA[n] {
			c, note = "17", canary
		}
		w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
			VALUES (now() - interval '400 days' + make_interval(mins => $1), 'r', jsonb_build_object('case_id', $2::int, 'n', $1, 'note', $3::text), '{}')`, n, c, note)
	}
	for i, c := range []string{`17`, `"case-17"`, `18`} {
		note := "b"
		if i < 2 {
			note = canary
		}
		w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
			VALUES (now() - interval '10 days' + make_interval(mins => $1), 'r', jsonb_build_object('case_id', $2::jsonb, 'n', 100 + $1, 'note', $3::text), '{}')`, i, c, note)
	}
	var err error
	w.mgr, err = lifecycle.New(w.db.Pool, w.st, lifecycle.Config{Service: w.s3.Service, ObjectLock: true, Tables: []string{"rule_evaluations"},
		SubjectKey: w.key, SubjectTables: []string{"rule_evaluations"}}, slog.New(w.logs), w.m)
	require.NoError(t, err)
	w.reader = archiveread.New(w.db.Pool, w.st, w.s3.Service, []archive.TableSpec{subjectSpec()}).WithSubjectKey(w.key)
	w.eng = w.engine(t, w.key)
	w.orders, err = courtorder.New(w.db.Pool, w.st, courtorder.Config{Service: w.s3.Service, Tables: []archive.TableSpec{subjectSpec()}, Key: w.key,
		ObjectLock: true, Bookkeep: archive.Bookkeeper{EventType: "rules.evaluations_archived", SourceService: "craig-rules"}.Bookkeep}, slog.New(w.logs))
	require.NoError(t, err)
	w.arch = w.archives(t)
	return w
}

func mustSubject(t testing.TB, s string) subject.Subject {
	t.Helper()
	sub, err := subject.Parse(s)
	require.NoError(t, err)
	return sub
}

// ledgerKeys are the data and manifest keys of the given archives.
func (w *orderWorld) ledgerKeys(t *testing.T, ids ...uuid.UUID) []string {
	t.Helper()
	rows, err := w.db.Pool.Query(w.ctx, `SELECT data_key, manifest_key FROM archive_ledger WHERE archive_id = ANY ($1) ORDER BY archive_id`, ids)
	require.NoError(t, err)
	var keys []string
	for _, r := range must(pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ D, M string }]))(t) {
		keys = append(keys, r.D, r.M)
	}
	require.Len(t, keys, 2*len(ids))
	return keys
}

func must[T any](v T, err error) func(*testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		require.NoError(t, err)
		return v
	}
}

// canaryNowhere: no row of any table of the database, no current object
// of the service's prefix, no log line holds the canary (or A in clear).
func (w *orderWorld) canaryNowhere(t *testing.T) {
	t.Helper()
	rows, err := w.db.Pool.Query(w.ctx, `SELECT quote_ident(table_name) FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'`)
	require.NoError(t, err)
	for _, tbl := range must(pgx.CollectRows(rows, pgx.RowTo[string]))(t) {
		require.Zero(t, w.db.Count(t, `SELECT count(*) FROM `+tbl+` AS t WHERE strpos(t::text, $1) > 0`, canary), "table %s", tbl)
	}
	objs, err := w.st.ListObjects(w.ctx, "retention-archives/"+w.s3.Service+"/")
	require.NoError(t, err)
	require.NotEmpty(t, objs)
	for _, o := range objs {
		b, err := w.st.Get(w.ctx, o.Key)
		require.NoError(t, err)
		require.NotContains(t, string(b), canary, o.Key)
		require.NotContains(t, string(b), "case:17", o.Key)
	}
	for _, r := range w.logs.Records() {
		line := r.Message
		r.Attrs(func(a slog.Attr) bool { line += " " + a.String(); return true })
		require.NotContains(t, line, canary)
		require.NotContains(t, line, "case:17")
	}
}

// TestExpungeRewritesWithLineage: expunging A rewrites exactly the
// archives that held A's rows (a successor for each with B's rows, none
// for the archive that held only A's), deletes A's hot rows, and leaves
// every B row fetching and verifying; A's rows answer as unknown; no
// version of an object with A's rows is left; the certificate proves the
// act by a commitment the returned salt opens; a second call changes
// nothing.
func TestExpungeRewritesWithLineage(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	a, b := mustSubject(t, "case:17"), mustSubject(t, "case:18")
	aRows, _ := w.fetch(t, "case:17")
	require.Len(t, aRows, 10)
	bBefore, _ := w.fetch(t, "case:18")
	oldKeys := w.ledgerKeys(t, w.arch[0], w.arch[2], w.arch[3])

	for _, bad := range []struct{ ref, reason string }{{"", "r"}, {"ORDER-1", " "}, {"ORD\nER", "r"}, {strings.Repeat("x", 201), "r"}} {
		_, err := w.orders.RequestExpunge(w.ctx, a, bad.ref, bad.reason, nil, "ops:alice")
		require.ErrorIs(t, err, courtorder.ErrInvalid, "%q", bad.ref)
	}
	req, err := w.orders.RequestExpunge(w.ctx, a, "JV-2026-0042", "court order: unsubstantiated report", nil, "ops:alice")
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{w.arch[0], w.arch[2], w.arch[3]}, req.Archives)
	require.Equal(t, int64(10), w.db.Count(t, `SELECT count(*) FROM rule_evaluations`)+7, "nothing changes until approved")

	for _, self := range []string{"ops:alice", "OPS:Alice"} {
		_, err = w.orders.Approve(w.ctx, req.ExpungeID, self)
		require.ErrorIs(t, err, courtorder.ErrSelfApproval, "%q", self)
	}
	_, err = w.orders.Approve(w.ctx, uuid.Must(uuid.NewV7()), "ops:bob")
	require.ErrorIs(t, err, courtorder.ErrNotFound)
	res, err := w.orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
	require.NoError(t, err)
	require.Equal(t, 3, res.Rewritten)
	require.Equal(t, int64(10), res.RowsRemoved, "8 archived + 2 hot")
	salt, err := hex.DecodeString(res.Salt)
	require.NoError(t, err)
	require.Equal(t, hex.EncodeToString(subject.Commitment(salt, a)), res.Commitment, "the salt opens the commitment")

	// Before any later read of A (a read announces the hash it asked for).
	hashA := subject.Hex(w.key.Hash(a))
	for _, tbl := range []string{"archive_subjects", "archive_lifecycle_log", "expungements", "subject_seals", "archive_holds", "event_outbox"} {
		require.Zero(t, w.db.Count(t, `SELECT count(*) FROM `+tbl+` AS t WHERE strpos(t::text, $1) > 0 OR strpos(encode(convert_to(t::text, 'UTF8'), 'hex'), $1) > 0`, hashA),
			"%s no longer holds A's keyed hash", tbl)
	}
	require.Equal(t, int64(3), w.db.Count(t, `SELECT count(*) FROM archive_subjects WHERE subject_hashes @> ARRAY[$1::bytea]`, must(hex.DecodeString(res.Commitment))(t)),
		"the commitment replaces A in the index of the three superseded archives")

	rows, sum := w.fetch(t, "case:17")
	require.Empty(t, rows)
	require.Zero(t, sum.Summary.PurgedArchives, "expunged rows are unknown, not purged")
	bAfter, sum := w.fetch(t, "case:18")
	require.Equal(t, ns(t, bBefore), ns(t, bAfter), "every B row is still there")
	require.Equal(t, 3, sum.Summary.ArchivesRead, "A2 and the successors of A1 and A4")
	for _, l := range aRows {
		var r struct {
			ID uuid.UUID `json:"id"`
		}
		require.NoError(t, json.Unmarshal(l.Row, &r))
		_, err := w.reader.Row(w.ctx, "rule_evaluations", r.ID, "ops:dana")
		require.ErrorIs(t, err, archiveread.ErrNotFound, "A's row %s answers as unknown", r.ID)
	}
	for _, key := range oldKeys {
		n, err := w.st.VersionCount(w.ctx, key)
		require.NoError(t, err)
		require.Zero(t, n, "no version of %s is left", key)
	}
	rep, err := w.reader.Verify(w.ctx, true, 0)
	require.NoError(t, err)
	require.Zero(t, rep.Failed, "%+v", rep)
	require.Equal(t, 3, rep.Checked, "A2 and two successors")

	cert, err := w.st.Get(w.ctx, res.CertificateKey)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(res.CertificateKey, "retention-archives/"+w.s3.Service+"/expungements/"))
	require.Contains(t, string(cert), res.Commitment)
	require.Contains(t, string(cert), "JV-2026-0042")
	require.NotContains(t, string(cert), res.Salt, "the salt is not kept")
	w.canaryNowhere(t)

	again, err := w.orders.Approve(w.ctx, req.ExpungeID, "ops:carol")
	require.NoError(t, err)
	require.Empty(t, again.Salt, "the salt is returned once")
	require.Equal(t, res.RowsRemoved, again.RowsRemoved)
	require.Equal(t, int64(6), w.db.Count(t, `SELECT count(*) FROM archive_ledger`), "a second call books nothing")
	_ = b
}

// TestExpungeRefusals: a hold the order does not name blocks it (409,
// nothing recorded); named, the order runs and the successor stays held
// (ledger and store); a subject with no rows is an empty result.
func TestExpungeRefusals(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	a := mustSubject(t, "case:17")
	h, err := w.mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "family 18", Reason: "fair hearing", Subjects: []string{"case:18"}}, "ops:carol")
	require.NoError(t, err)
	_, err = w.orders.RequestExpunge(w.ctx, a, "JV-1", "order", nil, "ops:alice")
	var held *courtorder.HeldError
	require.ErrorAs(t, err, &held)
	require.Equal(t, []uuid.UUID{w.arch[0], w.arch[3]}, held.Archives)
	require.Equal(t, []uuid.UUID{h.ID}, held.Holds)
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM expungements`), "nothing recorded")
	_, err = w.orders.RequestExpunge(w.ctx, a, "JV-1", "order", []uuid.UUID{uuid.Must(uuid.NewV7())}, "ops:alice")
	require.ErrorIs(t, err, courtorder.ErrInvalid, "an unknown hold")

	req, err := w.orders.RequestExpunge(w.ctx, a, "JV-1", "order names the hearing's hold", []uuid.UUID{h.ID}, "ops:alice")
	require.NoError(t, err)
	res, err := w.orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
	require.NoError(t, err)
	require.Equal(t, 3, res.Rewritten)
	for _, r := range w.records(t) {
		if r.PurgedAt != nil {
			continue
		}
		wantHeld := r.ArchiveID != w.arch[2] // B is in every archive left
		require.Equal(t, wantHeld, r.LegalHold, "archive %s", r.ArchiveID)
		on, err := w.st.LegalHold(w.ctx, r.DataKey)
		require.NoError(t, err)
		require.Equal(t, wantHeld, on, "store lock of %s", r.DataKey)
	}
	w.db.Exec(t, `UPDATE archive_ledger SET retention_until = (now() AT TIME ZONE 'UTC')::date - 1`)
	pr, err := w.mgr.Purge(w.ctx, 10, false, "ops:alice")
	require.NoError(t, err)
	require.Empty(t, pr.Purged, "B's hold still keeps every archive with B's rows, successors included")

	none, err := w.orders.RequestExpunge(w.ctx, mustSubject(t, "case:4242"), "JV-2", "order", nil, "ops:alice")
	require.NoError(t, err)
	require.Empty(t, none.Archives)
	res, err = w.orders.Approve(w.ctx, none.ExpungeID, "ops:bob")
	require.NoError(t, err)
	require.Zero(t, res.Rewritten)
	require.Zero(t, res.RowsRemoved)
}

// TestSealHidesTheSubject: a sealed subject's rows answer as rows that do
// not exist on every read path (by id, range, subject), and appear with
// sealed access, announced with the order; unsealing restores them;
// nothing logged or announced names the subject in clear.
func TestSealHidesTheSubject(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	a := mustSubject(t, "case:17")
	aRows, _ := w.fetch(t, "case:17")
	res, err := w.orders.Seal(w.ctx, a, "SEAL-781", "WIC 781 order", "ops:alice")
	require.NoError(t, err)
	require.Equal(t, courtorder.SealResult{Subject: "case:17", Sealed: true, OrderRef: "SEAL-781"}, res)
	again, err := w.orders.Seal(w.ctx, mustSubject(t, "CASE:017"), "SEAL-OTHER", "again", "ops:alice")
	require.NoError(t, err)
	require.Equal(t, "SEAL-781", again.OrderRef, "sealed once, by the first order")

	rows, sum := w.fetch(t, "case:17")
	require.Empty(t, rows)
	require.Zero(t, sum.Summary.ArchivesRead)
	require.Zero(t, sum.Summary.Rows)
	for _, l := range aRows {
		var r struct {
			ID uuid.UUID `json:"id"`
		}
		require.NoError(t, json.Unmarshal(l.Row, &r))
		_, err := w.reader.Row(w.ctx, "rule_evaluations", r.ID, "ops:dana")
		require.ErrorIs(t, err, archiveread.ErrNotFound)
		f, err := w.reader.WithSealedAccess("SEAL-781").Row(w.ctx, "rule_evaluations", r.ID, "ops:dana")
		require.NoError(t, err, "sealed access reads it")
		require.Contains(t, string(f.Row), canary)
	}
	var out bytes.Buffer
	rs, err := w.reader.Range(w.ctx, &out, "rule_evaluations", time.Now().AddDate(-5, 0, 0), time.Now().Add(time.Hour), "ops:dana")
	require.NoError(t, err)
	require.NotContains(t, out.String(), canary)
	require.Equal(t, 13, rs.ArchivedRows+rs.HotRows, "B's 12 archived rows and 1 hot row")
	out.Reset()
	rs, err = w.reader.WithSealedAccess("SEAL-781").Range(w.ctx, &out, "rule_evaluations", time.Now().AddDate(-5, 0, 0), time.Now().Add(time.Hour), "ops:dana")
	require.NoError(t, err)
	require.Equal(t, 23, rs.ArchivedRows+rs.HotRows)
	require.Positive(t, w.db.Count(t, `SELECT count(*) FROM event_outbox WHERE event_type LIKE '%.archive_read' AND payload ->> 'order_ref' = 'SEAL-781'`))
	require.Equal(t, int64(1), w.db.Count(t, `SELECT count(*) FROM event_outbox WHERE event_type LIKE '%.subject_sealed'`))
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM event_outbox WHERE strpos(payload::text, 'case:17') > 0 OR strpos(payload::text, $1) > 0`, canary))

	un, err := w.orders.Unseal(w.ctx, a, "UNSEAL-1", "order lifted", "ops:alice")
	require.NoError(t, err)
	require.False(t, un.Sealed)
	rows, _ = w.fetch(t, "case:17")
	require.Len(t, rows, 10)
	for _, r := range w.logs.Records() {
		require.NotContains(t, fmt.Sprint(r), "case:17")
	}
}

// Expunge benchmark shape: a subject spread over expungeBenchArchives
// archives of expungeBenchBatch rows, expungeBenchPerArchive rows each.
const (
	expungeBenchArchives   = 10
	expungeBenchBatch      = 1000
	expungeBenchPerArchive = 10
)

// BenchmarkExpungeTenArchives times one approved expungement of a subject
// with rows in 10 archives of 1,000 rows (each rewritten without them,
// read back, booked, the old versions destroyed) and 10 hot rows, on an
// Object Lock bucket. The setup (seeding, archiving, the request) is not
// timed. Run: go test -run '^$' -bench ExpungeTenArchives ./kernel/lifecycle/
func BenchmarkExpungeTenArchives(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		w := newExpungeBenchWorld(b)
		req, err := w.orders.RequestExpunge(w.ctx, mustSubject(b, "case:17"), "BENCH-1", "benchmark", nil, "ops:alice")
		require.NoError(b, err)
		require.Len(b, req.Archives, expungeBenchArchives)
		b.StartTimer()
		res, err := w.orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
		b.StopTimer()
		require.NoError(b, err)
		require.Equal(b, expungeBenchArchives, res.Rewritten)
		require.Equal(b, int64(expungeBenchArchives*expungeBenchPerArchive+10), res.RowsRemoved)
		b.StartTimer()
	}
}

// expungeBench is the benchmark's world.
type expungeBench struct {
	ctx    context.Context
	orders *courtorder.Orders
}

func newExpungeBenchWorld(b *testing.B) expungeBench {
	b.Helper()
	ctx := context.Background()
	db := kerneltest.NewDB(b, kerneltest.ArchivingFixture()...)
	s3 := kerneltest.NewS3Scratch(b)
	st, err := store.Open(ctx, s3.URL)
	require.NoError(b, err)
	b.Cleanup(func() { _ = st.Close() })
	key, err := subject.NewKey([]byte("lifecycle bench subject key, 32 bytes or more"))
	require.NoError(b, err)
	every := expungeBenchBatch / expungeBenchPerArchive
	db.Exec(b, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
		SELECT now() - interval '400 days' + make_interval(secs => g), 'r',
		       jsonb_build_object('case_id', CASE WHEN g % $2 = 0 THEN 17 ELSE 100000 + g % 500 END, 'n', g, 'amount', 12.5), '{}'
		FROM generate_series(0, $1 - 1) AS g`, expungeBenchArchives*expungeBenchBatch, every)
	db.Exec(b, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
		SELECT now() - make_interval(mins => g), 'r', '{"case_id": 17}', '{}' FROM generate_series(1, 10) AS g`)
	am, err := metrics.NewArchive(prometheus.NewRegistry())
	require.NoError(b, err)
	bk := archive.Bookkeeper{EventType: "rules.evaluations_archived", SourceService: "craig-rules"}.Bookkeep
	eng, err := archive.New(db.Pool, st, []archive.TableSpec{subjectSpec()}, bk,
		archive.Config{Service: s3.Service, HotWindowDays: 90, BatchSize: expungeBenchBatch, MaxBatchBytes: archive.DefaultMaxBatchBytes,
			LedgerHolds: true, ObjectLock: true, SubjectKey: key}, slog.New(&kerneltest.LogRecorder{}), am)
	require.NoError(b, err)
	rep, err := eng.RunPass(ctx, expungeBenchArchives+1)
	require.NoError(b, err)
	require.NoError(b, rep.Err())
	orders, err := courtorder.New(db.Pool, st, courtorder.Config{Service: s3.Service, Tables: []archive.TableSpec{subjectSpec()}, Key: key,
		ObjectLock: true, Bookkeep: bk}, slog.New(&kerneltest.LogRecorder{}))
	require.NoError(b, err)
	return expungeBench{ctx: ctx, orders: orders}
}
