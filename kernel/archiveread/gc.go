package archiveread

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/lease"
	"github.com/craig/retention/kernel/outbox"
	"github.com/craig/retention/kernel/store"
	"github.com/jackc/pgx/v5"
)

// Bounds of an orphan GC.
const (
	// MinGCAgeDays: an archive pass's objects are orphans until its ledger
	// row commits, seconds later; a day keeps every pass in flight safe.
	MinGCAgeDays = 1
	// MaxGCAgeDays is the longest bound (ten years).
	MaxGCAgeDays = 3650
)

// ErrGCBusy: an archive pass or purge holds the archive lease.
var ErrGCBusy = errors.New("archiveread: the archive lease is held; orphan GC waits for the pass to end")

// ErrGCInvalid is a bad bound.
var ErrGCInvalid = errors.New("archiveread: invalid orphan GC request")

// GCReport is an orphan GC's result.
type GCReport struct {
	DryRun  bool     `json:"dry_run"`
	Orphans []string `json:"orphans"`
	Deleted []string `json:"deleted"`
	// PutBack counts the rows a copy's destruction put back into their hot
	// table first (PutBackCopies, DestroyCopies: rows a restore lost).
	PutBack int64 `json:"put_back,omitempty"`
	// Left are the unknown data objects a copies' destruction left: the
	// only copy of some row (DestroyCopies), or not rows of their table.
	Left []string `json:"left,omitempty"`
}

// CollectOrphans destroys, every version (or, dry, lists) the archive
// objects under the service's prefix that no LOCAL ledger row names and
// that are older than olderThanDays, under the archive lease (no pass is
// between its puts and its ledger row); never a key a ledger row names.
// With only, it destroys only those of them (the keys an operator was
// shown by a dry run: one that is no longer an orphan, or younger, is
// left). It is logged and announced (<service>.archive_orphans_collected),
// attributed to actor.
func (r *Reader) CollectOrphans(ctx context.Context, olderThanDays int, dryRun bool, actor string, only ...string) (GCReport, error) {
	if olderThanDays < MinGCAgeDays || olderThanDays > MaxGCAgeDays {
		return GCReport{}, fmt.Errorf("%w: older_than_days %d outside %d..%d", ErrGCInvalid, olderThanDays, MinGCAgeDays, MaxGCAgeDays)
	}
	rep := GCReport{DryRun: dryRun, Orphans: []string{}, Deleted: []string{}}
	acquired, err := lease.TryRun(ctx, r.pool, lease.ArchiveKey, func(ctx context.Context, _ *pgx.Conn) error {
		objs, err := r.orphanObjects(ctx)
		if err != nil {
			return err
		}
		cutoff := r.now().Add(-time.Duration(olderThanDays) * 24 * time.Hour)
		for _, o := range objs {
			if o.ModTime.After(cutoff) || (len(only) > 0 && !slices.Contains(only, o.Key)) {
				continue
			}
			rep.Orphans = append(rep.Orphans, o.Key)
			if dryRun {
				continue
			}
			// Every version: a plain delete in a versioned bucket only hides
			// the object behind a delete marker, and its rows stay.
			_, err := r.store.DestroyAllVersions(ctx, o.Key)
			if errors.Is(err, store.ErrLocked) { // a booking that rolled back had locked it: no ledger row holds it
				_, err = r.store.DestroyReleased(ctx, o.Key)
			}
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
			rep.Deleted = append(rep.Deleted, o.Key)
		}
		if dryRun || len(rep.Deleted) == 0 {
			return nil
		}
		return r.recordGC(ctx, actor, olderThanDays, rep.Deleted)
	})
	if err == nil && !acquired {
		return rep, ErrGCBusy
	}
	return rep, err
}

// recordGC logs and announces the deleted orphans.
func (r *Reader) recordGC(ctx context.Context, actor string, days int, deleted []string) error {
	doc, err := json.Marshal(map[string]any{"actor": actor, "older_than_days": days, "deleted": deleted, "at": time.Now().UTC().Format(time.RFC3339Nano)})
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		if err := queries.New(tx).LogLifecycle(ctx, queries.LogLifecycleParams{Actor: actor, Action: "archive_orphans_collected", Detail: doc}); err != nil {
			return err
		}
		_, err := outbox.Stage(ctx, tx, outbox.Envelope{EventType: r.service + ".archive_orphans_collected", Payload: doc})
		return err
	})
}
