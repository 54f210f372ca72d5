package bench

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/craig/retention/kernel/store"
)

// Archive comparison configurations.
const (
	// cfgFloor is the archive pass's work done by hand (archiveFloorSQL):
	// the floor the pass is held against.
	cfgFloor = "floor_by_hand"
	// cfgArchiveSmallBatch is security's pass at the specification's batch
	// size (1,000), beside its default (10,000).
	cfgArchiveSmallBatch = "archive_pass_batch_1000"
	specBatchSize        = 1000
)

// floorOnce archives the target's aged rows on a fresh copy the way a
// hand-written job with no safety would, on one connection, per batch: COPY
// of the batch out (id and to_jsonb, keyset order), one PUT of the bytes,
// then DELETE by id and INSERT of the ledger row in one transaction. No
// hash, no manifest, no upload intent, no hold check, no event, no
// read-back, no pipelining. It deletes the objects it wrote.
func (r *runner) floorOnce(ctx context.Context, tg archiveTarget, st *store.Store, tpl string, round int) (ArchiveRun, error) {
	run := ArchiveRun{Config: cfgFloor, Round: round + 1}
	db, err := r.srv.copyOf(ctx, tpl, tg.name+"_floor", round)
	if err != nil {
		return run, err
	}
	defer r.discard(db.name)
	prefix := store.Prefix + "bench-floor-" + randomSuffix() + "/" + tg.table + "/"
	var keys []string
	defer func() { _ = deleteObjects(context.WithoutCancel(ctx), st, keys) }()
	err = withConn(ctx, db.url, func(conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, floorCursorTable); err != nil {
			return err
		}
		start := time.Now()
		for {
			n, key, err := floorBatch(ctx, conn, tg, st, prefix, len(keys))
			if err != nil {
				return err
			}
			if n == 0 {
				break
			}
			keys = append(keys, key)
			run.Rows += int64(n)
			run.Archives++
		}
		run.Seconds = time.Since(start).Seconds()
		return nil
	})
	if err != nil {
		return run, err
	}
	if run.Rows != int64(r.cfg.ArchiveRows) {
		return run, fmt.Errorf("the floor archived %d rows, want %d", run.Rows, r.cfg.ArchiveRows)
	}
	run.RowsPerSec = float64(run.Rows) / run.Seconds
	return run, nil
}

// floorBatch archives one batch by hand: rows archived (0 when none is
// left) and the object's key.
func floorBatch(ctx context.Context, conn *pgx.Conn, tg archiveTarget, st *store.Store, prefix string, seq int) (int, string, error) {
	var out bytes.Buffer
	if _, err := conn.PgConn().CopyTo(ctx, &out, tg.floorCopy); err != nil {
		return 0, "", fmt.Errorf("floor copy: %w", err)
	}
	ids, body, err := splitFloorCopy(out.Bytes())
	if err != nil || len(ids) == 0 {
		return 0, "", err
	}
	key := fmt.Sprintf("%s%08d.ndjson", prefix, seq)
	if err := st.PutCreate(ctx, key, body, store.ContentTypeNDJSON); err != nil {
		return 0, "", err
	}
	last := ids[len(ids)-1]
	if _, err := conn.Exec(ctx, tg.floorAdvance, last); err != nil {
		return 0, "", fmt.Errorf("floor cursor: %w", err)
	}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, tg.floorDelete, ids); err != nil {
			return fmt.Errorf("floor delete: %w", err)
		}
		if _, err := tx.Exec(ctx, floorInsertLedger, uuid.New(), tg.table, key, len(ids), ids[0], last); err != nil {
			return fmt.Errorf("floor ledger: %w", err)
		}
		return nil
	})
	return len(ids), key, err
}

// splitFloorCopy splits COPY's text lines "<id>\t<json>" into the ids and
// the NDJSON body (the JSON as COPY's text format writes it: a hand-written
// job that does not unescape it).
func splitFloorCopy(b []byte) ([]uuid.UUID, []byte, error) {
	var ids []uuid.UUID
	body := make([]byte, 0, len(b))
	for line := range bytes.Lines(b) {
		id, doc, ok := bytes.Cut(line, []byte{'\t'})
		if !ok {
			return nil, nil, fmt.Errorf("floor copy: a line without a tab: %.80q", line)
		}
		u, err := uuid.ParseBytes(id)
		if err != nil {
			return nil, nil, fmt.Errorf("floor copy: %w", err)
		}
		ids, body = append(ids, u), append(body, doc...)
	}
	return ids, body, nil
}
