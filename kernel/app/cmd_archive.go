package app

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"strings"
	"text/tabwriter"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/intent"
	"github.com/craig/retention/kernel/journal"
	"github.com/craig/retention/kernel/lifecycle"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/kernel/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// archiveCmd is `<svc> archive run [--budget N] [--json] [--actor NAME]`
// (archiving services): exit 3 when the archiver is disabled.
type archiveCmd[T any] struct {
	budget int
	asJSON bool
	actor  string
}

func (c *archiveCmd[T]) define(fs *flag.FlagSet) {
	fs.IntVar(&c.budget, "budget", archive.DefaultManualBudget, fmt.Sprintf("most batches this pass may run (1..%d)", archive.MaxManualBudget))
	fs.BoolVar(&c.asJSON, "json", false, "print the pass report as one JSON object")
	fs.StringVar(&c.actor, "actor", defaultActor(), "who runs this pass (recorded as archived_by cli:<actor>)")
}

func (c *archiveCmd[T]) check() error {
	if c.budget < 1 || c.budget > archive.MaxManualBudget || strings.TrimSpace(c.actor) == "" {
		return fmt.Errorf("--budget must be between 1 and %d and --actor non-empty (got %d, %q)", archive.MaxManualBudget, c.budget, c.actor)
	}
	return nil
}

func (c *archiveCmd[T]) run(ctx context.Context, rt *runtime[T]) (int, error) {
	err := rt.archiveRun(ctx, c.budget, c.asJSON, CLIActor(c.actor))
	if errors.Is(err, archive.ErrDisabled) {
		fmt.Fprintf(rt.stderr, "%s archive run: refused: %v\n", rt.spec.Name, err)
		return ExitDisabled, nil
	}
	return exitFor(err)
}

// archiveSettings returns the service's archive settings and whether the
// service archives at all.
func (r *runtime[T]) archiveSettings() (archive.Settings, bool) {
	if r.spec.Archive == nil {
		return archive.Settings{}, false
	}
	return r.spec.Archive.Settings(r.cfg), true
}

// disabledError names the consent knob and its environment variable.
func (r *runtime[T]) disabledError() error {
	return fmt.Errorf("%w: set archive.enabled=true (env %s) to consent to archive-then-prune",
		archive.ErrDisabled, settings.EnvVar(r.spec.Name, "archive.enabled"))
}

// archiveEngine boots the archiver (store + probe) and builds its engine.
// The caller closes the store.
func (r *runtime[T]) archiveEngine(ctx context.Context, pool *pgxpool.Pool, reg prometheus.Registerer) (*archive.Engine, *store.Store, error) {
	as, ok := r.archiveSettings()
	if !ok || !as.Enabled {
		return nil, nil, r.disabledError()
	}
	if err := archive.CheckInsertOnly(ctx, pool, archiveTables(r.spec, r.cfg)); err != nil {
		return nil, nil, fmt.Errorf("archiver refused to start: %w", err)
	}
	boundMemory(as, r.logger)
	r.logger.InfoContext(ctx, "archiver boot: probing the store", slog.String("service", r.spec.Name),
		slog.Duration("request_timeout", as.Store.RequestTimeout), slog.Duration("boot_timeout", archive.BootTimeout))
	st, err := archive.Boot(ctx, r.spec.Name, as)
	if err != nil {
		return nil, nil, err
	}
	m, err := metrics.NewArchive(reg)
	if err != nil {
		_ = st.Close()
		return nil, nil, err
	}
	m.Known(r.spec.Name, archiveTableNames(r.spec, r.cfg), archive.FailureKinds())
	locked, err := st.ObjectLock(ctx)
	if err != nil {
		_ = st.Close()
		return nil, nil, fmt.Errorf("archiver refused to start: %w", err)
	}
	key, err := r.subjectKey(ctx, pool, as)
	if err != nil {
		_ = st.Close()
		return nil, nil, fmt.Errorf("archiver refused to start: %w", err)
	}
	if !key.Valid() && hasSubjects(archiveTables(r.spec, r.cfg)) {
		r.logger.WarnContext(ctx, "archive.subject_key_file is not set: archives are booked without their subject index; subject fetch and subject holds are off until a key is set and the backfill has run",
			slog.String("service", r.spec.Name), slog.String("env", settings.EnvVar(r.spec.Name, "archive.subject_key_file")))
	}
	jr, err := r.openJournal(ctx, pool, st)
	if err != nil {
		_ = st.Close()
		return nil, nil, fmt.Errorf("archiver refused to start: %w", err)
	}
	e, err := archive.New(pool, st, archiveTables(r.spec, r.cfg), r.scheduled(r.spec.Archive.Bookkeeper.Bookkeep), archive.Config{
		Service: r.spec.Name, HotWindowDays: as.HotWindowDays, BatchSize: as.BatchSize, MaxBatchBytes: as.MaxBatchBytes, DBTimeout: as.DBTimeout,
		LedgerHolds: true, ObjectLock: locked, SubjectKey: key, Journal: jr,
	}, r.logger, m)
	if err != nil {
		_ = st.Close()
		return nil, nil, err
	}
	return e, st, nil
}

// archiveRun runs one pass now, attributed to actor.
func (r *runtime[T]) archiveRun(ctx context.Context, budget int, asJSON bool, actor string) error {
	if as, ok := r.archiveSettings(); !ok || !as.Enabled {
		return r.disabledError() // consent first: nothing is opened
	}
	pool, err := r.pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	e, st, err := r.archiveEngine(ctx, pool, prometheus.NewRegistry())
	if err != nil {
		return err
	}
	defer func() { _ = st.Close() }()
	rep, err := e.WithActor(actor).RunPass(ctx, budget)
	if err != nil {
		return err
	}
	if asJSON {
		if err := json.NewEncoder(r.stdout).Encode(rep); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
	} else {
		tw := tabwriter.NewWriter(r.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "more: %v\n", rep.More)
		fmt.Fprintln(tw, "TABLE\tARCHIVED\tQUARANTINED\tARCHIVES\tERROR")
		for _, t := range rep.Tables {
			errText := "-"
			if t.Error != nil {
				errText = *t.Error
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\n", t.Table, t.Archived, t.Quarantined, len(t.Archives), errText)
			for _, a := range t.Archives {
				fmt.Fprintf(tw, "  %s\t%d rows\t%s\t%s\t\n", a.ArchiveID, a.RecordCount, a.DataKey, a.ManifestKey)
			}
		}
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
	}
	return rep.Err()
}

// probeArchive checks that every archived table is insert-only (whether or
// not the archiver is enabled: it is a property of the schema) and runs the
// archiver's boot probe when it is enabled.
func (r *runtime[T]) probeArchive(ctx context.Context, pool *pgxpool.Pool) error {
	as, ok := r.archiveSettings()
	if !ok {
		return nil
	}
	tables := archiveTables(r.spec, r.cfg)
	if err := archive.CheckInsertOnly(ctx, pool, tables); err != nil {
		return err
	}
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = t.Table
	}
	fmt.Fprintf(r.stdout, "archived tables: insert-only trigger present (%s)\n", strings.Join(names, ", "))
	switch {
	case !as.Enabled:
		fmt.Fprintf(r.stdout, "archiver: disabled (archive.enabled=false, env %s): no store probe\n", settings.EnvVar(r.spec.Name, "archive.enabled"))
		return nil
	}
	st, err := archive.Boot(ctx, r.spec.Name, as)
	if err != nil {
		return err
	}
	id := st.Identity()
	fmt.Fprintf(r.stdout, "archiver: store probe passed (endpoint %s, bucket %s)\n", id.Endpoint, id.Bucket)
	return st.Close()
}

// startArchiver boots the archiver for serve when it is enabled and returns
// its scheduled worker (nil when disabled or interval 0) and a close func.
func (r *runtime[T]) startArchiver(ctx context.Context, pool *pgxpool.Pool, reg prometheus.Registerer) (*archiver, error) {
	as, ok := r.archiveSettings()
	if !ok || !as.Enabled {
		if !ok {
			return &archiver{}, nil
		}
		r.logger.Info("archiver disabled: no scheduled archive passes", slog.String("knob", settings.EnvVar(r.spec.Name, "archive.enabled")))
		return r.readOnlyArchiver(ctx, pool, as), nil
	}
	if w := as.DetectionWindowWarning(); w != "" {
		r.logger.Warn(w, slog.String("hot_window_key", settings.EnvVar(r.spec.Name, "archive.hot_window_days")),
			slog.String("lookback_key", settings.EnvVar(r.spec.Name, "archive.detection_lookback_days")))
	}
	e, st, err := r.archiveEngine(ctx, pool, reg)
	if err != nil {
		return nil, err
	}
	a := &archiver{engine: e, store: st, objectLock: e.ObjectLock(), journal: e.Journal()}
	if as.IntervalSeconds == 0 {
		r.logger.Info("archiver enabled with interval 0: manual passes only")
		return a, nil
	}
	if a.worker, err = archive.NewWorker(as.Enabled, e, as.Interval(), archive.DefaultScheduledBudget, r.logger); err != nil {
		a.close()
		return nil, err
	}
	r.logger.Info("archiver enabled", slog.String("service", r.spec.Name), slog.Int("hot_window_days", as.HotWindowDays),
		slog.Duration("interval", as.Interval()), slog.String("endpoint", st.Identity().Endpoint), slog.String("bucket", st.Identity().Bucket))
	return a, nil
}

// scheduled wraps the service's bookkeeping so each new archive is dated by
// its table's retention schedule in the same transaction.
func (r *runtime[T]) scheduled(bk archive.BookkeepFunc) archive.BookkeepFunc {
	sched := retentionSchedule(r.spec, r.cfg)
	return func(ctx context.Context, tx pgx.Tx, m archive.Manifest, by string) error {
		if err := bk(ctx, tx, m, by); err != nil {
			return err
		}
		return lifecycle.ScheduleRetention(ctx, tx, m.ArchiveID, sched[m.Table])
	}
}

// archiver is serve's archiver: its scheduled worker (nil: none), its
// engine (nil when disabled) and store (nil when none is configured or it
// cannot be opened), and whether the bucket has Object Lock.
type archiver struct {
	worker     *archive.Worker
	engine     *archive.Engine
	store      *store.Store
	objectLock bool
	// journal is the service's journal of acts (nil without a store).
	journal *journal.Journal
}

// orphans is the engine's orphan sweeper (its metric), or nil without an
// engine (the court orders then build their own).
func (a *archiver) orphans() *intent.Sweeper {
	if a.engine == nil {
		return nil
	}
	return a.engine.Orphans()
}

// readOnlyArchiver opens the configured store of a disabled archiver for
// what needs no consent: reading archived records (they are cold, not
// gone) and keeping the store's locks on held archives. Nothing is
// written there by it; a store that cannot be opened is a WARN and leaves
// archived records unreadable until it can.
func (r *runtime[T]) readOnlyArchiver(ctx context.Context, pool *pgxpool.Pool, as archive.Settings) *archiver {
	if as.Store.URL == "" {
		return &archiver{}
	}
	bctx, cancel := context.WithTimeout(ctx, archive.BootTimeout)
	defer cancel()
	st, err := store.Open(bctx, as.Store.URL, store.WithRequestTimeout(as.Store.RequestTimeout))
	if err != nil {
		r.logger.Warn("archived records are unreadable: the store did not open", slog.String("knob", settings.EnvVar(r.spec.Name, "archive.store.url")), slog.Any("error", err))
		return &archiver{}
	}
	locked, err := st.ObjectLock(bctx)
	if err != nil {
		r.logger.Warn("store object lock unknown; holds are kept in the ledger only until it answers", slog.Any("error", err))
	}
	jr, err := r.openJournal(ctx, pool, st)
	if err != nil { // the journal is read again at every verify interval
		r.logger.Error("the store's journal could not be compared with the database's; acts are journaled in the database until it can", slog.Any("error", err))
		jr = journal.New(pool, st, r.spec.Name, &journal.Gate{})
	}
	return &archiver{store: st, objectLock: locked, journal: jr}
}

func (a *archiver) close() {
	if a.store != nil {
		_ = a.store.Close()
	}
}

// archiveMemorySlack is the heap the archiver's process needs besides its
// batches' documents: the runtime, the pool, the S3 client and its upload
// buffers, the sweep. The Go limit counts the heap, not the binary's text
// pages that RSS counts too: a pass of small rows peaks at about 42 MiB of
// RSS, of which well under 32 MiB is heap.
const archiveMemorySlack = 32 << 20

// boundMemory sets the Go runtime's soft memory limit for the archiver,
// unless the operator set GOMEMLIMIT: archiveMemorySlack plus one and a half
// max_batch_bytes (the batch being uploaded, and the next one the pipeline
// selects while the first holds less than half the cap), 80 MiB at the
// defaults. The selection never holds more than max_batch_bytes of
// documents a batch, and the NDJSON is streamed from them without a copy,
// so the live heap stays about there; but without a limit the collector
// lets the heap grow to twice the live data between collections, and a
// batch's documents arrive faster than it runs. Measured peak RSS of 12
// rows of 20 MiB at 32 MiB batches (ADR-076): 133 MiB with a limit of 96
// MiB (a slack of 48), 109 MiB with 80, 106 with 64, the pass's time the
// same (27 s); 200 KiB rows: 114, 101 and 97 MiB. The limit is soft: it
// makes the collector work harder near it and never fails an allocation.
// The bound the benchmark checks is 64 MiB + 2 × max_batch_bytes.
func boundMemory(as archive.Settings, logger *slog.Logger) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	limit := int64(archiveMemorySlack) + as.MaxBatchBytes + as.MaxBatchBytes/2
	if prev := debug.SetMemoryLimit(-1); prev < limit && prev != math.MaxInt64 {
		return // a lower limit is already set (by another archiver in this process)
	}
	debug.SetMemoryLimit(limit)
	logger.Debug("archiver memory bound set", slog.Int64("memory_limit_bytes", limit))
}

// hasSubjects is true when some archived table declares subjects.
func hasSubjects(specs []archive.TableSpec) bool {
	for _, s := range specs {
		if len(s.Subjects) > 0 {
			return true
		}
	}
	return false
}
