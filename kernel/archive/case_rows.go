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
	hashes := map[string][]byte{}
	hashOf := func(v string, wantCase bool) ([]byte, subject.Subject, error) {
		s, err := subject.Parse(v)
		if err != nil || s.String() != v || (wantCase && s.Kind() != subject.Case) {
			return nil, subject.Subject{}, fmt.Errorf("%w: table %s yielded a value that is not a canonical subject", ErrSubject, spec.Table)
		}
		h, ok := hashes[v]
		if !ok {
			h = key.Hash(s)
			hashes[v] = h
		}
		return h, s, nil
	}
	groups := map[string]*CaseRows{}
	var order []string
	for rows.Next() {
		var cases, all []string
		var unparsed bool
		var day time.Time
		var n int64
		if err := rows.Scan(&cases, &all, &unparsed, &day, &n); err != nil {
			return nil, fmt.Errorf("case rows of %s: %w", spec.Table, err)
		}
		if len(cases) == 0 && unparsed {
			continue // a case nobody can name: never due (and counted as unparsed)
		}
		allHashes := make([][]byte, 0, len(all))
		for _, v := range all {
			h, _, err := hashOf(v, false)
			if err != nil {
				return nil, err
			}
			allHashes = append(allHashes, h)
		}
		add := func(c subject.Subject, h []byte) {
			var others [][]byte
			for _, o := range allHashes {
				if !bytes.Equal(o, h) {
					others = append(others, o)
				}
			}
			slices.SortFunc(others, bytes.Compare)
			k := string(h) + "\x00" + string(bytes.Join(others, nil))
			if len(h) == 0 {
				k += "\x00" + day.Format(time.DateOnly)
			}
			g, ok := groups[k]
			if !ok {
				g = &CaseRows{Case: c, Hash: h, Others: bytes.Join(others, nil), Oldest: day, Newest: day}
				if g.Others == nil {
					g.Others = []byte{}
				}
				groups[k] = g
				order = append(order, k)
			}
			g.Rows += n
			g.Oldest, g.Newest = minTime(g.Oldest, day), maxTime(g.Newest, day)
		}
		if len(cases) == 0 {
			add(subject.Subject{}, []byte{})
			continue
		}
		for _, v := range cases {
			h, s, err := hashOf(v, true)
			if err != nil {
				return nil, err
			}
			add(s, h)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("case rows of %s: %w", spec.Table, err)
	}
	slices.Sort(order)
	out := make([]CaseRows, 0, len(order))
	for _, k := range order {
		out = append(out, *groups[k])
	}
	return out, nil
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
