package lifecycle_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/archiveread"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/lifecycle"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/kernel/subject"
)

// subjectSpec is the fixture's rule_evaluations with a case subject (the
// kernel's fixture has no subject function of its own: the expression is
// the transport set's canonicaliser over input->>'case_id').
func subjectSpec() archive.TableSpec {
	s := evaluationsSpec()
	s.Subjects = []archive.Subject{{Kind: subject.Case, SQL: "retention_subject('case', input ->> 'case_id')"}}
	return s
}

func testKey(t *testing.T) subject.Key {
	t.Helper()
	k, err := subject.NewKey([]byte("lifecycle test subject key, 32 bytes or more"))
	require.NoError(t, err)
	return k
}

// subjectWorld is a rules-shaped database with aged rows of cases 17, 18
// and 19 over four archives of five rows, plus hot rows: A1 {17}, A2 {18},
// A3 {18}, A4 {19, 17}; hot: 17 (as 17, "017" and "case-17") and 18.
type subjectWorld struct {
	*world
	key    subject.Key
	mgr    *lifecycle.Manager
	reader *archiveread.Reader
	eng    *archive.Engine
}

func newSubjectWorld(t *testing.T) *subjectWorld {
	t.Helper()
	w := &subjectWorld{world: newWorldLocked(t, 0, true), key: testKey(t)}
	caseOf := func(n int) string {
		switch {
		case n <= 5 || n == 20:
			return "17"
		case n <= 15:
			return "18"
		}
		return "19"
	}
	for n := 1; n <= 20; n++ {
		w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
			VALUES (now() - interval '400 days' + make_interval(mins => $1), 'r', jsonb_build_object('case_id', $2::int, 'n', $1), '{}')`, n, caseOf(n))
	}
	for i, c := range []string{`17`, `"017"`, `"case-17"`, `18`, `"seventeen"`} {
		w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
			VALUES (now() - interval '10 days' + make_interval(mins => $1), 'r', jsonb_build_object('case_id', $2::jsonb, 'n', 100 + $1), '{}')`, i, c)
	}
	var err error
	w.mgr, err = lifecycle.New(w.db.Pool, w.st, lifecycle.Config{Service: w.s3.Service, ObjectLock: true, Tables: []string{"rule_evaluations"},
		SubjectKey: w.key, SubjectTables: []string{"rule_evaluations"}}, slog.New(&kerneltest.LogRecorder{}), w.m)
	require.NoError(t, err)
	w.reader = archiveread.New(w.db.Pool, w.st, w.s3.Service, []archive.TableSpec{subjectSpec()}).WithSubjectKey(w.key)
	w.eng = w.engine(t, w.key)
	return w
}

func (w *subjectWorld) engine(t *testing.T, key subject.Key) *archive.Engine {
	t.Helper()
	am, err := metrics.NewArchive(prometheus.NewRegistry())
	require.NoError(t, err)
	eng, err := archive.New(w.db.Pool, w.st, []archive.TableSpec{subjectSpec()},
		archive.Bookkeeper{EventType: "rules.evaluations_archived", SourceService: "craig-rules"}.Bookkeep,
		archive.Config{Service: w.s3.Service, HotWindowDays: 90, BatchSize: 5, MaxBatchBytes: archive.DefaultMaxBatchBytes, LedgerHolds: true, ObjectLock: true, SubjectKey: key},
		slog.New(&kerneltest.LogRecorder{}), am)
	require.NoError(t, err)
	return eng
}

// archives runs a pass and returns the four archives in record order.
func (w *subjectWorld) archives(t *testing.T) []uuid.UUID {
	t.Helper()
	rep, err := w.eng.RunPass(w.ctx, 10)
	require.NoError(t, err)
	require.NoError(t, rep.Err())
	var out []uuid.UUID
	for _, a := range rep.Tables[0].Archives {
		out = append(out, a.ArchiveID)
	}
	require.Len(t, out, 4)
	return out
}

type subjectLine struct {
	Table     string          `json:"table"`
	Source    string          `json:"source"`
	ArchiveID *uuid.UUID      `json:"archive_id"`
	Row       json.RawMessage `json:"row"`
	Summary   *struct {
		Tables         []string `json:"tables"`
		ArchivesRead   int      `json:"archives_read"`
		Rows           int      `json:"rows"`
		PurgedArchives int      `json:"purged_archives"`
		Disposed       []struct {
			DispositionID uuid.UUID `json:"disposition_id"`
			Item          string    `json:"item"`
			Authority     string    `json:"authority"`
		} `json:"disposed"`
	} `json:"summary"`
}

func (w *subjectWorld) fetch(t *testing.T, s string) ([]subjectLine, subjectLine) {
	t.Helper()
	sub, err := subject.Parse(s)
	require.NoError(t, err)
	var out bytes.Buffer
	_, err = w.reader.Subject(w.ctx, &out, sub, "ops:dana")
	require.NoError(t, err)
	var lines []subjectLine
	for _, raw := range bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n")) {
		var l subjectLine
		require.NoError(t, json.Unmarshal(raw, &l), "%s", raw)
		lines = append(lines, l)
	}
	require.NotEmpty(t, lines)
	last := lines[len(lines)-1]
	require.NotNil(t, last.Summary, "the stream closes with its summary")
	return lines[:len(lines)-1], last
}

// ns are the rows' input.n, in stream order.
func ns(t *testing.T, lines []subjectLine) []int {
	t.Helper()
	var out []int
	for _, l := range lines {
		var row struct {
			Input struct {
				N int `json:"n"`
			} `json:"input"`
		}
		require.NoError(t, json.Unmarshal(l.Row, &row))
		out = append(out, row.Input.N)
	}
	return out
}

// TestSubjectFetch: a subject's rows, hot and archived, exactly those of
// the subject (two spellings of one case are one), in time order, each
// archived line from an archive the index named; no other archive is read;
// a subject with no rows is an empty stream with its summary; the read is
// announced with the keyed hash only.
func TestSubjectFetch(t *testing.T) {
	t.Parallel()
	w := newSubjectWorld(t)
	arch := w.archives(t)
	lines, sum := w.fetch(t, "case:17")
	require.Equal(t, []int{1, 2, 3, 4, 5, 20, 100, 101, 102}, ns(t, lines), "case 17's rows, oldest first; \"seventeen\" is no case")
	for _, l := range lines {
		require.Equal(t, "rule_evaluations", l.Table)
		if l.Source == "archive" {
			require.NotNil(t, l.ArchiveID)
			require.Contains(t, []uuid.UUID{arch[0], arch[3]}, *l.ArchiveID)
		} else {
			require.Equal(t, "hot", l.Source)
			require.Nil(t, l.ArchiveID)
		}
	}
	require.Equal(t, 2, sum.Summary.ArchivesRead, "only the archives that hold case 17 are read")
	require.Equal(t, 9, sum.Summary.Rows)
	require.Equal(t, []string{"rule_evaluations"}, sum.Summary.Tables)

	lines, sum = w.fetch(t, "CASE:0018")
	require.Equal(t, []int{6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 103}, ns(t, lines))
	require.Equal(t, 2, sum.Summary.ArchivesRead)

	lines, sum = w.fetch(t, "case:4242")
	require.Empty(t, lines)
	require.Zero(t, sum.Summary.Rows)
	require.Zero(t, sum.Summary.ArchivesRead)

	k17, _ := subject.Parse("case:17")
	require.Equal(t, int64(1), w.db.Count(t, `SELECT count(*) FROM event_outbox WHERE event_type LIKE '%.archive_read' AND payload ->> 'subject_hash' = $1`, subject.Hex(w.key.Hash(k17))))
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM event_outbox WHERE payload::text LIKE '%case:17%'`), "no event names the subject in clear")
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM archive_subjects, unnest(subject_hashes) AS h WHERE position(convert_to('case:', 'UTF8') in h) > 0`))
}

// TestSubjectFetchVerifiesBeforeSending: an archive that holds the subject
// and no longer matches its ledger hash fails the read before any line.
func TestSubjectFetchVerifiesBeforeSending(t *testing.T) {
	t.Parallel()
	w := newSubjectWorld(t)
	arch := w.archives(t)
	w.db.Exec(t, `ALTER TABLE archive_ledger DISABLE TRIGGER USER`)
	w.db.Exec(t, `UPDATE archive_ledger SET data_sha256 = repeat('0', 64) WHERE archive_id = $1`, arch[3])
	var out bytes.Buffer
	s, _ := subject.Parse("case:17")
	_, err := w.reader.Subject(w.ctx, &out, s, "ops:dana")
	require.ErrorIs(t, err, archiveread.ErrCorrupt)
	require.Zero(t, out.Len(), "nothing was sent")
}

// TestSubjectHoldLocksOnlyItsArchives: a subject hold placed before the
// pass holds (ledger, store lock, event) the new archives that hold the
// subject and no others; the purge skips them; the fetch then reports the
// purged archive of the subject. Refusals change nothing.
func TestSubjectHoldLocksOnlyItsArchives(t *testing.T) {
	t.Parallel()
	w := newSubjectWorld(t)
	for _, bad := range [][]string{{"case-19"}, {"case:"}, {"household:1"}} {
		_, err := w.mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "t", Reason: "r", Subjects: bad}, "ops:carol")
		require.ErrorIs(t, err, lifecycle.ErrInvalid, "%v", bad)
	}
	h, err := w.mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "family 19", Reason: "subpoena", Subjects: []string{"case:19"}}, "ops:carol")
	require.NoError(t, err)
	require.Len(t, h.SubjectHashes, 1)
	require.Empty(t, h.Covers, "nothing archived yet")
	arch := w.archives(t)
	held := map[uuid.UUID]bool{}
	for _, r := range w.records(t) {
		held[r.ArchiveID] = r.LegalHold
		for _, key := range []string{r.DataKey, r.ManifestKey} {
			on, err := w.st.LegalHold(w.ctx, key)
			require.NoError(t, err)
			require.Equal(t, r.ArchiveID == arch[3], on, "store lock of %s", key)
		}
	}
	require.Equal(t, map[uuid.UUID]bool{arch[0]: false, arch[1]: false, arch[2]: false, arch[3]: true}, held)
	require.Equal(t, int64(1), w.db.Count(t, `SELECT count(*) FROM event_outbox WHERE event_type LIKE '%.archive_hold_placed'
		AND payload -> 'subject_hold' ->> $1 = 'true'`, arch[3].String()), "the fleet is told a subject hold covers it")
	hs, err := w.mgr.Holds(w.ctx)
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{arch[3]}, hs[0].Covers)

	w.db.Exec(t, `UPDATE archive_ledger SET retention_until = (now() AT TIME ZONE 'UTC')::date - 1`)
	res, err := w.mgr.Purge(w.ctx, 10, false, "ops:alice")
	require.NoError(t, err)
	require.ElementsMatch(t, arch[:3], res.Purged, "the purge skips the subject's archive")
	lines, sum := w.fetch(t, "case:17")
	require.Equal(t, []int{20, 100, 101, 102}, ns(t, lines), "A1 is gone; A4 is held")
	require.Equal(t, 1, sum.Summary.PurgedArchives)
	require.Equal(t, 1, sum.Summary.ArchivesRead)

	_, err = w.mgr.ReleaseHold(w.ctx, h.ID, "", "ops:carol")
	require.ErrorIs(t, err, lifecycle.ErrInvalid, "a release needs a reason")
	_, err = w.mgr.ReleaseHold(w.ctx, h.ID, "case closed", "ops:carol")
	require.NoError(t, err)
	require.Equal(t, int64(1), w.db.Count(t, `SELECT count(*) FROM event_outbox WHERE event_type LIKE '%.archive_hold_released'
		AND payload -> 'subject_hold' ->> $1 = 'false'`, arch[3].String()))
	res, err = w.mgr.Purge(w.ctx, 10, false, "ops:alice")
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{arch[3]}, res.Purged)
}

func (w *subjectWorld) records(t *testing.T) []lifecycle.Record {
	t.Helper()
	rs, err := w.mgr.Records(w.ctx, lifecycle.Filter{Limit: 100})
	require.NoError(t, err)
	return rs
}

// TestSubjectBackfill: archives booked without a key are unindexed; a
// subject hold is refused while any is (it would hold them all), a read
// still finds their rows; the backfill indexes them (resumably, a limit
// at a time), and then the hold covers exactly the subject's archives.
func TestSubjectBackfill(t *testing.T) {
	t.Parallel()
	w := newSubjectWorld(t)
	w.eng = w.engine(t, subject.Key{})
	arch := w.archives(t)
	require.Equal(t, int64(4), w.db.Count(t, `SELECT count(*) FROM archive_ledger WHERE NOT subjects_indexed`))
	_, err := w.mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "t", Reason: "r", Subjects: []string{"case:19"}}, "ops:carol")
	require.ErrorIs(t, err, lifecycle.ErrNotIndexed)
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM archive_holds`), "a refusal changes nothing")
	lines, sum := w.fetch(t, "case:19")
	require.Equal(t, []int{16, 17, 18, 19}, ns(t, lines), "unindexed archives are read, not skipped")
	require.Equal(t, 4, sum.Summary.ArchivesRead)

	rep, _, err := w.reader.IndexSubjects(w.ctx, 3, "cli:ops")
	require.NoError(t, err)
	require.Equal(t, 3, rep.Indexed)
	require.True(t, rep.More)
	rep, _, err = w.reader.IndexSubjects(w.ctx, 3, "cli:ops")
	require.NoError(t, err)
	require.Equal(t, 1, rep.Indexed)
	require.False(t, rep.More)
	_, sum = w.fetch(t, "case:19")
	require.Equal(t, 1, sum.Summary.ArchivesRead, "now only the archive that holds it")
	h, err := w.mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "t", Reason: "r", Subjects: []string{"case:19"}}, "ops:carol")
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{arch[3]}, h.Covers)

	noKey, err := lifecycle.New(w.db.Pool, w.st, lifecycle.Config{Service: w.s3.Service}, slog.New(&kerneltest.LogRecorder{}), w.m)
	require.NoError(t, err)
	_, err = noKey.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "t", Reason: "r", Subjects: []string{"case:1"}}, "ops:carol")
	require.ErrorIs(t, err, lifecycle.ErrNoSubjectKey)
	var out bytes.Buffer
	s, _ := subject.Parse("case:1")
	_, err = archiveread.New(w.db.Pool, w.st, w.s3.Service, []archive.TableSpec{subjectSpec()}).Subject(w.ctx, &out, s, "x")
	require.ErrorIs(t, err, archiveread.ErrNoSubjectKey)
	require.False(t, slices.ContainsFunc(strings.Split(out.String(), "\n"), func(l string) bool { return l != "" }))
	_, err = w.mgr.ReleaseHold(w.ctx, h.ID, "done", "ops:carol")
	require.NoError(t, err)
}

// TestSubjectKeyIsBound: the first key used binds the database; another
// key is refused (ErrSubjectKeyChanged): with it, the index's hashes would
// never match and a subject hold would cover none of the archives it must
// keep, letting the purge destroy them.
func TestSubjectKeyIsBound(t *testing.T) {
	t.Parallel()
	w := newSubjectWorld(t)
	require.NoError(t, archive.BindSubjectKey(w.ctx, w.db.Pool, subject.Key{}), "no key binds nothing")
	require.NoError(t, archive.BindSubjectKey(w.ctx, w.db.Pool, w.key))
	require.NoError(t, archive.BindSubjectKey(w.ctx, w.db.Pool, w.key), "the same key again")
	other, err := subject.NewKey([]byte("another key of at least thirty-two bytes!"))
	require.NoError(t, err)
	require.ErrorIs(t, archive.BindSubjectKey(w.ctx, w.db.Pool, other), archive.ErrSubjectKeyChanged)
	var fp []byte
	require.NoError(t, w.db.Pool.QueryRow(w.ctx, `SELECT fingerprint FROM archive_subject_key`).Scan(&fp))
	require.Equal(t, w.key.Fingerprint(), fp, "the first key stays bound")
}

// TestSubjectBackfillGoesPastACorruptArchive: an archive whose object no
// longer matches its ledger is left unindexed and reported; the others
// are indexed.
func TestSubjectBackfillGoesPastACorruptArchive(t *testing.T) {
	t.Parallel()
	w := newSubjectWorld(t)
	w.eng = w.engine(t, subject.Key{})
	arch := w.archives(t)
	w.db.Exec(t, `UPDATE archive_ledger SET data_sha256 = repeat('0', 64) WHERE archive_id = $1`, arch[1])
	rep, _, err := w.reader.IndexSubjects(w.ctx, 10, "cli:ops")
	require.NoError(t, err)
	require.Equal(t, 3, rep.Indexed)
	require.Equal(t, []uuid.UUID{arch[1]}, rep.Failed)
	require.Equal(t, int64(1), w.db.Count(t, `SELECT count(*) FROM archive_ledger WHERE NOT subjects_indexed`))
}

// TestSubjectDeclaredAfterArchiving: a table archived before it declared a
// subject has archives indexed by nothing; when the declaration changes
// they are marked unindexed, a subject hold is refused until the backfill
// has read them, and then it covers exactly the subject's archives, which
// the purge skips.
func TestSubjectDeclaredAfterArchiving(t *testing.T) {
	t.Parallel()
	w := newSubjectWorld(t)
	before := evaluationsSpec() // no subjects
	marked, err := archive.SyncSubjectDeclarations(w.ctx, w.db.Pool, []archive.TableSpec{before})
	require.NoError(t, err)
	require.Empty(t, marked)
	am, err := metrics.NewArchive(prometheus.NewRegistry())
	require.NoError(t, err)
	w.eng, err = archive.New(w.db.Pool, w.st, []archive.TableSpec{before},
		archive.Bookkeeper{EventType: "rules.evaluations_archived", SourceService: "craig-rules"}.Bookkeep,
		archive.Config{Service: w.s3.Service, HotWindowDays: 90, BatchSize: 5, MaxBatchBytes: archive.DefaultMaxBatchBytes, LedgerHolds: true, ObjectLock: true, SubjectKey: w.key},
		slog.New(&kerneltest.LogRecorder{}), am)
	require.NoError(t, err)
	arch := w.archives(t)
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM archive_ledger WHERE NOT subjects_indexed`), "indexed by nothing: the table declared nothing")

	marked, err = archive.SyncSubjectDeclarations(w.ctx, w.db.Pool, []archive.TableSpec{subjectSpec()})
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"rule_evaluations": 4}, marked)
	_, err = w.mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "t", Reason: "r", Subjects: []string{"case:17"}}, "ops:carol")
	require.ErrorIs(t, err, lifecycle.ErrNotIndexed)
	_, sum := w.fetch(t, "case:17")
	require.Equal(t, 4, sum.Summary.ArchivesRead, "unindexed archives are read")

	rep, _, err := w.reader.IndexSubjects(w.ctx, 10, "cli:ops")
	require.NoError(t, err)
	require.Equal(t, 4, rep.Indexed)
	h, err := w.mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "t", Reason: "r", Subjects: []string{"case:17"}}, "ops:carol")
	require.NoError(t, err)
	require.ElementsMatch(t, []uuid.UUID{arch[0], arch[3]}, h.Covers)
	w.db.Exec(t, `UPDATE archive_ledger SET retention_until = (now() AT TIME ZONE 'UTC')::date - 1`)
	res, err := w.mgr.Purge(w.ctx, 10, false, "ops:alice")
	require.NoError(t, err)
	require.ElementsMatch(t, []uuid.UUID{arch[1], arch[2]}, res.Purged, "case 17's archives stay")
	_, err = w.mgr.ReleaseHold(w.ctx, h.ID, "done", "ops:carol")
	require.NoError(t, err)
	res, err = w.mgr.Purge(w.ctx, 10, false, "ops:alice")
	require.NoError(t, err)
	require.Len(t, res.Purged, 2)
}

// TestSubjectExpressionNotCanonicalStopsTheTable: a table whose subject
// expression yields a value that is not a canonical subject (the service's
// function is wrong) fails its batch as a configuration error: no row is
// deleted, no archive booked, the value is not repeated in the error, and
// the batch's objects, put while its subjects were read, are destroyed by
// the pass's own sweep of their upload intents.
func TestSubjectExpressionNotCanonicalStopsTheTable(t *testing.T) {
	t.Parallel()
	w := newSubjectWorld(t)
	bad := subjectSpec()
	bad.Subjects = []archive.Subject{{Kind: subject.Case, SQL: "'case-' || (input ->> 'case_id')"}}
	am, err := metrics.NewArchive(prometheus.NewRegistry())
	require.NoError(t, err)
	eng, err := archive.New(w.db.Pool, w.st, []archive.TableSpec{bad},
		archive.Bookkeeper{EventType: "rules.evaluations_archived", SourceService: "craig-rules"}.Bookkeep,
		archive.Config{Service: w.s3.Service, HotWindowDays: 90, BatchSize: 5, MaxBatchBytes: archive.DefaultMaxBatchBytes, LedgerHolds: true, ObjectLock: true, SubjectKey: w.key},
		slog.New(&kerneltest.LogRecorder{}), am)
	require.NoError(t, err)
	rows := w.db.Count(t, `SELECT count(*) FROM rule_evaluations`)

	rep, err := eng.RunPass(w.ctx, 10)
	require.NoError(t, err)
	tr := rep.Tables[0]
	require.ErrorIs(t, tr.Err, archive.ErrSubject)
	require.ErrorIs(t, tr.Err, archive.ErrConfig)
	require.NotContains(t, tr.Err.Error(), "case-17", "the value is not repeated: a subject is not shown in clear")
	require.Zero(t, tr.Archived)
	require.Equal(t, rows, w.db.Count(t, `SELECT count(*) FROM rule_evaluations`), "no row is deleted")
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM archive_ledger`))
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM archive_subjects`))
	objs, err := w.st.ListAllObjects(w.ctx, store.Prefix+w.s3.Service+"/")
	require.NoError(t, err)
	require.Empty(t, objs, "the unbooked batch's objects are destroyed, every version")
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM archive_upload_intents WHERE destroyed_at IS NULL`), "every intent of the batch is settled")
}
