package archive

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"strings"

	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/subject"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Subject declares one subject of an archived table (ADR-066):
// what its rows are about, computed by the database from the row.
type Subject struct {
	// Kind is the kind of subject the expression yields.
	Kind subject.Kind
	// SQL is an expression over the table's columns (unqualified) that
	// yields the row's subject in its canonical spelling (<kind>:<digits>)
	// or NULL, and never raises (an error it raises is reported by its
	// SQLSTATE only, RedactRowValues, and stops the table's pass): a call
	// of the table's subject function (migrations/<service>), with an
	// index on exactly this expression so
	// the hot rows of a subject are found through it. It is the service's
	// own code, never input; the kernel builds its subject queries from it.
	SQL string
	// Field is the raw value SQL reads (an expression over the same
	// columns, e.g. input ->> 'case_id'), or "" when there is none to
	// check: a row whose Field holds a digit while SQL yields NULL is a
	// spelling of a subject the canonical form does not take, counted as
	// unparsed (retention_subject_unparsed_rows{table}, the
	// <table>_subject_unparsed invariant, an expungement's answer), since
	// fetch, holds, seals and orders cannot reach it. Not part of the
	// declaration: changing it re-indexes nothing.
	Field string
}

// UnparsedSQL counts a table's rows whose declared subject fields hold a
// digit but yield no subject (Subject.Field); "" when no subject of the
// spec declares a field. It reads every hot row: a watchdog's query, not a
// pass's.
func UnparsedSQL(spec TableSpec) string {
	var conds []string
	for _, sub := range spec.Subjects {
		if sub.Field != "" {
			conds = append(conds, "((("+sub.Field+") ~ '[0-9]') AND ("+sub.SQL+") IS NULL)")
		}
	}
	if len(conds) == 0 {
		return ""
	}
	return "SELECT count(*) FROM " + pgx.Identifier{spec.Table}.Sanitize() + " AS t WHERE " + strings.Join(conds, " OR ")
}

// RedactRowValues returns err with a database error's message, detail,
// hint and context withheld, keeping its SQLSTATE: a table's subject
// expression that raises (its contract is never to) reports the value it
// could not read, a subject in clear, and errors reach reports, logs and
// API answers. errors.As still finds a *pgconn.PgError, carrying only the
// code and severity. Any other error is returned as is.
func RedactRowValues(err error) error {
	var pg *pgconn.PgError
	if !errors.As(err, &pg) {
		return err
	}
	return &redactedPgError{pg: &pgconn.PgError{Severity: pg.Severity, SeverityUnlocalized: pg.SeverityUnlocalized, Code: pg.Code,
		Message: "message withheld: it may quote a row's value"}}
}

// redactedPgError is a database error with only its code (RedactRowValues).
type redactedPgError struct{ pg *pgconn.PgError }

func (e *redactedPgError) Error() string {
	return fmt.Sprintf("database error, SQLSTATE %s (its message is withheld: it may quote a row's value)", e.pg.Code)
}

func (e *redactedPgError) Unwrap() error { return e.pg }

// ErrSubject: a table's subject expression returned a value that is not a
// canonical subject (the table's function is wrong; the value is not
// repeated: a subject is not logged in clear).
var ErrSubject = errors.New("archive: subject expression")

func (s Subject) check() error {
	if s.Kind != subject.Case && s.Kind != subject.Person {
		return fmt.Errorf("subject kind %q: one of %v", s.Kind, subject.Kinds())
	}
	if strings.TrimSpace(s.SQL) == "" || strings.Contains(s.SQL, ";") {
		return fmt.Errorf("subject %s: SQL must be one expression", s.Kind)
	}
	return nil
}

// subjectValues is the VALUES list of a spec's subject expressions, one
// row each (over the row alias t).
func subjectValues(spec TableSpec) string {
	parts := make([]string, len(spec.Subjects))
	for i, s := range spec.Subjects {
		parts[i] = "((" + s.SQL + ")::text)"
	}
	return "(VALUES " + strings.Join(parts, ", ") + ") AS craig_s(subject)"
}

// SubjectMatch is the WHERE clause that selects a spec's rows (alias t)
// whose declared subject is $n: each expression compared alone, so each
// can use its index.
func SubjectMatch(spec TableSpec, n int) string {
	parts := make([]string, len(spec.Subjects))
	for i, s := range spec.Subjects {
		parts[i] = fmt.Sprintf("(%s) = $%d", s.SQL, n)
	}
	return "(" + strings.Join(parts, " OR ") + ")"
}

// clampedAge is the spec's age column (alias t) clamped into years
// 1..9999, as manifests record it.
func clampedAge(spec TableSpec) string {
	age := "t." + pgx.Identifier{spec.AgeColumn}.Sanitize()
	return "LEAST(GREATEST(" + age + ", '0001-01-01 00:00:00+00'::timestamptz), '9999-12-31 23:59:59.999999+00'::timestamptz)"
}

// HotSubjectSQL selects the hot rows of spec whose subject is $1: their
// to_jsonb text, clamped age and id, oldest first.
func HotSubjectSQL(spec TableSpec) string {
	tbl, age := pgx.Identifier{spec.Table}.Sanitize(), "t."+pgx.Identifier{spec.AgeColumn}.Sanitize()
	return "SELECT to_jsonb(t)::text, " + clampedAge(spec) + ", t.id FROM " + tbl + " AS t WHERE " +
		SubjectMatch(spec, 1) + " ORDER BY " + age + ", t.id"
}

// docsAsRows is the FROM list that turns $1 (text[] of archived documents)
// back into rows of spec's table (alias t), numbered by craig_d.craig_ord:
// the subject expressions then read an archived row exactly as a hot one.
func docsAsRows(spec TableSpec) string {
	return "unnest($1::text[]) WITH ORDINALITY AS craig_d(craig_doc, craig_ord) " +
		"CROSS JOIN LATERAL jsonb_populate_record(NULL::" + pgx.Identifier{spec.Table}.Sanitize() + ", craig_d.craig_doc::jsonb) AS t"
}

// DocSubjectSQL selects, of the archived documents $1, the ordinals (from
// 1) and clamped ages of those whose subject is $2.
func DocSubjectSQL(spec TableSpec) string {
	return "SELECT craig_d.craig_ord, " + clampedAge(spec) + " FROM " + docsAsRows(spec) + " WHERE " + SubjectMatch(spec, 2)
}

// The subject queries below select NULL too (a row about no subject of a
// kind), for Hashes to skip: a filter on the subject would be pushed down
// to the scan and compute every subject twice, once to filter and once to
// return it (measured 12-15 ms against 7-9 for a batch of 1,000 rules
// rows, ADR-076).

// DocSubjectsSQL selects the distinct subjects of the archived documents
// $1 (the backfill), and NULL when a document is about no subject of a
// kind.
func DocSubjectsSQL(spec TableSpec) string {
	return "SELECT DISTINCT craig_s.subject FROM " + docsAsRows(spec) + " CROSS JOIN LATERAL " + subjectValues(spec)
}

// rowSubjectsSQL selects the distinct subjects of spec's rows with ids $1,
// and NULL when a row is about no subject of a kind.
func rowSubjectsSQL(spec TableSpec) string {
	return "SELECT DISTINCT craig_s.subject FROM " + pgx.Identifier{spec.Table}.Sanitize() + " AS t CROSS JOIN LATERAL " +
		subjectValues(spec) + " WHERE t.id = ANY ($1::uuid[])"
}

// Hashes reads subjects (each must be canonical; a NULL is no subject and
// is skipped) from a query and returns their keyed hashes.
func Hashes(ctx context.Context, db prune.DB, key subject.Key, table, sql string, args ...any) ([][]byte, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("subjects of %s: %w", table, RedactRowValues(err))
	}
	vals, err := pgx.CollectRows(rows, pgx.RowTo[*string])
	if err != nil {
		return nil, fmt.Errorf("subjects of %s: %w", table, RedactRowValues(err))
	}
	subjects := make([]subject.Subject, 0, len(vals))
	for _, p := range vals {
		if p == nil {
			continue
		}
		v := *p
		s, err := subject.Parse(v)
		if err != nil || s.String() != v {
			return nil, fmt.Errorf("%w: table %s yielded a value that is not a canonical subject (<kind>:<digits>)", ErrSubject, table)
		}
		subjects = append(subjects, s)
	}
	return key.HashAll(subjects), nil
}

// subjectsOf returns the keyed hashes of the subjects of a batch's rows and
// whether the archive will be indexed: a table with no subjects is indexed
// by nothing; one with subjects needs the key (without it the archive is
// booked unindexed, for the backfill).
func (e *Engine) subjectsOf(ctx context.Context, spec TableSpec, ids []uuid.UUID) ([][]byte, bool, error) {
	if len(spec.Subjects) == 0 {
		return nil, true, nil
	}
	if !e.cfg.SubjectKey.Valid() {
		return nil, false, nil
	}
	hs, err := Hashes(ctx, e.pool, e.cfg.SubjectKey, spec.Table, rowSubjectsSQL(spec), ids)
	if err != nil {
		return nil, false, err
	}
	return hs, true, nil
}

// IndexSubjects writes an archive's subject index in tx (its booking's
// transaction, or the backfill's) and, when indexed, marks it so; then
// recomputes its legal_hold (a subject hold may cover it) and returns it.
func IndexSubjects(ctx context.Context, tx pgx.Tx, archiveID uuid.UUID, hashes [][]byte, indexed bool) (queries.RefreshArchiveHoldRow, error) {
	q := queries.New(tx)
	id := pgtype.UUID{Bytes: archiveID, Valid: true}
	if len(hashes) > 0 {
		if err := q.InsertArchiveSubjects(ctx, queries.InsertArchiveSubjectsParams{ArchiveID: id, Hashes: hashes}); err != nil {
			return queries.RefreshArchiveHoldRow{}, fmt.Errorf("subject index of %s: %w", archiveID, err)
		}
	}
	if indexed {
		if err := q.MarkSubjectsIndexed(ctx, id); err != nil {
			return queries.RefreshArchiveHoldRow{}, fmt.Errorf("mark %s indexed: %w", archiveID, err)
		}
	}
	row, err := q.RefreshArchiveHold(ctx, id)
	if err != nil {
		return row, fmt.Errorf("hold state of %s: %w", archiveID, err)
	}
	return row, nil
}

// ErrSubjectKeyChanged: the configured subject key is not the one the
// database's subject index was built with.
var ErrSubjectKeyChanged = errors.New("archive: the subject key differs from the one the subject index was built with")

// BindSubjectKey records key's fingerprint in the database on first use,
// and refuses (ErrSubjectKeyChanged) a key whose fingerprint differs from
// the one recorded: with another key every lookup of the index misses, and
// a subject hold would cover none of the archives it must keep. A zero key
// binds nothing.
func BindSubjectKey(ctx context.Context, db prune.DB, key subject.Key) error {
	if !key.Valid() {
		return nil
	}
	bound, err := queries.New(db).BindSubjectKey(ctx, key.Fingerprint())
	if errors.Is(err, pgx.ErrNoRows) { // another service bound one after this statement's snapshot
		bound, err = queries.New(db).SubjectKeyFingerprint(ctx)
	}
	if err != nil {
		return fmt.Errorf("bind the subject key: %w", err)
	}
	if !hmac.Equal(bound, key.Fingerprint()) {
		return ErrSubjectKeyChanged
	}
	return nil
}

// Declaration is the text that identifies a spec's subject declaration
// (its kinds and expressions; "" for none).
func Declaration(spec TableSpec) string {
	parts := make([]string, len(spec.Subjects))
	for i, sub := range spec.Subjects {
		parts[i] = string(sub.Kind) + "=" + sub.SQL
	}
	return strings.Join(parts, "; ")
}

// SyncSubjectDeclarations records each table's subject declaration and,
// for a table whose declaration differs from the one recorded (or none was
// recorded), marks its unpurged archives unindexed: they were indexed by
// other subjects (a table that gained a subject was indexed by none), so
// the backfill must read them again, and until it has a subject hold is
// refused and a subject read reads them. It returns, per table, how many
// archives it marked.
func SyncSubjectDeclarations(ctx context.Context, pool *pgxpool.Pool, specs []TableSpec) (map[string]int64, error) {
	out := map[string]int64{}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		q := queries.New(tx)
		for _, spec := range specs {
			decl := Declaration(spec)
			recorded, err := q.SubjectDeclaration(ctx, spec.Table)
			switch {
			case err == nil && recorded == decl:
				continue
			case err != nil && !errors.Is(err, pgx.ErrNoRows):
				return fmt.Errorf("subject declaration of %s: %w", spec.Table, err)
			}
			n, err := q.UnindexTable(ctx, spec.Table)
			if err != nil {
				return fmt.Errorf("unindex %s: %w", spec.Table, err)
			}
			if n > 0 {
				out[spec.Table] = n
				// Unindexed, its archives are covered by every active
				// subject hold (archive_is_held): legal_hold says so now,
				// and the lock reconciler puts the store's holds on them.
				if _, err := q.RefreshLegalHolds(ctx); err != nil {
					return fmt.Errorf("legal holds after unindexing %s: %w", spec.Table, err)
				}
			}
			if err := q.RecordSubjectDeclaration(ctx, queries.RecordSubjectDeclarationParams{TableName: spec.Table, Declaration: decl}); err != nil {
				return fmt.Errorf("record the subject declaration of %s: %w", spec.Table, err)
			}
		}
		return nil
	})
	return out, err
}

// DocOrdSubjectsSQL selects, of the archived (or to_jsonb) documents $1,
// each document's ordinal (from 1) and each of its subjects: what a read
// checks against the sealed subjects and an expungement against its own.
func DocOrdSubjectsSQL(spec TableSpec) string {
	return "SELECT craig_d.craig_ord, craig_s.subject FROM " + docsAsRows(spec) + " CROSS JOIN LATERAL " + subjectValues(spec) +
		" WHERE craig_s.subject IS NOT NULL"
}

// DocIDAgeSQL selects, of the archived documents $1, each one's ordinal
// (from 1), id and clamped age: what a rewritten archive's manifest and
// ledger row are computed from.
func DocIDAgeSQL(spec TableSpec) string {
	return "SELECT craig_d.craig_ord, t.id, " + clampedAge(spec) + " FROM " + docsAsRows(spec) + " ORDER BY craig_d.craig_ord"
}

// SubjectRowsSubjectsSQL selects every subject of spec's rows whose
// subject is $1 (the other subjects of a row about it too), and NULL
// when such a row is about no subject of a kind.
func SubjectRowsSubjectsSQL(spec TableSpec) string {
	return "SELECT DISTINCT craig_s.subject FROM " + pgx.Identifier{spec.Table}.Sanitize() + " AS t CROSS JOIN LATERAL " + subjectValues(spec) +
		" WHERE " + SubjectMatch(spec, 1)
}

// insertableColumnsSQL reads the columns of a table an INSERT may write
// (not generated, not an identity ALWAYS); the table name is a bound
// parameter.
const insertableColumnsSQL = `SELECT column_name::text FROM information_schema.columns
WHERE table_schema = current_schema() AND table_name = $1 AND is_generated = 'NEVER' AND coalesce(identity_generation, '') <> 'ALWAYS'
ORDER BY ordinal_position`

// PutBack inserts into spec's table each archived document of docs whose
// row it lacks (ON CONFLICT DO NOTHING: a row still hot stays as it is),
// every insertable column read from the document as the table's types
// read it, and returns how many rows it inserted. It brings back rows a
// database restore lost whose only copy is an archive object the restored
// ledger does not know.
func PutBack(ctx context.Context, db prune.DB, spec TableSpec, docs []string) (int64, error) {
	rows, err := db.Query(ctx, insertableColumnsSQL, spec.Table)
	if err != nil {
		return 0, fmt.Errorf("columns of %s: %w", spec.Table, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("columns of %s: %w", spec.Table, err)
	}
	if len(names) == 0 {
		return 0, fmt.Errorf("columns of %s: table not found in the current schema", spec.Table)
	}
	cols, vals := make([]string, len(names)), make([]string, len(names))
	for i, n := range names {
		cols[i] = pgx.Identifier{n}.Sanitize()
		vals[i] = "t." + cols[i]
	}
	tag, err := db.Exec(ctx, "INSERT INTO "+pgx.Identifier{spec.Table}.Sanitize()+" ("+strings.Join(cols, ", ")+") SELECT "+strings.Join(vals, ", ")+
		" FROM "+docsAsRows(spec)+" ON CONFLICT DO NOTHING", docs)
	if err != nil {
		return 0, fmt.Errorf("put back rows of %s: %w", spec.Table, err)
	}
	return tag.RowsAffected(), nil
}
