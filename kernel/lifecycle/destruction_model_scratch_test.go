package lifecycle_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/archiveread"
	"github.com/craig/retention/kernel/courtorder"
	"github.com/craig/retention/kernel/disposition"
	"github.com/craig/retention/kernel/intent"
	"github.com/craig/retention/kernel/journal"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/lease"
	"github.com/craig/retention/kernel/lifecycle"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/reconcile"
	"github.com/craig/retention/kernel/schedule"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/kernel/subject"
)

// destructionSeed and destructionChecks: the destruction model's fixed
// seed and number of sequences in the ordinary run (-rapid.seed, RAPID_SEED
// or CRAIG_MODEL_RANDOM=1 choose another seed, as for TestLifecycleModel,
// and CRAIG_DESTRUCTION_CHECKS another number; go tool mage test:faults
// runs 20 with a random seed). Each sequence has its own database and prefix, and
// a restore costs a pg_dump and a pg_restore: eight sequences keep the
// model near two minutes here.
const (
	destructionSeed   = "4040"
	destructionChecks = 8
	// modelCases are the cases the model's rows are about (case:1..4).
	modelCases = 4
)

// destructionWorld is one sequence's service: its database (replaced by a
// restore), the store's prefix, and everything that acts on them, rebuilt
// on the database a restore brings.
type destructionWorld struct {
	ctx    context.Context
	t      *testing.T
	base   *world
	db     *kerneltest.DB
	j      *journal.Journal
	mgr    *lifecycle.Manager
	orders *courtorder.Orders
	eng    *archive.Engine
	reader *archiveread.Reader
	logs   *kerneltest.LogRecorder
	// The records schedule (ADR-073): its versions, the case clocks and
	// the disposition batches, journaled like the rest.
	sch     *schedule.Schedules
	clocks  *schedule.Clocks
	batches *disposition.Finder
}

// rebuild makes the journal, the lifecycle manager, the court orders, the
// archive engine and the reader on db, and compares the journals.
func (d *destructionWorld) rebuild(db *kerneltest.DB) journal.State {
	t := d.t
	d.db = db
	key := testKey(t)
	d.j = journal.New(db.Pool, d.base.st, d.base.s3.Service, &journal.Gate{})
	st, err := d.j.Compare(d.ctx)
	require.NoError(t, err)
	pm, err := metrics.NewPurge(prometheus.NewRegistry())
	require.NoError(t, err)
	d.mgr, err = lifecycle.New(db.Pool, d.base.st, lifecycle.Config{Service: d.base.s3.Service, ObjectLock: true, Tables: []string{"rule_evaluations"},
		SubjectKey: key, SubjectTables: []string{"rule_evaluations"}, Journal: d.j}, slog.New(d.logs), pm)
	require.NoError(t, err)
	// The orders sweep with no late-upload window: the model's uploads are
	// all in the past (a window would refuse every order for 20 minutes).
	d.orders, err = courtorder.New(db.Pool, d.base.st, courtorder.Config{Service: d.base.s3.Service, Tables: []archive.TableSpec{subjectSpec()}, Key: key,
		ObjectLock: true, Bookkeep: archive.Bookkeeper{EventType: "rules.evaluations_archived", SourceService: "craig-rules"}.Bookkeep, Journal: d.j,
		Orphans: intent.NewSweeper(db.Pool, d.base.st, true, slog.New(d.logs), nil).WithLateWindow(0)}, slog.New(d.logs))
	require.NoError(t, err)
	am, err := metrics.NewArchive(prometheus.NewRegistry())
	require.NoError(t, err)
	d.eng, err = archive.New(db.Pool, d.base.st, []archive.TableSpec{subjectSpec()}, archive.Bookkeeper{EventType: "rules.evaluations_archived", SourceService: "craig-rules"}.Bookkeep,
		archive.Config{Service: d.base.s3.Service, HotWindowDays: 90, BatchSize: 3, MaxBatchBytes: archive.DefaultMaxBatchBytes, LedgerHolds: true, ObjectLock: true,
			SubjectKey: key, Journal: d.j}, slog.New(d.logs), am)
	require.NoError(t, err)
	d.reader = archiveread.New(db.Pool, d.base.st, d.base.s3.Service, []archive.TableSpec{subjectSpec()}).WithSubjectKey(key)
	d.sch = schedule.New(db.Pool, modelSeries).WithJournal(d.j)
	d.clocks = schedule.NewClocks(db.Pool, key).WithJournal(d.j)
	d.batches = disposition.NewFinder(db.Pool, key, []archive.TableSpec{subjectSpec()}, d.sch).WithExecution(disposition.Execution{
		Service: d.base.s3.Service, Orders: d.orders, Store: d.base.st, Journal: d.j,
		Index: func(ctx context.Context) (int64, error) {
			rep, err := d.reader.IndexCaseRows(ctx, 100)
			return rep.Left, err
		}})
	return st
}

// modelSeries and modelSchedule: rule_evaluations kept 30 days after the
// case's closure.
var modelSeries = []schedule.Series{{Table: "rule_evaluations"}}

const modelSchedule = `version: "m-1"
items:
  - id: M-30
    series: rule_evaluations
    starts: case.closed
    retain: P30D
    authority: model schedule
`

// caseClock is the model of a case's clock: closed (when) or reopened;
// the zero value is no clock (never closed, or expunged since).
type caseClock struct {
	state    string
	closedAt time.Time
	changed  time.Time
}

// due says whether the model makes case c's rows due today: closed 30
// days or more ago, no hold on it, not extended.
func modelDue(c int, clocks map[int]caseClock, holds map[uuid.UUID]int, extended map[int]bool) bool {
	k := clocks[c]
	if k.state != "closed" || extended[c] || !k.closedAt.AddDate(0, 0, 30).Before(time.Now().UTC().Truncate(24*time.Hour)) {
		return false
	}
	for _, hc := range holds {
		if hc == c {
			return false
		}
	}
	return true
}

// reconcile runs the real reconcile (kernel/reconcile).
func (d *destructionWorld) reconcile() (reconcile.Report, error) {
	return reconcile.Reconciler{Journal: d.j, Lifecycle: d.mgr, Orders: d.orders, Reader: d.reader, Schedules: d.sch, Clocks: d.clocks,
		Dispositions: d.batches, Logger: slog.New(d.logs), Actor: "cli:reconcile"}.Run(d.ctx)
}

// canaryOf is written into each row about case c of generation g (the
// rows written between two expungements of c).
func canaryOf(c, g int) string { return fmt.Sprintf("CANARY-%d-G%d-", c, g) }

// TestDestructionModel: random sequences of rows about cases 1..4, case
// events (closed long or not long ago, reopened; stale ones refused),
// disposition batches approved or rejected with an extension under a
// schedule keeping rows 30 days after closure, archive passes, passes cancelled while their booking waits (after their uploads),
// passes and order tries killed between upload and booking (the intent and
// the object left, nothing booked), seals and unseals, subject holds and
// releases, expungements, backups, and restores of the database to the
// last backup (the store keeping its objects and journal) followed by
// reconcile, drive a real database and the real store (Object Lock). After
// every step: no row and no object version holds a row of an executed
// expungement or disposition; a batch destroyed exactly the cases the
// model makes due (none early, none due kept); no hold and no seal is forgotten; after a restore,
// reconcile brings the database level with the store's journal, verify
// finds every booked archive whole, and reconciling again re-applies
// nothing and books nothing.
func TestDestructionModel(t *testing.T) {
	modelFlags(t, destructionSeed, destructionChecks, "CRAIG_DESTRUCTION_CHECKS")
	ctx, cancel := context.WithTimeout(context.Background(), modelTimeout)
	t.Cleanup(cancel)
	sequences, steps, restores, reapplied, disposed := 0, 0, 0, 0, 0

	rapid.Check(t, func(rt *rapid.T) {
		sequences++
		base := newWorldLocked(t, 0, true)
		base.ctx = ctx
		// Each sequence's databases (its own, and one a restore) are
		// dropped when the test ends; their pools are closed when the
		// sequence is done with them, or a long run holds a server's
		// connections (max_connections) for sequences long finished.
		dbs := []*kerneltest.DB{base.db}
		defer func() {
			for _, db := range dbs {
				db.Pool.Close()
			}
		}()
		d := &destructionWorld{ctx: ctx, t: t, base: base, logs: &kerneltest.LogRecorder{}}
		d.rebuild(base.db)
		doc, err := schedule.Parse([]byte(modelSchedule), modelSeries)
		require.NoError(t, err)
		_, err = d.sch.Propose(ctx, doc, "ops:alice")
		require.NoError(t, err)
		_, err = d.sch.Approve(ctx, doc.Version, "ops:bob", true)
		require.NoError(t, err)
		clocks := map[int]caseClock{} // case -> its clock
		extended := map[int]bool{}    // case -> kept by a rejected batch's extension
		gen := map[int]int{}          // case -> its rows' generation
		executed := map[string]bool{} // canaries of executed expungements
		holds := map[uuid.UUID]int{}  // active hold -> its case
		seals := map[int]string{}     // sealed case -> its order reference
		var locked []string           // keys the store may hold under legal hold
		t.Cleanup(func() { unlockKeys(base.st, locked) })
		var backup string
		insert := func(c, n, daysAgo int) {
			for i := 0; i < n; i++ {
				d.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
					VALUES (now() - make_interval(days => $1) + make_interval(mins => $2), 'r', jsonb_build_object('case_id', $3::int, 'note', $4::text), '{}')`,
					daysAgo, i, c, canaryOf(c, gen[c]))
			}
		}
		for c := 1; c <= modelCases; c++ {
			insert(c, 2, 300)
			insert(c, 1, 10) // hot: never archived
		}
		// orphan leaves what a process killed between its PUT and its
		// booking leaves: the intent, the data object of docs (rows as
		// to_jsonb lines), and nothing booked.
		orphan := func(work intent.Work, id uuid.UUID, docs string) {
			keys, err := store.NewArchiveKeys(base.s3.Service, "rule_evaluations", time.Now(), id.String())
			require.NoError(t, err)
			require.NoError(t, intent.Record(ctx, d.db.Pool, work, id, "rule_evaluations", "system:retention", keys.Data, keys.Manifest))
			require.NoError(t, base.st.PutCreate(ctx, keys.Data, []byte(docs), store.ContentTypeNDJSON))
		}

		// caseEvent sends case c's closure (or reopening) daysAgo days ago
		// and checks the clock's answer against the model's.
		caseEvent := func(rt *rapid.T, c int, reopen bool, daysAgo int) {
			at := time.Now().UTC().AddDate(0, 0, -daysAgo).Add(time.Duration(steps) * time.Minute).Truncate(time.Microsecond)
			e := schedule.Event{Type: schedule.EventClosed, Case: caseSubject(c), At: at, Classification: "x"}
			if reopen {
				e = schedule.Event{Type: schedule.EventReopened, Case: caseSubject(c), At: at}
			}
			k := clocks[c]
			stale := k.state != "" && (at.Before(k.changed) || (at.Equal(k.changed) && !reopen))
			_, err := d.clocks.Apply(ctx, e, "ops:erin")
			switch {
			case stale && !errors.Is(err, schedule.ErrStale):
				rt.Fatalf("case %d: an event at %v older than its clock's change at %v: %v, want ErrStale", c, at, k.changed, err)
			case !stale && err != nil:
				rt.Fatalf("case %d: event at %v: %v", c, at, err)
			case !stale && reopen:
				clocks[c] = caseClock{state: "reopened", changed: at}
			case !stale:
				clocks[c] = caseClock{state: "closed", closedAt: at, changed: at}
			}
		}

		rt.Repeat(map[string]func(*rapid.T){
			"rows": func(rt *rapid.T) {
				c := rapid.IntRange(1, modelCases).Draw(rt, "case")
				insert(c, rapid.IntRange(1, 3).Draw(rt, "rows"), rapid.IntRange(100, 400).Draw(rt, "days_ago"))
			},
			"pass": func(rt *rapid.T) {
				rep, err := d.eng.RunPass(ctx, rapid.IntRange(1, 3).Draw(rt, "budget"))
				if err != nil {
					rt.Fatalf("pass: %v", err)
				}
				if err := rep.Err(); err != nil {
					rt.Fatalf("pass: %v", err)
				}
			},
			"pass_cancelled": func(rt *rapid.T) {
				// A hold placement's lock keeps the pass's booking waiting
				// after its uploads; the pass is cancelled there.
				blocker, err := d.db.Pool.Begin(ctx)
				require.NoError(t, err)
				defer func() { _ = blocker.Rollback(ctx) }()
				_, err = blocker.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lease.HoldsKey)
				require.NoError(t, err)
				pctx, stop := context.WithCancel(ctx)
				defer stop()
				done := make(chan error, 1)
				go func() {
					_, err := d.eng.RunPass(pctx, 1)
					done <- err
				}()
				tick := time.NewTicker(5 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case err := <-done: // nothing to archive: no booking waited
						if err != nil {
							rt.Fatalf("pass: %v", err)
						}
						return
					case <-tick.C:
					}
					var waiting int
					require.NoError(t, base.db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND wait_event = 'advisory'`, d.db.Name).Scan(&waiting))
					if waiting > 0 {
						stop()
						if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
							rt.Fatalf("cancelled pass: %v", err)
						}
						// A cancelled pass's lease connection is closed, not
						// unlocked: the server lets go of the lease when it
						// has ended that session. The next act waits for it
						// as an operator would retry.
						waitLeaseFree(t, ctx, d.db, lease.ArchiveKey)
						return
					}
				}
			},
			"pass_killed": func(rt *rapid.T) {
				var docs *string
				require.NoError(t, d.db.Pool.QueryRow(ctx, `SELECT string_agg(to_jsonb(t)::text, E'\n') FROM (SELECT * FROM rule_evaluations
					WHERE evaluated_at < now() - interval '90 days' ORDER BY id LIMIT 3) t`).Scan(&docs))
				if docs == nil {
					rt.Skip("nothing aged")
				}
				orphan(intent.WorkArchive, uuid.Must(uuid.NewV7()), *docs+"\n")
			},
			"order_killed": func(rt *rapid.T) {
				// An order's try killed after its successor's PUT: the
				// successor holds a booked archive's rows but one case's.
				var id uuid.UUID
				var dataKey string
				err := d.db.Pool.QueryRow(ctx, `SELECT archive_id, data_key FROM archive_ledger WHERE purged_at IS NULL ORDER BY archive_id LIMIT 1 OFFSET $1`,
					rapid.IntRange(0, 5).Draw(rt, "archive")).Scan(&id, &dataKey)
				if errors.Is(err, pgx.ErrNoRows) {
					rt.Skip("no archive")
				}
				require.NoError(t, err)
				data, err := base.st.Get(ctx, dataKey)
				require.NoError(t, err)
				drop := rapid.IntRange(1, modelCases).Draw(rt, "dropped_case")
				var kept []string
				for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
					if !strings.Contains(line, fmt.Sprintf("CANARY-%d-G", drop)) {
						kept = append(kept, line)
					}
				}
				order := uuid.Must(uuid.NewV7())
				orphan(intent.WorkExpungement, uuid.NewSHA1(order, id[:]), strings.Join(kept, "\n")+"\n")
			},
			"seal": func(rt *rapid.T) {
				c := rapid.IntRange(1, modelCases).Draw(rt, "case")
				if _, ok := seals[c]; ok {
					rt.Skip("sealed")
				}
				ref := "WIC-" + strconv.Itoa(c) + "-" + strconv.Itoa(steps)
				if _, err := d.orders.Seal(ctx, caseSubject(c), ref, "sealed record", "ops:alice"); err != nil {
					rt.Fatalf("seal case %d: %v", c, err)
				}
				seals[c] = ref
			},
			"unseal": func(rt *rapid.T) {
				if len(seals) == 0 {
					rt.Skip("no seal")
				}
				c := rapid.SampledFrom(sortedKeys(seals)).Draw(rt, "case")
				if _, err := d.orders.Unseal(ctx, caseSubject(c), seals[c], "order vacated", "ops:alice"); err != nil {
					rt.Fatalf("unseal case %d: %v", c, err)
				}
				delete(seals, c)
			},
			"hold": func(rt *rapid.T) {
				c := rapid.IntRange(1, modelCases).Draw(rt, "case")
				h, err := d.mgr.PlaceHold(ctx, lifecycle.HoldRequest{Title: "hearing", Reason: "subpoena", Subjects: []string{"case:" + strconv.Itoa(c)}}, "ops:carol")
				if err != nil {
					rt.Fatalf("hold case %d: %v", c, err)
				}
				holds[h.ID] = c
			},
			"release": func(rt *rapid.T) {
				if len(holds) == 0 {
					rt.Skip("no hold")
				}
				var ids []uuid.UUID
				for id := range holds {
					ids = append(ids, id)
				}
				id := rapid.SampledFrom(sortedIDs(ids)).Draw(rt, "hold")
				if _, err := d.mgr.ReleaseHold(ctx, id, "hearing over", "ops:carol"); err != nil {
					rt.Fatalf("release: %v", err)
				}
				delete(holds, id)
			},
			"expunge": func(rt *rapid.T) {
				c := rapid.IntRange(1, modelCases).Draw(rt, "case")
				var named []uuid.UUID // every active hold: none keeps the order back
				for id := range holds {
					named = append(named, id)
				}
				req, err := d.orders.RequestExpunge(ctx, caseSubject(c), "JV-"+strconv.Itoa(steps), "order", sortedIDs(named), "ops:alice")
				if err != nil {
					rt.Fatalf("expunge case %d: %v", c, err)
				}
				_, err = d.orders.Approve(ctx, req.ExpungeID, "ops:bob")
				if errors.Is(err, courtorder.ErrOrphans) {
					// An unknown archive holds rows a restore lost: the
					// operator reconciles (they are put back), and approves
					// again.
					if _, rerr := d.reconcile(); rerr != nil {
						rt.Fatalf("reconcile after %v: %v", err, rerr)
					}
					_, err = d.orders.Approve(ctx, req.ExpungeID, "ops:bob")
				}
				if err != nil {
					rt.Fatalf("approve the expungement of case %d: %v", c, err)
				}
				for g := 0; g <= gen[c]; g++ {
					executed[canaryOf(c, g)] = true
				}
				gen[c]++
				// Its clock and extension now name the order's commitment:
				// a later event about the case starts a new clock.
				clocks[c], extended[c] = caseClock{}, false
			},
			"case_event": func(rt *rapid.T) {
				caseEvent(rt, rapid.IntRange(1, modelCases).Draw(rt, "case"), rapid.Bool().Draw(rt, "reopen"),
					rapid.SampledFrom([]int{90, 60, 10}).Draw(rt, "days_ago"))
			},
			"case_closed": func(rt *rapid.T) { // closed long ago: its rows due
				caseEvent(rt, rapid.IntRange(1, modelCases).Draw(rt, "case"), false, 60)
			},
			"dispose": func(rt *rapid.T) {
				disposeModel(rt, d, clocks, holds, extended, func(c int) {
					disposed++
					for g := 0; g <= gen[c]; g++ {
						executed[canaryOf(c, g)] = true
					}
					gen[c]++
				})
			},
			"extend": func(rt *rapid.T) {
				if _, err := d.reader.IndexCaseRows(ctx, 100); err != nil {
					rt.Fatalf("index: %v", err)
				}
				b, err := d.batches.Freeze(ctx, 0, "ops:rita")
				if errors.Is(err, disposition.ErrNothingDue) {
					rt.Skip("nothing due")
				}
				if err != nil {
					rt.Fatalf("freeze: %v", err)
				}
				until := time.Now().UTC().AddDate(1, 0, 0).Truncate(24 * time.Hour)
				if _, err := d.batches.Reject(ctx, b.ID, "ops:bob", "fair hearing", &until); err != nil {
					rt.Fatalf("reject: %v", err)
				}
				for _, it := range b.Items {
					for _, bc := range it.Cases {
						n, err := strconv.Atoi(strings.TrimPrefix(bc.Subject, "case:"))
						if err != nil {
							rt.Fatalf("a batch's case %q", bc.Subject)
						}
						extended[n] = true
					}
				}
			},
			"backup": func(rt *rapid.T) {
				backup = kerneltest.Backup(t, d.db)
			},
			"restore": func(rt *rapid.T) {
				if backup == "" {
					rt.Skip("no backup")
				}
				restores++
				restored := kerneltest.Restore(t, backup)
				dbs = append(dbs, restored)
				if d.db != base.db {
					d.db.Pool.Close() // the database this restore replaces
				}
				st := d.rebuild(restored)
				if st.Behind() {
					if _, err := d.mgr.Purge(ctx, 10, false, "ops:alice"); !errors.Is(err, journal.ErrBehind) {
						rt.Fatalf("a purge on a database behind the journal: %v, want ErrBehind", err)
					}
				}
				rep, err := d.reconcile()
				if err != nil {
					rt.Fatalf("reconcile: %v", err)
				}
				if rep.After.Behind() || len(rep.Reapplied) != len(st.Missing) {
					rt.Fatalf("reconcile left the database behind: %+v", rep)
				}
				reapplied += len(rep.Reapplied)
				d.rebuild(d.db) // a service booting on the reconciled database
				ledger := d.db.Count(t, `SELECT count(*) FROM archive_ledger`)
				again, err := d.reconcile()
				if err != nil || len(again.Reapplied) != 0 || len(again.Copies.Deleted) != 0 {
					rt.Fatalf("a second reconcile changed something: %+v, %v", again, err)
				}
				if n := d.db.Count(t, `SELECT count(*) FROM archive_ledger`); n != ledger {
					rt.Fatalf("a second reconcile booked %d archive(s)", n-ledger)
				}
				vr, err := d.reader.Verify(ctx, true, 0)
				if err != nil || vr.Failed != 0 {
					rt.Fatalf("verify after reconcile: %+v, %v", vr.Failures, err)
				}
			},
			"": func(rt *rapid.T) {
				steps++
				checkDestruction(rt, d, executed, holds, seals)
				locked = appendLedgerKeys(t, d, locked)
			},
		})
	})
	t.Logf("destruction model: %d sequences, %d steps, %d restores, %d journal entries re-applied, %d cases disposed of", sequences, steps, restores,
		reapplied, disposed)
}

// disposeModel freezes what is due (after indexing the archives by case)
// and has a second identity approve it, then checks the batch against the
// model: every case it destroyed was due (closed 30 days ago or more, no
// hold on it, no extension); while no hold is active, every case the
// model makes due that has rows left was destroyed; destroyed(c) is
// called for each destroyed case.
func disposeModel(rt *rapid.T, d *destructionWorld, clocks map[int]caseClock, holds map[uuid.UUID]int, extended map[int]bool, destroyed func(c int)) {
	ctx := d.ctx
	if _, err := d.reader.IndexCaseRows(ctx, 100); err != nil {
		rt.Fatalf("index: %v", err)
	}
	// Liveness is checked while no hold is active: a hold on one case
	// keeps the archives that hold its rows, and so the other cases' rows
	// in them (a case is disposed of whole).
	want := map[int]bool{}
	for c := 1; c <= modelCases && len(holds) == 0; c++ {
		if modelDue(c, clocks, holds, extended) && hasRows(rt, d, c) {
			want[c] = true
		}
	}
	b, err := d.batches.Freeze(ctx, 0, "ops:rita")
	if errors.Is(err, disposition.ErrNothingDue) {
		if len(want) > 0 {
			rt.Fatalf("cases %v are due and nothing was frozen", sortedKeys(want))
		}
		return
	}
	if err != nil {
		rt.Fatalf("freeze: %v", err)
	}
	_, err = d.batches.Approve(ctx, b.ID, "ops:bob")
	if errors.Is(err, courtorder.ErrOrphans) {
		// An unknown archive holds rows a restore lost: reconcile, again.
		if _, rerr := d.reconcile(); rerr != nil {
			rt.Fatalf("reconcile after %v: %v", err, rerr)
		}
		_, err = d.batches.Approve(ctx, b.ID, "ops:bob")
	}
	if err != nil {
		rt.Fatalf("approve batch %s: %v", b.ID, err)
	}
	raw, err := d.batches.Certificate(ctx, b.ID)
	if err != nil {
		rt.Fatalf("certificate: %v", err)
	}
	var cert struct {
		Cases []struct {
			Hash    string `json:"subject_hash"`
			Outcome string `json:"outcome"`
			Reason  string `json:"reason"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(raw, &cert); err != nil {
		rt.Fatalf("certificate: %v", err)
	}
	byHash := map[string]int{}
	for c := 1; c <= modelCases; c++ {
		byHash[subject.Hex(testKey(d.t).Hash(caseSubject(c)))] = c
	}
	got := map[int]bool{}
	for _, bc := range cert.Cases {
		c, ok := byHash[bc.Hash]
		if !ok {
			rt.Fatalf("the certificate names a case %s the model does not know", bc.Hash)
		}
		if bc.Outcome == "destroyed" {
			if !modelDue(c, clocks, holds, extended) {
				rt.Fatalf("case %d destroyed and not due: clock %+v, extended %v", c, clocks[c], extended[c])
			}
			got[c] = true
		}
	}
	for c := range want {
		if !got[c] {
			rt.Fatalf("case %d is due (clock %+v) and batch %s kept it: %s", c, clocks[c], b.ID, raw)
		}
	}
	for c := range got {
		destroyed(c)
	}
}

// hasRows says whether rows of case c are left, hot or in an unpurged
// archive indexed by case (a restore may bring rows back or lose rows
// written after its backup: the database is asked, not the model).
func hasRows(rt *rapid.T, d *destructionWorld, c int) bool {
	var n int64
	err := d.db.Pool.QueryRow(d.ctx, `SELECT (SELECT count(*) FROM rule_evaluations WHERE input ->> 'case_id' = $1)
		+ (SELECT coalesce(sum(c.rows), 0) FROM archive_cases AS c JOIN archive_ledger AS l ON l.archive_id = c.archive_id
		   WHERE l.purged_at IS NULL AND c.subject_hash = $2)`, strconv.Itoa(c), testKey(d.t).Hash(caseSubject(c))).Scan(&n)
	if err != nil {
		rt.Fatalf("rows of case %d: %v", c, err)
	}
	return n > 0
}

// checkDestruction compares the database and the store with the model.
func checkDestruction(rt *rapid.T, d *destructionWorld, executed map[string]bool, holds map[uuid.UUID]int, seals map[int]string) {
	ctx := d.ctx
	canaries := sortedKeys(executed)
	// No row of any table holds an executed expungement's row.
	rows, err := d.db.Pool.Query(ctx, `SELECT quote_ident(table_name) FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'`)
	if err != nil {
		rt.Fatalf("tables: %v", err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		rt.Fatalf("tables: %v", err)
	}
	for _, c := range canaries {
		for _, tbl := range tables {
			var n int
			if err := d.db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+tbl+` AS t WHERE strpos(t::text, $1) > 0`, c).Scan(&n); err != nil {
				rt.Fatalf("%s: %v", tbl, err)
			}
			if n > 0 {
				rt.Fatalf("%d row(s) of %s hold %s, expunged", n, tbl, c)
			}
		}
	}
	// No object version under the service's prefix does.
	if len(canaries) > 0 {
		objs, err := d.base.st.ListAllObjects(ctx, store.Prefix+d.base.s3.Service+"/")
		if err != nil {
			rt.Fatalf("list: %v", err)
		}
		for _, o := range objs {
			f, err := d.base.st.GetMatching(ctx, o.Key, func(b []byte) bool {
				return slices.ContainsFunc(canaries, func(c string) bool { return strings.Contains(string(b), c) })
			})
			if err == nil {
				for _, r := range d.logs.Records() {
					line := r.Message
					r.Attrs(func(a slog.Attr) bool { line += " " + a.String(); return true })
					rt.Log(line)
				}
				rt.Fatalf("object %s (version %q) holds an expunged row: %.200s", o.Key, f.VersionID, f.Data)
			}
			if !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrNoMatchingVersion) {
				rt.Fatalf("read %s: %v", o.Key, err)
			}
		}
	}
	// No hold is forgotten, none comes back.
	got, err := d.mgr.Holds(ctx)
	if err != nil {
		rt.Fatalf("holds: %v", err)
	}
	active := map[uuid.UUID]bool{}
	for _, h := range got {
		if h.Active {
			active[h.ID] = true
		}
	}
	for id, c := range holds {
		if !active[id] {
			rt.Fatalf("the hold %s on case %d is forgotten", id, c)
		}
	}
	if len(active) != len(holds) {
		rt.Fatalf("%d active holds, the model has %d", len(active), len(holds))
	}
	// No seal is forgotten, none comes back.
	srows, err := d.db.Pool.Query(ctx, `SELECT order_ref FROM subject_seals ORDER BY order_ref`)
	if err != nil {
		rt.Fatalf("seals: %v", err)
	}
	refs, err := pgx.CollectRows(srows, pgx.RowTo[string])
	if err != nil {
		rt.Fatalf("seals: %v", err)
	}
	var want []string
	for _, r := range seals {
		want = append(want, r)
	}
	slices.Sort(want)
	if !slices.Equal(refs, want) {
		rt.Fatalf("seals %v, the model has %v", refs, want)
	}
}

// appendLedgerKeys adds the ledger's keys to locked (lifted at the end so
// the scratch prefix can be cleaned).
func appendLedgerKeys(t *testing.T, d *destructionWorld, locked []string) []string {
	t.Helper()
	rows, err := d.db.Pool.Query(d.ctx, `SELECT data_key, manifest_key FROM archive_ledger WHERE legal_hold`)
	require.NoError(t, err)
	for _, r := range must(pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ D, M string }]))(t) {
		if !slices.Contains(locked, r.D) {
			locked = append(locked, r.D, r.M)
		}
	}
	return locked
}

// unlockKeys lifts the store's legal hold from keys.
func unlockKeys(st *store.Store, keys []string) {
	for _, k := range keys {
		_ = st.SetLegalHold(context.Background(), k, false)
	}
}

func sortedKeys[K interface{ ~int | ~string }, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// waitLeaseFree waits (at most a minute) until no session of db holds
// the advisory lock key.
func waitLeaseFree(t *testing.T, ctx context.Context, db *kerneltest.DB, key int64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		held, err := lease.Held(ctx, db.Pool, key)
		require.NoError(t, err)
		if !held {
			return
		}
		require.True(t, time.Now().Before(deadline), "the lease %x is still held a minute after its pass ended", key)
		time.Sleep(10 * time.Millisecond)
	}
}
