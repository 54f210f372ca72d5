package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/craig/retention/kernel/archiveread"
	"github.com/craig/retention/kernel/disposition"
	"github.com/craig/retention/kernel/lifecycle"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/schedule"
	"github.com/craig/retention/kernel/settings"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// archiveAPI builds the archive API of an archiving service with a token
// key configured (nil otherwise: not served). Without a key, an archiving
// service refuses to serve on a non-loopback address.
func (r *runtime[T]) archiveAPI(lm *lifecycle.Manager, arch *archiver, reader *archiveReader, keys adminKeys) (*ArchiveAPI, error) {
	as, ok := r.archiveSettings()
	if !ok {
		return nil, nil
	}
	if keys.verifier == nil {
		if !settings.LoopbackAddr(r.tr.HTTPAddr) {
			return nil, fmt.Errorf("http_addr %s is not loopback and no archive API key is configured: set auth.jwt_public_key_file (%s), auth.jwks_file or auth.jwt_hs256_secret_file",
				r.tr.HTTPAddr, settings.EnvVar(r.spec.Name, "auth.jwt_public_key_file"))
		}
		return nil, nil
	}
	v, am := keys.verifier, keys.metrics
	r.logger.Info("archive API served", slog.Any("algorithms", v.Algorithms()), slog.Int("purge_approvals_required", as.Purge.ApprovalsRequired),
		slog.Bool("store_object_lock", arch.objectLock), slog.Bool("archiver_enabled", arch.engine != nil), slog.Bool("reads", reader.reader != nil))
	return &ArchiveAPI{Verifier: v, Metrics: am, Logger: r.logger, Lifecycle: lm, Engine: arch.engine, Journal: arch.journal,
		Knob: settings.EnvVar(r.spec.Name, "archive.enabled"), StoreKnob: settings.EnvVar(r.spec.Name, "archive.store.url"),
		Reader: reader.reader, VerifyMetrics: reader.metrics, SubjectKeyKnob: settings.EnvVar(r.spec.Name, "archive.subject_key_file")}, nil
}

// lifecycleManager builds an archiving service's lifecycle manager (nil
// for a service that does not archive), its purge metrics registered once.
func (r *runtime[T]) lifecycleManager(ctx context.Context, pool *pgxpool.Pool, arch *archiver, reg prometheus.Registerer) (*lifecycle.Manager, error) {
	as, ok := r.archiveSettings()
	if !ok {
		return nil, nil
	}
	pm, err := metrics.NewPurge(reg)
	if err != nil {
		return nil, err
	}
	tables := archiveTableNames(r.spec, r.cfg)
	pm.Known(tables, lifecycle.PurgeRefusals())
	key, err := r.subjectKey(ctx, pool, as)
	if err != nil {
		return nil, err
	}
	specs := archiveTables(r.spec, r.cfg)
	dated := disposition.NewFinder(pool, key, specs, schedule.New(pool, scheduleSeries(specs)))
	return lifecycle.New(pool, arch.store, lifecycle.Config{Service: r.spec.Name, ApprovalsRequired: as.Purge.ApprovalsRequired, ObjectLock: arch.objectLock, Tables: tables,
		SubjectKey: key, SubjectTables: subjectTableNames(specs), Journal: arch.journal, PurgeCheck: dated.PurgeCheck()}, r.logger, pm)
}

// lockReconciler keeps the store's legal holds on the ledger's held
// archives: once at boot, then every verify interval (every
// DefaultLockReconcileInterval when scheduled verification is off). Nil
// when the bucket has no Object Lock.
func (r *runtime[T]) lockReconciler(lm *lifecycle.Manager, arch *archiver) func(context.Context) error {
	as, ok := r.archiveSettings()
	if !ok || lm == nil || !arch.objectLock {
		return nil
	}
	every := DefaultLockReconcileInterval
	if as.VerifyIntervalHours > 0 {
		every = time.Duration(as.VerifyIntervalHours) * time.Hour
	}
	return func(ctx context.Context) error {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if err := arch.journal.Err(); err != nil { // a restore forgot holds: no lock is touched until reconciled
				r.logger.WarnContext(ctx, "store-lock reconciliation skipped: "+RestoredBehindJournal, slog.Any("error", err))
				select {
				case <-ctx.Done():
					return nil
				case <-t.C:
					continue
				}
			}
			rep, err := lm.ReconcileLocks(ctx)
			switch {
			case ctx.Err() != nil:
				return nil
			case err != nil:
				r.logger.ErrorContext(ctx, "store-lock reconciliation failed; retried next interval", slog.Any("error", err))
			case rep.Drift > 0 || rep.Missing > 0:
				r.logger.WarnContext(ctx, "store-lock reconciliation found held archives the store did not lock", slog.Int("held", rep.Held),
					slog.Int("drift", rep.Drift), slog.Int("locked", rep.Locked), slog.Int("missing", rep.Missing))
			}
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
	}
}

// DefaultLedgerWatchInterval is how often serve counts its ledger's
// archives per state (archive_ledger_archives): one grouped read of a
// table of one row per archive, so a hold, a date or a purge shows on the
// dashboard within a minute.
const DefaultLedgerWatchInterval = time.Minute

// ledgerWatch is serve's ledger counter (nil when the archiver is off):
// every DefaultLedgerWatchInterval it exports each archived table's
// archives per lifecycle state.
func (r *runtime[T]) ledgerWatch(lm *lifecycle.Manager, reg prometheus.Registerer) (func(context.Context) error, error) {
	if lm == nil {
		return nil, nil
	}
	m, err := metrics.NewLedger(reg)
	if err != nil {
		return nil, err
	}
	m.Known(archiveTableNames(r.spec, r.cfg), lifecycle.States())
	return func(ctx context.Context) error {
		t := time.NewTicker(DefaultLedgerWatchInterval)
		defer t.Stop()
		for {
			states, err := lm.LedgerStates(ctx)
			switch {
			case ctx.Err() != nil:
				return nil
			case err != nil:
				r.logger.WarnContext(ctx, "could not count the ledger's archives; retried next interval", slog.Any("error", err))
			default:
				for table, byState := range states {
					for state, n := range byState {
						m.Archives.WithLabelValues(table, state).Set(float64(n))
					}
				}
			}
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
	}, nil
}

// DefaultLockReconcileInterval is how often the store's legal holds are
// reconciled with the ledger when scheduled verification is off: hourly,
// so a hold the store missed is enforced within the hour.
const DefaultLockReconcileInterval = time.Hour

// archiveReader is an archiving service's reader of its archives (nil
// when the archiver is disabled) and the verification metrics.
type archiveReader struct {
	reader  *archiveread.Reader
	metrics *metrics.Verify
}

// archiveReader builds the reader and, with archive.verify_interval_hours,
// the scheduled verifier (nil: none).
func (r *runtime[T]) archiveReader(ctx context.Context, pool *pgxpool.Pool, arch *archiver, reg prometheus.Registerer) (*archiveReader, func(context.Context) error, error) {
	as, ok := r.archiveSettings()
	if !ok {
		return &archiveReader{}, nil, nil
	}
	vm, err := metrics.NewVerify(reg)
	if err != nil {
		return nil, nil, err
	}
	vm.Known(archiveread.Kinds())
	out := &archiveReader{metrics: vm}
	// Without a scheduled verifier (no store, or verify_interval_hours 0)
	// no "last verify" is exported: its 0 would read "never verified" and
	// fire ArchiveVerifyStale for a verification nobody asked for.
	unscheduled := func() { reg.Unregister(vm.Last) }
	if arch.store == nil {
		unscheduled()
		return out, nil, nil
	}
	key, err := r.subjectKey(ctx, pool, as)
	if err != nil {
		return nil, nil, err
	}
	out.reader = archiveread.New(pool, arch.store, r.spec.Name, archiveTables(r.spec, r.cfg)).WithSubjectKey(key)
	if as.VerifyIntervalHours == 0 {
		unscheduled()
		return out, nil, nil
	}
	every := time.Duration(as.VerifyIntervalHours) * time.Hour
	return out, func(ctx context.Context) error {
		out.reader.RunVerifier(ctx, every, vm, r.logger)
		return nil
	}, nil
}
