package archiveread

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/internal/queries"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// MaxRangeDays bounds one range read (ten years).
const MaxRangeDays = 3650

// ErrInvalidRange is a range read with from not before to or too long.
var ErrInvalidRange = errors.New("archiveread: invalid range")

// PurgedArchive is an archive whose record times overlapped a range read
// and which was purged: its rows can no longer be returned.
type PurgedArchive struct {
	ArchiveID     uuid.UUID `json:"archive_id"`
	FirstRecordAt time.Time `json:"first_record_at"`
	LastRecordAt  time.Time `json:"last_record_at"`
	RecordCount   int       `json:"record_count"`
	PurgedAt      time.Time `json:"purged_at"`
}

// RangeSummary is the last line of a range stream ({"summary": …}): what
// the stream holds and what it cannot. A stream that ends without it was
// cut short.
type RangeSummary struct {
	Table        string          `json:"table"`
	From         time.Time       `json:"from"`
	To           time.Time       `json:"to"`
	ArchivedRows int             `json:"archived_rows"`
	HotRows      int             `json:"hot_rows"`
	Archives     []uuid.UUID     `json:"archives"`
	Purged       []PurgedArchive `json:"purged_archives"`
	// Complete is false when a purged archive overlapped the range.
	Complete bool `json:"complete"`
}

// Range writes, as NDJSON to w, every row of table whose age column lies in
// [from, to): first the archived ones (each line the row exactly as
// archived), archive by archive in record-time order, each object verified
// against its ledger sha256 before any of its lines is written (a corrupt
// object stops the stream with a *CorruptError); then the rows still in the
// hot table, each marked as {"hot": row}; then one {"summary": …} line
// (RangeSummary) naming the archives read and every purged archive that
// overlapped the range. The ledger and the hot table are read in one
// repeatable-read snapshot, so a row archived meanwhile is in exactly one of
// the two. It announces the read.
func (r *Reader) Range(ctx context.Context, w io.Writer, table string, from, to time.Time, actor string) (RangeSummary, error) {
	sum := RangeSummary{Table: table, From: from, To: to, Archives: []uuid.UUID{}, Purged: []PurgedArchive{}}
	spec, ok := r.tables[table]
	if !ok {
		return sum, fmt.Errorf("%w: %q", ErrUnknownTable, table)
	}
	// PostgreSQL keeps microseconds: the ledger, the hot table and the
	// archived lines are compared at that precision, never at Go's
	// nanoseconds (a bound between two microseconds would put a row in
	// neither of two adjacent ranges).
	from, to = from.Truncate(time.Microsecond), to.Truncate(time.Microsecond)
	sum.From, sum.To = from, to
	if !from.Before(to) || to.Sub(from) > MaxRangeDays*24*time.Hour {
		return sum, fmt.Errorf("%w: from must be before to, at most %d days apart", ErrInvalidRange, MaxRangeDays)
	}
	err := pgx.BeginTxFunc(ctx, r.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		q := queries.New(tx)
		fromAt, toAt := pgtype.Timestamptz{Time: from, Valid: true}, pgtype.Timestamptz{Time: to, Valid: true}
		cands, err := q.ArchivesInRange(ctx, queries.ArchivesInRangeParams{TableName: table, ToAt: toAt, FromAt: fromAt})
		if err != nil {
			return fmt.Errorf("ledger range of %s: %w", table, err)
		}
		purged, err := q.PurgedArchivesInRange(ctx, queries.PurgedArchivesInRangeParams{TableName: table, ToAt: toAt, FromAt: fromAt})
		if err != nil {
			return fmt.Errorf("purged archives of %s: %w", table, err)
		}
		for _, p := range purged {
			sum.Purged = append(sum.Purged, PurgedArchive{ArchiveID: p.ArchiveID.Bytes, FirstRecordAt: p.FirstRecordAt.Time.UTC(),
				LastRecordAt: p.LastRecordAt.Time.UTC(), RecordCount: int(p.RecordCount), PurgedAt: p.PurgedAt.Time.UTC()})
		}
		sealed, err := r.sealedSet(ctx, tx)
		if err != nil {
			return err
		}
		for _, c := range cands {
			aid := uuid.UUID(c.ArchiveID.Bytes)
			data, err := r.readData(ctx, aid, c.DataKey, c.DataSha256)
			if err != nil {
				return err
			}
			whole := len(data)
			if data, err = r.unsealedData(ctx, tx, spec, data, sealed); err != nil {
				return err
			}
			if len(data) == 0 && whole > 0 {
				continue // every row of it is sealed: as if it were not there
			}
			sum.Archives = append(sum.Archives, aid)
			n, err := writeInRange(w, data, spec.AgeColumn, from, to)
			sum.ArchivedRows += n
			if err != nil {
				return err
			}
		}
		sum.HotRows, err = r.writeHot(ctx, tx, w, spec, from, to, sealed)
		return err
	})
	if err != nil {
		return sum, err
	}
	sum.Complete = len(sum.Purged) == 0
	if err := json.NewEncoder(w).Encode(map[string]RangeSummary{"summary": sum}); err != nil {
		return sum, err
	}
	return sum, r.announceRange(ctx, table, from, to, actor, sum.Archives)
}

// unsealedData is an archive's lines without those of sealed subjects.
func (r *Reader) unsealedData(ctx context.Context, tx pgx.Tx, spec archive.TableSpec, data []byte, sealed map[string]bool) ([]byte, error) {
	if len(sealed) == 0 || len(spec.Subjects) == 0 {
		return data, nil
	}
	docs, err := r.withoutSealed(ctx, tx, spec, splitLines(data), sealed)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	for _, d := range docs {
		b.WriteString(d)
		b.WriteByte('\n')
	}
	return b.Bytes(), nil
}

// hotChunk is how many hot rows a range read checks against the sealed
// subjects at once (one statement per chunk).
const hotChunk = 1000

// writeHot writes the hot table's rows whose age column is in [from, to),
// oldest first, each as {"hot": row}, leaving out those of sealed
// subjects. The table and its age column are the service's own spec,
// quoted: never input.
func (r *Reader) writeHot(ctx context.Context, tx pgx.Tx, w io.Writer, spec archive.TableSpec, from, to time.Time, sealed map[string]bool) (int, error) {
	if len(sealed) > 0 && len(spec.Subjects) > 0 {
		return r.writeHotUnsealed(ctx, tx, w, spec, from, to, sealed)
	}
	tbl, age := pgx.Identifier{spec.Table}.Sanitize(), pgx.Identifier{spec.AgeColumn}.Sanitize()
	rows, err := tx.Query(ctx, "SELECT to_jsonb(t)::text FROM "+tbl+" AS t WHERE t."+age+" >= $1 AND t."+age+" < $2 ORDER BY t."+age+", t.id", from, to)
	if err != nil {
		return 0, fmt.Errorf("hot rows of %s: %w", spec.Table, err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var doc string
		if err := rows.Scan(&doc); err != nil {
			return n, err
		}
		if _, err := fmt.Fprintf(w, "{\"hot\": %s}\n", doc); err != nil {
			return n, err
		}
		n++
	}
	return n, rows.Err()
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
		at, finite, err := ageOf(doc[ageColumn])
		if err != nil {
			return n, fmt.Errorf("archive line: %s: %w", ageColumn, err)
		}
		if !finite || at.Before(from) || !at.Before(to) {
			continue // infinity is outside any range a caller can name
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

// ageOf reads an archived row's age column as to_jsonb rendered it:
// RFC 3339, "infinity"/"-infinity" (finite false), or a BC date
// ("0001-06-01T00:00:00+00:00 BC" is year 0 to Go, which counts a year 0).
// Anything else is an error: a row is never left out of a range silently.
func ageOf(raw json.RawMessage) (at time.Time, finite bool, err error) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return time.Time{}, false, fmt.Errorf("not a timestamp: %s", raw)
	}
	switch s {
	case "infinity", "-infinity":
		return time.Time{}, false, nil
	}
	bc := strings.HasSuffix(s, " BC")
	at, err = time.Parse(time.RFC3339Nano, strings.TrimSuffix(s, " BC"))
	if err != nil {
		return time.Time{}, false, fmt.Errorf("timestamp %q: %w", s, err)
	}
	if bc { // 1 BC is year 0, 2 BC year -1
		at = at.AddDate(1-2*at.Year(), 0, 0)
	}
	return at, true, nil
}

// writeHotUnsealed is writeHot while subjects are sealed: the rows are
// read in chunks, each checked against the sealed subjects before any of
// it is written.
func (r *Reader) writeHotUnsealed(ctx context.Context, tx pgx.Tx, w io.Writer, spec archive.TableSpec, from, to time.Time, sealed map[string]bool) (int, error) {
	tbl, age := pgx.Identifier{spec.Table}.Sanitize(), pgx.Identifier{spec.AgeColumn}.Sanitize()
	rows, err := tx.Query(ctx, "SELECT to_jsonb(t)::text FROM "+tbl+" AS t WHERE t."+age+" >= $1 AND t."+age+" < $2 ORDER BY t."+age+", t.id", from, to)
	if err != nil {
		return 0, fmt.Errorf("hot rows of %s: %w", spec.Table, err)
	}
	docs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("hot rows of %s: %w", spec.Table, err)
	}
	n := 0
	for chunk := range slices.Chunk(docs, hotChunk) {
		keep, err := r.withoutSealed(ctx, tx, spec, chunk, sealed)
		if err != nil {
			return n, err
		}
		for _, doc := range keep {
			if _, err := fmt.Fprintf(w, "{\"hot\": %s}\n", doc); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}
