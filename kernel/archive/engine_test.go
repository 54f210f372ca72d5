package archive_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/pgsession"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/kernel/store"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// lazyPool is a pool that never connects: New and the validation paths
// must not touch the database.
func lazyPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgsession.NewPool(context.Background(), "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func fileStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), "file://"+t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func newMetrics(t *testing.T) *metrics.Archive {
	t.Helper()
	m, err := metrics.NewArchive(prometheus.NewRegistry())
	require.NoError(t, err)
	return m
}

func stubSpec(table string) archive.TableSpec {
	return archive.TableSpec{
		Table:     table,
		AgeColumn: "created_at",
		Select: func(context.Context, prune.DB, archive.SelectParams) ([]archive.Row, error) {
			return nil, errors.New("stub: never selected in a unit test")
		},
		Delete: func(context.Context, pgx.Tx, int32, []uuid.UUID) (int64, error) {
			return 0, errors.New("stub: never deleted in a unit test")
		},
	}
}

func stubBookkeep(context.Context, pgx.Tx, archive.Manifest, string) error { return nil }

func validConfig() archive.Config {
	return archive.Config{Service: "rules", HotWindowDays: 90, BatchSize: 1000, MaxBatchBytes: archive.DefaultMaxBatchBytes}
}

var discard = slog.New(slog.DiscardHandler)

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	pool, st := lazyPool(t), fileStore(t)
	spec := stubSpec("items")
	tests := []struct {
		name     string
		cfg      func(*archive.Config)
		specs    []archive.TableSpec
		nilStore bool
		nilBk    bool
		wantErr  string // "" = accepted
	}{
		{name: "valid"},
		{name: "hot window 1 (lower bound)", cfg: func(c *archive.Config) { c.HotWindowDays = 1 }},
		{name: "hot window 3650 (upper bound)", cfg: func(c *archive.Config) { c.HotWindowDays = 3650 }},
		{name: "hot window 0", cfg: func(c *archive.Config) { c.HotWindowDays = 0 }, wantErr: "hot window 0 days"},
		{name: "hot window 3651", cfg: func(c *archive.Config) { c.HotWindowDays = 3651 }, wantErr: "hot window 3651 days"},
		{name: "hot window negative", cfg: func(c *archive.Config) { c.HotWindowDays = -1 }, wantErr: "hot window -1 days"},
		{name: "batch 1 (lower bound)", cfg: func(c *archive.Config) { c.BatchSize = 1 }},
		{name: "batch 10000 (upper bound)", cfg: func(c *archive.Config) { c.BatchSize = 10_000 }},
		{name: "batch 0", cfg: func(c *archive.Config) { c.BatchSize = 0 }, wantErr: "batch size 0"},
		{name: "batch 10001", cfg: func(c *archive.Config) { c.BatchSize = 10_001 }, wantErr: "batch size 10001"},
		{name: "max bytes 4096 (floor)", cfg: func(c *archive.Config) { c.MaxBatchBytes = 4096 }},
		{name: "max bytes 4095", cfg: func(c *archive.Config) { c.MaxBatchBytes = 4095 }, wantErr: "max batch bytes 4095 below 4096"},
		{name: "max bytes = store cap", cfg: func(c *archive.Config) { c.MaxBatchBytes = st.MaxObjectBytes() }},
		{name: "max bytes > store cap", cfg: func(c *archive.Config) { c.MaxBatchBytes = st.MaxObjectBytes() + 1 }, wantErr: "above the store's object cap"},
		{name: "empty service", cfg: func(c *archive.Config) { c.Service = "" }, wantErr: "service"},
		{name: "service with a slash", cfg: func(c *archive.Config) { c.Service = "rules/x" }, wantErr: "service"},
		{name: "upper-case service", cfg: func(c *archive.Config) { c.Service = "Rules" }, wantErr: "service"},
		{name: "two tables", specs: []archive.TableSpec{stubSpec("a"), stubSpec("b")}},
		{name: "duplicate table", specs: []archive.TableSpec{stubSpec("a"), stubSpec("b"), stubSpec("a")}, wantErr: "registered twice"},
		{name: "table with a dot", specs: []archive.TableSpec{stubSpec("public.items")}, wantErr: "table"},
		{name: "upper-case table", specs: []archive.TableSpec{stubSpec("Items")}, wantErr: "table"},
		{name: "table with a slash", specs: []archive.TableSpec{stubSpec("a/b")}, wantErr: "table"},
		{name: "table too long", specs: []archive.TableSpec{stubSpec(strings.Repeat("t", 64))}, wantErr: "longer than 63"},
		{name: "empty table", specs: []archive.TableSpec{stubSpec("")}, wantErr: "needs Table"},
		{name: "no age column", specs: []archive.TableSpec{func() archive.TableSpec { s := stubSpec("a"); s.AgeColumn = ""; return s }()}, wantErr: "AgeColumn"},
		{name: "no select", specs: []archive.TableSpec{func() archive.TableSpec { s := stubSpec("a"); s.Select = nil; return s }()}, wantErr: "Select"},
		{name: "no delete", specs: []archive.TableSpec{func() archive.TableSpec { s := stubSpec("a"); s.Delete = nil; return s }()}, wantErr: "Delete"},
		{name: "no specs", specs: []archive.TableSpec{}, wantErr: "no table specs"},
		{name: "no store", nilStore: true, wantErr: "required"},
		{name: "no bookkeep", nilBk: true, wantErr: "required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := validConfig()
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			specs := tt.specs
			if specs == nil {
				specs = []archive.TableSpec{spec}
			}
			s, bk := st, archive.BookkeepFunc(stubBookkeep)
			if tt.nilStore {
				s = nil
			}
			if tt.nilBk {
				bk = nil
			}
			e, err := archive.New(pool, s, specs, bk, cfg, discard, newMetrics(t))
			if tt.wantErr == "" {
				require.NoError(t, err)
				require.NotNil(t, e)
				return
			}
			require.ErrorIs(t, err, archive.ErrConfig)
			require.ErrorContains(t, err, tt.wantErr)
			require.Nil(t, e)
			var ae *archive.Error
			require.ErrorAs(t, err, &ae)
			require.Equal(t, archive.ErrConfig, ae.Kind)
		})
	}
}

func testEngine(t *testing.T) *archive.Engine {
	t.Helper()
	e, err := archive.New(lazyPool(t), fileStore(t), []archive.TableSpec{stubSpec("items")}, stubBookkeep, validConfig(), discard, newMetrics(t))
	require.NoError(t, err)
	return e
}

func TestRunPassRefusesBudgetBelowOne(t *testing.T) {
	t.Parallel()
	e := testEngine(t)
	for _, budget := range []int{0, -1} {
		rep, err := e.RunPass(context.Background(), budget) // before any connection
		require.ErrorIs(t, err, archive.ErrConfig)
		require.False(t, rep.More)
		require.Len(t, rep.Tables, 1)
		require.Equal(t, "items", rep.Tables[0].Table)
		require.NotNil(t, rep.Tables[0].Archives, "an empty list, not null, in the JSON report")
	}
}

func TestErrorKindsAndCause(t *testing.T) {
	t.Parallel()
	cause := errors.New("outbox table missing")
	err := fmt.Errorf("wrapped: %w", &archive.Error{Kind: archive.ErrBookkeep, Table: "rule_evaluations", Err: cause})
	require.ErrorIs(t, err, archive.ErrBookkeep)
	require.ErrorIs(t, err, cause)
	require.NotErrorIs(t, err, archive.ErrDB)
	require.Contains(t, err.Error(), "table rule_evaluations")
	require.Contains(t, err.Error(), "outbox table missing")
	kinds := []error{archive.ErrAlreadyRunning, archive.ErrStore, archive.ErrDB, archive.ErrBookkeep, archive.ErrConfig, archive.ErrDisabled}
	for i, a := range kinds {
		for j, b := range kinds {
			require.Equal(t, i == j, errors.Is(a, b), "%v vs %v", a, b)
		}
	}
}

func TestSettingsProblems(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		mutate  func(*archive.Settings)
		want    []string // offending keys
		related []string // of the last problem, if any
	}{
		{name: "defaults", mutate: func(*archive.Settings) {}},
		{name: "enabled with a store", mutate: func(s *archive.Settings) { s.Enabled = true; s.Store.URL = "s3://b" }},
		{name: "enabled without a store", mutate: func(s *archive.Settings) { s.Enabled = true },
			want: []string{"archive.store.url"}, related: []string{"archive.enabled"}},
		{name: "disabled without a store is fine", mutate: func(s *archive.Settings) { s.Store.URL = "" }},
		{name: "hot window 0", mutate: func(s *archive.Settings) { s.HotWindowDays = 0 }, want: []string{"archive.hot_window_days"}},
		{name: "hot window 3651", mutate: func(s *archive.Settings) { s.HotWindowDays = 3651 }, want: []string{"archive.hot_window_days"}},
		{name: "hot window bounds", mutate: func(s *archive.Settings) { s.HotWindowDays = 3650 }},
		{name: "batch 0", mutate: func(s *archive.Settings) { s.BatchSize = 0 }, want: []string{"archive.batch_size"}},
		{name: "batch 10001", mutate: func(s *archive.Settings) { s.BatchSize = 10_001 }, want: []string{"archive.batch_size"}},
		{name: "max bytes 4095", mutate: func(s *archive.Settings) { s.MaxBatchBytes = 4095 }, want: []string{"archive.max_batch_bytes"}},
		{name: "max bytes 4096", mutate: func(s *archive.Settings) { s.MaxBatchBytes = 4096 }},
		{name: "interval 0 (manual only)", mutate: func(s *archive.Settings) { s.IntervalSeconds = 0 }},
		{name: "interval negative", mutate: func(s *archive.Settings) { s.IntervalSeconds = -1 }, want: []string{"archive.interval_seconds"}},
		{name: "interval above a week", mutate: func(s *archive.Settings) { s.IntervalSeconds = archive.MaxIntervalSeconds + 1 }, want: []string{"archive.interval_seconds"}},
		{name: "everything wrong", mutate: func(s *archive.Settings) {
			*s = archive.Settings{Enabled: true, IntervalSeconds: -5}
		}, want: []string{"archive.hot_window_days", "archive.interval_seconds", "archive.batch_size", "archive.max_batch_bytes", "archive.db_timeout", "archive.store.request_timeout", "archive.store.url"}},
		{name: "db timeout below a second", mutate: func(s *archive.Settings) { s.DBTimeout = 999 * time.Millisecond }, want: []string{"archive.db_timeout"}},
		{name: "db timeout above an hour", mutate: func(s *archive.Settings) { s.DBTimeout = time.Hour + time.Second }, want: []string{"archive.db_timeout"}},
		{name: "db timeout at its bounds", mutate: func(s *archive.Settings) { s.DBTimeout = time.Hour }},
		{name: "detection look-back negative", mutate: func(s *archive.Settings) { s.DetectionLookbackDays = -1 }, want: []string{"archive.detection_lookback_days"}},
		{name: "detection look-back 3651", mutate: func(s *archive.Settings) { s.DetectionLookbackDays = 3651 }, want: []string{"archive.detection_lookback_days"}},
		{name: "detection look-back bounds", mutate: func(s *archive.Settings) { s.DetectionLookbackDays = 0 }},
		{name: "verify interval negative", mutate: func(s *archive.Settings) { s.VerifyIntervalHours = -1 }, want: []string{"archive.verify_interval_hours"}},
		{name: "verify interval above a month", mutate: func(s *archive.Settings) { s.VerifyIntervalHours = 721 }, want: []string{"archive.verify_interval_hours"}},
		{name: "verify interval off and bounds", mutate: func(s *archive.Settings) { s.VerifyIntervalHours = 0 }},
		{name: "max bytes above the store cap", mutate: func(s *archive.Settings) { s.MaxBatchBytes = archive.MaxMaxBatchBytes + 1 }, want: []string{"archive.max_batch_bytes"}},
		{name: "max bytes at the store cap", mutate: func(s *archive.Settings) { s.MaxBatchBytes = archive.MaxMaxBatchBytes }},
		{name: "request timeout below a second", mutate: func(s *archive.Settings) { s.Store.RequestTimeout = 999 * time.Millisecond }, want: []string{"archive.store.request_timeout"}},
		{name: "request timeout above ten minutes", mutate: func(s *archive.Settings) { s.Store.RequestTimeout = 10*time.Minute + time.Second }, want: []string{"archive.store.request_timeout"}},
		// Credentials inside the store URL or its endpoint
		// were accepted and copied into probe output, ledger, event and
		// manifest.
		{name: "store URL with userinfo", mutate: func(s *archive.Settings) { s.Store.URL = "s3://user:secret@b" }, want: []string{"archive.store.url"}},
		{name: "store endpoint with userinfo", mutate: func(s *archive.Settings) {
			s.Store.URL = "s3://b?endpoint=http://user:secret@127.0.0.1:7070&region=us-east-1"
		}, want: []string{"archive.store.url"}},
		{name: "store endpoint with user only", mutate: func(s *archive.Settings) {
			s.Store.URL = "s3://b?endpoint=http://user@127.0.0.1:7070"
		}, want: []string{"archive.store.url"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := archive.DefaultSettings()
			tt.mutate(&s)
			ps := s.Problems()
			var keys []string
			for _, p := range ps {
				require.True(t, strings.HasPrefix(p.Key, "archive."), "key %q", p.Key)
				require.NotEmpty(t, p.Reason)
				keys = append(keys, p.Key)
			}
			require.Equal(t, tt.want, keys)
			if tt.related != nil {
				require.Equal(t, tt.related, ps[len(ps)-1].Related)
			}
		})
	}
}

func TestDefaultSettingsAreOff(t *testing.T) {
	t.Parallel()
	s := archive.DefaultSettings()
	require.False(t, s.Enabled, "archiving is opt-in")
	require.Equal(t, 90, s.HotWindowDays)
	require.Equal(t, 3600, s.IntervalSeconds)
	require.Equal(t, time.Hour, s.Interval())
	require.Equal(t, 1000, s.BatchSize)
	require.Equal(t, int64(32<<20), s.MaxBatchBytes)
	require.Empty(t, s.Store.URL)
	require.Empty(t, s.Problems())
}

func TestStartDelay(t *testing.T) {
	t.Parallel()
	intervals := []time.Duration{time.Nanosecond, time.Millisecond, time.Second, time.Hour, 7 * 24 * time.Hour}
	services := []string{"rules", "security", "exchange", "financial", "a", "t0123456789abcdef"}
	for _, iv := range intervals {
		distinct := map[time.Duration]bool{}
		for _, svc := range services {
			d := archive.StartDelay(svc, iv)
			require.GreaterOrEqual(t, d, time.Duration(0))
			require.Less(t, d, iv, "%s within %v", svc, iv)
			require.Equal(t, d, archive.StartDelay(svc, iv), "deterministic: replicas of one service align")
			distinct[d] = true
		}
		if iv >= time.Second {
			require.Greater(t, len(distinct), 1, "services stagger within %v", iv)
		}
	}
	require.Zero(t, archive.StartDelay("rules", 0))
	require.Zero(t, archive.StartDelay("rules", -time.Second))
}

func TestNewWorkerConsentAndConfig(t *testing.T) {
	t.Parallel()
	e := testEngine(t)
	tests := []struct {
		name     string
		enabled  bool
		engine   *archive.Engine
		interval time.Duration
		budget   int
		wantErr  error
	}{
		{"disabled", false, e, time.Hour, 120, archive.ErrDisabled},
		{"disabled even when otherwise invalid", false, nil, 0, 0, archive.ErrDisabled},
		{"no engine", true, nil, time.Hour, 120, archive.ErrConfig},
		{"interval 0", true, e, 0, 120, archive.ErrConfig},
		{"budget 0", true, e, time.Hour, 0, archive.ErrConfig},
		{"enabled", true, e, time.Hour, archive.DefaultScheduledBudget, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w, err := archive.NewWorker(tt.enabled, tt.engine, tt.interval, tt.budget, discard)
			if tt.wantErr == nil {
				require.NoError(t, err)
				require.NotNil(t, w)
				return
			}
			require.ErrorIs(t, err, tt.wantErr)
			require.Nil(t, w)
			if errors.Is(tt.wantErr, archive.ErrDisabled) {
				require.ErrorContains(t, err, "archive.enabled=true")
			}
		})
	}
}

func TestBootDisabledTouchesNothing(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "never-created")
	for _, url := range []string{"", "file://" + missing, "bogus://nowhere", "s3://b?endpoint=http://127.0.0.1:1"} {
		s := archive.DefaultSettings()
		s.Store.URL = url
		st, err := archive.Boot(context.Background(), "rules", s)
		require.NoError(t, err, url)
		require.Nil(t, st, url)
	}
	_, err := os.Stat(missing)
	require.ErrorIs(t, err, os.ErrNotExist, "a disabled boot opens no store")
}

func TestBootRefusesLocalBackend(t *testing.T) {
	t.Parallel()
	for _, svc := range []string{"rules", "security"} {
		t.Run(svc, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			for _, url := range []string{"file://" + dir, "mem://"} {
				s := archive.DefaultSettings()
				s.Enabled, s.Store.URL = true, url
				st, err := archive.Boot(context.Background(), svc, s)
				require.Nil(t, st)
				require.ErrorIs(t, err, archive.ErrLocalBackend, url)
				upper := strings.ToUpper(svc)
				require.ErrorContains(t, err, "CRAIG_"+upper+"__ARCHIVE__ENABLED")
				require.ErrorContains(t, err, "CRAIG_"+upper+"__ARCHIVE__STORE__URL")
				require.ErrorContains(t, err, "archive.enabled")
				require.ErrorContains(t, err, "archive.store.url")
			}
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			require.Empty(t, entries, "the refused probe wrote nothing")
		})
	}
}

func TestBootRefusals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		mutate  func(*archive.Settings)
		wantIs  error
		wantEnv string
	}{
		{"unsupported backend", func(s *archive.Settings) { s.Store.URL = "gs://bucket" }, store.ErrUnsupportedBackend, "CRAIG_RULES__ARCHIVE__STORE__URL"},
		{"no bucket", func(s *archive.Settings) { s.Store.URL = "s3://" }, store.ErrBadURL, "CRAIG_RULES__ARCHIVE__STORE__URL"},
		{"max bytes above the store cap", func(s *archive.Settings) {
			s.Store.URL = "mem://"
			s.MaxBatchBytes = 5<<30 + 1
		}, nil, "CRAIG_RULES__ARCHIVE__MAX_BATCH_BYTES"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := archive.DefaultSettings()
			s.Enabled = true
			tt.mutate(&s)
			st, err := archive.Boot(context.Background(), "rules", s)
			require.Nil(t, st)
			require.Error(t, err)
			if tt.wantIs != nil {
				require.ErrorIs(t, err, tt.wantIs)
			}
			require.ErrorContains(t, err, tt.wantEnv)
			require.ErrorContains(t, err, settings.EnvVar("rules", "archive.enabled"))
		})
	}
}

func TestProbeRefusesLocalBackend(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st, err := store.Open(context.Background(), "file://"+dir)
	require.NoError(t, err)
	defer func() { _ = st.Close() }()
	err = archive.Probe(context.Background(), st, "rules")
	require.ErrorIs(t, err, archive.ErrLocalBackend)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries)
}

// TestDetectionWindowWarning: a hot window shorter than the
// detection look-back is warned about, naming both keys; equal or longer is
// not.
func TestDetectionWindowWarning(t *testing.T) {
	t.Parallel()
	s := archive.DefaultSettings()
	require.Equal(t, 30, s.DetectionLookbackDays)
	require.Empty(t, s.DetectionWindowWarning(), "90 >= 30")
	s.HotWindowDays = 30
	require.Empty(t, s.DetectionWindowWarning())
	s.HotWindowDays = 29
	w := s.DetectionWindowWarning()
	require.Contains(t, w, "archive.hot_window_days (29)")
	require.Contains(t, w, "archive.detection_lookback_days (30)")
}

// TestNewRefusesUnpinnedPool: an archive pass's cursor
// and hot window are times compared in SQL; a pool whose sessions are not
// pinned to UTC and ISO dates is refused.
func TestNewRefusesUnpinnedPool(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.ErrorIs(t, pgsession.CheckPinned(pool), pgsession.ErrNotPinned)
	require.NoError(t, pgsession.CheckPinned(lazyPool(t)))
}
