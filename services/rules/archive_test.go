package rules_test

import (
	"bytes"
	"context"
	"slices"
	"testing"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/services/rules"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func TestArchiveSettingsFromEnvironment(t *testing.T) {
	t.Parallel()
	const url = "s3://craig-archive?endpoint=http://127.0.0.1:7070&region=us-east-1&use_path_style=true&disable_https=true"
	tests := []struct {
		name      string
		env       []string
		want      func(*archive.Settings)
		retention int
		wantErr   []string // substrings of the error; nil = valid
	}{
		{name: "defaults: off", env: []string{}, want: func(*archive.Settings) {}},
		{
			name: "enabled with every knob",
			env: []string{
				"CRAIG_RULES__ARCHIVE__ENABLED=true", "CRAIG_RULES__ARCHIVE__STORE__URL=" + url,
				"CRAIG_RULES__ARCHIVE__HOT_WINDOW_DAYS=120", "CRAIG_RULES__ARCHIVE__INTERVAL_SECONDS=0",
				"CRAIG_RULES__ARCHIVE__BATCH_SIZE=500", "CRAIG_RULES__ARCHIVE__MAX_BATCH_BYTES=1048576",
				"CRAIG_RULES__ARCHIVE__RETENTION__RULE_EVALUATIONS_DAYS=2555", "CRAIG_RULES__ARCHIVE__PURGE__APPROVALS_REQUIRED=1",
			},
			want: func(s *archive.Settings) {
				s.Enabled, s.Store.URL, s.HotWindowDays, s.IntervalSeconds, s.BatchSize, s.MaxBatchBytes = true, url, 120, 0, 500, 1<<20
				s.Purge.ApprovalsRequired = 1
			},
			retention: 2555,
		},
		{
			name:    "enabled without a store",
			env:     []string{"CRAIG_RULES__ARCHIVE__ENABLED=true"},
			wantErr: []string{"archive.store.url", "CRAIG_RULES__ARCHIVE__STORE__URL", "CRAIG_RULES__ARCHIVE__ENABLED"},
		},
		{
			name:    "bounds",
			env:     []string{"CRAIG_RULES__ARCHIVE__HOT_WINDOW_DAYS=0", "CRAIG_RULES__ARCHIVE__BATCH_SIZE=10001", "CRAIG_RULES__ARCHIVE__MAX_BATCH_BYTES=4095"},
			wantErr: []string{"CRAIG_RULES__ARCHIVE__HOT_WINDOW_DAYS", "CRAIG_RULES__ARCHIVE__BATCH_SIZE", "CRAIG_RULES__ARCHIVE__MAX_BATCH_BYTES"},
		},
		{
			name:    "empty enabled is not false",
			env:     []string{"CRAIG_RULES__ARCHIVE__ENABLED="},
			wantErr: []string{"CRAIG_RULES__ARCHIVE__ENABLED"},
		},
		{
			name:    "two approvals",
			env:     []string{"CRAIG_RULES__ARCHIVE__PURGE__APPROVALS_REQUIRED=2"},
			wantErr: []string{"CRAIG_RULES__ARCHIVE__PURGE__APPROVALS_REQUIRED"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := app.LoadSettings(rules.Spec(), settings.Source{Environ: tt.env})
			if tt.wantErr != nil {
				require.ErrorIs(t, err, settings.ErrInvalid)
				for _, s := range tt.wantErr {
					require.ErrorContains(t, err, s)
				}
				return
			}
			require.NoError(t, err)
			want := archive.DefaultSettings()
			tt.want(&want)
			require.Equal(t, want, got.Archive)
			days, ok := got.Derived.Get(app.RetentionKey(rules.EvaluationsTable))
			require.True(t, ok, "every archived table's schedule key is loaded")
			require.Equal(t, tt.retention, days)
		})
	}
}

func TestSpecArchivesRuleEvaluations(t *testing.T) {
	t.Parallel()
	spec := rules.Spec()
	require.NotNil(t, spec.Archive)
	// Other tables may be registered beside it: find it by name.
	i := slices.IndexFunc(spec.Archive.Tables(), func(t archive.TableSpec) bool { return t.Table == rules.EvaluationsTable })
	require.GreaterOrEqual(t, i, 0)
	table := spec.Archive.Tables()[i]
	require.Equal(t, "evaluated_at", table.AgeColumn)
	require.NotNil(t, table.Select)
	require.NotNil(t, table.Delete)
	require.False(t, spec.Archive.Settings(rules.DefaultSettings()).Enabled, "off by default")
}

// TestBookkeepRefusesEmptyStoreIdentity: the event contract requires the
// store identity; Bookkeep refuses before touching the transaction.
func TestBookkeepRefusesEmptyStoreIdentity(t *testing.T) {
	t.Parallel()
	for _, m := range []archive.Manifest{
		{ArchiveID: uuid.New(), Endpoint: "", Bucket: "b"},
		{ArchiveID: uuid.New(), Endpoint: "http://e", Bucket: ""},
	} {
		err := rules.Bookkeep(context.Background(), nil, m, archive.SystemActor)
		require.ErrorContains(t, err, "store identity")
	}
}

// TestArchiveRunRefusedWhenDisabled: consent is checked before anything is
// opened, so no database is needed to prove the refusal.
func TestArchiveRunRefusedWhenDisabled(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"archive", "run"}, {"archive", "run", "--json", "--budget", "1"}} {
		var out, errOut bytes.Buffer
		env := []string{"CRAIG_RULES__DATABASE_URL=postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=1"}
		code := app.Run(context.Background(), rules.Spec(), args, &out, &errOut, env)
		require.Equal(t, app.ExitDisabled, code, errOut.String())
		require.Contains(t, errOut.String(), "CRAIG_RULES__ARCHIVE__ENABLED")
		require.Empty(t, out.String())
	}
}
