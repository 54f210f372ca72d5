package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/invariants"
	"github.com/craig/retention/kernel/lease"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/vacuumwatch"

	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/outbox"
	"github.com/craig/retention/kernel/pgsession"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/kernel/sweep"
	"github.com/craig/retention/migrations"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// runtime is what every command runs with: the service, its validated
// settings, its logger and migration sets, and where output goes.
type runtime[T any] struct {
	spec   Spec[T]
	cfg    T
	tr     settings.Transport
	logger *slog.Logger
	sets   []migrations.Set
	stdout io.Writer
	stderr io.Writer
}

// newRuntime loads and validates the settings (defaults < configPath <
// environ) and the service's migration sets; an error is a usage error.
func newRuntime[T any](spec Spec[T], configPath string, environ []string, stdout, stderr io.Writer) (*runtime[T], error) {
	if err := CheckRegistrations(spec); err != nil {
		return nil, err
	}
	cfg, err := LoadSettings(spec, settings.Source{ConfigPath: configPath, Environ: environ})
	if err != nil {
		return nil, err
	}
	sets := spec.MigrationSets()
	tr := spec.Transport(cfg)
	return &runtime[T]{spec: spec, cfg: cfg, tr: tr, logger: newLogger(stderr, tr.LogLevel), sets: sets, stdout: stdout, stderr: stderr}, nil
}

// pool opens the service's database pool. Every connection it opens is
// bounded by database_connect_timeout (TCP, TLS and the startup
// handshake), and so is the first ping: a server that accepts connections
// and never answers fails the command naming the database, instead of
// hanging it.
func (r *runtime[T]) pool(ctx context.Context) (*pgxpool.Pool, error) {
	return OpenPool(ctx, r.tr.DatabaseURL, r.tr.DatabaseConnectTimeout)
}

// OpenPool opens a pool on databaseURL whose connections are pinned to UTC
// and ISO dates (pgsession) and opened within connectTimeout, and pings it within the same bound. Errors name the
// database without its password.
func OpenPool(ctx context.Context, databaseURL string, connectTimeout time.Duration) (*pgxpool.Pool, error) {
	where := settings.Redact(databaseURL)
	cfg, err := pgsession.ParsePoolConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("database_url %s: does not parse as a PostgreSQL connection string", where)
	}
	cfg.ConnConfig.ConnectTimeout = connectTimeout
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("database pool %s: %w", where, err)
	}
	pctx, cancel := context.WithTimeoutCause(ctx, connectTimeout, fmt.Errorf("database %s did not answer within database_connect_timeout=%v", where, connectTimeout))
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		if ctx.Err() == nil && pctx.Err() != nil { // our bound fired, not the caller's
			return nil, fmt.Errorf("%w: %w", context.Cause(pctx), err)
		}
		return nil, fmt.Errorf("database %s unreachable: %w", where, err)
	}
	return pool, nil
}

// Groups returns every sweep group of a service: the transport group first,
// then the service's own, with the configured batch bounds applied to every
// policy.
func Groups[T any](spec Spec[T], cfg T) []sweep.Group {
	tr := spec.Transport(cfg)
	groups := []sweep.Group{sweep.Transport(sweep.TransportConfig{
		OutboxWindowDays:     tr.EventOutboxRetentionDays,
		InboxWindowDays:      tr.EventInboxRetentionDays,
		DeadLetterWindowDays: tr.Outbox.DeadLetterRetentionDays,
		YieldToWriters:       tr.PruneYieldToWriters,
	})}
	for _, l := range spec.Locals {
		groups = append(groups, sweep.Group{
			Name: l.Sweep.Table, LockKey: lease.KeyFor(spec.Name, l.Sweep.Table), Policies: []prune.Policy{l.PolicyFor(tr)},
		})
	}
	return sweep.Bounds{
		BatchSize:        tr.PruneBatchSize,
		CycleCap:         tr.PruneCycleCap,
		StatementTimeout: tr.PruneStatementTimeout,
		LockTimeout:      tr.PruneLockTimeout,
		Pacing: prune.Pacing{
			MaxReplicaLag: tr.PruneMaxReplicaLag, MaxWALBytesPerSecond: tr.PruneMaxWALBytesPerSecond, MaxPause: tr.PruneMaxPause,
		},
	}.Apply(groups)
}

// ExportInvariants is serve's group hook: the replica that ran a group's
// sweep checks the group's watchdogs right after it, under the group's
// lease, and exports them (retention_invariant_violations). A replica that
// did not run the group (another held the lease) removes its series for
// the group's invariants instead: while the leader drains a backlog the
// tables overrun by design, and a stale or mid-drain count from a replica
// must not raise RetentionInvariantViolated.
func ExportInvariants(m *metrics.Invariants, logger *slog.Logger) sweep.GroupHook {
	return func(ctx context.Context, db prune.DB, g sweep.Group, ran bool) {
		var specs []invariants.Spec
		for _, p := range g.Policies {
			specs = append(specs, invariants.ForPolicy(p)...)
		}
		if !ran {
			for _, s := range specs {
				m.Violations.DeleteLabelValues(s.Name)
			}
			return
		}
		results, err := invariants.CheckAll(ctx, db, specs)
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				logger.ErrorContext(ctx, "invariant check after the sweep failed", slog.String("group", g.Name), slog.Any("error", err))
			}
			return
		}
		for _, res := range results {
			m.Violations.WithLabelValues(res.Name).Set(float64(res.Violations))
		}
	}
}

// VacuumLimits are the vacuum watchdog's thresholds from the transport
// settings.
func VacuumLimits(tr settings.Transport) vacuumwatch.Limits {
	return vacuumwatch.Limits{MaxHeld: tr.VacuumHorizonMaxHeld, MaxSlotWALBytes: tr.VacuumSlotMaxRetainedWALBytes, MaxDeadTuples: tr.VacuumDeadTuplesMax}
}

// WatchVacuum is the sweep group hook that reads, after each group a
// replica swept, what keeps VACUUM from reclaiming the deleted rows (the
// xmin horizon's holders, the slots' WAL, the group's dead tuples) and
// exports it; each finding over the limits is logged at WARN: what the
// sweep deletes stays on disk.
func WatchVacuum(m *metrics.Vacuum, logger *slog.Logger, limits vacuumwatch.Limits) sweep.GroupHook {
	cycle := &cycleRuns{}
	return func(ctx context.Context, db prune.DB, g sweep.Group, ran bool) {
		ranAny := cycle.group(g.Name, ran)
		if !ran {
			if g.Enabled() { // another replica holds the lease: its reading of the group is the fresh one
				vacuumwatch.ForgetTables(m, groupTables(g))
				if !ranAny { // and of the database, unless this replica read it this cycle
					vacuumwatch.ForgetHorizon(m)
				}
			}
			return
		}
		rep, err := vacuumwatch.Read(ctx, db, groupTables(g))
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				logger.WarnContext(ctx, "vacuum watchdog could not read the database", slog.String("group", g.Name), slog.Any("error", err))
			}
			return
		}
		vacuumwatch.Export(m, rep)
		for _, f := range vacuumwatch.Findings(rep, limits) {
			logger.WarnContext(ctx, "VACUUM cannot keep up with what the sweep deletes",
				slog.String("kind", f.Kind), slog.String("holder", f.Holder), slog.String("name", f.Name),
				slog.Float64("value", f.Value), slog.Float64("limit", f.Limit), slog.Int64("xmin_age_xids", f.XminAge))
		}
		for _, h := range rep.Hidden() {
			logger.WarnContext(ctx, "vacuum watchdog cannot see how long a session holds the xmin horizon: grant the service's role pg_monitor",
				slog.String("name", h.Name), slog.Int64("xmin_age_xids", h.XminAge))
		}
	}
}

// cycleRuns tells, across a sweep cycle's group hooks (called in group
// order, every group every cycle), whether this replica ran any group of
// the current cycle: a group seen again starts the next cycle.
type cycleRuns struct {
	mu     sync.Mutex
	seen   map[string]bool
	ranAny bool
}

// group records one group's hook and reports whether any group of this
// cycle ran so far.
func (c *cycleRuns) group(name string, ran bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil || c.seen[name] {
		c.seen, c.ranAny = map[string]bool{}, false
	}
	c.seen[name] = true
	c.ranAny = c.ranAny || ran
	return c.ranAny
}

// groupTables are the tables a sweep group prunes, each once (the outbox
// has two policies).
func groupTables(g sweep.Group) []string {
	return sweptTables(g.Policies)
}

// sweptTables are the policies' tables, each once, in order.
func sweptTables(ps []prune.Policy) []string {
	tables := make([]string, 0, len(ps))
	for _, p := range ps {
		if !slices.Contains(tables, p.Table) {
			tables = append(tables, p.Table)
		}
	}
	return tables
}

// ReplayLimits are the admin replay's bounds from the transport settings.
func ReplayLimits(tr settings.Transport) outbox.ReplayLimits {
	return outbox.ReplayLimits{
		OutboxWindowDays: tr.EventOutboxRetentionDays, MaxAgeDays: tr.ReplayMaxAgeDays,
		MaxRows: tr.ReplayMaxRows, BatchSize: tr.PruneBatchSize,
	}
}

// InvariantSpecs returns the watchdog of every swept table of a service.
func InvariantSpecs[T any](spec Spec[T], cfg T) []invariants.Spec {
	var out []invariants.Spec
	policies := sweep.Policies(Groups(spec, cfg))
	for _, p := range policies {
		out = append(out, invariants.FromPolicy(p))
	}
	for _, p := range policies { // the future-dated watchdogs after every overrun one
		out = append(out, invariants.FutureFromPolicy(p))
	}
	if spec.Archive != nil { // then the archived tables' watchdogs
		as := spec.Archive.Settings(cfg)
		for _, t := range archiveTables(spec, cfg) {
			hot := 0
			if as.Enabled {
				hot = t.HotWindowDays
				if hot == 0 {
					hot = as.HotWindowDays
				}
			}
			out = append(out, invariants.ForArchive(t.Table, t.AgeColumn, hot))
		}
		for _, t := range archiveTables(spec, cfg) { // then their unparsed subjects
			if q := archive.UnparsedSQL(t); q != "" {
				out = append(out, invariants.ForUnparsedSubjects(t.Table, q, as.Enabled))
			}
		}
	}
	return out
}

func (r *runtime[T]) sweeper(pool *pgxpool.Pool, reg prometheus.Registerer) (*sweep.Sweeper, error) {
	m, err := metrics.NewPrune(reg)
	if err != nil {
		return nil, err
	}
	groups := Groups(r.spec, r.cfg)
	var tables, names []string
	for _, g := range groups {
		if g.Enabled() { // a disabled group never succeeds: no "never" series to alert on
			names = append(names, g.Name)
		}
		for _, p := range g.Policies {
			tables = append(tables, p.Label())
		}
	}
	m.Known(tables, names, []string{prune.PauseReplicaLag, prune.PauseWALRate})
	return sweep.New(pool, groups, r.logger, m)
}
