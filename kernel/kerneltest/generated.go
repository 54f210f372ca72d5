package kerneltest

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archivetest"
	"github.com/craig/retention/kernel/prune"
)

// maxGeneratedRows bounds the rows CheckGenerated writes: the product of
// every value of every column the rules read. Five columns of six values
// each is under 8,000; a table that reads more is one its team seeds.
const maxGeneratedRows = 20_000

// column is one column of a swept table, as the catalog describes it.
type column struct {
	name, typ, category string
	notNull, hasDefault bool
	generated, identity bool
	expr                string // a generated column's expression
	enum                []string
	checks              []string // single-column CHECK constraints' definitions
	dependsOn           []string // a generated column's inputs
}

// CheckGenerated is the conformance suite's own rows for a swept table
// (ADR-072): from the registration alone (its age column, Eligible, Keep,
// the window) and the catalog, it writes a row for every combination of
// the values of each column the rules read (a generated column's inputs
// in its place): for a timestamp, a second each side of the window's edge,
// far past, the future and NULL; for text, every literal the rules and the
// column's CHECK name, and another; booleans, numbers around the literals,
// enum labels; NULL wherever the column allows it. It then runs the real
// batch delete and checks that every row Eligible names past the window
// went, that no other row went (a row a second inside the window may have
// crossed it meanwhile), and that no row Keep names went. A seed that
// moves columns together (created_at = sent_at) hides a delete that reads
// the wrong one; these rows do not.
func CheckGenerated(t *testing.T, db *DB, p prune.Policy) {
	t.Helper()
	require.Empty(t, GeneratedFindings(t, db, p))
}

// GeneratedFindings writes the generated rows of CheckGenerated, runs the
// sweep, and returns what it did wrong (nothing: none).
func GeneratedFindings(t *testing.T, db *DB, p prune.Policy) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), archivetest.Timeout)
	defer cancel()
	cols := catalogColumns(t, ctx, db, p.Table)
	read := readColumns(p, cols)
	require.NotEmpty(t, read, "%s: the rules read no column of the table", p.Table)

	var names, sel, from []string
	args := []any{int32(p.WindowDays)}
	product := 1
	for i, c := range insertable(cols, read) {
		vals, err := valuesOf(c, read[c.name], &args)
		require.NoError(t, err, "%s: column %s", p.Table, c.name)
		names = append(names, pgx.Identifier{c.name}.Sanitize())
		if _, ok := read[c.name]; !ok {
			sel = append(sel, vals[0]) // a filler, evaluated per row (a default-less uuid key stays unique)
			continue
		}
		product *= len(vals)
		sel = append(sel, fmt.Sprintf("v%d.v", i))
		from = append(from, fmt.Sprintf("(VALUES (%s)) AS v%d(v)", strings.Join(vals, "), ("), i))
	}
	require.LessOrEqual(t, product, maxGeneratedRows, "%s: the rules read too many columns to write every combination: seed the table", p.Table)
	table := pgx.Identifier{p.Table}.Sanitize()
	n := db.Exec(t, "INSERT INTO "+table+" ("+strings.Join(names, ", ")+") SELECT "+strings.Join(sel, ", ")+" FROM "+strings.Join(from, " CROSS JOIN ")+
		" WHERE $1::int IS NOT NULL", args...) // $1, the window, whether or not a value uses it
	require.Equal(t, int64(product), n)

	countAll := "SELECT count(*) FROM " + table
	if p.Keep != "" {
		require.Zero(t, db.Count(t, countAll+" WHERE (("+p.Eligible+") IS NOT TRUE) IS DISTINCT FROM (("+p.Keep+") IS TRUE)"),
			"%s: Keep must be true exactly for the rows Eligible is not TRUE for, on every generated row", p.Table)
	}
	// Each row's fate, written down before the sweep in a table of the
	// scratch database (compared there, as typed values): when it becomes
	// due (Eligible and past the window; never: NULL), and whether Keep
	// protects it. The sweep's own start and end bound what "due" means
	// while it runs: a row a second inside the window may cross it.
	keep := "FALSE"
	if p.Keep != "" {
		keep = "(" + p.Keep + ") IS TRUE"
	}
	db.Exec(t, "CREATE TABLE kerneltest_fate AS SELECT ctid::text AS id, CASE WHEN ("+p.Eligible+") IS TRUE THEN "+
		pgx.Identifier{p.AgeColumn}.Sanitize()+" + make_interval(days => $1::int) END AS due_at, "+keep+" AS keep, "+
		"clock_timestamp() AS sweep_started, NULL::timestamptz AS sweep_ended FROM "+table, int32(p.WindowDays))
	require.Positive(t, db.Count(t, "SELECT count(*) FROM kerneltest_fate WHERE due_at < sweep_started"),
		"%s: no generated row is due: the rules cannot be told apart", p.Table)

	q := p
	q.YieldToWriters, q.CycleCap = false, 0
	for {
		rep, err := prune.PruneTable(ctx, db.Pool, q)
		require.NoError(t, err)
		if !rep.Capped {
			break
		}
	}
	db.Exec(t, "UPDATE kerneltest_fate SET sweep_ended = clock_timestamp()")
	gone := "NOT EXISTS (SELECT 1 FROM " + table + " AS r WHERE r.ctid::text = f.id)"
	fate := func(where string) []string {
		return ctids(t, ctx, db, "SELECT f.id FROM kerneltest_fate AS f WHERE "+where)
	}
	keptGone := fate("f.keep AND " + gone)
	wrong := fate("(f.due_at IS NULL OR f.due_at >= f.sweep_ended) AND " + gone)
	missed := fate("f.due_at < f.sweep_started AND NOT " + gone)
	var findings []string
	for _, f := range []struct {
		ids  []string
		what string
	}{{keptGone, "the delete took rows Keep protects"}, {wrong, "the delete took rows Eligible does not name past the window"},
		{missed, "the delete left rows Eligible names past the window"}} {
		if len(f.ids) > 0 {
			findings = append(findings, fmt.Sprintf("%s: %s: %s", p.Table, f.what, describe(t, ctx, db, p, f.ids)))
		}
	}
	return findings
}

// describe is how a finding names rows: how many, and the first few of
// those still in the table (the deleted ones are gone).
func describe(t *testing.T, ctx context.Context, db *DB, p prune.Policy, ids []string) string {
	t.Helper()
	slices.Sort(ids)
	rows, err := db.Pool.Query(ctx, "SELECT t::text FROM "+pgx.Identifier{p.Table}.Sanitize()+" AS t WHERE ctid::text = ANY ($1) LIMIT 5", ids)
	require.NoError(t, err)
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return fmt.Sprintf("%d rows (ctids %v); still in the table: %v", len(ids), ids[:min(len(ids), 5)], left)
}

func ctids(t *testing.T, ctx context.Context, db *DB, sql string, args ...any) []string {
	t.Helper()
	rows, err := db.Pool.Query(ctx, sql, args...)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return ids
}

// catalogColumns reads the table's columns, their single-column CHECKs and
// a generated column's inputs from the catalog.
func catalogColumns(t *testing.T, ctx context.Context, db *DB, table string) []column {
	t.Helper()
	rel := pgx.Identifier{table}.Sanitize()
	rows, err := db.Pool.Query(ctx, `
SELECT a.attname, format_type(a.atttypid, a.atttypmod), ty.typcategory::text, a.attnotnull, a.atthasdef,
       a.attgenerated <> '', a.attidentity = 'a',
       COALESCE((SELECT pg_get_expr(ad.adbin, ad.adrelid) FROM pg_attrdef AS ad
                 WHERE a.attgenerated <> '' AND ad.adrelid = a.attrelid AND ad.adnum = a.attnum), ''),
       COALESCE((SELECT array_agg(e.enumlabel::text ORDER BY e.enumsortorder) FROM pg_enum AS e WHERE e.enumtypid = a.atttypid), '{}'),
       COALESCE((SELECT array_agg(pg_get_constraintdef(c.oid)) FROM pg_constraint AS c
                 WHERE c.conrelid = a.attrelid AND c.contype = 'c' AND c.conkey = ARRAY[a.attnum]), '{}'),
       COALESCE((SELECT array_agg(DISTINCT src.attname::text) FROM pg_attrdef AS ad
                 JOIN pg_depend AS d ON d.classid = 'pg_attrdef'::regclass AND d.objid = ad.oid
                 JOIN pg_attribute AS src ON src.attrelid = d.refobjid AND src.attnum = d.refobjsubid
                 WHERE a.attgenerated <> '' AND ad.adrelid = a.attrelid AND ad.adnum = a.attnum
                   AND d.refobjid = a.attrelid AND d.refobjsubid > 0 AND d.refobjsubid <> a.attnum), '{}')
FROM pg_attribute AS a JOIN pg_type AS ty ON ty.oid = a.atttypid
WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum`, rel)
	require.NoError(t, err)
	var cols []column
	for rows.Next() {
		var c column
		require.NoError(t, rows.Scan(&c.name, &c.typ, &c.category, &c.notNull, &c.hasDefault, &c.generated, &c.identity, &c.expr, &c.enum, &c.checks, &c.dependsOn))
		cols = append(cols, c)
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, cols, "%s: no columns", table)
	return cols
}

var (
	identRE   = regexp.MustCompile(`"((?:[^"]|"")+)"|[A-Za-z_][A-Za-z0-9_$]*`)
	stringRE  = regexp.MustCompile(`'((?:[^']|'')*)'`)
	numberRE  = regexp.MustCompile(`(?:^|[^A-Za-z0-9_'])(-?\d+(?:\.\d+)?)`)
	otherText = "conformance-other"
)

// readColumns are the columns the rules (age column, Eligible, Keep) name,
// a generated column's inputs in its place, each with the rules' text
// (where its literals come from).
func readColumns(p prune.Policy, cols []column) map[string]string {
	byName := map[string]column{}
	for _, c := range cols {
		byName[c.name] = c
	}
	rules := pgx.Identifier{p.AgeColumn}.Sanitize() + " " + p.Eligible + " " + p.Keep
	read := map[string]string{}
	var add func(name string)
	add = func(name string) {
		c, ok := byName[name]
		if !ok {
			return
		}
		if c.generated {
			for _, in := range c.dependsOn {
				add(in)
			}
			return
		}
		read[name] = rules
	}
	for _, m := range identRE.FindAllStringSubmatch(rules, -1) {
		name := m[0]
		if m[1] != "" {
			name = strings.ReplaceAll(m[1], `""`, `"`)
		}
		add(name)
	}
	for _, c := range cols { // a generated column's own literals (its CASE's states) are the rules' too
		if c.generated && strings.Contains(rules, c.name) {
			for _, in := range c.dependsOn {
				if _, ok := read[in]; ok {
					read[in] += " " + c.expr
				}
			}
		}
	}
	return read
}

// insertable are the columns an INSERT names: the read ones, and every
// other one that needs a value (NOT NULL, no default).
func insertable(cols []column, read map[string]string) []column {
	var out []column
	for _, c := range cols {
		if c.generated || c.identity {
			continue
		}
		if _, ok := read[c.name]; ok || (c.notNull && !c.hasDefault) {
			out = append(out, c)
		}
	}
	return out
}

// valuesOf are the typed SQL expressions of column c's values (parameters
// appended to args; $1 is the window in days). rules is empty for a column
// the rules do not read (one filler value).
func valuesOf(c column, rules string, args *[]any) ([]string, error) {
	param := func(v any, cast string) string {
		*args = append(*args, v)
		return fmt.Sprintf("$%d::%s::%s", len(*args), cast, c.typ)
	}
	var vals []string
	switch {
	case rules == "":
		filler, ok := map[string]string{"S": "'conformance'", "N": "0", "B": "false", "D": "now()", "A": "'{}'"}[c.category]
		switch {
		case len(c.enum) > 0:
			return []string{param(c.enum[0], "text")}, nil
		case c.typ == "uuid":
			filler = "gen_random_uuid()"
		case c.typ == "jsonb" || c.typ == "json":
			filler = "'{}'"
		case !ok:
			return nil, fmt.Errorf("type %s is not one the generated rows know: seed the table", c.typ)
		}
		return []string{"(" + filler + ")::" + c.typ}, nil
	case len(c.enum) > 0:
		for _, l := range c.enum {
			vals = append(vals, param(l, "text"))
		}
	case c.category == "D" && c.typ == "date":
		edge := "((now() AT TIME ZONE 'UTC')::date - $1::int)"
		for _, v := range []string{edge + " - 1", edge + " + 1", edge + " + 2", edge + " - 1000", "(now() AT TIME ZONE 'UTC')::date + 1"} {
			vals = append(vals, "("+v+")::"+c.typ)
		}
	case c.category == "D":
		edge := "(now() - make_interval(days => $1::int))"
		for _, v := range []string{edge + " - interval '1 second'", edge + " + interval '1 second'", edge + " + interval '1 hour'", edge + " - interval '1000 days'",
			"now() + interval '1 hour'"} {
			vals = append(vals, "("+v+")::"+c.typ)
		}
	case c.category == "B":
		vals = []string{"true", "false"}
	case c.category == "S":
		seen := map[string]bool{}
		constrained := false
		for _, chk := range c.checks {
			for _, m := range stringRE.FindAllStringSubmatch(chk, -1) {
				seen[strings.ReplaceAll(m[1], "''", "'")] = true
				constrained = true
			}
		}
		if !constrained {
			for _, m := range stringRE.FindAllStringSubmatch(rules, -1) {
				seen[strings.ReplaceAll(m[1], "''", "'")] = true
			}
			seen[otherText] = true
		}
		for _, s := range slices.Sorted(maps.Keys(seen)) {
			vals = append(vals, param(s, "text"))
		}
	case c.category == "N":
		seen := map[string]bool{"0": true}
		for _, m := range numberRE.FindAllStringSubmatch(rules, -1) {
			seen[m[1]] = true
		}
		for _, s := range slices.Sorted(maps.Keys(seen)) {
			for _, d := range []string{"-1", "0", "1"} {
				vals = append(vals, fmt.Sprintf("(%s + %s)::%s", param(s, "numeric"), d, c.typ))
			}
		}
	default:
		return nil, fmt.Errorf("the rules read it, and type %s is not one the generated rows vary: seed the table", c.typ)
	}
	if !c.notNull {
		vals = append(vals, "NULL::"+c.typ)
	}
	return vals, nil
}
