package archive

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/subject"
)

// CaseRows is what a set of rows (a table's hot rows, or an archive's
// lines) holds of one case with the same other subjects (ADR-073): how
// many rows and the UTC days of the oldest and newest. With a zero Case,
// they are the rows about no case of one UTC day (each of them uses its
// own date).
type CaseRows struct {
	Case subject.Subject
	Hash []byte // the case's keyed hash; empty for no case
	// Others are the keyed hashes of the rows' other subjects (cases and
	// persons), concatenated in order: a row about two cases is due when
	// both are, and a hold on any of its subjects keeps it.
	Others []byte
	Oldest time.Time
	Newest time.Time
	Rows   int64
}

// caseDaysSQL groups rows (alias t) by the cases they are about, every
// subject they are about, whether a declared case field holds a value no
// case expression reads (such a row is about a case nobody can name: it
// is never due), and the UTC day of their age column. from is the FROM
// item that yields t.
func caseDaysSQL(spec TableSpec, from string) string {
	var cases, all, unparsed []string
	for _, s := range spec.Subjects {
		all = append(all, "(("+s.SQL+")::text)")
		if s.Kind == subject.Case {
			cases = append(cases, "(("+s.SQL+")::text)")
			if s.Field != "" {
				unparsed = append(unparsed, "(nullif(btrim(("+s.Field+")::text), '') IS NOT NULL AND ("+s.SQL+") IS NULL)")
			}
		}
	}
	agg := func(exprs []string) string {
		if len(exprs) == 0 {
			return "ARRAY[]::text[]"
		}
		return "ARRAY(SELECT DISTINCT craig_v.s FROM (VALUES " + strings.Join(exprs, ", ") + ") AS craig_v(s) WHERE craig_v.s IS NOT NULL ORDER BY 1)"
	}
	unparsedExpr := "false"
	if len(unparsed) > 0 {
		unparsedExpr = strings.Join(unparsed, " OR ")
	}
	return "SELECT " + agg(cases) + ", " + agg(all) + ", (" + unparsedExpr + "), (" + clampedAge(spec) + " AT TIME ZONE 'UTC')::date, count(*) FROM " + from +
		" GROUP BY 1, 2, 3, 4"
}

// HotCaseRows are the facts of spec's hot rows.
func HotCaseRows(ctx context.Context, db prune.DB, key subject.Key, spec TableSpec) ([]CaseRows, error) {
	return readCaseRows(ctx, db, key, spec, caseDaysSQL(spec, pgx.Identifier{spec.Table}.Sanitize()+" AS t"))
}

// DocCaseRows are the facts of an archive's lines (docs, read back as rows
// of spec's table).
func DocCaseRows(ctx context.Context, db prune.DB, key subject.Key, spec TableSpec, docs []string) ([]CaseRows, error) {
	return readCaseRows(ctx, db, key, spec, caseDaysSQL(spec, docsAsRows(spec)), docs)
}

func readCaseRows(ctx context.Context, db prune.DB, key subject.Key, spec TableSpec, sql string, args ...any) ([]CaseRows, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("case rows of %s: %w", spec.Table, err)
	}
	defer rows.Close()
	g := caseGroups{key: key, table: spec.Table, hashes: map[string][]byte{}, groups: map[string]*CaseRows{}}
	for rows.Next() {
		var cases, all []string
		var unparsed bool
		var day time.Time
		var n int64
		if err := rows.Scan(&cases, &all, &unparsed, &day, &n); err != nil {
			return nil, fmt.Errorf("case rows of %s: %w", spec.Table, err)
		}
		if unparsed {
			continue // about a case nobody can name: never due (and counted as unparsed)
		}
		if err := g.add(cases, all, day, n); err != nil {
			return nil, err
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("case rows of %s: %w", spec.Table, err)
	}
	return g.result(), nil
}

// caseGroups gathers rows into CaseRows groups: a case's rows with the
// same other subjects, or the rows about no case of one day.
type caseGroups struct {
	key    subject.Key
	table  string
	hashes map[string][]byte
	groups map[string]*CaseRows
	order  []string
}

// hash is a subject's keyed hash (each computed once).
func (g *caseGroups) hash(v string, wantCase bool) ([]byte, subject.Subject, error) {
	s, err := subject.Parse(v)
	if err != nil || s.String() != v || (wantCase && s.Kind() != subject.Case) {
		return nil, subject.Subject{}, fmt.Errorf("%w: table %s yielded a value that is not a canonical subject", ErrSubject, g.table)
	}
	h, ok := g.hashes[v]
	if !ok {
		h = g.key.Hash(s)
		g.hashes[v] = h
	}
	return h, s, nil
}

// add counts n rows of day about cases and, in all, every subject.
func (g *caseGroups) add(cases, all []string, day time.Time, n int64) error {
	allHashes := make([][]byte, 0, len(all))
	for _, v := range all {
		h, _, err := g.hash(v, false)
		if err != nil {
			return err
		}
		allHashes = append(allHashes, h)
	}
	if len(cases) == 0 {
		g.addTo(subject.Subject{}, []byte{}, allHashes, day, n)
		return nil
	}
	for _, v := range cases {
		h, s, err := g.hash(v, true)
		if err != nil {
			return err
		}
		g.addTo(s, h, allHashes, day, n)
	}
	return nil
}

func (g *caseGroups) addTo(c subject.Subject, h []byte, all [][]byte, day time.Time, n int64) {
	var others [][]byte
	for _, o := range all {
		if !bytes.Equal(o, h) {
			others = append(others, o)
		}
	}
	slices.SortFunc(others, bytes.Compare)
	joined := bytes.Join(others, nil)
	if joined == nil {
		joined = []byte{}
	}
	k := string(h) + "\x00" + string(joined)
	if len(h) == 0 {
		k += "\x00" + day.Format(time.DateOnly)
	}
	r, ok := g.groups[k]
	if !ok {
		r = &CaseRows{Case: c, Hash: h, Others: joined, Oldest: day, Newest: day}
		g.groups[k] = r
		g.order = append(g.order, k)
	}
	r.Rows += n
	r.Oldest, r.Newest = minTime(r.Oldest, day), maxTime(r.Newest, day)
}

// result is the groups in a stable order.
func (g *caseGroups) result() []CaseRows {
	slices.Sort(g.order)
	out := make([]CaseRows, 0, len(g.order))
	for _, k := range g.order {
		out = append(out, *g.groups[k])
	}
	return out
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
