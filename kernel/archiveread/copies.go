package archiveread

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/lease"
	"github.com/craig/retention/kernel/store"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// PutBackCopies destroys, every version, each archive object under the
// service's prefix that no local ledger row names and that no expungement
// wrote (with its manifest), after putting back into its hot table every
// row of it the table lacks: such an object is a pass's archive whose
// booking the database does not hold. After a database restore that is
// an archive booked after the backup (its rows written before the backup
// are hot again; those written after exist only in it) and an upload
// whose intent the restore forgot; with their rows hot, no copy is left
// of a case an expungement re-applied later removes, and no row is lost.
// An expungement's successor is left (the journal may book it again:
// DestroyCopies, after the journal is re-applied), and so is an object
// that does not read as rows of its table (for gc). It runs under the
// archive lease (no pass is between its puts and its booking), and is
// logged and announced like a gc.
func (r *Reader) PutBackCopies(ctx context.Context, actor string) (GCReport, error) {
	return r.leased(ctx, func(ctx context.Context) (GCReport, error) { return r.destroyCopies(ctx, actor, false) })
}

// DestroyCopies is PutBackCopies that also destroys each unknown
// expungement successor: an object whose archive id is a version-5 UUID
// (derived from an order and the archive it rewrites) that no ledger row
// names was written by an order's try that was never booked and that the
// database no longer knows of (its intent lost with a restore). Its rows
// are a subset of the archive it rewrites, which the ledger books (or
// whose rows are since destroyed): a copy, never the only one.
func (r *Reader) DestroyCopies(ctx context.Context, actor string) (GCReport, error) {
	return r.leased(ctx, func(ctx context.Context) (GCReport, error) { return r.destroyCopies(ctx, actor, true) })
}

// DestroyCopiesLeased is DestroyCopies for a caller that holds the archive
// lease (an expungement, before it rewrites: a copy no ledger row names is
// one no rewrite would reach).
func (r *Reader) DestroyCopiesLeased(ctx context.Context, actor string) (GCReport, error) {
	return r.destroyCopies(ctx, actor, true)
}

func (r *Reader) leased(ctx context.Context, f func(context.Context) (GCReport, error)) (GCReport, error) {
	rep := GCReport{Orphans: []string{}, Deleted: []string{}}
	acquired, err := lease.TryRun(ctx, r.pool, lease.ArchiveKey, func(ctx context.Context, _ *pgx.Conn) error {
		var err error
		rep, err = f(ctx)
		return err
	})
	if err == nil && !acquired {
		return rep, ErrGCBusy
	}
	return rep, err
}

func (r *Reader) destroyCopies(ctx context.Context, actor string, successors bool) (GCReport, error) {
	rep := GCReport{Orphans: []string{}, Deleted: []string{}}
	objs, err := r.orphanObjects(ctx)
	if err != nil {
		return rep, err
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
		switch {
		case isSuccessorKey(data):
			if !successors {
				continue // the journal may book it again
			}
		default:
			n, err := r.putBack(ctx, o.Key)
			if err != nil {
				rep.Left = append(rep.Left, o.Key+": "+err.Error())
				continue // left for gc: not rows of its table
			}
			rep.PutBack += n
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
				return rep, fmt.Errorf("destroy %s: %w", key, err)
			}
			rep.Deleted = append(rep.Deleted, key)
		}
	}
	if len(rep.Deleted) == 0 {
		return rep, nil
	}
	return rep, r.recordGC(ctx, actor, 0, rep.Deleted)
}

// isSuccessorKey reports whether an archive key (without its suffix) names
// an expungement successor: its archive id is a version-5 UUID, which only
// courtorder's successor ids are (a pass's are version 7).
func isSuccessorKey(stem string) bool {
	i := strings.LastIndexByte(stem, '/')
	id, err := uuid.Parse(stem[i+1:])
	return err == nil && id.Version() == 5
}

// putBack inserts into the hot table its key names every row of the data
// object key (its first version) the table lacks, and returns how many.
func (r *Reader) putBack(ctx context.Context, key string) (int64, error) {
	rest := strings.TrimPrefix(key, store.Prefix+r.service+"/")
	table, _, _ := strings.Cut(rest, "/")
	spec, ok := r.tables[table]
	if !ok {
		return 0, fmt.Errorf("table %q is not archived by this service", table)
	}
	b, err := r.store.GetFirstVersion(ctx, key)
	if err != nil {
		return 0, err
	}
	var docs []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, len(b)+1)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" {
			docs = append(docs, line)
		}
	}
	if len(docs) == 0 {
		return 0, nil // holds no row
	}
	return archive.PutBack(ctx, r.pool, spec, docs)
}
