package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/archivetest"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/services/rules"
	"github.com/craig/retention/services/security"
)

// archivingCase is one archiving service as its binary is driven: its
// first archived table gets the seeded rows.
type archivingCase struct {
	service string
	run     runner
	// tables are the service's archived tables, in pass order (its
	// registry's: a table added since is among them).
	tables []string
	// seeded is the table seed inserts into: $2 rows aged $1 days plus g
	// minutes.
	seeded string
	seed   string
}

func archivingCases() []archivingCase {
	return []archivingCase{
		{service: rules.Name, run: runnerOf(rules.Spec()), tables: archive.TableNames(rules.ArchiveTables()), seeded: rules.EvaluationsTable,
			seed: `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
SELECT now() - make_interval(days => $1::int, mins => g), 'r', jsonb_build_object('n', g, 'amount', 1.10), '{}'
FROM generate_series(1, $2::int) AS g`},
		{service: security.Name, run: runnerOf(security.Spec()), tables: archive.TableNames(security.ArchiveTables()), seeded: security.AuditLogTable,
			seed: `INSERT INTO audit_log (occurred_at, actor, action, subject_id, detail)
SELECT now() - make_interval(days => $1::int, mins => g), 'user:ann', 'case.viewed', 'case-' || g, jsonb_build_object('n', g)
FROM generate_series(1, $2::int) AS g`},
	}
}

func (c archivingCase) env(key string) string { return settings.EnvVar(c.service, key) }

// rows seeds n rows aged ageDays (plus minutes) into the first table.
func (c archivingCase) rows(t *testing.T, db *kerneltest.DB, ageDays, n int) {
	t.Helper()
	require.Equal(t, int64(n), db.Exec(t, c.seed, ageDays, n))
}

// docs returns id → to_jsonb text of the first table's rows older than
// the hot window.
func (c archivingCase) docs(t *testing.T, db *kerneltest.DB) map[uuid.UUID]string {
	t.Helper()
	spec := c.spec(t)
	return archivetest.Docs(context.Background(), t, db.Pool, spec.Table, pgx.Identifier{"t", spec.AgeColumn}.Sanitize()+" < now() - interval '90 days'")
}

func (c archivingCase) spec(t *testing.T) archive.TableSpec {
	t.Helper()
	var specs []archive.TableSpec
	switch c.service {
	case rules.Name:
		specs = rules.ArchiveTables()
	case security.Name:
		specs = security.ArchiveTables()
	}
	i := slices.IndexFunc(specs, func(s archive.TableSpec) bool { return s.Table == c.seeded })
	require.GreaterOrEqual(t, i, 0, c.seeded)
	return specs[i]
}

func (c archivingCase) cmd(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := c.run(context.Background(), args, &out, &errOut, env)
	return code, out.String(), errOut.String()
}

// TestArchiveConsentCLI: each archiving service's
// archiver runs only with consent and a durable store, and every refusal
// names the knob and its environment variable; nothing is archived.
func TestArchiveConsentCLI(t *testing.T) {
	t.Parallel()
	bucketURL := kerneltest.S3Bucket(t)
	u, err := url.Parse(bucketURL)
	require.NoError(t, err)
	q := u.Query()
	q.Set("endpoint", "http://127.0.0.1:1")
	u.RawQuery = q.Encode()
	storeDown := u.String()
	for _, c := range archivingCases() {
		enabled, storeURL := c.env("archive.enabled"), c.env("archive.store.url")
		tests := []struct {
			name       string
			env        func(t *testing.T) []string
			args       []string
			wantCode   int
			wantStderr []string
			wantStdout []string
		}{
			{name: "disabled (default): archive run refused with exit 3", env: func(*testing.T) []string { return nil },
				args: []string{"archive", "run"}, wantCode: app.ExitDisabled, wantStderr: []string{enabled, "refused"}},
			{name: "disabled even with a store configured", env: func(*testing.T) []string { return []string{storeURL + "=" + bucketURL} },
				args: []string{"archive", "run", "--json"}, wantCode: app.ExitDisabled, wantStderr: []string{enabled}},
			{name: "disabled: probe skips the store", env: func(*testing.T) []string { return nil },
				args: []string{"probe"}, wantCode: app.ExitOK, wantStdout: []string{"archiver: disabled", enabled}},
			{name: "enabled + local backend: archive run refused",
				env:  func(t *testing.T) []string { return []string{enabled + "=true", storeURL + "=file://" + t.TempDir()} },
				args: []string{"archive", "run"}, wantCode: app.ExitFail, wantStderr: []string{enabled, storeURL, "local-directory"}},
			{name: "enabled + local backend: probe fails",
				env:  func(t *testing.T) []string { return []string{enabled + "=true", storeURL + "=file://" + t.TempDir()} },
				args: []string{"probe"}, wantCode: app.ExitFail, wantStderr: []string{enabled, storeURL, "local-directory"}},
			{name: "enabled + local backend: serve refuses to boot",
				env: func(t *testing.T) []string {
					return []string{enabled + "=true", storeURL + "=file://" + t.TempDir(), c.env("http_addr") + "=127.0.0.1:0"}
				},
				args: []string{"serve"}, wantCode: app.ExitFail, wantStderr: []string{enabled, storeURL, "archiver refused to start"}},
			{name: "enabled + store down: probe fails naming the knob",
				env:  func(*testing.T) []string { return []string{enabled + "=true", storeURL + "=" + storeDown} },
				args: []string{"probe"}, wantCode: app.ExitFail, wantStderr: []string{enabled, storeURL, "store probe failed"}},
			{name: "enabled + store down: archive run refused",
				env:  func(*testing.T) []string { return []string{enabled + "=true", storeURL + "=" + storeDown} },
				args: []string{"archive", "run"}, wantCode: app.ExitFail, wantStderr: []string{enabled, storeURL, "store probe failed"}},
			{name: "enabled without a store: invalid configuration", env: func(*testing.T) []string { return []string{enabled + "=true"} },
				args: []string{"archive", "run"}, wantCode: app.ExitUsage, wantStderr: []string{storeURL}},
		}
		for _, tt := range tests {
			t.Run(c.service+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				db := serviceDB(t, c.service)
				c.rows(t, db, 100, 5)
				env := append([]string{c.env("database_url") + "=" + db.URL}, tt.env(t)...)
				code, stdout, stderr := c.cmd(t, env, tt.args...)
				require.Equal(t, tt.wantCode, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
				for _, s := range tt.wantStderr {
					require.Contains(t, stderr, s)
				}
				for _, s := range tt.wantStdout {
					require.Contains(t, stdout, s)
				}
				require.Equal(t, int64(5), db.Count(t, "SELECT count(*) FROM "+c.seeded), "nothing archived")
				require.Zero(t, db.Count(t, `SELECT count(*) FROM archive_ledger`))
				require.Zero(t, db.Count(t, `SELECT count(*) FROM event_outbox`))
			})
		}
	}
}

// TestArchiveRunCLIRealStore: with consent and the real store, `probe`
// passes and `archive run --json --actor` prints the pinned one-object
// report (a table entry per archived table) and attributes the archive to
// the actor as cli:<actor>: an actor posing as the scheduler is recorded as
// a CLI act. Each binary writes under
// retention-archives/<service>/, so the test deletes exactly the keys it
// reports.
func TestArchiveRunCLIRealStore(t *testing.T) {
	t.Parallel()
	for _, c := range archivingCases() {
		t.Run(c.service, func(t *testing.T) {
			t.Parallel()
			testArchiveRunCLI(t, c)
		})
	}
}

func testArchiveRunCLI(t *testing.T, c archivingCase) {
	ctx := context.Background()
	bucketURL := kerneltest.S3Bucket(t)
	db := serviceDB(t, c.service)
	c.rows(t, db, 100, 12)
	c.rows(t, db, 3, 3)
	want := c.docs(t, db)
	env := []string{c.env("database_url") + "=" + db.URL, c.env("archive.enabled") + "=true", c.env("archive.store.url") + "=" + bucketURL}

	code, stdout, stderr := c.cmd(t, env, "probe")
	require.Equal(t, app.ExitOK, code, stderr)
	require.Contains(t, stdout, "archiver: store probe passed")

	code, stdout, stderr = c.cmd(t, env, "archive", "run", "--json", "--actor", archive.SystemActor)
	st, err := store.Open(ctx, bucketURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	var rep archive.PassReport
	if jerr := json.Unmarshal([]byte(stdout), &rep); jerr == nil {
		t.Cleanup(func() {
			for _, tr := range rep.Tables {
				for _, a := range tr.Archives {
					for _, k := range []string{a.DataKey, a.ManifestKey} {
						if _, err := st.DeleteIfExists(context.Background(), k); err != nil {
							t.Errorf("cleanup %s: %v", k, err)
						}
					}
				}
			}
		})
	}
	require.Equal(t, app.ExitOK, code, stderr)
	requirePinnedReport(t, stdout, c.tables, c.seeded)

	ref := rep.Tables[slices.Index(c.tables, c.seeded)].Archives[0]
	require.NotEqual(t, uuid.Nil, ref.ArchiveID)
	require.True(t, strings.HasPrefix(ref.DataKey, "retention-archives/"+c.service+"/"+c.seeded+"/"), ref.DataKey)
	m, _, lines := archivetest.ReadArchive(ctx, t, st, ref.DataKey, ref.ManifestKey)
	const recorded = app.CLIActorPrefix + archive.SystemActor // "cli:system:retention"
	require.Equal(t, recorded, m.ArchivedBy)
	require.Equal(t, c.service, m.Service)
	got := map[uuid.UUID]string{}
	for _, l := range lines {
		got[l.ID] = l.Text
	}
	require.Equal(t, want, got)

	rows := archivetest.Ledger(ctx, t, db.Pool)
	require.Len(t, rows, 1)
	require.Equal(t, recorded, rows[0].ArchivedBy, "--actor lands in archive_ledger.archived_by as cli:<actor>")
	require.Equal(t, ref.ArchiveID, rows[0].ArchiveID)
	events := archivetest.Events(ctx, t, db.Pool)
	require.Len(t, events, 1)
	require.Equal(t, recorded, events[0].Payload["archived_by"])
	require.Equal(t, int64(3), db.Count(t, "SELECT count(*) FROM "+c.seeded))

	// The probe left nothing behind.
	probeKey, err := store.ProbeKey(c.service)
	require.NoError(t, err)
	_, err = st.Get(ctx, probeKey)
	require.ErrorIs(t, err, store.ErrNotFound)

	// A second run finds nothing; the text report says so.
	code, stdout, stderr = c.cmd(t, env, "archive", "run", "--budget", "2")
	require.Equal(t, app.ExitOK, code, stderr)
	require.Contains(t, stdout, "more: false")
	require.Contains(t, stdout, c.seeded)
	require.Len(t, archivetest.Ledger(ctx, t, db.Pool), 1)
}

// requirePinnedReport: exactly one JSON object on stdout, with exactly the
// pinned fields: 12 rows archived from the first table in one archive,
// none from the others.
func requirePinnedReport(t *testing.T, stdout string, tables []string, seeded string) {
	t.Helper()
	require.Equal(t, 1, strings.Count(stdout, "\n"), stdout)
	dec := json.NewDecoder(strings.NewReader(stdout))
	var top map[string]json.RawMessage
	require.NoError(t, dec.Decode(&top))
	require.False(t, dec.More())
	require.ElementsMatch(t, []string{"more", "tables"}, slices.Collect(maps.Keys(top)))
	require.JSONEq(t, "false", string(top["more"]))
	var got []map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(top["tables"], &got))
	require.Len(t, got, len(tables))
	for i, tbl := range got {
		require.ElementsMatch(t, []string{"table", "archived", "quarantined", "archives", "error"}, slices.Collect(maps.Keys(tbl)))
		require.JSONEq(t, `"`+tables[i]+`"`, string(tbl["table"]))
		require.JSONEq(t, "0", string(tbl["quarantined"]))
		require.JSONEq(t, "null", string(tbl["error"]))
		var archives []map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(tbl["archives"], &archives))
		if tables[i] != seeded {
			require.JSONEq(t, "0", string(tbl["archived"]))
			require.Empty(t, archives)
			continue
		}
		require.JSONEq(t, "12", string(tbl["archived"]))
		require.Len(t, archives, 1)
		require.ElementsMatch(t, []string{"archive_id", "data_key", "manifest_key", "record_count"}, slices.Collect(maps.Keys(archives[0])))
		require.JSONEq(t, "12", string(archives[0]["record_count"]))
	}
}

// TestRetentionSchedule: with archive.retention.<table>_days set, each new
// archive is dated its newest record's UTC day plus the days; without it,
// undated; out of bounds, the command refuses naming the variable.
func TestRetentionSchedule(t *testing.T) {
	t.Parallel()
	for _, c := range archivingCases() {
		t.Run(c.service, func(t *testing.T) {
			t.Parallel()
			key := c.env("archive.retention." + c.seeded + "_days")
			db := serviceDB(t, c.service)
			env := []string{c.env("database_url") + "=" + db.URL}
			code, _, stderr := c.cmd(t, append(env, key+"=36501"), "archive", "run")
			require.Equal(t, app.ExitUsage, code)
			require.Contains(t, stderr, key)

			c.rows(t, db, 100, 3)
			bucketURL := kerneltest.S3Bucket(t)
			on := append(env, c.env("archive.enabled")+"=true", c.env("archive.store.url")+"="+bucketURL, key+"=2555")
			code, stdout, stderr := c.cmd(t, on, "archive", "run", "--json")
			require.Equal(t, app.ExitOK, code, stderr)
			deleteReported(t, bucketURL, []byte(stdout))
			require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM archive_ledger
				WHERE retention_until = (last_record_at AT TIME ZONE 'UTC')::date + 2555`))
		})
	}
}

// TestArchiveWatchdogGate: with the archiver on, rows
// past the hot window + 7 days make `invariants --gate` fail naming the
// table's watchdog; one archive pass moves them (ledger row, objects) and
// the gate passes.
func TestArchiveWatchdogGate(t *testing.T) {
	t.Parallel()
	for _, c := range archivingCases() {
		t.Run(c.service, func(t *testing.T) {
			t.Parallel()
			db := serviceDB(t, c.service)
			c.rows(t, db, 100, 4) // 100 d > 90 + 7
			c.rows(t, db, 95, 2)  // inside the grace: archived, never a violation
			env := []string{c.env("database_url") + "=" + db.URL, c.env("archive.enabled") + "=true", c.env("archive.store.url") + "=" + kerneltest.S3Bucket(t)}
			code, stdout, stderr := c.cmd(t, env, "invariants", "--gate", "--json")
			require.Equal(t, app.ExitFail, code, stderr)
			watch := c.seeded + "_hot_window_overrun"
			var rep struct {
				Invariants []struct {
					Name       string `json:"name"`
					Violations int64  `json:"violations"`
				} `json:"invariants"`
			}
			require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
			got := map[string]int64{}
			for _, inv := range rep.Invariants {
				got[inv.Name] = inv.Violations
			}
			require.Equal(t, int64(4), got[watch], stdout)

			code, stdout, stderr = c.cmd(t, env, "archive", "run", "--json")
			require.Equal(t, app.ExitOK, code, stderr)
			deleteReported(t, kerneltest.S3Bucket(t), []byte(stdout))
			require.Len(t, archivetest.Ledger(context.Background(), t, db.Pool), 1)
			require.Zero(t, db.Count(t, "SELECT count(*) FROM "+c.seeded))

			code, _, stderr = c.cmd(t, env, "invariants", "--gate")
			require.Equal(t, app.ExitOK, code, stderr)
		})
	}
}
