//go:build scratch

package rules_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/services/rules"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

const (
	envEnabled  = "CRAIG_RULES__ARCHIVE__ENABLED"
	envStoreURL = "CRAIG_RULES__ARCHIVE__STORE__URL"
)

// runRules runs one command of the rules binary in-process.
func runRules(ctx context.Context, args []string, env []string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = app.Run(ctx, rules.Spec(), args, &out, &errOut, env)
	return code, out.String(), errOut.String()
}

// TestArchiveConsentCLI (matrix rows 12 and 15): the archiver runs only with
// consent and a durable store, and every refusal names the knob and its
// environment variable.
func TestArchiveConsentCLI(t *testing.T) {
	t.Parallel()
	bucketURL := kerneltest.S3URL(t)
	storeDown := func() string {
		u, err := url.Parse(bucketURL)
		require.NoError(t, err)
		q := u.Query()
		q.Set("endpoint", "http://127.0.0.1:1")
		u.RawQuery = q.Encode()
		return u.String()
	}()

	tests := []struct {
		name       string
		env        func(t *testing.T) []string
		args       []string
		wantCode   int
		wantStderr []string
		wantStdout []string
	}{
		{
			name: "disabled (default): archive run refused with exit 3", env: func(*testing.T) []string { return nil },
			args: []string{"archive", "run"}, wantCode: app.ExitDisabled, wantStderr: []string{envEnabled, "refused"},
		},
		{
			name: "disabled even with a store configured", env: func(*testing.T) []string { return []string{envStoreURL + "=" + bucketURL} },
			args: []string{"archive", "run", "--json"}, wantCode: app.ExitDisabled, wantStderr: []string{envEnabled},
		},
		{
			name: "disabled: probe skips the store", env: func(*testing.T) []string { return nil },
			args: []string{"probe"}, wantCode: app.ExitOK, wantStdout: []string{"archiver: disabled", envEnabled},
		},
		{
			name: "enabled + local backend: archive run refused",
			env: func(t *testing.T) []string {
				return []string{envEnabled + "=true", envStoreURL + "=file://" + t.TempDir()}
			},
			args: []string{"archive", "run"}, wantCode: app.ExitFail, wantStderr: []string{envEnabled, envStoreURL, "local-directory"},
		},
		{
			name: "enabled + local backend: probe fails",
			env: func(t *testing.T) []string {
				return []string{envEnabled + "=true", envStoreURL + "=file://" + t.TempDir()}
			},
			args: []string{"probe"}, wantCode: app.ExitFail, wantStderr: []string{envEnabled, envStoreURL, "local-directory"},
		},
		{
			name: "enabled + local backend: serve refuses to boot",
			env: func(t *testing.T) []string {
				return []string{envEnabled + "=true", envStoreURL + "=file://" + t.TempDir(), "CRAIG_RULES__HTTP_ADDR=127.0.0.1:0"}
			},
			args: []string{"serve"}, wantCode: app.ExitFail, wantStderr: []string{envEnabled, envStoreURL, "archiver refused to start"},
		},
		{
			name: "enabled + store down: probe fails naming the knob",
			env:  func(*testing.T) []string { return []string{envEnabled + "=true", envStoreURL + "=" + storeDown} },
			args: []string{"probe"}, wantCode: app.ExitFail, wantStderr: []string{envEnabled, envStoreURL, "store probe failed"},
		},
		{
			name: "enabled + store down: archive run refused",
			env:  func(*testing.T) []string { return []string{envEnabled + "=true", envStoreURL + "=" + storeDown} },
			args: []string{"archive", "run"}, wantCode: app.ExitFail, wantStderr: []string{envEnabled, envStoreURL, "store probe failed"},
		},
		{
			name: "enabled without a store: invalid configuration",
			env:  func(*testing.T) []string { return []string{envEnabled + "=true"} },
			args: []string{"archive", "run"}, wantCode: app.ExitUsage, wantStderr: []string{envStoreURL},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db := kerneltest.ServiceDB(t, rules.Name)
			ids := seedEvaluations(t, db, 1, 6, 100, 0)
			env := append([]string{"CRAIG_RULES__DATABASE_URL=" + db.URL}, tt.env(t)...)
			code, stdout, stderr := runRules(context.Background(), tt.args, env)
			require.Equal(t, tt.wantCode, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
			for _, s := range tt.wantStderr {
				require.Contains(t, stderr, s)
			}
			for _, s := range tt.wantStdout {
				require.Contains(t, stdout, s)
			}
			require.Equal(t, int64(len(ids)), db.Count(t, `SELECT count(*) FROM rule_evaluations`), "nothing archived")
			require.Zero(t, db.Count(t, `SELECT count(*) FROM archive_ledger`))
			require.Zero(t, db.Count(t, `SELECT count(*) FROM event_outbox`))
		})
	}
}

// TestArchiveRunCLIRealStore: with consent and the real store, `probe`
// passes and `archive run --json --actor` prints the pinned one-object
// report and attributes the archive to the actor as cli:<actor>: an actor
// posing as the scheduler is recorded as a CLI act (issue 9, finding 8).
//
// The rules binary writes under retention-archives/rules/ (its service
// name), so the test deletes exactly the keys it reports.
func TestArchiveRunCLIRealStore(t *testing.T) {
	t.Parallel()
	bucketURL := kerneltest.S3URL(t)
	db := kerneltest.ServiceDB(t, rules.Name)
	aged := seedEvaluations(t, db, 1, 13, 100, 0)
	fresh := seedEvaluations(t, db, 100, 103, 3, 0)
	want := docs(t, db, agedWhere)
	env := []string{"CRAIG_RULES__DATABASE_URL=" + db.URL, envEnabled + "=true", envStoreURL + "=" + bucketURL}
	ctx := context.Background()

	code, stdout, stderr := runRules(ctx, []string{"probe"}, env)
	require.Equal(t, app.ExitOK, code, stderr)
	require.Contains(t, stdout, "archiver: store probe passed")

	code, stdout, stderr = runRules(ctx, []string{"archive", "run", "--json", "--actor", archive.SystemActor}, env)
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

	// Exactly one JSON object on stdout, with exactly the pinned fields.
	require.Equal(t, 1, strings.Count(stdout, "\n"), stdout)
	dec := json.NewDecoder(strings.NewReader(stdout))
	var top map[string]json.RawMessage
	require.NoError(t, dec.Decode(&top))
	require.False(t, dec.More())
	require.ElementsMatch(t, []string{"more", "tables"}, keys(top))
	require.JSONEq(t, "false", string(top["more"]))
	var tables []map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(top["tables"], &tables))
	require.Len(t, tables, 1)
	tbl := tables[0]
	require.ElementsMatch(t, []string{"table", "archived", "quarantined", "archives", "error"}, keys(tbl))
	require.JSONEq(t, `"rule_evaluations"`, string(tbl["table"]))
	require.JSONEq(t, "12", string(tbl["archived"]))
	require.JSONEq(t, "0", string(tbl["quarantined"]))
	require.JSONEq(t, "null", string(tbl["error"]))
	var archives []map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(tbl["archives"], &archives))
	require.Len(t, archives, 1)
	require.ElementsMatch(t, []string{"archive_id", "data_key", "manifest_key", "record_count"}, keys(archives[0]))
	require.JSONEq(t, "12", string(archives[0]["record_count"]))

	ref := rep.Tables[0].Archives[0]
	require.NotEqual(t, uuid.Nil, ref.ArchiveID)
	require.True(t, strings.HasPrefix(ref.DataKey, "retention-archives/rules/rule_evaluations/"), ref.DataKey)
	m, _, lines := readArchive(ctx, t, st, ref.DataKey, ref.ManifestKey)
	const recorded = app.CLIActorPrefix + archive.SystemActor // "cli:system:retention"
	require.Equal(t, recorded, m.ArchivedBy)
	require.Equal(t, "rules", m.Service)
	got := map[uuid.UUID]string{}
	for _, l := range lines {
		got[l.ID] = l.Text
	}
	require.Equal(t, want, got)

	rows := ledger(t, db)
	require.Len(t, rows, 1)
	require.Equal(t, recorded, rows[0].ArchivedBy, "--actor lands in archive_ledger.archived_by as cli:<actor>")
	require.Equal(t, ref.ArchiveID, rows[0].ArchiveID)
	events := outboxEvents(t, db)
	require.Len(t, events, 1)
	require.Equal(t, recorded, events[0].Payload["archived_by"])
	require.Equal(t, int64(len(fresh)), db.Count(t, `SELECT count(*) FROM rule_evaluations`))
	require.Len(t, aged, 12)

	// The probe left nothing behind.
	probeKey, err := store.ProbeKey(rules.Name)
	require.NoError(t, err)
	_, err = st.Get(ctx, probeKey)
	require.ErrorIs(t, err, store.ErrNotFound)

	// A second run finds nothing; the text report says so.
	code, stdout, stderr = runRules(ctx, []string{"archive", "run", "--budget", "2"}, env)
	require.Equal(t, app.ExitOK, code, stderr)
	require.Contains(t, stdout, "more: false")
	require.Contains(t, stdout, "rule_evaluations")
	require.Len(t, ledger(t, db), 1)
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
