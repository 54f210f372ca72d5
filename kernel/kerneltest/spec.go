package kerneltest

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/archivetest"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/kernel/sweep"
	"github.com/craig/retention/migrations"
	"github.com/jackc/pgx/v5"
)

// Tables are what a service registers, as CheckSpec walks them: its sweep
// groups (app.Groups: transport first) and its archived tables.
type Tables struct {
	// Service names the service (its scratch databases get its migration
	// sets).
	Service  string
	Groups   []sweep.Group
	Archived []archive.TableSpec
	// Bookkeeper is the service's archive bookkeeping (required with
	// Archived).
	Bookkeeper archive.Bookkeeper
	// Sets are the migration sets of the scratch databases: the service's
	// (app.Spec.MigrationSets), or a fixture's own.
	Sets []migrations.Set
}

// DB is a scratch database with the tables' migration sets.
func (tables Tables) DB(t testing.TB) *DB {
	t.Helper()
	require.NotEmpty(t, tables.Sets, "%s: the scratch databases' migration sets (app.Spec.MigrationSets)", tables.Service)
	return NewDB(t, tables.Sets...)
}

// Harness returns the archivetest harness maker of the tables: a scratch
// database of the tables' migration sets and a scratch prefix of the real
// store, both per test.
func (tables Tables) Harness() archivetest.HarnessMaker {
	return func(t *testing.T) archivetest.Harness {
		t.Helper()
		db := tables.DB(t)
		s3 := NewS3Scratch(t)
		ctx, cancel := context.WithTimeout(context.Background(), archivetest.Timeout)
		defer cancel()
		st, err := store.Open(ctx, s3.URL)
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		return archivetest.Harness{Pool: db.Pool, Store: st, Service: s3.Service, Keys: s3.Keys, Logs: &LogRecorder{}}
	}
}

// CheckSpec is the per-service conformance suite, in the way go-cloud's
// drivertest is: it walks every table a service registers and fails when
// one has no seed in seeds (SeedsOf collects them).
//
// For every swept table the seed is an INSERT of one row per element of two
// arrays: $1 float8[] the row's age in seconds before the database's now()
// (negative: in the future) for its AgeColumn, and $2 bool[] whether the row
// is one the policy must keep (a row its Keep, the business rule, is true
// for) or one it may delete. CheckSpec seeds both kinds at every age of
// SweepAges (the future, the window's two edges, past every window, BC),
// proves the seed honest (Keep is true for exactly the keep rows) and then,
// on a scratch database of the service, with uncapped and capped batch
// bounds, that the dry run, the sweep and the capped sweep delete exactly
// the old deletable rows and that every keep row survives all of them
// (CheckPolicy and requireKept). A policy without Keep fails: the rule that
// protects rows is what the suite proves. Then CheckGenerated writes rows
// of its own from the registration and the catalog, every column the rules
// read varied independently, and checks each row's fate after the real
// delete: the seed is the team's extra case, not the proof (ADR-072).
//
// For every archived table the seed is the archivetest.Table.Seed statement
// (ids, ages and padding as arrays), and CheckSpec runs the whole
// archivetest suite (round trip, crash-resume, byte cap, quarantine,
// concurrency, …) against scratch databases and scratch prefixes of the
// real store.
//
// TransportSeeds gives the transport tables' seeds; a service adds its own.
func CheckSpec(t *testing.T, tables Tables, seeds map[string]string) {
	t.Helper()
	checkSeedsCover(t, tables, seeds)
	for _, a := range tables.Archived {
		seed, ok := seeds[a.Table]
		if !ok {
			continue
		}
		// The suite ages its rows against the kernel's default hot window:
		// it proves the table's queries at that window (they take it as a
		// parameter), whatever hot window of its own the table declares.
		a.HotWindowDays = 0
		t.Run(a.Table+"/Archive", func(t *testing.T) {
			t.Parallel()
			archivetest.Run(t, tables.Harness(), archivetest.Table{Spec: a, Bookkeeper: tables.Bookkeeper, Seed: seed})
		})
	}
	for _, p := range sweep.Policies(tables.Groups) {
		seed, ok := seeds[p.Label()]
		if !ok {
			continue
		}
		if p.WindowDays == 0 {
			// Off by default (the outbox's dead letters): its queries are
			// proved at a window an operator may set.
			p.WindowDays = disabledPolicyWindow
		}
		for _, b := range []struct {
			name     string
			batch    int
			cycleCap int64
			window   int
		}{{"Uncapped", 3, 0, p.WindowDays}, {"Capped", 2, 4, p.WindowDays}, {"OtherWindow", 3, 0, otherWindow(p.WindowDays)}} {
			t.Run(p.Label()+"/"+b.name, func(t *testing.T) {
				t.Parallel()
				require.NotEmpty(t, p.Keep, "%s: declare the policy's Keep, the rows that must never be deleted: it is what this suite proves", p.Table)
				db := tables.DB(t)
				q := p
				// OtherWindow: the delete must take the window it is given
				// (a query with the default written in fails here).
				q.BatchSize, q.CycleCap, q.WindowDays = b.batch, b.cycleCap, b.window
				rows := seedSwept(t, db, q, seed)
				CheckPolicy(t, db, q)
				rows.requireKept(t, db, q)
			})
		}
		t.Run(p.Label()+"/Generated", func(t *testing.T) {
			t.Parallel()
			q := p
			q.BatchSize = 7 // several batches over the generated rows
			CheckGenerated(t, tables.DB(t), q)
		})
	}
}

// disabledPolicyWindow is the window a policy that is off by default is
// proved at.
const disabledPolicyWindow = 30

// checkSeedsCover fails for every registered table without a seed and
// every seed of a table the service does not register.
func checkSeedsCover(t *testing.T, tables Tables, seeds map[string]string) {
	t.Helper()
	registered := map[string]bool{}
	for _, p := range sweep.Policies(tables.Groups) {
		registered[p.Label()] = true
	}
	for _, a := range tables.Archived {
		registered[a.Table] = true
	}
	var missing, unknown []string
	for table := range registered {
		if _, ok := seeds[table]; !ok {
			missing = append(missing, table)
		}
	}
	for table := range seeds {
		if !registered[table] {
			unknown = append(unknown, table)
		}
	}
	sort.Strings(missing)
	sort.Strings(unknown)
	if len(missing) > 0 {
		t.Errorf("%s: no conformance seed for %v: every registered table needs one", tables.Service, missing)
	}
	if len(unknown) > 0 {
		t.Errorf("%s: seeds for tables the service does not register: %v", tables.Service, unknown)
	}
}

// Seed is one table's conformance seed (see CheckSpec for its shape).
type Seed struct {
	Table string
	SQL   string
}

// SeedsOf collects the seeds a test's seed registry declares: every
// exported method that takes nothing and returns a Seed. A table added in a
// file of its own brings its seed in a test file of its own, a method on
// the same registry type, and no list is edited.
func SeedsOf(registry any) map[string]string {
	out := map[string]string{}
	v := reflect.ValueOf(registry)
	seedType := reflect.TypeFor[Seed]()
	for i := range v.NumMethod() {
		m := v.Type().Method(i)
		if m.Type.NumIn() != 1 || m.Type.NumOut() != 1 || m.Type.Out(0) != seedType {
			panic(fmt.Sprintf("kerneltest: %s.%s is not a seed: a seed registry's methods take nothing and return a kerneltest.Seed", v.Type(), m.Name))
		}
		s := v.Method(i).Call(nil)[0].Interface().(Seed)
		if _, dup := out[s.Table]; dup {
			panic(fmt.Sprintf("kerneltest: two seeds for %s", s.Table))
		}
		out[s.Table] = s.SQL
	}
	return out
}

// otherWindow is a window other than w that the ages still straddle.
func otherWindow(w int) int {
	if w > 7 {
		return w / 2
	}
	return w + 7
}

// secondsPerDay converts a window to the seed's age unit.
const secondsPerDay = 86400

// SweepAges are the ages (seconds before the database's now(); negative:
// in the future) CheckSpec seeds a swept table at, both kinds of row at
// each: thirty years ahead, an hour ahead, now, an hour inside the window,
// an hour past it, twice the window, a day past the longest window any
// setting allows, and 1e11 s (a BC timestamp, the oldest a row can be).
func SweepAges(windowDays int) []float64 {
	w := float64(windowDays) * secondsPerDay
	return []float64{-1e9, -3600, 0, w - 3600, w + 3600, 2 * w, (prune.MaxWindowDays + 1) * secondsPerDay, 1e11}
}

// sweptRows is what seedSwept inserted: how many rows must be kept and
// how many deletable rows are inside the window (so stay too).
type sweptRows struct {
	keep, young int64
}

// seedSwept inserts both kinds of row at every SweepAges age and proves the
// seed honest: Keep is true for exactly the keep rows, and the keep rows
// carry the ages they were given (as many older than the window as were
// seeded so). Only the kernel's inbox keeps nothing past its window (its
// Keep is FALSE): it gets deletable rows only. Any other policy must keep
// something, or the proof would be empty.
func seedSwept(t *testing.T, db *DB, p prune.Policy, seed string) sweptRows {
	t.Helper()
	keepsNothing := p.Table == sweep.InboxTable && p.Keep == "FALSE"
	var ages []float64
	var keep []bool
	var rows sweptRows
	var oldKeep int64
	w := float64(p.WindowDays) * secondsPerDay
	for _, age := range SweepAges(p.WindowDays) {
		ages, keep = append(ages, age), append(keep, false)
		if age < w {
			rows.young++
		}
		if !keepsNothing {
			ages, keep = append(ages, age), append(keep, true)
			rows.keep++
			if age > w {
				oldKeep++
			}
		}
	}
	n := db.Exec(t, seed, ages, keep)
	require.Equal(t, int64(len(ages)), n, "%s: the seed inserts one row per age", p.Table)
	table := pgx.Identifier{p.Table}.Sanitize()
	require.Equal(t, rows.keep, db.Count(t, "SELECT count(*) FROM "+table+" WHERE ("+p.Keep+") IS TRUE"),
		"%s: the seed's keep rows are exactly the rows Keep is true for (Keep FALSE keeps nothing: only the inbox may)", p.Table)
	age := pgx.Identifier{p.AgeColumn}.Sanitize()
	require.Equal(t, oldKeep, db.Count(t, "SELECT count(*) FROM "+table+" WHERE ("+p.Keep+") IS TRUE AND "+age+" < now() - make_interval(days => $1::int)", p.WindowDays),
		"%s: the seed's keep rows carry their ages (%d of them older than the window)", p.Table, oldKeep)
	return rows
}

// requireKept: after the sweep, every keep row is still there, and so is
// every deletable row inside the window; nothing else is.
func (r sweptRows) requireKept(t *testing.T, db *DB, p prune.Policy) {
	t.Helper()
	table := pgx.Identifier{p.Table}.Sanitize()
	require.Equal(t, r.keep, db.Count(t, "SELECT count(*) FROM "+table+" WHERE ("+p.Keep+") IS TRUE"),
		"%s: every row Keep protects survives the dry run, the sweep and the capped sweep, at every age", p.Table)
	require.Equal(t, r.keep+r.young, db.Count(t, "SELECT count(*) FROM "+table),
		"%s: the rows left are the kept ones and those inside the window", p.Table)
}

// TransportSeeds returns the conformance seeds of event_outbox (keep rows:
// unpublished, whatever their age, every other one a dead letter), its dead
// letters (keep rows: published ones carrying a dead-letter stamp of the
// same age, so that only the predicate keeps them; pending rows, which carry
// no stamp, are the generated rows' part) and
// event_inbox (nothing to keep past its window).
func TransportSeeds() map[string]string {
	return map[string]string{
		sweep.OutboxTable: `INSERT INTO event_outbox (event_type, payload, created_at, published_at, dead_lettered_at)
  SELECT 'conformance', '{}', now() - make_interval(secs => age),
         CASE WHEN keep THEN NULL ELSE now() - make_interval(secs => age) END,
         CASE WHEN keep AND n % 2 = 0 THEN now() - make_interval(secs => age) END
  FROM unnest($1::float8[], $2::bool[]) WITH ORDINALITY AS s(age, keep, n)`,
		sweep.OutboxDeadLetters: `INSERT INTO event_outbox (event_type, payload, created_at, published_at, dead_lettered_at, attempts)
  SELECT 'conformance', '{}', now() - make_interval(secs => age) - interval '1 day',
         CASE WHEN keep THEN now() - make_interval(secs => age) END,
         now() - make_interval(secs => age), 3
  FROM unnest($1::float8[], $2::bool[]) AS s(age, keep)`,
		sweep.InboxTable: `INSERT INTO event_inbox (event_id, event_type, received_at)
  SELECT gen_random_uuid(), 'conformance', now() - make_interval(secs => age)
  FROM unnest($1::float8[], $2::bool[]) AS s(age, keep)`,
	}
}

// CheckService is CheckSpec over everything a service's spec registers:
// its sweep groups at their default windows, its archived tables and its
// bookkeeping when it archives, its migration sets; seeds are the service's
// own (SeedsOf), the transport tables' are added. A table the service
// registers later, or an archiver it gains, is walked with no edit of the
// service's conformance test.
func CheckService[T any](t *testing.T, spec app.Spec[T], seeds map[string]string) {
	t.Helper()
	require.NoError(t, app.CheckRegistrations(spec))
	tables := Tables{Service: spec.Name, Groups: app.Groups(spec, spec.Defaults), Sets: spec.MigrationSets()}
	if spec.Archive != nil {
		tables.Archived, tables.Bookkeeper = spec.Archive.Tables(), spec.Archive.Bookkeeper
	}
	all := TransportSeeds()
	for table, seed := range seeds {
		all[table] = seed
	}
	CheckSpec(t, tables, all)
}
