package subject_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/migrate"
	"github.com/craig/retention/migrations"
)

func hostileValues() []string {
	var in []string
	for _, pre := range []string{"", "case", "CASE", "Case", "person", "PERSON", "Person", "cas", "c", "1", "0", "a+", "a", "(", "x", " ", "#", "+", "caſe", "\u212a"} {
		for _, sep := range []string{"", "-", ":", "_", "/", "--", " ", ".", "\u2003", "#", "+"} {
			for _, d := range []string{"", "0", "00", "17", "017", "0017", strings.Repeat("9", 30), strings.Repeat("9", 31), "0" + strings.Repeat("9", 30),
				strings.Repeat("0", 40), "17.0", "١٧", "１７", "17 ", "17x", "-17"} {
				in = append(in, pre+sep+d)
			}
		}
	}
	return in
}

// TestHostileFastPathAgreesForEveryKind: the third version answers as the
// second for the kinds 'case' and 'person' in any letter case, and the
// empty kind, over a corpus of prefixes, separators and digits.
func TestHostileFastPathAgreesForEveryKind(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := kerneltest.NewDB(t, migrations.Transport())
	installV2(t, db)
	rows, err := db.Pool.Query(ctx, `SELECT format('%L %L: %s, was %s', k, v, coalesce(retention_subject(k, v), 'NULL'), coalesce(retention_subject_v2(k, v), 'NULL'))
		FROM unnest($1::text[]) AS v, unnest($2::text[]) AS k
		WHERE retention_subject(k, v) IS DISTINCT FROM retention_subject_v2(k, v)`,
		hostileValues(), []string{"case", "person", "Case", "CASE", "Person", "PERSON", "", "c", "1", "0"})
	require.NoError(t, err)
	diffs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Empty(t, diffs)
}

// TestHostileFastPathKindWithRegexCharacters: a kind holding a regular
// expression's characters answers as the second version does, which reads
// the kind as a pattern ('a+' matches 'a', then '+' is the number's sign;
// '(' is an invalid pattern, an error): the fast path takes only kinds of
// lower-case ASCII letters (it answered 'a+:17' for ('a+', 'a+-17') and
// '(:17' for ('(', '17') when it compared any kind as text).
func TestHostileFastPathKindWithRegexCharacters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := kerneltest.NewDB(t, migrations.Transport())
	installV2(t, db)
	rows, err := db.Pool.Query(ctx, `SELECT format('%L %L: %s, was %s', k, v, coalesce(retention_subject(k, v), 'NULL'), coalesce(retention_subject_v2(k, v), 'NULL'))
		FROM unnest($1::text[]) AS v, unnest($2::text[]) AS k
		WHERE retention_subject(k, v) IS DISTINCT FROM retention_subject_v2(k, v)`,
		hostileValues(), []string{"a+", "c.se", "ca*e"})
	require.NoError(t, err)
	diffs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Empty(t, diffs[:min(10, len(diffs))], "%d values differ", len(diffs))
	var v3, v2 *string
	err3 := db.Pool.QueryRow(ctx, `SELECT retention_subject('(', '17')`).Scan(&v3)
	err2 := db.Pool.QueryRow(ctx, `SELECT retention_subject_v2('(', '17')`).Scan(&v2)
	require.Error(t, err2, "the second version reads '(' as a pattern")
	require.Error(t, err3, "the third answers as the second does: %v", v3)
}

// TestHostileIndexBuiltBeforeFastPath: an expression index built by the
// second version, rows written before 00011, then 00011 applied: an index
// lookup (and a sequential scan) finds exactly the rows the second version
// indexed, for every spelling of the corpus, under an odd session.
func TestHostileIndexBuiltBeforeFastPath(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := kerneltest.NewDB(t, transportBefore(t, "00011"))
	db.Exec(t, `CREATE TABLE notes (id int PRIMARY KEY, case_id text)`)
	db.Exec(t, `CREATE INDEX notes_case_idx ON notes (retention_subject('case', case_id))`)
	db.Exec(t, `INSERT INTO notes SELECT n, v FROM unnest($1::text[]) WITH ORDINALITY AS x (v, n)`, hostileValues())
	db.Exec(t, `CREATE TABLE before AS SELECT id, retention_subject('case', case_id) AS s FROM notes`)
	_, err := migrate.Up(ctx, stdlib.OpenDBFromPool(db.Pool), []migrations.Set{migrations.Transport()}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	db.Exec(t, `ANALYZE notes`)
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SET LOCAL enable_seqscan = off; SET LOCAL TimeZone = 'Pacific/Kiritimati'; SET LOCAL DateStyle = 'SQL, DMY'`)
	require.NoError(t, err)
	rows, err := tx.Query(ctx, `SELECT format('%s %s', b.id, b.s) FROM before AS b
		WHERE b.s IS NOT NULL AND NOT EXISTS (SELECT 1 FROM notes AS n WHERE retention_subject('case', n.case_id) = b.s AND n.id = b.id)`)
	require.NoError(t, err)
	missing, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Empty(t, missing, "rows the index holds are found")
	require.Zero(t, count(t, tx, `SELECT count(*) FROM before AS b JOIN notes AS n USING (id) WHERE b.s IS DISTINCT FROM retention_subject('case', n.case_id)`))
}

func count(t *testing.T, tx pgx.Tx, q string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, tx.QueryRow(context.Background(), q).Scan(&n))
	return n
}
