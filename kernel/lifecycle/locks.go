package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/store"
)

// reconcilePage is the held archives one reconciliation query reads.
const reconcilePage = 500

// LockReport is what a store-lock reconciliation found and did.
type LockReport struct {
	// Held is the number of held, unpurged archives checked.
	Held int `json:"held"`
	// Drift is the number of their objects found without the legal hold
	// (each then locked), Locked the number locked now.
	Drift  int `json:"drift"`
	Locked int `json:"locked"`
	// Missing is the objects that have no current version (an overwrite's
	// delete marker, say: verify restores them).
	Missing int `json:"missing"`
}

// ReconcileLocks makes the store's Object Lock legal holds follow the
// ledger: it recomputes legal_hold from the active holds (so that a hold
// placed while the store was unreachable or the archiver disabled takes
// effect), then turns the legal hold on for the current version of every
// held archive's data and manifest objects that lacks it, counting each
// as drift (archive_hold_lock_drift, and a WARN naming the archive). A
// bucket without Object Lock has nothing to reconcile.
func (m *Manager) ReconcileLocks(ctx context.Context) (LockReport, error) {
	var rep LockReport
	if !m.cfg.ObjectLock {
		return rep, nil
	}
	err := pgx.BeginFunc(ctx, m.pool, func(tx pgx.Tx) error {
		_, _, err := refresh(ctx, queries.New(tx))
		return err
	})
	if err != nil {
		return rep, fmt.Errorf("reconcile holds: %w", err)
	}
	var errs []error
	after := uuid.Nil
	for {
		rows, err := queries.New(m.pool).HeldArchives(ctx, queries.HeldArchivesParams{After: pgUUID(after), RowLimit: reconcilePage})
		if err != nil {
			return rep, fmt.Errorf("reconcile holds: list held archives: %w", err)
		}
		for _, r := range rows {
			rep.Held++
			id := uuid.UUID(r.ArchiveID.Bytes)
			for _, key := range []string{r.DataKey, r.ManifestKey} {
				if err := m.lockObject(ctx, id, key, &rep); err != nil {
					errs = append(errs, err)
				}
			}
			after = id
		}
		if len(rows) < reconcilePage {
			break
		}
	}
	if m.metrics != nil {
		m.metrics.HoldLockDrift.Set(float64(rep.Drift))
	}
	if err := errors.Join(errs...); err != nil {
		return rep, fmt.Errorf("reconcile holds: %w", err)
	}
	return rep, nil
}

// lockObject puts one held archive's object under the store's legal hold
// when it is not, counting it as drift.
func (m *Manager) lockObject(ctx context.Context, id uuid.UUID, key string, rep *LockReport) error {
	on, err := m.store.LegalHold(ctx, key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		rep.Missing++
		m.logger.WarnContext(ctx, "held archive object has no current version; verify restores it", slog.String("archive_id", id.String()), slog.String("key", key))
		return nil
	case err != nil || on:
		return err
	}
	rep.Drift++
	m.logger.WarnContext(ctx, "held archive object was not under the store's legal hold; locking it", slog.String("archive_id", id.String()), slog.String("key", key))
	if err := m.store.SetLegalHold(ctx, key, true); err != nil {
		return err
	}
	rep.Locked++
	return nil
}
