package archive

import (
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
// lines) holds of one case (ADR-073): how many rows are about it and the
// UTC days of the oldest and newest. With a zero Case, they are the rows
// about no case of one UTC day (each of them uses its own date).
type CaseRows struct {
	Case   subject.Subject
	Hash   []byte // the case's keyed hash; empty for no case
	Oldest time.Time
	Newest time.Time
	Rows   int64
}

// caseDaysSQL groups rows (alias t) by each case subject they declare
// (NULL: none) and the UTC day of their age column. A row about two cases
// counts for each. from is the FROM item that yields t.
func caseDaysSQL(spec TableSpec, from string) string {
	var parts []string
	for _, s := range spec.Subjects {
		if s.Kind == subject.Case {
			parts = append(parts, "(("+s.SQL+")::text)")
		}
	}
	cases := "SELECT NULL::text AS subject WHERE false"
	if len(parts) > 0 {
		cases = "SELECT DISTINCT craig_s.subject FROM (VALUES " + strings.Join(parts, ", ") + ") AS craig_s(subject) WHERE craig_s.subject IS NOT NULL"
	}
	return "SELECT craig_c.subject, (" + clampedAge(spec) + " AT TIME ZONE 'UTC')::date, count(*) FROM " + from +
		" LEFT JOIN LATERAL (" + cases + ") AS craig_c ON true GROUP BY 1, 2"
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
	byCase := map[string]*CaseRows{}
	var out []CaseRows
	for rows.Next() {
		var subj *string
		var day time.Time
		var n int64
		if err := rows.Scan(&subj, &day, &n); err != nil {
			return nil, fmt.Errorf("case rows of %s: %w", spec.Table, err)
		}
		if subj == nil {
			out = append(out, CaseRows{Hash: []byte{}, Oldest: day, Newest: day, Rows: n})
			continue
		}
		c, ok := byCase[*subj]
		if !ok {
			s, err := subject.Parse(*subj)
			if err != nil || s.String() != *subj || s.Kind() != subject.Case {
				return nil, fmt.Errorf("%w: table %s yielded a value that is not a canonical case (case:<digits>)", ErrSubject, spec.Table)
			}
			c = &CaseRows{Case: s, Hash: key.Hash(s), Oldest: day, Newest: day}
			byCase[*subj] = c
		}
		c.Rows += n
		c.Oldest, c.Newest = minTime(c.Oldest, day), maxTime(c.Newest, day)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("case rows of %s: %w", spec.Table, err)
	}
	for _, c := range byCase {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b CaseRows) int {
		if c := strings.Compare(string(a.Hash), string(b.Hash)); c != 0 {
			return c
		}
		return a.Newest.Compare(b.Newest)
	})
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
