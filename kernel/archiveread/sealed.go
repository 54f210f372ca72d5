package archiveread

import (
	"context"
	"errors"
	"fmt"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/subject"
	"github.com/jackc/pgx/v5"
)

// WithSealedAccess returns a copy of the reader that also returns the rows
// of sealed subjects, for a caller with archive:sealed-read who names the
// court order that allows it (orderRef, non-empty); every read it makes is
// announced with that order reference. The default reader answers for a
// sealed subject's rows exactly as for rows that do not exist.
func (r *Reader) WithSealedAccess(orderRef string) *Reader {
	c := *r
	c.orderRef = orderRef
	return &c
}

// ErrOrderRef: a sealed-access read named an order reference under which
// the subject it reads (or any subject) is not sealed (HTTP 403).
var ErrOrderRef = errors.New("archiveread: the order reference does not open this seal")

// sealedSet is the keyed hashes of the sealed subjects this read must not
// return (hex → true); nil when there are none or the reader has sealed
// access. Seals without a key to tell whose rows are whose fail the read
// (ErrNoSubjectKey) rather than return a sealed row.
//
// A reader with sealed access sees only the subjects sealed under its own
// order: the rows of subjects sealed under another stay hidden, and an
// order that sealed nothing fails the read (ErrOrderRef): an order
// reference opens the seal it placed, not every seal.
func (r *Reader) sealedSet(ctx context.Context, db prune.DB) (map[string]bool, error) {
	q := queries.New(db)
	var hashes [][]byte
	var err error
	if r.orderRef != "" {
		var n int64
		if n, err = q.CountSealsUnder(ctx, r.orderRef); err != nil {
			return nil, fmt.Errorf("sealed subjects: %w", err)
		}
		if n == 0 {
			return nil, fmt.Errorf("%w: no subject is sealed under the order named", ErrOrderRef)
		}
		hashes, err = q.SealedHashesOutside(ctx, r.orderRef)
	} else {
		hashes, err = q.SealedHashes(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("sealed subjects: %w", err)
	}
	if len(hashes) == 0 {
		return nil, nil
	}
	if !r.key.Valid() {
		return nil, fmt.Errorf("%w: subjects are sealed and rows cannot be told apart without it", ErrNoSubjectKey)
	}
	set := make(map[string]bool, len(hashes))
	for _, h := range hashes {
		set[string(h)] = true
	}
	return set, nil
}

// sealedHere reports whether the subject of hash is hidden from this read:
// sealed, and (with sealed access) under another order, which fails the
// read with ErrOrderRef instead.
func (r *Reader) sealedHere(ctx context.Context, db prune.DB, hash []byte) (map[string]bool, bool, error) {
	sealed, err := r.sealedSet(ctx, db)
	switch {
	case err != nil:
		return nil, false, err
	case sealed[string(hash)] && r.orderRef != "":
		return nil, false, fmt.Errorf("%w: the subject is sealed under another order", ErrOrderRef)
	}
	return sealed, sealed[string(hash)], nil
}

// sealedOrds returns which of docs (rows as to_jsonb text, ordinals from 1)
// have a sealed subject, as the table's own subject expressions read them.
func (r *Reader) sealedOrds(ctx context.Context, db prune.DB, spec archive.TableSpec, docs []string, set map[string]bool) (map[int]bool, error) {
	if len(set) == 0 || len(spec.Subjects) == 0 || len(docs) == 0 {
		return nil, nil
	}
	rows, err := db.Query(ctx, archive.DocOrdSubjectsSQL(spec), docs)
	if err != nil {
		return nil, fmt.Errorf("subjects of %s rows: %w", spec.Table, err)
	}
	type ordSubject struct {
		Ord     int64
		Subject string
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ordSubject])
	if err != nil {
		return nil, fmt.Errorf("subjects of %s rows: %w", spec.Table, err)
	}
	out := map[int]bool{}
	for _, g := range got {
		s, err := subject.Parse(g.Subject)
		if err != nil {
			continue // not a subject: the index never held it either
		}
		if set[string(r.key.Hash(s))] {
			out[int(g.Ord)] = true
		}
	}
	return out, nil
}

// withoutSealed returns docs without those of a sealed subject.
func (r *Reader) withoutSealed(ctx context.Context, db prune.DB, spec archive.TableSpec, docs []string, set map[string]bool) ([]string, error) {
	drop, err := r.sealedOrds(ctx, db, spec, docs, set)
	if err != nil || len(drop) == 0 {
		return docs, err
	}
	out := make([]string, 0, len(docs)-len(drop))
	for i, d := range docs {
		if !drop[i+1] {
			out = append(out, d)
		}
	}
	return out, nil
}

// accessDetail adds the order reference of a sealed-access read to its
// announcement.
func (r *Reader) accessDetail(detail map[string]any) map[string]any {
	if r.orderRef != "" {
		detail["order_ref"], detail["sealed_access"] = r.orderRef, true
	}
	return detail
}
