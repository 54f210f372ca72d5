package archiveread

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/craig/retention/kernel/lease"
	"github.com/craig/retention/kernel/store"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// DestroyHotCopies destroys, every version, each archive object under the
// service's prefix that no local ledger row names and all of whose rows
// are in their hot table (with its manifest): such an object is a copy of
// rows the database holds, never the only one. After a database restore
// that is what an archive booked after the backup is (its rows are hot
// again) and what an upload whose intent the restore forgot is; destroying
// them leaves no copy of a case an expungement re-applied later removes
// from the hot table. An object with any row not hot (a successor of an
// order the journal does not know) is left, for gc. It runs under the
// archive lease (no pass is between its puts and its booking), and is
// logged and announced like a gc.
func (r *Reader) DestroyHotCopies(ctx context.Context, actor string) (GCReport, error) {
	rep := GCReport{Orphans: []string{}, Deleted: []string{}}
	acquired, err := lease.TryRun(ctx, r.pool, lease.ArchiveKey, func(ctx context.Context, _ *pgx.Conn) error {
		objs, err := r.orphanObjects(ctx)
		if err != nil {
			return err
		}
		unknown := map[string]bool{}
		for _, o := range objs {
			unknown[o.Key] = true
		}
		for _, o := range objs {
			data, ok := strings.CutSuffix(o.Key, ".ndjson")
			if !ok {
				continue
			}
			rep.Orphans = append(rep.Orphans, o.Key)
			if hot, err := r.allHot(ctx, o.Key); err != nil || !hot {
				continue // left for gc: not known to be a copy
			}
			for _, key := range []string{o.Key, data + ".manifest.json"} {
				if key != o.Key && !unknown[key] {
					continue
				}
				_, err := r.store.DestroyAllVersions(ctx, key)
				if errors.Is(err, store.ErrLocked) { // a booking that rolled back had locked it
					_, err = r.store.DestroyReleased(ctx, key)
				}
				if err != nil && !errors.Is(err, store.ErrNotFound) {
					return fmt.Errorf("destroy %s: %w", key, err)
				}
				rep.Deleted = append(rep.Deleted, key)
			}
		}
		if len(rep.Deleted) == 0 {
			return nil
		}
		return r.recordGC(ctx, actor, 0, rep.Deleted)
	})
	if err == nil && !acquired {
		return rep, ErrGCBusy
	}
	return rep, err
}

// allHot reports whether every row of the data object key (its first
// version) is in the hot table its key names.
func (r *Reader) allHot(ctx context.Context, key string) (bool, error) {
	rest := strings.TrimPrefix(key, store.Prefix+r.service+"/")
	table, _, _ := strings.Cut(rest, "/")
	spec, ok := r.tables[table]
	if !ok {
		return false, fmt.Errorf("table %q is not archived by this service", table)
	}
	b, err := r.store.GetFirstVersion(ctx, key)
	if err != nil {
		return false, err
	}
	var ids []uuid.UUID
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, len(b)+1)
	for sc.Scan() {
		var row struct {
			ID uuid.UUID `json:"id"`
		}
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			return false, fmt.Errorf("a line of %s: %w", key, err)
		}
		ids = append(ids, row.ID)
	}
	if len(ids) == 0 {
		return true, nil // holds no row
	}
	var n int
	q := "SELECT count(*) FROM " + pgx.Identifier{spec.Table}.Sanitize() + " WHERE id = ANY ($1)"
	if err := r.pool.QueryRow(ctx, q, ids).Scan(&n); err != nil {
		return false, err
	}
	return n == len(ids), nil
}
