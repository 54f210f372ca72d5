package kerneltest

import (
	"context"
	"fmt"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/archivetest"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/kernel/sweep"
	"github.com/craig/retention/migrations"
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
	// Sets are the migration sets of the scratch databases; nil means the
	// service's own (migrations.ForService). A test fixture that is not a
	// service passes its own.
	Sets []migrations.Set
}

// DB is a scratch database with the tables' migration sets.
func (tables Tables) DB(t testing.TB) *DB {
	t.Helper()
	if tables.Sets != nil {
		return NewDB(t, tables.Sets...)
	}
	return ServiceDB(t, tables.Service)
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
// one has no seed in seeds. For every swept table the seed is SQL that
// inserts rows on both sides of the table's window, must-keep rows
// included, and CheckSpec runs CheckPolicy on a scratch database of the
// service, with uncapped and capped batch bounds. For every archived table
// the seed is the archivetest.Table.Seed statement (ids, ages and padding
// as arrays), and CheckSpec runs the whole archivetest suite (round trip,
// crash-resume, byte cap, quarantine, concurrency, …) against scratch
// databases and scratch prefixes of the real store.
//
// TransportSeeds gives the transport tables' seeds; a service adds its own.
func CheckSpec(t *testing.T, tables Tables, seeds map[string]string) {
	t.Helper()
	registered := map[string]bool{}
	for _, p := range sweep.Policies(tables.Groups) {
		registered[p.Table] = true
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
	for _, a := range tables.Archived {
		seed, ok := seeds[a.Table]
		if !ok {
			continue
		}
		t.Run(a.Table+"/Archive", func(t *testing.T) {
			t.Parallel()
			archivetest.Run(t, tables.Harness(), archivetest.Table{Spec: a, Bookkeeper: tables.Bookkeeper, Seed: seed})
		})
	}
	for _, p := range sweep.Policies(tables.Groups) {
		seed, ok := seeds[p.Table]
		if !ok || p.WindowDays == 0 {
			continue
		}
		for _, b := range []struct {
			name     string
			batch    int
			cycleCap int64
		}{{"Uncapped", 3, 0}, {"Capped", 2, 4}} {
			t.Run(p.Table+"/"+b.name, func(t *testing.T) {
				t.Parallel()
				db := tables.DB(t)
				q := p
				q.BatchSize, q.CycleCap = b.batch, b.cycleCap
				db.Exec(t, seed)
				CheckPolicy(t, db, q)
			})
		}
	}
}

// TransportSeeds returns the conformance seeds of event_outbox and
// event_inbox at the given windows: rows just past and just inside each
// window, old and fresh rows, and the outbox's pending rows (however old)
// that must be kept.
func TransportSeeds(outboxWindowDays, inboxWindowDays int) map[string]string {
	return map[string]string{
		sweep.OutboxTable: fmt.Sprintf(`
INSERT INTO event_outbox (event_type, payload, created_at, published_at) VALUES
  ('e', '{}', %[1]s, %[1]s), ('e', '{}', %[2]s, %[2]s),
  ('e', '{}', now() - interval '400 days', now() - interval '1 day'),
  ('e', '{}', now() - interval '1 day', now() - interval '1 day');
INSERT INTO event_outbox (event_type, payload, created_at, published_at)
  SELECT 'e', '{}', now() - interval '40 days' - g * interval '1 minute', now() - interval '40 days' FROM generate_series(1, 6) AS g;
INSERT INTO event_outbox (event_type, payload, created_at, last_error) VALUES
  ('e', '{}', now() - interval '400 days', 'x'), ('e', '{}', %[1]s, NULL);`, WindowEdges(outboxWindowDays)...),
		sweep.InboxTable: fmt.Sprintf(`
INSERT INTO event_inbox (event_id, event_type, received_at) VALUES
  (gen_random_uuid(), 'e', %[1]s), (gen_random_uuid(), 'e', %[2]s), (gen_random_uuid(), 'e', now());
INSERT INTO event_inbox (event_id, event_type, received_at)
  SELECT gen_random_uuid(), 'e', now() - interval '40 days' - g * interval '1 minute' FROM generate_series(1, 6) AS g;`, WindowEdges(inboxWindowDays)...),
	}
}

// WindowEdges returns the SQL of two timestamps an hour either side of a
// window's cutoff (just eligible, just not), for fmt's %[1]s and %[2]s.
func WindowEdges(windowDays int) []any {
	return []any{
		fmt.Sprintf("now() - interval '%d days 1 hour'", windowDays),
		fmt.Sprintf("now() - interval '%d days -1 hour'", windowDays),
	}
}
