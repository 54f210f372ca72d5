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
	cases, all, unparsed := caseExprs(spec)
	return "SELECT " + cases + ", " + all + ", (" + unparsed + "), (" + clampedAge(spec) + " AT TIME ZONE 'UTC')::date, count(*) FROM " + from +
		" GROUP BY 1, 2, 3, 4"
}

// caseExprs are the expressions (over alias t) of a row's cases and every
// subject (distinct, sorted text arrays) and whether a declared case field
// holds a value no case expression reads.
func caseExprs(spec TableSpec) (cases, all, unparsed string) {
	var caseVals, allVals, unparsedVals []string
	for _, s := range spec.Subjects {
		allVals = append(allVals, "(("+s.SQL+")::text)")
		if s.Kind == subject.Case {
			caseVals = append(caseVals, "(("+s.SQL+")::text)")
			if s.Field != "" {
				unparsedVals = append(unparsedVals, "(nullif(btrim(("+s.Field+")::text), '') IS NOT NULL AND ("+s.SQL+") IS NULL)")
			}
		}
	}
	agg := func(exprs []string) string {
		if len(exprs) == 0 {
			return "ARRAY[]::text[]"
		}
		return "ARRAY(SELECT DISTINCT craig_v.s FROM (VALUES " + strings.Join(exprs, ", ") + ") AS craig_v(s) WHERE craig_v.s IS NOT NULL ORDER BY 1)"
	}
	unparsed = "false"
	if len(unparsedVals) > 0 {
		unparsed = strings.Join(unparsedVals, " OR ")
	}
	return agg(caseVals), agg(allVals), unparsed
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
	k, joined := groupKey(h, all, day)
	r, ok := g.groups[k]
	if !ok {
		r = &CaseRows{Case: c, Hash: h, Others: joined, Oldest: day, Newest: day}
		g.groups[k] = r
		g.order = append(g.order, k)
	}
	r.Rows += n
	r.Oldest, r.Newest = minTime(r.Oldest, day), maxTime(r.Newest, day)
}

// groupKey is the key of the group of case h (empty: no case) whose rows
// are about every subject of all, of day, and its other subjects' hashes
// concatenated in order.
func groupKey(h []byte, all [][]byte, day time.Time) (string, []byte) {
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
	return GroupKey(h, joined, day), joined
}

// GroupKey identifies a group of rows of one table: a case's rows (hash)
// about the same other subjects (others, concatenated hashes), or, with
// no case, the rows about no case of one UTC day.
func GroupKey(hash, others []byte, day time.Time) string {
	k := string(hash) + "\x00" + string(others)
	if len(hash) == 0 {
		k += "\x00" + day.UTC().Format(time.DateOnly)
	}
	return k
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

// RowGroups is one row (a hot row by id, an archive's line by its
// ordinal from 1) and the keys of the groups it belongs to: one per case
// it is about, or its day's group of rows about no case; none when a case
// field of it cannot be read (such a row is never due).
type RowGroups struct {
	ID     string
	Groups []string
	// At is the row's age (clamped to the representable range).
	At time.Time
	// facts are its groups' (in Groups' order), for FactsOf.
	facts []CaseRows
}

// FactsOf are the case rows of rows (as HotCaseRows reads them from the
// table), computed from these rows only: a plan made from them and a
// delete by their ids see the same rows.
func FactsOf(rows []RowGroups) []CaseRows {
	byKey := map[string]*CaseRows{}
	var order []string
	for _, r := range rows {
		for i, k := range r.Groups {
			f := r.facts[i]
			c, ok := byKey[k]
			if !ok {
				c = &CaseRows{Case: f.Case, Hash: f.Hash, Others: f.Others, Oldest: f.Oldest, Newest: f.Newest}
				byKey[k] = c
				order = append(order, k)
			}
			c.Rows++
			c.Oldest, c.Newest = minTime(c.Oldest, f.Oldest), maxTime(c.Newest, f.Newest)
		}
	}
	slices.Sort(order)
	out := make([]CaseRows, 0, len(order))
	for _, k := range order {
		out = append(out, *byKey[k])
	}
	return out
}

// HotRowGroups are the groups of each of spec's hot rows.
func HotRowGroups(ctx context.Context, db prune.DB, key subject.Key, spec TableSpec) ([]RowGroups, error) {
	return readRowGroups(ctx, db, key, spec, rowCasesSQL(spec, "t.id::text", pgx.Identifier{spec.Table}.Sanitize()+" AS t"))
}

// DocRowGroups are the groups of each of an archive's lines (docs, read
// back as rows of spec's table), by ordinal.
func DocRowGroups(ctx context.Context, db prune.DB, key subject.Key, spec TableSpec, docs []string) ([]RowGroups, error) {
	return readRowGroups(ctx, db, key, spec, rowCasesSQL(spec, "craig_d.craig_ord::text", docsAsRows(spec)), docs)
}

// DeleteByIDSQL deletes spec's hot rows whose id (as text) is in $1.
func DeleteByIDSQL(spec TableSpec) string {
	return "DELETE FROM " + pgx.Identifier{spec.Table}.Sanitize() + " AS t WHERE t.id::text = ANY ($1::text[])"
}

// rowCasesSQL selects, per row (alias t) of from, id, its cases, every
// subject, whether a case field is unreadable, and its UTC day.
func rowCasesSQL(spec TableSpec, id, from string) string {
	cases, all, unparsed := caseExprs(spec)
	return "SELECT " + id + ", " + cases + ", " + all + ", (" + unparsed + "), (" + clampedAge(spec) + " AT TIME ZONE 'UTC')::date, " + clampedAge(spec) +
		" FROM " + from
}

func readRowGroups(ctx context.Context, db prune.DB, key subject.Key, spec TableSpec, sql string, args ...any) ([]RowGroups, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("row groups of %s: %w", spec.Table, err)
	}
	defer rows.Close()
	g := caseGroups{key: key, table: spec.Table, hashes: map[string][]byte{}}
	var out []RowGroups
	for rows.Next() {
		var r RowGroups
		var cases, all []string
		var unparsed bool
		var day time.Time
		if err := rows.Scan(&r.ID, &cases, &all, &unparsed, &day, &r.At); err != nil {
			return nil, fmt.Errorf("row groups of %s: %w", spec.Table, err)
		}
		if !unparsed {
			if r.Groups, r.facts, err = g.keys(cases, all, day); err != nil {
				return nil, err
			}
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("row groups of %s: %w", spec.Table, err)
	}
	return out, nil
}

// keys are the group keys of a row about cases and, in all, every
// subject, of day, with each group's facts (one row of day).
func (g *caseGroups) keys(cases, all []string, day time.Time) ([]string, []CaseRows, error) {
	allHashes := make([][]byte, 0, len(all))
	for _, v := range all {
		h, _, err := g.hash(v, false)
		if err != nil {
			return nil, nil, err
		}
		allHashes = append(allHashes, h)
	}
	if len(cases) == 0 {
		k, others := groupKey([]byte{}, allHashes, day)
		return []string{k}, []CaseRows{{Hash: []byte{}, Others: others, Oldest: day, Newest: day}}, nil
	}
	keys, facts := make([]string, 0, len(cases)), make([]CaseRows, 0, len(cases))
	for _, v := range cases {
		h, s, err := g.hash(v, true)
		if err != nil {
			return nil, nil, err
		}
		k, others := groupKey(h, allHashes, day)
		keys, facts = append(keys, k), append(facts, CaseRows{Case: s, Hash: h, Others: others, Oldest: day, Newest: day})
	}
	return keys, facts, nil
}
