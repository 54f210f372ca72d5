package lifecycle_test

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/lifecycle"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/kernel/subject"
)

// modelSeed is the lifecycle model's fixed seed in CI (-rapid.seed or
// RAPID_SEED choose another, CRAIG_MODEL_RANDOM=1 a random one);
// CRAIG_MODEL_CHECKS its number of sequences (default modelChecks; go tool
// mage test:faults runs 200 with a random seed).
const (
	modelSeed   = "2222"
	modelChecks = 25
	// modelTimeout bounds a whole model run's database and store work (a
	// bound for a stalled run: 200 sequences took 10 minutes here).
	modelTimeout = 30 * time.Minute
)

// modelArchive is the reference model's view of one archive.
type modelArchive struct {
	id        uuid.UUID
	data, man string
	first     time.Time
	until     *time.Time // UTC date; nil: undated
	purged    bool
	// cases are the subjects (case:<n>) its rows are about, as indexed.
	cases map[int]bool
}

// modelHold is an active hold: by ids, or by table and record-time range.
type modelHold struct {
	id       uuid.UUID
	ids      []uuid.UUID
	from, to *time.Time
	// subject, when not 0, is the case the hold names.
	subject int
}

func (h modelHold) covers(a *modelArchive) bool {
	if h.subject != 0 {
		return a.cases[h.subject]
	}
	if h.ids != nil {
		for _, id := range h.ids {
			if id == a.id {
				return true
			}
		}
		return false
	}
	last := a.first.Add(time.Hour) // w.archived's record range
	return (h.from == nil || !last.Before(*h.from)) && (h.to == nil || a.first.Before(*h.to))
}

// TestLifecycleModel: random sequences of archives (each about some
// cases, indexed as a booking indexes them), holds by id, by table and
// range and by subject in any spelling (covering archives booked later),
// releases,
// retention dates with and without the purge scope, purges direct and with
// approvals by distinct and near-identical subjects, reconciliations and
// changes of the database's time zone and date style drive a real database
// and the real store (Object Lock), and after every step a reference model
// is checked: no archive destroyed unless due by the UTC date, free of
// holds and (with approvals) approved by another identity; every held
// archive's objects under the store's legal hold after a reconciliation;
// every unpurged archive's objects present.
func TestLifecycleModel(t *testing.T) {
	modelFlags(t, modelSeed, modelChecks, "CRAIG_MODEL_CHECKS")
	w := newWorldLocked(t, 1, true)
	// The world's two minutes bound one test; the model runs as many
	// sequences as asked (test:faults runs 200): it is bounded by the go
	// test timeout instead.
	ctx, cancel := context.WithTimeout(context.Background(), modelTimeout)
	t.Cleanup(cancel)
	w.ctx = ctx
	zones := []string{"UTC", "Pacific/Kiritimati", "Etc/GMT+12", "America/New_York", "Europe/Dublin"}
	styles := []string{"ISO, YMD", "SQL, DMY", "German", "Postgres, MDY"}
	// The manager runs on a pool that is NOT pinned: the database's own
	// zone and date style, which the steps change, reach its sessions.
	raw, err := pgxpool.New(w.ctx, w.db.URL)
	require.NoError(t, err)
	t.Cleanup(raw.Close)
	key := testKey(t)
	mgr, err := lifecycle.New(raw, w.st, lifecycle.Config{Service: w.s3.Service, ApprovalsRequired: 1, ObjectLock: true, Tables: []string{"rule_evaluations"},
		SubjectKey: key, SubjectTables: []string{"rule_evaluations"}}, slog.New(&kerneltest.LogRecorder{}), w.m)
	require.NoError(t, err)
	var all []*modelArchive
	t.Cleanup(func() { unlockAll(w.st, all) })
	sequences, steps := 0, 0

	rapid.Check(t, func(rt *rapid.T) {
		sequences++
		w.db.Exec(t, `UPDATE archive_holds SET released_at = now(), released_by = 'model', release_reason = 'next sequence' WHERE released_at IS NULL`)
		w.db.Exec(t, `UPDATE archive_ledger SET legal_hold = false`)
		unlockAll(w.st, all)
		var archives []*modelArchive
		holds := map[uuid.UUID]modelHold{}
		// today is the database's UTC date, read before every step: the
		// steps' dates are relative to it, and a step during which it
		// changes (the clock crossed UTC midnight) is not judged.
		var today time.Time
		utcDate := func() time.Time {
			var d time.Time
			require.NoError(t, w.db.Pool.QueryRow(w.ctx, `SELECT (now() AT TIME ZONE 'UTC')::date`).Scan(&d))
			return d
		}
		today = utcDate()
		held := func(a *modelArchive) bool {
			for _, h := range holds {
				if h.covers(a) {
					return true
				}
			}
			return false
		}
		rt.Repeat(map[string]func(*rapid.T){
			"archive": func(rt *rapid.T) {
				days := rapid.IntRange(200, 600).Draw(rt, "days_ago")
				ret := "NULL"
				var until *time.Time
				if rapid.Bool().Draw(rt, "dated") {
					d := today.AddDate(0, 0, rapid.IntRange(-3, 3).Draw(rt, "retention_offset"))
					until, ret = &d, "'"+d.Format(time.DateOnly)+"'::date"
				}
				m := w.archived(t, days, ret)
				a := &modelArchive{id: m.ArchiveID, data: m.DataKey, man: m.ManifestKey, first: m.FirstRecordAt, until: until, cases: map[int]bool{}}
				// Its subjects: some of cases 1..3, indexed as a booking
				// indexes them (the ledger row first, then the index).
				var hashes [][]byte
				for c := 1; c <= 3; c++ {
					if rapid.Bool().Draw(rt, "case_"+strconv.Itoa(c)) {
						a.cases[c] = true
						hashes = append(hashes, key.Hash(caseSubject(c)))
					}
				}
				require.NoError(t, pgx.BeginFunc(w.ctx, w.db.Pool, func(tx pgx.Tx) error {
					_, err := archive.IndexSubjects(w.ctx, tx, a.id, hashes, true)
					return err
				}))
				archives, all = append(archives, a), append(all, a)
				// A hold placed before the archive was booked covers it too.
				_, err := mgr.ReconcileLocks(w.ctx)
				require.NoError(t, err)
			},
			"hold_ids": func(rt *rapid.T) {
				if len(archives) == 0 {
					rt.Skip("no archive")
				}
				a := rapid.SampledFrom(archives).Draw(rt, "archive")
				h, err := mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "t", Reason: "r", ArchiveIDs: []uuid.UUID{a.id}}, "ops:carol")
				if a.purged {
					if err == nil {
						rt.Fatalf("a hold on purged archive %s was accepted", a.id)
					}
					return
				}
				if err != nil {
					rt.Fatalf("hold: %v", err)
				}
				holds[h.ID] = modelHold{id: h.ID, ids: []uuid.UUID{a.id}}
			},
			"hold_range": func(rt *rapid.T) {
				from := today.AddDate(0, 0, -rapid.IntRange(150, 650).Draw(rt, "from_days_ago"))
				to := from.AddDate(0, 0, rapid.IntRange(1, 400).Draw(rt, "span_days"))
				table := "rule_evaluations"
				h, err := mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "t", Reason: "r", Table: &table, From: &from, To: &to}, "ops:carol")
				if err != nil {
					rt.Fatalf("hold: %v", err)
				}
				holds[h.ID] = modelHold{id: h.ID, from: &from, to: &to}
			},
			"hold_subject": func(rt *rapid.T) {
				c := rapid.IntRange(1, 4).Draw(rt, "case") // case 4 is in no archive
				spelling := rapid.SampledFrom([]string{"case:%d", "CASE:%d", "case:0%d"}).Draw(rt, "spelling")
				h, err := mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "t", Reason: "r", Subjects: []string{fmt.Sprintf(spelling, c)}}, "ops:carol")
				if err != nil {
					rt.Fatalf("subject hold: %v", err)
				}
				holds[h.ID] = modelHold{id: h.ID, subject: c}
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
				if _, err := mgr.ReleaseHold(w.ctx, id, "done", "ops:carol"); err != nil {
					rt.Fatalf("release: %v", err)
				}
				delete(holds, id)
			},
			"retention": func(rt *rapid.T) {
				if len(archives) == 0 {
					rt.Skip("no archive")
				}
				a := rapid.SampledFrom(archives).Draw(rt, "archive")
				d := today.AddDate(0, 0, rapid.IntRange(-3, 3).Draw(rt, "offset"))
				purgeScope := rapid.Bool().Draw(rt, "purge_scope")
				err := mgr.SetRetention(w.ctx, a.id, d, "ops:carol", purgeScope)
				nearer := d.Before(today) || a.until == nil || d.Before(*a.until)
				switch {
				case a.purged:
					if err == nil {
						rt.Fatalf("retention set on purged archive %s", a.id)
					}
				case nearer && !purgeScope:
					if err == nil {
						rt.Fatalf("archive:hold brought %s's destruction nearer (%v -> %s)", a.id, a.until, d.Format(time.DateOnly))
					}
				case err != nil:
					rt.Fatalf("retention: %v", err)
				default:
					a.until = &d
				}
			},
			"purge": func(rt *rapid.T) {
				res, err := mgr.Purge(w.ctx, 100, false, "ops:alice")
				if err != nil {
					rt.Fatalf("purge: %v", err)
				}
				if res.PurgeID == nil {
					return
				}
				approver := rapid.SampledFrom([]string{"ops:alice", "Ops:Alice", "ops\uff1aalice", "ops:\u0430lice", "ops:bob"}).Draw(rt, "approver")
				done, err := mgr.Approve(w.ctx, *res.PurgeID, approver)
				if approver != "ops:bob" {
					if err == nil {
						rt.Fatalf("%q approved ops:alice's purge", approver)
					}
					return
				}
				if err != nil {
					rt.Fatalf("approve: %v", err)
				}
				if now := utcDate(); !now.Equal(today) {
					rt.Skip("the clock crossed UTC midnight during the purge")
				}
				destroyed := map[uuid.UUID]bool{}
				for _, id := range done.Purged {
					destroyed[id] = true
				}
				for _, a := range archives {
					due := !a.purged && a.until != nil && !a.until.After(today) && !held(a)
					if due != destroyed[a.id] {
						rt.Fatalf("archive %s (until %v, today %s UTC, held %v): due %v, destroyed %v", a.id, a.until, today.Format(time.DateOnly), held(a), due, destroyed[a.id])
					}
					a.purged = a.purged || destroyed[a.id]
				}
			},
			"clock": func(rt *rapid.T) {
				name := pgx.Identifier{w.db.Name}.Sanitize()
				w.db.Exec(t, fmt.Sprintf("ALTER DATABASE %s SET timezone = '%s'", name, rapid.SampledFrom(zones).Draw(rt, "zone")))
				w.db.Exec(t, fmt.Sprintf("ALTER DATABASE %s SET datestyle = '%s'", name, rapid.SampledFrom(styles).Draw(rt, "datestyle")))
				raw.Reset() // new sessions take the database's new settings
			},
			"": func(rt *rapid.T) { // the model's checks, after every step
				steps++
				if now := utcDate(); !now.Equal(today) {
					today = now // crossed UTC midnight: judged from the next step
					return
				}
				checkModel(rt, w, mgr, archives, today, held)
				if now := utcDate(); !now.Equal(today) {
					rt.Skip("the clock crossed UTC midnight during the check")
				}
			},
		})
	})
	t.Logf("lifecycle model: %d sequences, %d steps", sequences, steps)
}

// checkModel compares the database and the store with the model.
func checkModel(rt *rapid.T, w *world, mgr *lifecycle.Manager, archives []*modelArchive, today time.Time, held func(*modelArchive) bool) {
	ctx := context.Background()
	// What the service calls purgeable now is exactly what the model says
	// is due by the UTC date, whatever the session's zone and date style.
	recs, err := mgr.Records(ctx, lifecycle.Filter{Purgeable: ptr(true), Limit: 1000})
	if err != nil {
		rt.Fatalf("records: %v", err)
	}
	purgeable := map[uuid.UUID]bool{}
	for _, r := range recs {
		purgeable[r.ArchiveID] = true
	}
	for _, a := range archives {
		due := !a.purged && a.until != nil && !a.until.After(today) && !held(a)
		if due != purgeable[a.id] {
			rt.Fatalf("archive %s (until %v, today %s UTC, held %v): due %v, the service says purgeable %v", a.id, a.until, today.Format(time.DateOnly), held(a), due, purgeable[a.id])
		}
	}
	for _, a := range archives {
		var purgedAt *time.Time
		var legal bool
		if err := w.db.Pool.QueryRow(ctx, `SELECT purged_at, legal_hold FROM archive_ledger WHERE archive_id = $1`, a.id).Scan(&purgedAt, &legal); err != nil {
			rt.Fatalf("ledger %s: %v", a.id, err)
		}
		switch {
		case purgedAt != nil && !a.purged:
			rt.Fatalf("archive %s destroyed, the model says it must stay (until %v, today %s UTC, held %v)", a.id, a.until, today.Format(time.DateOnly), held(a))
		case purgedAt == nil && a.purged:
			rt.Fatalf("archive %s reported purged, its ledger row is not", a.id)
		case a.purged:
			continue
		}
		if legal != held(a) {
			rt.Fatalf("archive %s legal_hold %v, the model's holds say %v", a.id, legal, held(a))
		}
		for _, key := range []string{a.data, a.man} {
			if _, err := w.st.Get(ctx, key); err != nil {
				rt.Fatalf("unpurged archive %s: %s unreadable: %v", a.id, key, err)
			}
			if legal {
				on, err := w.st.LegalHold(ctx, key)
				if err != nil || !on {
					rt.Fatalf("held archive %s: %s not under the store's legal hold (%v)", a.id, key, err)
				}
			}
		}
	}
}

// modelFlags sets rapid's seed to seed unless -rapid.seed, RAPID_SEED or
// CRAIG_MODEL_RANDOM chooses another, and its number of sequences to
// checks unless -rapid.checks or the environment variable env does.
func modelFlags(t *testing.T, seed string, checks int, env string) {
	t.Helper()
	if f := flag.Lookup("rapid.seed"); f != nil && f.Value.String() == "0" && os.Getenv("RAPID_SEED") == "" && os.Getenv("CRAIG_MODEL_RANDOM") == "" {
		require.NoError(t, flag.Set("rapid.seed", seed))
	}
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == "100" {
		n := strconv.Itoa(checks)
		if v := os.Getenv(env); v != "" {
			n = v
		}
		require.NoError(t, flag.Set("rapid.checks", n))
	}
}

func sortedIDs(ids []uuid.UUID) []uuid.UUID {
	for i := range ids {
		for j := i + 1; j < len(ids); j++ {
			if ids[j].String() < ids[i].String() {
				ids[i], ids[j] = ids[j], ids[i]
			}
		}
	}
	return ids
}

// unlockAll lifts the store's legal holds the model's archives got, so the
// scratch prefix can be cleaned.
func unlockAll(st *store.Store, all []*modelArchive) {
	for _, a := range all {
		if a.purged {
			continue
		}
		for _, key := range []string{a.data, a.man} {
			_ = st.SetLegalHold(context.Background(), key, false)
		}
	}
}

// caseSubject is case:<n>.
func caseSubject(n int) subject.Subject {
	s, err := subject.Parse("case:" + strconv.Itoa(n))
	if err != nil {
		panic(err)
	}
	return s
}
