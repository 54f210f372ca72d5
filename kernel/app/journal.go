package app

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/archiveread"
	"github.com/craig/retention/kernel/courtorder"
	"github.com/craig/retention/kernel/disposition"
	"github.com/craig/retention/kernel/journal"
	"github.com/craig/retention/kernel/lifecycle"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/reconcile"
	"github.com/craig/retention/kernel/schedule"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/kernel/store"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// RestoredBehindJournal names the invariant (retention_invariant_violations
// {invariant}) and the API error of a database behind the store's journal.
const RestoredBehindJournal = "restored_behind_journal"

// openJournal builds the service's journal over its database and store and
// compares them (checkJournal).
func (r *runtime[T]) openJournal(ctx context.Context, pool *pgxpool.Pool, st *store.Store) (*journal.Journal, error) {
	j := journal.New(pool, st, r.spec.Name, &journal.Gate{})
	if _, err := r.checkJournal(ctx, j); err != nil {
		return nil, err
	}
	return j, nil
}

// checkJournal compares the database's journal with the store's (setting
// the journal's gate) and, when the database is not behind, writes to the
// store the entries it lacks. A database behind the store is logged at
// ERROR: its acts since the backup are forgotten until `reconcile`.
func (r *runtime[T]) checkJournal(ctx context.Context, j *journal.Journal) (journal.State, error) {
	st, err := j.Compare(ctx)
	if err != nil {
		return st, err
	}
	if st.Behind() {
		r.logger.ErrorContext(ctx, RestoredBehindJournal+": the store's journal holds acts the database lacks (it was restored from a backup); archive passes, purges, orders and reads are refused until `"+r.spec.Name+" reconcile`",
			slog.Int("missing", len(st.Missing)), slog.Int64("first_missing", st.Missing[0]), slog.Int64("database_seq", st.DatabaseSeq), slog.Int64("store_seq", st.StoreSeq))
		return st, nil
	}
	if n, err := j.Publish(ctx); err != nil {
		r.logger.ErrorContext(ctx, "acts journaled in the database could not be written to the store yet; retried next interval", slog.Any("error", err))
	} else if n > 0 {
		r.logger.InfoContext(ctx, "journal entries written to the store", slog.Int("entries", n))
	}
	return st, nil
}

// BehindRecheckInterval is how often serve compares the journals again
// while the database is behind the store's (or the comparison failed):
// `reconcile` runs beside the service, which reopens within a minute.
const BehindRecheckInterval = time.Minute

// journalWatch is serve's journal check (nil without a journal): at boot,
// then every verify interval (every DefaultLockReconcileInterval when
// scheduled verification is off), it compares the journals and exports
// restored_behind_journal (the number of acts the database lacks).
func (r *runtime[T]) journalWatch(arch *archiver, m *metrics.Invariants) func(context.Context) error {
	as, ok := r.archiveSettings()
	if !ok || arch.journal == nil {
		return nil
	}
	every := DefaultLockReconcileInterval
	if as.VerifyIntervalHours > 0 {
		every = time.Duration(as.VerifyIntervalHours) * time.Hour
	}
	return func(ctx context.Context) error {
		for {
			st, err := r.checkJournal(ctx, arch.journal)
			switch {
			case ctx.Err() != nil:
				return nil
			case err != nil:
				r.logger.ErrorContext(ctx, "the journals could not be compared; retried next interval", slog.Any("error", err))
			default:
				m.Violations.WithLabelValues(RestoredBehindJournal).Set(float64(len(st.Missing)))
			}
			wait := every
			if st.Behind() || err != nil {
				wait = min(every, BehindRecheckInterval) // reopen soon after `reconcile`
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
		}
	}
}

// reconcileCmd is `<svc> reconcile [--json]`: after a database restore,
// re-applies every act the store's journal holds and the database lacks,
// in order, each in its own transaction with its entry adopted, so
// running it again changes nothing. It needs the store and the subject
// key, not the archiver's consent.
type reconcileCmd[T any] struct {
	asJSON bool
}

func (c *reconcileCmd[T]) define(fs *flag.FlagSet) {
	fs.BoolVar(&c.asJSON, "json", false, "print the report as one JSON object")
}

func (c *reconcileCmd[T]) check() error { return nil }

func (c *reconcileCmd[T]) run(ctx context.Context, rt *runtime[T]) (int, error) {
	as, _ := rt.archiveSettings()
	if as.Store.URL == "" {
		fmt.Fprintf(rt.stderr, "%s reconcile: refused: set archive.store.url (env %s)\n", rt.spec.Name, settings.EnvVar(rt.spec.Name, "archive.store.url"))
		return ExitDisabled, nil
	}
	pool, err := rt.pool(ctx)
	if err != nil {
		return ExitFail, err
	}
	defer pool.Close()
	key, err := rt.subjectKey(ctx, pool, as)
	if err != nil {
		return ExitFail, err
	}
	bctx, cancel := context.WithTimeout(ctx, archive.BootTimeout)
	st, err := store.Open(bctx, as.Store.URL, store.WithRequestTimeout(as.Store.RequestTimeout))
	if err != nil {
		cancel()
		return ExitFail, fmt.Errorf("open the store (archive.store.url, env %s): %w", settings.EnvVar(rt.spec.Name, "archive.store.url"), err)
	}
	defer func() { _ = st.Close() }()
	locked, err := st.ObjectLock(bctx)
	cancel()
	if err != nil {
		return ExitFail, err
	}
	pm, err := metrics.NewPurge(prometheus.NewRegistry())
	if err != nil {
		return ExitFail, err
	}
	tables := archiveTables(rt.spec, rt.cfg)
	lm, err := lifecycle.New(pool, st, lifecycle.Config{Service: rt.spec.Name, ObjectLock: locked, Tables: archiveTableNames(rt.spec, rt.cfg),
		SubjectKey: key, SubjectTables: subjectTableNames(tables)}, rt.logger, pm)
	if err != nil {
		return ExitFail, err
	}
	orders, err := courtorder.New(pool, st, courtorder.Config{Service: rt.spec.Name, Tables: tables, Key: key, ObjectLock: locked,
		Bookkeep: rt.scheduled(rt.spec.Archive.Bookkeeper.Bookkeep)}, rt.logger)
	if err != nil {
		return ExitFail, err
	}
	reader := archiveread.New(pool, st, rt.spec.Name, tables).WithSubjectKey(key)
	schedules := schedule.New(pool, scheduleSeries(tables))
	batches := disposition.NewFinder(pool, key, tables, schedules).WithExecution(disposition.Execution{Service: rt.spec.Name, Orders: orders, Store: st})
	rep, err := reconcile.Reconciler{Journal: journal.New(pool, st, rt.spec.Name, &journal.Gate{}), Lifecycle: lm, Orders: orders, Reader: reader,
		Schedules: schedules, Clocks: schedule.NewClocks(pool, key), Dispositions: batches,
		Logger: rt.logger, Actor: CLIActor("reconcile")}.Run(ctx)
	if err != nil {
		return ExitFail, err
	}
	return c.report(rt, rep)
}

func (c *reconcileCmd[T]) report(rt *runtime[T], rep reconcile.Report) (int, error) {
	code := ExitOK
	if rep.After.Behind() {
		code = ExitFail
	}
	if c.asJSON {
		return code, json.NewEncoder(rt.stdout).Encode(rep)
	}
	if len(rep.Reapplied) == 0 {
		fmt.Fprintf(rt.stdout, "nothing to reconcile: the database holds every act of the store's journal (entry %d)\n", rep.After.StoreSeq)
		return code, nil
	}
	var acts []string
	seen := map[journal.Act]bool{}
	for _, r := range rep.Reapplied { // in the order they first came
		if !seen[r.Act] {
			seen[r.Act] = true
			acts = append(acts, fmt.Sprintf("%d %s", rep.Acts[r.Act], r.Act))
		}
	}
	fmt.Fprintf(rt.stdout, "re-applied: %d act(s) (%s), entries %d..%d\nbehind: %v\n", len(rep.Reapplied), strings.Join(acts, ", "),
		rep.Reapplied[0].Seq, rep.Reapplied[len(rep.Reapplied)-1].Seq, rep.After.Behind())
	return code, nil
}
