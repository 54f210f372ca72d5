package archiveread

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/journal"
	"github.com/craig/retention/kernel/lease"
	"github.com/craig/retention/kernel/store"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
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
//
// forgotten is what the acts the database does not know yet (a purge or
// an expungement the journal holds) destroyed and wrote: what versions of
// the keys they destroyed are left are destroyed without putting anything
// back, so no purged or expunged row comes back; a successor they name
// whose line reaches an archive the ledger books is left for its entry to
// book again.
func (r *Reader) PutBackCopies(ctx context.Context, actor string, forgotten journal.Forgotten) (GCReport, error) {
	return r.leased(ctx, func(ctx context.Context) (GCReport, error) {
		return r.destroyCopies(ctx, actor, copyRules{putBack: true, forgotten: forgotten})
	})
}

// DestroyCopies destroys each unknown pass archive all of whose rows are in
// their hot table (putting nothing back: it leaves the others, listed in
// Left) and each unknown expungement successor: an object whose archive id is a version-5 UUID
// (derived from an order and the archive it rewrites) that no ledger row
// names was written by an order's try that was never booked and that the
// database no longer knows of (its intent lost with a restore). Its rows
// are a subset of the archive it rewrites, which the ledger books (or
// whose rows are since destroyed): a copy, never the only one.
func (r *Reader) DestroyCopies(ctx context.Context, actor string) (GCReport, error) {
	return r.leased(ctx, func(ctx context.Context) (GCReport, error) {
		return r.destroyCopies(ctx, actor, copyRules{successors: true})
	})
}

// DestroyCopiesLeased is DestroyCopies for a caller that holds the archive
// lease (an expungement, before it rewrites: a copy no ledger row names is
// one no rewrite would reach). It never writes a row into the database
// from the store: an object no ledger row names may be anyone's.
func (r *Reader) DestroyCopiesLeased(ctx context.Context, actor string) (GCReport, error) {
	return r.destroyCopies(ctx, actor, copyRules{successors: true})
}

// copyRules say which unknown objects a copies' destruction takes:
// putBack, pass archives after their missing rows are put back (else only
// those all of whose rows are hot); successors, unknown expungement
// successors; forgotten, what the acts the database does not know yet
// destroyed and wrote.
type copyRules struct {
	putBack    bool
	successors bool
	forgotten  journal.Forgotten
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

func (r *Reader) destroyCopies(ctx context.Context, actor string, rules copyRules) (GCReport, error) {
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
		case rules.forgotten.Destroyed[o.Key]: // its act destroyed it: what is left goes, nothing comes back
		case isSuccessorKey(data) && r.successorOfKnown(ctx, data, rules.forgotten):
			if !rules.successors {
				continue // the journal may book it again
			}
		case rules.putBack:
			n, err := r.putBack(ctx, o.Key)
			if err != nil {
				rep.Left = append(rep.Left, o.Key)
				continue // left for gc: not rows of its table
			}
			rep.PutBack += n
		default:
			if hot, err := r.allHot(ctx, o.Key); err != nil || !hot {
				rep.Left = append(rep.Left, o.Key)
				continue // the only copy of some row, or not rows of its table
			}
		}
		for _, key := range []string{o.Key, data + ".manifest.json"} {
			if key != o.Key && !unknown[key] && !rules.forgotten.Destroyed[key] {
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

// successorOfKnown reports whether the unknown object stem (without its
// suffix) is an expungement successor of an archive the ledger knows: its
// manifest names the archive it supersedes and the order, the object's id
// is the one the order derives from them, and the ledger books that
// archive (its rows are there, or were destroyed since) or, through the
// successors the journal's orders wrote, one it descends from, or an
// archive a journaled order superseded (booked after the backup: the
// journal books its line again). An object named
// like a successor without such a manifest is judged like any other.
func (r *Reader) successorOfKnown(ctx context.Context, stem string, forgotten journal.Forgotten) bool {
	b, err := r.store.GetFirstVersion(ctx, stem+".manifest.json")
	if err != nil {
		return false
	}
	var m struct {
		ArchiveID  uuid.UUID `json:"archive_id"`
		Supersedes struct {
			ArchiveID uuid.UUID `json:"archive_id"`
			ExpungeID uuid.UUID `json:"expunge_id"`
		} `json:"supersedes"`
	}
	if json.Unmarshal(b, &m) != nil || m.ArchiveID != uuid.NewSHA1(m.Supersedes.ExpungeID, m.Supersedes.ArchiveID[:]) ||
		!strings.HasSuffix(stem, "/"+m.ArchiveID.String()) {
		return false
	}
	_, known, err := forgotten.Ancestor(m.Supersedes.ArchiveID, func(id uuid.UUID) (bool, error) {
		if forgotten.Superseded[id] { // an archive a journaled order rewrote
			return true, nil
		}
		return queries.New(r.pool).LedgerHas(ctx, pgtype.UUID{Bytes: id, Valid: true})
	})
	return err == nil && known
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
	spec, docs, err := r.docsOf(ctx, key)
	if err != nil || len(docs) == 0 {
		return 0, err
	}
	return archive.PutBack(ctx, r.pool, spec, docs)
}

// docsOf reads the data object key (its first version) as lines of the
// archived table its key names.
func (r *Reader) docsOf(ctx context.Context, key string) (archive.TableSpec, []string, error) {
	rest := strings.TrimPrefix(key, store.Prefix+r.service+"/")
	table, _, _ := strings.Cut(rest, "/")
	spec, ok := r.tables[table]
	if !ok {
		return spec, nil, fmt.Errorf("table %q is not archived by this service", table)
	}
	b, err := r.store.GetFirstVersion(ctx, key)
	if err != nil {
		return spec, nil, err
	}
	var docs []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, len(b)+1)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" {
			docs = append(docs, line)
		}
	}
	return spec, docs, sc.Err()
}

// allHot reports whether every row of the data object key (its first
// version) is in the hot table its key names.
func (r *Reader) allHot(ctx context.Context, key string) (bool, error) {
	spec, docs, err := r.docsOf(ctx, key)
	if err != nil || len(docs) == 0 {
		return err == nil, err
	}
	ids := make([]uuid.UUID, 0, len(docs))
	for _, d := range docs {
		var row struct {
			ID uuid.UUID `json:"id"`
		}
		if err := json.Unmarshal([]byte(d), &row); err != nil {
			return false, fmt.Errorf("a line of %s: %w", key, err)
		}
		ids = append(ids, row.ID)
	}
	var n int
	q := "SELECT count(*) FROM " + pgx.Identifier{spec.Table}.Sanitize() + " WHERE id = ANY ($1)"
	if err := r.pool.QueryRow(ctx, q, ids).Scan(&n); err != nil {
		return false, err
	}
	return n == len(ids), nil
}
