package archiveread

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/lease"
	"github.com/craig/retention/kernel/outbox"
	"github.com/craig/retention/kernel/subject"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"golang.org/x/sync/errgroup"
)

// ErrNoSubjectKey: a subject read on a service with no subject key.
var ErrNoSubjectKey = errors.New("archiveread: no subject key is configured (archive.subject_key_file)")

// WithSubjectKey returns a copy of the reader that reads by subject with
// key (the service's archive.subject_key_file).
func (r *Reader) WithSubjectKey(key subject.Key) *Reader {
	c := *r
	c.key = key
	return &c
}

// SubjectLine is one line of a subject stream: a row of the subject, hot or
// archived, exactly as it is stored.
type SubjectLine struct {
	Table     string          `json:"table"`
	Source    string          `json:"source"` // "hot" or "archive"
	ArchiveID *uuid.UUID      `json:"archive_id"`
	Row       json.RawMessage `json:"row"`
	at        time.Time
	ord       int
}

// SubjectSummary is the closing line of a subject stream ({"summary": …}):
// the tables searched, how many archives were read and rows sent, and how
// many archives that held the subject are purged (their rows are gone by
// the retention schedule). A stream that ends without it was cut short.
type SubjectSummary struct {
	Tables         []string    `json:"tables"`
	ArchivesRead   int         `json:"archives_read"`
	Rows           int         `json:"rows"`
	PurgedArchives int         `json:"purged_archives"`
	PurgedIDs      []uuid.UUID `json:"purged_archive_ids"`
	// Disposed are the executed disposition batches that destroyed rows
	// of the subject (a case) on the records schedule (ADR-073): the
	// answer to a records request that arrives after them.
	Disposed []Disposal `json:"disposed"`
}

// Disposal is one executed disposition batch that destroyed rows of a
// subject: when, under which item and its authority, of which table, how
// many rows.
type Disposal struct {
	DispositionID uuid.UUID `json:"disposition_id"`
	ExecutedAt    time.Time `json:"executed_at"`
	Item          string    `json:"item"`
	Authority     string    `json:"authority"`
	Table         string    `json:"table"`
	Rows          int64     `json:"rows"`
}

// Subject writes, as NDJSON to w, every row of every table of the service
// whose declared subject is s, hot and archived, in time order (ties by
// table, then as stored), each {"table", "source", "archive_id", "row"}
// with row verbatim; then one {"summary": …} line. Each archive is read
// only when the subject index says it holds s (or it is not yet indexed),
// and verified against its ledger sha256 before any line is written: every
// line is gathered first, so a corrupt archive fails the call before its
// first byte. The index, the ledger and the hot tables are read in one
// repeatable-read snapshot (a row archived meanwhile is in exactly one of
// them); the archives' objects, which never change, are then fetched and
// filtered subjectReadParallel at a time. The read is announced
// (<service>.archive_read) with the subject's keyed hash, never the
// subject.
func (r *Reader) Subject(ctx context.Context, w io.Writer, s subject.Subject, actor string) (SubjectSummary, error) {
	sum := SubjectSummary{Tables: []string{}, PurgedIDs: []uuid.UUID{}, Disposed: []Disposal{}}
	if !r.key.Valid() {
		return sum, ErrNoSubjectKey
	}
	specs := r.subjectSpecs()
	sum.Tables = tableNames(specs)
	hash := r.key.Hash(s)
	var lines []SubjectLine
	var todo []queries.SubjectArchivesRow
	var sealed map[string]bool
	err := pgx.BeginTxFunc(ctx, r.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var hidden bool
		var err error
		if sealed, hidden, err = r.sealedHere(ctx, tx, hash); err != nil || hidden {
			return err // a sealed subject answers as one with no rows
		}
		var cands []queries.SubjectArchivesRow
		if cands, sum.Disposed, err = candidates(ctx, tx, hash, sum.Tables); err != nil {
			return err
		}
		for _, c := range cands {
			switch {
			case !c.PurgedAt.Valid:
				todo = append(todo, c)
			case c.SubjectsIndexed: // an unindexed purged archive may not have held it
				sum.PurgedIDs = append(sum.PurgedIDs, uuid.UUID(c.ArchiveID.Bytes))
			}
		}
		for _, spec := range specs {
			got, err := hotOf(ctx, tx, spec, s.String())
			if err != nil {
				return err
			}
			lines = append(lines, got...)
		}
		return nil
	})
	if err != nil {
		return sum, err
	}
	archived, gone, err := r.archivedAll(ctx, todo, s.String())
	if err != nil {
		return sum, err
	}
	lines = append(lines, archived...)
	if lines, err = r.unsealedLines(ctx, lines, sealed); err != nil {
		return sum, err
	}
	read := []uuid.UUID{}
	for _, c := range todo {
		if id := uuid.UUID(c.ArchiveID.Bytes); gone[id] {
			sum.PurgedIDs = append(sum.PurgedIDs, id) // purged since the snapshot
		} else {
			read = append(read, id)
		}
	}
	sum.ArchivesRead, sum.Rows, sum.PurgedArchives = len(read), len(lines), len(sum.PurgedIDs)
	if err := writeSubject(w, lines, sum); err != nil {
		return sum, err
	}
	return sum, r.stage(ctx, map[string]any{"actor": actor, "source": "subject", "subject_hash": subject.Hex(hash),
		"archive_ids": read, "rows": sum.Rows, "at": time.Now().UTC().Format(time.RFC3339Nano)})
}

// unsealedLines are lines without those whose row has a sealed subject
// (a row about the subject read and also about a sealed one).
func (r *Reader) unsealedLines(ctx context.Context, lines []SubjectLine, sealed map[string]bool) ([]SubjectLine, error) {
	if len(sealed) == 0 {
		return lines, nil
	}
	byTable := map[string][]int{}
	for i, l := range lines {
		byTable[l.Table] = append(byTable[l.Table], i)
	}
	drop := map[int]bool{}
	for table, idx := range byTable {
		docs := make([]string, len(idx))
		for j, i := range idx {
			docs[j] = string(lines[i].Row)
		}
		ords, err := r.sealedOrds(ctx, r.pool, r.tables[table], docs, sealed)
		if err != nil {
			return nil, err
		}
		for ord := range ords {
			drop[idx[ord-1]] = true
		}
	}
	out := lines[:0:0]
	for i, l := range lines {
		if !drop[i] {
			out = append(out, l)
		}
	}
	return out, nil
}

// subjectSpecs are the service's tables that declare subjects, by name.
// DeclaresKind reports whether any table the reader knows declares
// subjects of kind k: a hold, an order or a read of a kind none declares
// could never reach a row.
func (r *Reader) DeclaresKind(k subject.Kind) bool {
	for _, spec := range r.tables {
		for _, s := range spec.Subjects {
			if s.Kind == k {
				return true
			}
		}
	}
	return false
}

// tableNames are the specs' tables, in their order (never nil).
func tableNames(specs []archive.TableSpec) []string {
	out := make([]string, 0, len(specs))
	for _, spec := range specs {
		out = append(out, spec.Table)
	}
	return out
}

func (r *Reader) subjectSpecs() []archive.TableSpec {
	var out []archive.TableSpec
	for _, spec := range r.tables {
		if len(spec.Subjects) > 0 {
			out = append(out, spec)
		}
	}
	slices.SortFunc(out, func(a, b archive.TableSpec) int { return cmp.Compare(a.Table, b.Table) })
	return out
}

// subjectReadParallel is how many archives a subject read fetches and
// filters at once: their objects are immutable and their filter is a pure
// function of their lines, so they need neither the ledger's snapshot nor
// an order; four keep a 2-core machine's store and database busy without
// holding more than four archives in memory.
const subjectReadParallel = 4

// archivedAll reads the archives (each verified against its ledger hash)
// subjectReadParallel at a time and returns their lines whose subject is
// s, archive by archive in the order given.
// An archive purged after the snapshot (its object gone, its ledger row
// now stamped) is returned in gone, not as corrupt.
func (r *Reader) archivedAll(ctx context.Context, todo []queries.SubjectArchivesRow, s string) ([]SubjectLine, map[uuid.UUID]bool, error) {
	out := make([][]SubjectLine, len(todo))
	purged := make([]bool, len(todo))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(subjectReadParallel)
	for i, c := range todo {
		g.Go(func() error {
			var err error
			out[i], err = r.archivedOf(gctx, r.tables[c.TableName], c.ArchiveID.Bytes, c.DataKey, c.DataSha256, s)
			if errors.Is(err, ErrCorrupt) {
				row, lerr := queries.New(r.pool).GetLedgerRow(gctx, c.ArchiveID)
				if lerr == nil && row.PurgedAt.Valid {
					purged[i], err = true, nil
				}
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, err
	}
	gone := map[uuid.UUID]bool{}
	for i, p := range purged {
		if p {
			gone[todo[i].ArchiveID.Bytes] = true
		}
	}
	return slices.Concat(out...), gone, nil
}

// archivedOf reads one archive (verified against its ledger hash) and
// returns its lines whose subject is s, as the table's own subject
// expressions read them.
func (r *Reader) archivedOf(ctx context.Context, spec archive.TableSpec, aid uuid.UUID, key, sha, s string) ([]SubjectLine, error) {
	data, err := r.readData(ctx, aid, key, sha)
	if err != nil {
		return nil, err
	}
	docs := splitLines(data)
	rows, err := r.pool.Query(ctx, archive.DocSubjectSQL(spec), docs, s)
	if err != nil {
		return nil, fmt.Errorf("subject of archive %s: %w", aid, archive.RedactRowValues(err))
	}
	defer rows.Close()
	var out []SubjectLine
	for rows.Next() {
		var ord int64
		var at time.Time
		if err := rows.Scan(&ord, &at); err != nil {
			return nil, archive.RedactRowValues(err)
		}
		id := aid
		out = append(out, SubjectLine{Table: spec.Table, Source: "archive", ArchiveID: &id, Row: json.RawMessage(docs[ord-1]), at: at, ord: int(ord)})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("subject of archive %s: %w", aid, archive.RedactRowValues(err))
	}
	return out, nil
}

// hotOf returns the hot rows of spec whose subject is s (through the index
// on the subject expression).
func hotOf(ctx context.Context, tx pgx.Tx, spec archive.TableSpec, s string) ([]SubjectLine, error) {
	rows, err := tx.Query(ctx, archive.HotSubjectSQL(spec), s)
	if err != nil {
		return nil, fmt.Errorf("hot rows of %s: %w", spec.Table, archive.RedactRowValues(err))
	}
	defer rows.Close()
	var out []SubjectLine
	for rows.Next() {
		var doc string
		var at time.Time
		var id uuid.UUID
		if err := rows.Scan(&doc, &at, &id); err != nil {
			return nil, archive.RedactRowValues(err)
		}
		out = append(out, SubjectLine{Table: spec.Table, Source: "hot", Row: json.RawMessage(doc), at: at, ord: len(out)})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("hot rows of %s: %w", spec.Table, archive.RedactRowValues(err))
	}
	return out, nil
}

// splitLines returns an object's NDJSON lines (without their newlines).
func splitLines(data []byte) []string {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, len(data)+1)
	var out []string
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// BackfillReport is one backfill call's outcome.
type BackfillReport struct {
	Indexed int  `json:"indexed"`
	Purged  int  `json:"purged_marked"`
	More    bool `json:"more"`
	// Failed are the archives whose objects could not be read whole or
	// matched no version of their ledger sha256: left unindexed (restore
	// them, runbook §4, and run again); the others went on.
	Failed []uuid.UUID `json:"failed"`
}

// IndexSubjects indexes up to limit archives not yet indexed by subject
// (booked before the index existed, or while no key was configured): each
// unpurged one is read, verified against its ledger hash, and its subjects
// (the table's own expressions over its lines) written to the index in one
// transaction per archive, ordered with hold placements like a booking. A
// purged archive has no lines left: it is marked indexed with none. It is
// resumable: an interrupted call leaves every archive indexed or not, and
// the next call goes on. The archives whose hold state changed are
// returned (a conservative hold of an unindexed archive lifted).
func (r *Reader) IndexSubjects(ctx context.Context, limit int, actor string) (BackfillReport, []uuid.UUID, error) {
	rep := BackfillReport{Failed: []uuid.UUID{}}
	if !r.key.Valid() {
		return rep, nil, ErrNoSubjectKey
	}
	rows, err := queries.New(r.pool).UnindexedArchives(ctx, queries.UnindexedArchivesParams{After: pgtype.UUID{Valid: true}, RowLimit: int32(limit + 1)})
	if err != nil {
		return rep, nil, fmt.Errorf("unindexed archives: %w", err)
	}
	if len(rows) > limit {
		rows, rep.More = rows[:limit], true
	}
	var changed []uuid.UUID
	for _, row := range rows {
		aid := uuid.UUID(row.ArchiveID.Bytes)
		var hashes [][]byte
		spec, known := r.tables[row.TableName]
		if !row.PurgedAt.Valid && known && len(spec.Subjects) > 0 {
			data, err := r.readData(ctx, aid, row.DataKey, row.DataSha256)
			if errors.Is(err, ErrCorrupt) || errors.Is(err, ErrUnreadable) {
				rep.Failed = append(rep.Failed, aid)
				continue
			}
			if err != nil {
				return rep, changed, err
			}
			if hashes, err = archive.Hashes(ctx, r.pool, r.key, spec.Table, archive.DocSubjectsSQL(spec), splitLines(data)); err != nil {
				return rep, changed, fmt.Errorf("archive %s: %w", aid, err)
			}
		}
		moved, err := r.indexOne(ctx, row.ArchiveID, hashes, actor)
		if moved {
			changed = append(changed, aid)
		}
		if err != nil {
			return rep, changed, fmt.Errorf("index archive %s: %w", aid, err)
		}
		if row.PurgedAt.Valid {
			rep.Purged++
		} else {
			rep.Indexed++
		}
	}
	return rep, changed, nil
}

// announceHoldChange logs and stages the hold state the backfill changed
// (an archive held only because it was not indexed is released, or stays
// held by another hold but no longer by a subject hold; one that holds a
// held subject is held), for the local log and the fleet ledger.
func (r *Reader) announceHoldChange(ctx context.Context, tx pgx.Tx, aid uuid.UUID, held, subjectHold bool, actor string) error {
	action := "archive_hold_released"
	if held {
		action = "archive_hold_placed"
	}
	doc, err := json.Marshal(map[string]any{"actor": actor, "at": time.Now().UTC().Format(time.RFC3339Nano),
		"reason": "subject index backfill", "legal_hold": map[string]bool{aid.String(): held}, "subject_hold": map[string]bool{aid.String(): subjectHold}})
	if err != nil {
		return err
	}
	if err := queries.New(tx).LogLifecycle(ctx, queries.LogLifecycleParams{Actor: actor, Action: action, ArchiveID: pgtype.UUID{Bytes: aid, Valid: true}, Detail: doc}); err != nil {
		return fmt.Errorf("log %s of %s: %w", action, aid, err)
	}
	_, err = outbox.Stage(ctx, tx, outbox.Envelope{EventType: r.service + "." + action, Payload: doc})
	return err
}

// subjectHeld is whether an active subject hold covers the archive.
func subjectHeld(ctx context.Context, q *queries.Queries, id pgtype.UUID) (bool, error) {
	rows, err := q.SubjectHolds(ctx, queries.SubjectHoldsParams{Ids: []pgtype.UUID{id}})
	if err != nil || len(rows) == 0 {
		return false, err
	}
	return rows[0].SubjectHeld, nil
}

// indexOne indexes one archive in its own transaction, ordered with hold
// placements like a booking, and announces its hold state if indexing
// changed it (moved).
func (r *Reader) indexOne(ctx context.Context, id pgtype.UUID, hashes [][]byte, actor string) (moved bool, err error) {
	aid := uuid.UUID(id.Bytes)
	err = pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		q := queries.New(tx)
		if err := q.LockHoldsShared(ctx, lease.HoldsKey); err != nil {
			return err
		}
		before, err := q.GetLedgerRow(ctx, id)
		if err != nil {
			return err
		}
		subjBefore, err := subjectHeld(ctx, q, id)
		if err != nil {
			return err
		}
		after, err := archive.IndexSubjects(ctx, tx, aid, hashes, true)
		if err != nil {
			return err
		}
		subjAfter, err := subjectHeld(ctx, q, id)
		if err != nil || (after.LegalHold == before.LegalHold && subjAfter == subjBefore) {
			return err
		}
		moved = true
		return r.announceHoldChange(ctx, tx, aid, after.LegalHold, subjAfter, actor)
	})
	return moved && err == nil, err
}

// writeSubject writes a subject's lines in time order (ties by table, then
// as stored), then its summary.
func writeSubject(w io.Writer, lines []SubjectLine, sum SubjectSummary) error {
	slices.SortStableFunc(lines, func(a, b SubjectLine) int {
		return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.Table, b.Table), cmp.Compare(a.ord, b.ord))
	})
	enc := json.NewEncoder(w)
	for _, l := range lines {
		if err := enc.Encode(l); err != nil {
			return err
		}
	}
	return enc.Encode(map[string]SubjectSummary{"summary": sum})
}

// candidates are the archives of tables the subject index says hold the
// subject whose keyed hash is hash (or that are not indexed), and the
// executed batches that destroyed rows of it.
func candidates(ctx context.Context, tx pgx.Tx, hash []byte, tables []string) ([]queries.SubjectArchivesRow, []Disposal, error) {
	cands, err := queries.New(tx).SubjectArchives(ctx, queries.SubjectArchivesParams{SubjectHash: hash, Tables: tables})
	if err != nil {
		return nil, nil, fmt.Errorf("subject index: %w", err)
	}
	rows, err := queries.New(tx).SubjectDisposals(ctx, hash)
	if err != nil {
		return nil, nil, fmt.Errorf("disposals: %w", err)
	}
	out := make([]Disposal, 0, len(rows))
	for _, d := range rows {
		out = append(out, Disposal{DispositionID: d.DispositionID.Bytes, ExecutedAt: d.ExecutedAt.Time.UTC(), Item: d.ItemID,
			Authority: d.Authority, Table: d.Series, Rows: d.RowsDestroyed})
	}
	return cands, out, nil
}
