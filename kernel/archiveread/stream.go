package archiveread

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/craig/retention/kernel/internal/queries"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// MaxRangeDays bounds one range read (ten years).
const MaxRangeDays = 3650

// ErrInvalidRange is a range read with from not before to or too long.
var ErrInvalidRange = errors.New("archiveread: invalid range")

// Range writes, as NDJSON to w, every archived row of table whose age
// column lies in [from, to), archive by archive in record-time order, each
// object verified against its ledger sha256 before any of its lines is
// written; a corrupt object stops the stream with ErrCorrupt (the lines
// already written came from verified objects). It returns the archives
// read and the rows written, and announces the read.
func (r *Reader) Range(ctx context.Context, w io.Writer, table string, from, to time.Time, actor string) (archives []uuid.UUID, rows int, err error) {
	spec, ok := r.tables[table]
	if !ok {
		return nil, 0, fmt.Errorf("%w: %q", ErrUnknownTable, table)
	}
	if !from.Before(to) || to.Sub(from) > MaxRangeDays*24*time.Hour {
		return nil, 0, fmt.Errorf("%w: from must be before to, at most %d days apart", ErrInvalidRange, MaxRangeDays)
	}
	cands, err := queries.New(r.pool).ArchivesInRange(ctx, queries.ArchivesInRangeParams{
		TableName: table, ToAt: pgtype.Timestamptz{Time: to, Valid: true}, FromAt: pgtype.Timestamptz{Time: from, Valid: true},
	})
	if err != nil {
		return nil, 0, fmt.Errorf("ledger range of %s: %w", table, err)
	}
	for _, c := range cands {
		aid := uuid.UUID(c.ArchiveID.Bytes)
		data, err := r.readData(ctx, aid, c.DataKey, c.DataSha256)
		if err != nil {
			return archives, rows, err
		}
		archives = append(archives, aid)
		n, err := writeInRange(w, data, spec.AgeColumn, from, to)
		rows += n
		if err != nil {
			return archives, rows, err
		}
	}
	return archives, rows, r.announceRange(ctx, table, from, to, actor, archives)
}

// writeInRange writes the lines of data whose age column is in [from, to).
func writeInRange(w io.Writer, data []byte, ageColumn string, from, to time.Time) (int, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, len(data)+1)
	n := 0
	for sc.Scan() {
		var doc map[string]json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &doc); err != nil {
			return n, fmt.Errorf("archive line: %w", err)
		}
		var at time.Time
		if err := json.Unmarshal(doc[ageColumn], &at); err != nil {
			continue // infinity or BC: outside any range a caller can name
		}
		if at.Before(from) || !at.Before(to) {
			continue
		}
		if _, err := w.Write(append(sc.Bytes(), '\n')); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// announceRange stages <service>.archive_read for a range read.
func (r *Reader) announceRange(ctx context.Context, table string, from, to time.Time, actor string, archives []uuid.UUID) error {
	if archives == nil {
		archives = []uuid.UUID{}
	}
	return r.stage(ctx, map[string]any{"actor": actor, "table": table, "from": from, "to": to, "source": "archive",
		"archive_ids": archives, "at": time.Now().UTC().Format(time.RFC3339Nano)})
}
