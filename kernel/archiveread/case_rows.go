package archiveread

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/internal/queries"
)

// CaseRowsReport is one case-rows indexing call's outcome.
type CaseRowsReport struct {
	Indexed int `json:"indexed"`
	// Left are the unpurged archives still not indexed (over the limit,
	// or failed): their cases are not listed as due until they are.
	Left int64 `json:"left"`
	// Failed are the archives whose objects could not be read whole or
	// matched no version of their ledger sha256 (runbook §4).
	Failed []uuid.UUID `json:"failed"`
}

// IndexCaseRows writes what up to limit unindexed archives hold of each
// case (ADR-073, archive migration 00011): each is read once, verified
// against its ledger hash, its lines read back as rows of its table by the
// table's own subject expressions, and its case rows written in one
// transaction that marks it. The case rows of purged archives are deleted
// first. Resumable: an interrupted call leaves each archive indexed or not.
func (r *Reader) IndexCaseRows(ctx context.Context, limit int) (CaseRowsReport, error) {
	rep := CaseRowsReport{Failed: []uuid.UUID{}}
	if !r.key.Valid() {
		return rep, ErrNoSubjectKey
	}
	q := queries.New(r.pool)
	if _, err := q.ForgetPurgedCaseRows(ctx); err != nil {
		return rep, fmt.Errorf("forget the case rows of purged archives: %w", err)
	}
	rows, err := q.CaseRowsToIndex(ctx, int32(limit))
	if err != nil {
		return rep, fmt.Errorf("archives to index by case: %w", err)
	}
	for _, row := range rows {
		aid := uuid.UUID(row.ArchiveID.Bytes)
		var facts []archive.CaseRows
		if spec, known := r.tables[row.TableName]; known {
			data, err := r.readData(ctx, aid, row.DataKey, row.DataSha256)
			if errors.Is(err, ErrCorrupt) || errors.Is(err, ErrUnreadable) {
				rep.Failed = append(rep.Failed, aid)
				continue
			}
			if err != nil {
				return rep, err
			}
			if facts, err = archive.DocCaseRows(ctx, r.pool, r.key, spec, splitLines(data)); err != nil {
				return rep, fmt.Errorf("archive %s: %w", aid, err)
			}
		}
		if err := r.writeCaseRows(ctx, row.ArchiveID, facts); err != nil {
			return rep, fmt.Errorf("index archive %s by case: %w", aid, err)
		}
		rep.Indexed++
	}
	if rep.Left, err = q.CountCaseRowsToIndex(ctx); err != nil {
		return rep, fmt.Errorf("archives left to index by case: %w", err)
	}
	return rep, nil
}

// writeCaseRows writes one archive's case rows and marks it, in one
// transaction; an archive purged meanwhile is left as it is.
func (r *Reader) writeCaseRows(ctx context.Context, id pgtype.UUID, facts []archive.CaseRows) error {
	p := queries.InsertArchiveCaseRowsParams{ArchiveID: id}
	for _, f := range facts {
		var box []byte
		if !f.Case.IsZero() {
			b, err := r.key.Box([]byte(f.Case.String()))
			if err != nil {
				return err
			}
			box = b
		}
		p.Hashes, p.Others, p.Boxes = append(p.Hashes, f.Hash), append(p.Others, f.Others), append(p.Boxes, box)
		p.Oldest = append(p.Oldest, pgtype.Date{Time: f.Oldest, Valid: true})
		p.Newest = append(p.Newest, pgtype.Date{Time: f.Newest, Valid: true})
		p.Counts = append(p.Counts, f.Rows)
	}
	return pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		q := queries.New(tx)
		n, err := q.MarkCaseRowsIndexed(ctx, id)
		if err != nil || n == 0 {
			return err
		}
		if len(facts) == 0 {
			return nil
		}
		return q.InsertArchiveCaseRows(ctx, p)
	})
}
