package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/lifecycle"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/pgsession"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/services/rules"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// purgeArchives is how many archives one purge round destroys: the API's
// largest call.
const purgeArchives = lifecycle.MaxPurgeLimit

// runPurge measures the purge: purgeArchives due archives (a ledger row
// and both objects each, on the real S3 server) destroyed by one
// lifecycle purge call (re-check, manifest and data deletes, stamp, then
// the certificate and the purges row), in Rounds rounds.
func (r *runner) runPurge(ctx context.Context) (*PurgeResult, error) {
	sets := rules.Spec().MigrationSets()
	tpl := r.srv.name("purge")
	if err := r.buildTemplate(ctx, tpl, sets, func(*pgx.Conn) error { return nil }); err != nil {
		return nil, err
	}
	st, err := store.Open(ctx, r.cfg.S3URL)
	if err != nil {
		return nil, fmt.Errorf("open the S3 store (start it with `go tool mage store:up`): %w", err)
	}
	defer func() { _ = st.Close() }()
	res := &PurgeResult{Archives: purgeArchives}
	var rates []float64
	for round := range r.cfg.Rounds {
		run, err := r.purgeOnce(ctx, st, tpl, round)
		if err != nil {
			return nil, fmt.Errorf("purge round %d: %w", round+1, err)
		}
		r.cfg.logf("purge round %d/%d: %d archives destroyed in %.3f s, %.0f archives/s", round+1, r.cfg.Rounds, run.Archives, run.Seconds, run.ArchivesPerSec)
		res.Runs = append(res.Runs, run)
		rates = append(rates, run.ArchivesPerSec)
	}
	res.ArchivesPerSec = round3(median(rates))
	return res, nil
}

// purgeOnce books purgeArchives due archives on a fresh copy, then times
// one purge of them.
func (r *runner) purgeOnce(ctx context.Context, st *store.Store, tpl string, round int) (PurgeRun, error) {
	run := PurgeRun{Round: round + 1}
	db, err := r.srv.copyOf(ctx, tpl, "purge", round)
	if err != nil {
		return run, err
	}
	defer r.discard(db.name)
	pool, err := pgsession.NewPool(ctx, db.url)
	if err != nil {
		return run, err
	}
	defer pool.Close()
	service := "bench-purge-" + randomSuffix()
	if err := bookDue(ctx, pool, st, service, purgeArchives); err != nil {
		return run, err
	}
	pm, err := metrics.NewPurge(prometheus.NewRegistry())
	if err != nil {
		return run, err
	}
	mgr, err := lifecycle.New(pool, st, lifecycle.Config{Service: service}, slog.New(slog.NewTextHandler(io.Discard, nil)), pm)
	if err != nil {
		return run, err
	}
	start := time.Now()
	res, err := mgr.Purge(ctx, purgeArchives, false, "bench:purge")
	elapsed := time.Since(start)
	if err != nil {
		return run, err
	}
	if len(res.Purged) != purgeArchives {
		return run, fmt.Errorf("purged %d archives, want %d", len(res.Purged), purgeArchives)
	}
	_, _ = st.DeleteIfExists(ctx, res.Certificate)
	run.Archives, run.Seconds = len(res.Purged), elapsed.Seconds()
	run.ArchivesPerSec = float64(run.Archives) / run.Seconds
	return run, nil
}

// bookDue books n archives dated yesterday: both objects in the store and a
// ledger row each, through the kernel's bookkeeping.
func bookDue(ctx context.Context, pool interface {
	Begin(context.Context) (pgx.Tx, error)
}, st *store.Store, service string, n int) error {
	ident := st.Identity()
	for range n {
		id := uuid.Must(uuid.NewV7())
		keys, err := store.NewArchiveKeys(service, "rule_evaluations", time.Now(), id.String())
		if err != nil {
			return err
		}
		data := []byte("{}\n")
		if err := st.PutCreate(ctx, keys.Data, data, store.ContentTypeNDJSON); err != nil {
			return err
		}
		if err := st.PutCreate(ctx, keys.Manifest, []byte("{}"), store.ContentTypeJSON); err != nil {
			return err
		}
		at := time.Now().UTC().Add(-400 * 24 * time.Hour).Truncate(time.Microsecond)
		m := archive.Manifest{ArchiveID: id, Table: evaluationsTable, DataKey: keys.Data, ManifestKey: keys.Manifest,
			DataSHA256: archive.SHA256Hex(data), RecordCount: 1, Endpoint: ident.Endpoint, Bucket: ident.Bucket,
			FirstRecordID: id, LastRecordID: id, FirstRecordAt: at, LastRecordAt: at, HotWindowDays: 90, ArchivedAt: time.Now().UTC()}
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		err = rules.Spec().Archive.Bookkeeper.Bookkeep(ctx, tx, m, archive.SystemActor)
		if err == nil {
			err = lifecycle.ScheduleRetention(ctx, tx, id, 1)
		}
		if err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
	}
	return nil
}
