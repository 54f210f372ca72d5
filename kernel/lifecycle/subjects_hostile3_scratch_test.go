package lifecycle_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/lifecycle"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/pgsession"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/kernel/subject"
)

// h3Spec is evaluationsSpec over any table of rule_evaluations' shape.
func h3Spec(table string, subs ...archive.Subject) archive.TableSpec {
	tbl := pgx.Identifier{table}.Sanitize()
	sel := `SELECT t.id, t.evaluated_at, to_jsonb(t)::text FROM ` + tbl + ` AS t
WHERE t.evaluated_at < now() - make_interval(days => $1::int)
  AND (t.evaluated_at, t.id) > ($2::timestamptz, $3::uuid)
ORDER BY t.evaluated_at, t.id LIMIT $4::int`
	del := `DELETE FROM ` + tbl + ` WHERE id = ANY ($1::uuid[]) AND evaluated_at < now() - make_interval(days => $2::int)`
	return archive.TableSpec{Table: table, AgeColumn: "evaluated_at", Subjects: subs,
		Select: func(ctx context.Context, db prune.DB, p archive.SelectParams) ([]archive.Row, error) {
			rows, err := db.Query(ctx, sel, p.HotWindowDays, p.After.At, p.After.ID, p.Limit)
			if err != nil {
				return nil, err
			}
			return pgx.CollectRows(rows, func(r pgx.CollectableRow) (archive.Row, error) {
				var row archive.Row
				return row, r.Scan(&row.ID, &row.At, &row.Doc)
			})
		},
		Delete: func(ctx context.Context, tx pgx.Tx, hot int32, ids []uuid.UUID) (int64, error) {
			tag, err := tx.Exec(ctx, del, ids, hot)
			return tag.RowsAffected(), err
		}}
}

var (
	h3Case   = archive.Subject{Kind: subject.Case, SQL: "retention_subject('case', input ->> 'case_id')"}
	h3Person = archive.Subject{Kind: subject.Person, SQL: "retention_subject('person', input ->> 'person_id')"}
)

type h3World struct {
	*world
	key  subject.Key
	logs *kerneltest.LogRecorder
	// want: per row n (input.n), its canonical subjects.
	want map[int][]string
}

func newH3World(t *testing.T) *h3World {
	t.Helper()
	w := &h3World{world: newWorldLocked(t, 0, true), key: testKey(t), logs: &kerneltest.LogRecorder{}, want: map[int][]string{}}
	return w
}

// seed inserts aged rows n in [from, to) into table: the case spelled in
// many ways or absent or no subject, a person on every third row.
func (w *h3World) seed(t *testing.T, table string, from, to int) {
	t.Helper()
	for n := from; n < to; n++ {
		input := map[string]any{"n": n}
		var subs []string
		switch {
		case n%7 == 0:
			input["case_id"] = "seventeen" // no subject
		case n%5 == 0: // no case at all
		case n%5 == 1:
			input["case_id"] = "017"
			subs = append(subs, "case:17")
		case n%5 == 2:
			input["case_id"] = "case-17"
			subs = append(subs, "case:17")
		case n%5 == 3:
			input["case_id"] = "CASE:0017"
			subs = append(subs, "case:17")
		default:
			input["case_id"] = n
			subs = append(subs, fmt.Sprintf("case:%d", n))
		}
		if n%3 == 0 {
			input["person_id"] = fmt.Sprintf("00%d", n+1000)
			subs = append(subs, fmt.Sprintf("person:%d", n+1000))
		}
		doc, err := json.Marshal(input)
		require.NoError(t, err)
		w.db.Exec(t, `INSERT INTO `+pgx.Identifier{table}.Sanitize()+` (evaluated_at, rule_id, input, output)
			VALUES (now() - interval '400 days' + make_interval(mins => $1), 'r', $2::jsonb, '{}')`, n, string(doc))
		w.want[n] = subs
	}
}

func (w *h3World) engine(t *testing.T, pool *pgxpool.Pool, specs []archive.TableSpec, batch int, timeout time.Duration) *archive.Engine {
	t.Helper()
	am, err := metrics.NewArchive(prometheus.NewRegistry())
	require.NoError(t, err)
	eng, err := archive.New(pool, w.st, specs,
		archive.Bookkeeper{EventType: "rules.evaluations_archived", SourceService: "craig-rules"}.Bookkeep,
		archive.Config{Service: w.s3.Service, HotWindowDays: 90, BatchSize: batch, MaxBatchBytes: archive.DefaultMaxBatchBytes,
			LedgerHolds: true, ObjectLock: true, SubjectKey: w.key, DBTimeout: timeout},
		slog.New(w.logs), am)
	require.NoError(t, err)
	return eng
}

func (w *h3World) manager(t *testing.T, tables ...string) *lifecycle.Manager {
	t.Helper()
	mgr, err := lifecycle.New(w.db.Pool, w.st, lifecycle.Config{Service: w.s3.Service, ObjectLock: true, Tables: tables,
		SubjectKey: w.key, SubjectTables: tables}, slog.New(w.logs), w.m)
	require.NoError(t, err)
	return mgr
}

func (w *h3World) hashHex(t *testing.T, s string) string {
	t.Helper()
	sub, err := subject.Parse(s)
	require.NoError(t, err)
	return subject.Hex(w.key.Hash(sub))
}

// archiveNs reads a booked archive's data object and returns its rows' n.
func (w *h3World) archiveNs(t *testing.T, dataKey string) []int {
	t.Helper()
	data, err := w.st.Get(w.ctx, dataKey)
	require.NoError(t, err)
	var out []int
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var row struct {
			Input struct {
				N int `json:"n"`
			} `json:"input"`
		}
		require.NoError(t, json.Unmarshal(line, &row), "%s", line)
		out = append(out, row.Input.N)
	}
	return out
}

// checkWorld is the guarantee over the whole database and store: every
// seeded row is hot or in exactly one booked archive; every booked archive
// is indexed with exactly its rows' subjects; every object in the store is
// a booked archive's; every intent is settled; nothing in clear.
func (w *h3World) checkWorld(t *testing.T, tables []string) (held map[string][]uuid.UUID) {
	t.Helper()
	seen := map[int]uuid.UUID{}
	for _, table := range tables {
		rows, err := w.db.Pool.Query(w.ctx, `SELECT (input ->> 'n')::int FROM `+pgx.Identifier{table}.Sanitize())
		require.NoError(t, err)
		hot, err := pgx.CollectRows(rows, pgx.RowTo[int])
		require.NoError(t, err)
		for _, n := range hot {
			_, dup := seen[n]
			require.False(t, dup, "row %d twice", n)
			seen[n] = uuid.Nil
		}
	}
	type led struct {
		id                 uuid.UUID
		table, data, manif string
		indexed            bool
		hashes             [][]byte
	}
	rows, err := w.db.Pool.Query(w.ctx, `SELECT l.archive_id, l.table_name, l.data_key, l.manifest_key, l.subjects_indexed, coalesce(s.subject_hashes, '{}')
		FROM archive_ledger AS l LEFT JOIN archive_subjects AS s USING (archive_id) WHERE l.purged_at IS NULL`)
	require.NoError(t, err)
	var ls []led
	for rows.Next() {
		var l led
		require.NoError(t, rows.Scan(&l.id, &l.table, &l.data, &l.manif, &l.indexed, &l.hashes))
		ls = append(ls, l)
	}
	require.NoError(t, rows.Err())
	booked := map[string]bool{}
	held = map[string][]uuid.UUID{}
	for _, l := range ls {
		booked[l.data], booked[l.manif] = true, true
		require.True(t, l.indexed, "archive %s booked with a key must be indexed", l.id)
		want := map[string]bool{}
		for _, n := range w.archiveNs(t, l.data) {
			prev, dup := seen[n]
			require.False(t, dup, "row %d both in %s and %v", n, l.id, prev)
			seen[n] = l.id
			for _, s := range w.want[n] {
				want[w.hashHex(t, s)] = true
				held[s] = append(held[s], l.id)
			}
		}
		got := []string{}
		for _, h := range l.hashes {
			got = append(got, subject.Hex(h))
		}
		wantL := make([]string, 0, len(want))
		for h := range want {
			wantL = append(wantL, h)
		}
		slices.Sort(got)
		slices.Sort(wantL)
		require.Equal(t, wantL, got, "subject index of archive %s (table %s): every subject of every row, no more, no less", l.id, l.table)
	}
	for n := range w.want {
		_, ok := seen[n]
		require.True(t, ok, "row %d is neither hot nor in a booked archive: lost", n)
	}
	objs, err := w.st.ListAllObjects(w.ctx, store.Prefix+w.s3.Service+"/")
	require.NoError(t, err)
	for _, o := range objs {
		if strings.HasSuffix(o.Key, ".probe") {
			continue
		}
		require.True(t, booked[o.Key], "object %s in the store belongs to no booked archive", o.Key)
	}
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM archive_upload_intents WHERE destroyed_at IS NULL`), "every intent is settled")
	for _, bad := range []string{"case:17", "CASE:0017", "case-17", "person:1003"} {
		require.Zero(t, w.db.Count(t, `SELECT count(*) FROM event_outbox WHERE payload::text LIKE '%' || $1 || '%'`, bad), "event names %s in clear", bad)
		require.Zero(t, w.db.Count(t, `SELECT count(*) FROM archive_ledger WHERE to_jsonb(archive_ledger)::text LIKE '%' || $1 || '%'`, bad), "ledger names %s in clear", bad)
		for _, m := range w.logs.Messages(slog.LevelDebug, slog.LevelError+8) {
			require.NotContains(t, m, bad, "log line names a subject in clear")
		}
		for _, r := range w.logs.Records() {
			r.Attrs(func(a slog.Attr) bool {
				require.NotContains(t, a.Value.String(), bad, "log attribute %s names a subject in clear", a.Key)
				return true
			})
		}
	}
	return held
}

func (w *h3World) addTable(t *testing.T, name string) {
	t.Helper()
	w.db.Exec(t, `CREATE TABLE `+pgx.Identifier{name}.Sanitize()+` (LIKE rule_evaluations INCLUDING ALL)`)
}

// TestHostile3IndexExactMixed: NULL rows, rows with only a case, only a
// person, both, many spellings of case 17, "seventeen"; two subject
// expressions; small batches.
func TestHostile3IndexExactMixed(t *testing.T) {
	t.Parallel()
	w := newH3World(t)
	w.seed(t, "rule_evaluations", 1, 61)
	eng := w.engine(t, w.db.Pool, []archive.TableSpec{h3Spec("rule_evaluations", h3Case, h3Person)}, 7, 0)
	rep, err := eng.RunPass(w.ctx, 100)
	require.NoError(t, err)
	require.NoError(t, rep.Err())
	require.EqualValues(t, 60, rep.Tables[0].Archived)
	w.checkWorld(t, []string{"rule_evaluations"})
}

// TestHostile3SmallPoolManyTablesOneBad: pool_max_conns=2, three tables,
// the middle one's expression non-canonical: it stops with no row deleted
// and no object left; the others archive fully and exactly.
func TestHostile3SmallPoolManyTablesOneBad(t *testing.T) {
	t.Parallel()
	w := newH3World(t)
	w.addTable(t, "t_bad")
	w.addTable(t, "t_person")
	w.seed(t, "rule_evaluations", 1, 31)
	w.seed(t, "t_bad", 101, 131)
	w.seed(t, "t_person", 201, 231)
	sep := "?"
	if strings.Contains(w.db.URL, "?") {
		sep = "&"
	}
	cfg, err := pgsession.ParsePoolConfig(w.db.URL + sep + "pool_max_conns=2")
	require.NoError(t, err)
	require.EqualValues(t, 2, cfg.MaxConns)
	pool, err := pgxpool.NewWithConfig(w.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	bad := archive.Subject{Kind: subject.Case, SQL: "'case-' || (input ->> 'n')"}
	eng := w.engine(t, pool, []archive.TableSpec{h3Spec("rule_evaluations", h3Case, h3Person), h3Spec("t_bad", bad), h3Spec("t_person", h3Person, h3Case)}, 4, 5*time.Second)
	ctx, cancel := context.WithTimeout(w.ctx, 60*time.Second)
	defer cancel()
	rep, err := eng.RunPass(ctx, 100)
	require.NoError(t, err)
	require.NoError(t, rep.Table("rule_evaluations").Err)
	require.NoError(t, rep.Table("t_person").Err)
	require.ErrorIs(t, rep.Table("t_bad").Err, archive.ErrSubject)
	require.EqualValues(t, 30, rep.Table("rule_evaluations").Archived)
	require.EqualValues(t, 30, rep.Table("t_person").Archived)
	require.EqualValues(t, 30, w.db.Count(t, `SELECT count(*) FROM t_bad`), "no row of the bad table deleted")
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM archive_ledger WHERE table_name = 't_bad'`))
	w.checkWorld(t, []string{"rule_evaluations", "t_bad", "t_person"})
}

// TestHostile3RaisingExpressionLeaks: an expression that raises on a row
// (a database error) must fail cleanly and never repeat the row's subject
// spelling in the error or a log line.
func TestHostile3RaisingExpressionLeaks(t *testing.T) {
	t.Parallel()
	w := newH3World(t)
	w.seed(t, "rule_evaluations", 1, 11)
	raising := archive.Subject{Kind: subject.Case, SQL: "'case:' || ((input ->> 'case_id')::int)::text"}
	eng := w.engine(t, w.db.Pool, []archive.TableSpec{h3Spec("rule_evaluations", raising)}, 50, 0)
	rep, err := eng.RunPass(w.ctx, 10)
	require.NoError(t, err)
	tr := rep.Tables[0]
	require.Error(t, tr.Err)
	require.Zero(t, tr.Archived)
	require.EqualValues(t, 10, w.db.Count(t, `SELECT count(*) FROM rule_evaluations`))
	t.Logf("error: %v", tr.Err)
	for _, spelled := range []string{"017", "case-17", "CASE:0017"} {
		assert.NotContains(t, tr.Err.Error(), spelled, "the row's subject is in clear in the pass's error")
	}
	w.checkWorld(t, []string{"rule_evaluations"})
}

// TestHostile3SlowSubjectsTimeout: the subject read outlives DBTimeout:
// the batch fails, rows stay, nothing booked, no object left.
func TestHostile3SlowSubjectsTimeout(t *testing.T) {
	t.Parallel()
	w := newH3World(t)
	w.db.Exec(t, `CREATE FUNCTION h3_slow(v text) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
		BEGIN PERFORM pg_sleep(0.4); RETURN retention_subject('case', v); END $$`)
	w.seed(t, "rule_evaluations", 1, 6)
	slow := archive.Subject{Kind: subject.Case, SQL: "h3_slow(input ->> 'case_id')"}
	eng := w.engine(t, w.db.Pool, []archive.TableSpec{h3Spec("rule_evaluations", slow)}, 5, 1*time.Second)
	rep, err := eng.RunPass(w.ctx, 10)
	require.NoError(t, err)
	require.Error(t, rep.Tables[0].Err)
	t.Logf("error: %v", rep.Tables[0].Err)
	require.EqualValues(t, 5, w.db.Count(t, `SELECT count(*) FROM rule_evaluations`))
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM archive_ledger`))
	w.checkWorld(t, []string{"rule_evaluations"})
}

// TestHostile3CancelAnywhere: the pass's context cancelled at seeded
// points; after it, the world is consistent (no lost row, exact indexes,
// no stray object, every intent settled).
func TestHostile3CancelAnywhere(t *testing.T) {
	t.Parallel()
	for seed := int64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			w := newH3World(t)
			w.seed(t, "rule_evaluations", 1, 41)
			eng := w.engine(t, w.db.Pool, []archive.TableSpec{h3Spec("rule_evaluations", h3Case, h3Person)}, 3, 0)
			rng := rand.New(rand.NewSource(seed))
			// Half the seeds cancel on the k-th log record (a point in the
			// pass), the others after a seeded delay.
			ctx, cancel := context.WithCancel(w.ctx)
			defer cancel()
			if seed%2 == 0 {
				k, i := rng.Intn(6)+1, 0
				var mu sync.Mutex
				w.logs.SetHook(func(slog.Record) {
					mu.Lock()
					defer mu.Unlock()
					if i++; i == k {
						cancel()
					}
				})
			} else {
				time.AfterFunc(time.Duration(rng.Intn(400))*time.Millisecond, cancel)
			}
			_, _ = eng.RunPass(ctx, 100)
			w.logs.SetHook(nil)
			w.checkWorld(t, []string{"rule_evaluations"})
			// A later pass finishes the job exactly.
			rep, err := eng.RunPass(w.ctx, 100)
			require.NoError(t, err)
			require.NoError(t, rep.Err())
			require.Zero(t, w.db.Count(t, `SELECT count(*) FROM rule_evaluations`))
			w.checkWorld(t, []string{"rule_evaluations"})
		})
	}
}

// raceHoldWithPass runs a pass and, once start is closed, places a hold on
// spelled beside it; it returns the hold and the archives that hold a row
// of a subject of canonical (there is at least one).
func (w *h3World) raceHoldWithPass(t *testing.T, mgr *lifecycle.Manager, eng *archive.Engine, start <-chan struct{}, spelled, canonical []string) (lifecycle.Hold, map[uuid.UUID]bool) {
	t.Helper()
	var hold lifecycle.Hold
	var herr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-start
		hold, herr = mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "t", Reason: "r", Subjects: spelled}, "ops:carol")
	}()
	rep, err := eng.RunPass(w.ctx, 100)
	require.NoError(t, err)
	require.NoError(t, rep.Err())
	<-done
	w.logs.SetHook(nil)
	require.NoError(t, herr)
	held := w.checkWorld(t, []string{"rule_evaluations"})
	must := map[uuid.UUID]bool{}
	for _, s := range canonical {
		for _, id := range held[s] {
			must[id] = true
		}
	}
	require.NotEmpty(t, must)
	return hold, must
}

// TestHostile3HoldRacesPass: a hold on case:17 and person:1003 placed
// when the pass books its first archive; every archive that holds them
// is covered and survives a purge.
func TestHostile3HoldRacesPass(t *testing.T) {
	t.Parallel()
	w := newH3World(t)
	w.seed(t, "rule_evaluations", 1, 41)
	mgr := w.manager(t, "rule_evaluations")
	eng := w.engine(t, w.db.Pool, []archive.TableSpec{h3Spec("rule_evaluations", h3Case, h3Person)}, 2, 0)
	start := make(chan struct{})
	var once sync.Once
	w.logs.SetHook(func(r slog.Record) {
		if r.Message == "archived rows" {
			once.Do(func() { close(start) })
		}
	})
	hold, must := w.raceHoldWithPass(t, mgr, eng, start, []string{"CASE:0017", "person:1003"}, []string{"case:17", "person:1003"})
	hs, err := mgr.Holds(w.ctx)
	require.NoError(t, err)
	var covers []uuid.UUID
	for _, h := range hs {
		if h.ID == hold.ID {
			covers = h.Covers
		}
	}
	for id := range must {
		require.Contains(t, covers, id, "the subject hold covers archive %s", id)
		require.EqualValues(t, 1, w.db.Count(t, `SELECT count(*) FROM archive_ledger WHERE archive_id = $1 AND legal_hold`, id))
	}
	w.db.Exec(t, `UPDATE archive_ledger SET retention_until = (now() AT TIME ZONE 'UTC')::date - 1`)
	res, err := mgr.Purge(w.ctx, 100, false, "ops:alice")
	require.NoError(t, err)
	for _, id := range res.Purged {
		require.False(t, must[id], "purged archive %s that holds a held subject", id)
	}
}

// TestHostile3CommitFailsAfterStoreLock: a subject hold covers the batch,
// so its booking turns the store's legal holds on; then the COMMIT fails
// (a deferred constraint trigger raises). Rows stay, nothing booked, and
// the locked objects of the failed batch must not remain.
func TestHostile3CommitFailsAfterStoreLock(t *testing.T) {
	t.Parallel()
	w := newH3World(t)
	w.seed(t, "rule_evaluations", 1, 11)
	mgr := w.manager(t, "rule_evaluations")
	_, err := mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "t", Reason: "r", Subjects: []string{"case:17"}}, "ops:carol")
	require.NoError(t, err)
	w.db.Exec(t, `CREATE FUNCTION h3_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'h3: refused at commit'; END $$`)
	w.db.Exec(t, `CREATE CONSTRAINT TRIGGER h3_refuse AFTER INSERT ON archive_ledger DEFERRABLE INITIALLY DEFERRED
		FOR EACH ROW EXECUTE FUNCTION h3_refuse()`)
	eng := w.engine(t, w.db.Pool, []archive.TableSpec{h3Spec("rule_evaluations", h3Case, h3Person)}, 50, 0)
	rep, err := eng.RunPass(w.ctx, 10)
	require.NoError(t, err)
	require.Error(t, rep.Tables[0].Err)
	t.Logf("error: %v", rep.Tables[0].Err)
	require.EqualValues(t, 10, w.db.Count(t, `SELECT count(*) FROM rule_evaluations`))
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM archive_ledger`))
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM event_outbox WHERE event_type LIKE '%archive_hold_placed' AND payload ? 'legal_hold' AND payload->>'reason' = 'archived under an active hold'`), "no announcement of a hold on an archive that does not exist")
	w.checkWorld(t, []string{"rule_evaluations"})
}

// TestHostile3KiritimatiDMY: the database's sessions default to
// Pacific/Kiritimati and DateStyle 'SQL, DMY'; a pool over it archives
// exactly as in UTC: every aged row (and only those) archived, indexes exact.
func TestHostile3KiritimatiDMY(t *testing.T) {
	t.Parallel()
	w := newH3World(t)
	w.db.Exec(t, `ALTER DATABASE `+pgx.Identifier{w.db.Name}.Sanitize()+` SET timezone = 'Pacific/Kiritimati'`)
	w.db.Exec(t, `ALTER DATABASE `+pgx.Identifier{w.db.Name}.Sanitize()+` SET datestyle = 'SQL, DMY'`)
	w.seed(t, "rule_evaluations", 1, 21)
	// Rows right around the hot window: 89 days 23h (stays) and 90 days 1h (goes).
	w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output) VALUES
		(now() - interval '89 days 23 hours', 'r', '{"n": 500, "case_id": 17}', '{}'),
		(now() - interval '90 days 1 hour', 'r', '{"n": 501, "case_id": "0017"}', '{}')`)
	w.want[500], w.want[501] = []string{"case:17"}, []string{"case:17"}
	cfg, err := pgsession.ParsePoolConfig(w.db.URL)
	require.NoError(t, err)
	pool, err := pgxpool.NewWithConfig(w.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	eng := w.engine(t, pool, []archive.TableSpec{h3Spec("rule_evaluations", h3Case, h3Person)}, 6, 0)
	rep, err := eng.RunPass(w.ctx, 100)
	require.NoError(t, err)
	require.NoError(t, rep.Err())
	require.EqualValues(t, 21, rep.Tables[0].Archived)
	require.EqualValues(t, 1, w.db.Count(t, `SELECT count(*) FROM rule_evaluations WHERE input->>'n' = '500'`))
	w.checkWorld(t, []string{"rule_evaluations"})
}

// TestHostile3HoldRacesPassEveryPoint: the hold placed at the k-th log
// record of the pass, k = 1..8, and also concurrently with no signal.
func TestHostile3HoldRacesPassEveryPoint(t *testing.T) {
	t.Parallel()
	for k := 0; k <= 8; k++ {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			w := newH3World(t)
			w.seed(t, "rule_evaluations", 1, 31)
			mgr := w.manager(t, "rule_evaluations")
			eng := w.engine(t, w.db.Pool, []archive.TableSpec{h3Spec("rule_evaluations", h3Case, h3Person)}, 2, 0)
			start := make(chan struct{})
			if k == 0 {
				close(start)
			} else {
				var mu sync.Mutex
				i := 0
				w.logs.SetHook(func(slog.Record) {
					mu.Lock()
					defer mu.Unlock()
					if i++; i == k {
						close(start)
					}
				})
			}
			hold, must := w.raceHoldWithPass(t, mgr, eng, start, []string{"case:17", "person:1009"}, []string{"case:17", "person:1009"})
			for id := range must {
				require.EqualValues(t, 1, w.db.Count(t, `SELECT count(*) FROM archive_ledger WHERE archive_id = $1 AND legal_hold`, id), "archive %s holds a held subject", id)
			}
			w.db.Exec(t, `UPDATE archive_ledger SET retention_until = (now() AT TIME ZONE 'UTC')::date - 1`)
			res, err := mgr.Purge(w.ctx, 100, false, "ops:alice")
			require.NoError(t, err)
			for _, id := range res.Purged {
				require.False(t, must[id], "purged archive %s that holds a held subject (hold %s)", id, hold.ID)
			}
		})
	}
}

// TestHostile3CancelFine: cancels at seeded microsecond delays within the
// pass's first tens of milliseconds, under a small pool.
func TestHostile3CancelFine(t *testing.T) {
	t.Parallel()
	for seed := int64(100); seed < 112; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			w := newH3World(t)
			w.seed(t, "rule_evaluations", 1, 41)
			cfg, err := pgsession.ParsePoolConfig(w.db.URL)
			require.NoError(t, err)
			cfg.MaxConns = 2
			pool, err := pgxpool.NewWithConfig(w.ctx, cfg)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			eng := w.engine(t, pool, []archive.TableSpec{h3Spec("rule_evaluations", h3Case, h3Person)}, 2, 0)
			rng := rand.New(rand.NewSource(seed))
			ctx, cancel := context.WithCancel(w.ctx)
			defer cancel()
			time.AfterFunc(time.Duration(rng.Intn(120_000))*time.Microsecond, cancel)
			_, perr := eng.RunPass(ctx, 100)
			t.Logf("pass: %v; hot rows left %d", perr, w.db.Count(t, `SELECT count(*) FROM rule_evaluations`))
			w.checkWorld(t, []string{"rule_evaluations"})
		})
	}
}
