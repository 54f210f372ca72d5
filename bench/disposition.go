package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/disposition"
	"github.com/craig/retention/kernel/pgsession"
	"github.com/craig/retention/kernel/schedule"
	"github.com/craig/retention/kernel/subject"
	"github.com/craig/retention/services/rules"
)

// Disposition scenario constants.
const (
	// dispositionCasesPerArchive is how many cases each archive holds (a
	// case's evaluations come in bursts), as in the read scenario.
	dispositionCasesPerArchive = 10
	// dispositionCases is how many cases the archives spread over.
	dispositionCases = 50_000
	// dispositionDueCases is how many of them closed long enough ago to
	// be due (the 10,000 due cases).
	dispositionDueCases = 10_000
	// dispositionRowsPerArchive is each archive's record count.
	dispositionRowsPerArchive = 1_000
)

// dispositionSchedule keeps rule_evaluations a day after the case closed:
// every closed case is due.
const dispositionSchedule = `version: "bench"
items:
  - id: BENCH-1
    series: rule_evaluations
    starts: case.closed
    retain: P1D
    authority: bench schedule
`

// runDisposition measures the due listing (disposition.Finder.Find, the
// query behind GET /admin/dispositions/due) over ReadArchives indexed
// archives of dispositionCasesPerArchive cases each, dispositionDueCases of
// the cases closed and due, in Rounds rounds; the median is
// disposition_due_list_ms. The archives are ledger rows with their case
// rows (the listing reads no object).
func (r *runner) runDisposition(ctx context.Context) (*DispositionResult, error) {
	name := r.srv.name("disposition")
	dbURL, err := r.srv.create(ctx, name, "")
	if err != nil {
		return nil, err
	}
	defer r.discard(name)
	if err := migrateDB(ctx, dbURL, rules.Spec().MigrationSets()); err != nil {
		return nil, err
	}
	pool, err := pgsession.NewPool(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	key, err := subject.NewKey(secret)
	if err != nil {
		return nil, err
	}
	res := &DispositionResult{Archives: r.cfg.ReadArchives, CasesPerArchive: dispositionCasesPerArchive}
	start := time.Now()
	sch, err := seedDispositionWorld(ctx, pool, key, r.cfg.ReadArchives)
	if err != nil {
		return nil, fmt.Errorf("seed the disposition scenario: %w", err)
	}
	res.SeedSeconds = round3(time.Since(start).Seconds())
	spec := archive.TableSpec{Table: evaluationsTable, AgeColumn: "evaluated_at",
		Subjects: []archive.Subject{{Kind: subject.Case, SQL: "rule_evaluations_case(input)", Field: "input ->> 'case_id'"}}}
	f := disposition.NewFinder(pool, key, []archive.TableSpec{spec}, sch)
	var ms []float64
	for round := range r.cfg.Rounds {
		t0 := time.Now()
		due, err := f.Find(ctx, time.Now(), 0)
		if err != nil {
			return nil, fmt.Errorf("disposition round %d: %w", round+1, err)
		}
		ms = append(ms, float64(time.Since(t0).Microseconds())/1000)
		cases, rows := 0, int64(0)
		for _, it := range due.Items {
			cases += len(it.Cases)
			rows += it.Rows
		}
		res.DueCases, res.DueRows = cases, rows
		r.cfg.logf("disposition round %d/%d: due listing %.0f ms (%d cases, %d rows over %d archives)", round+1, r.cfg.Rounds, ms[len(ms)-1],
			cases, rows, r.cfg.ReadArchives)
	}
	res.RoundsMS = ms
	res.DueListMS = round3(median(ms))
	return res, nil
}

// seedDispositionWorld seeds the archives, their case rows and the clocks,
// and puts the scenario's schedule in force.
func seedDispositionWorld(ctx context.Context, pool *pgxpool.Pool, key subject.Key, n int) (*schedule.Schedules, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	err = seedDisposition(ctx, conn.Conn(), key, n)
	conn.Release()
	if err != nil {
		return nil, err
	}
	series := []schedule.Series{{Table: evaluationsTable}}
	sch := schedule.New(pool, series)
	doc, err := schedule.Parse([]byte(dispositionSchedule), series)
	if err != nil {
		return nil, err
	}
	if _, err := sch.Propose(ctx, doc, "bench:alice"); err != nil {
		return nil, err
	}
	if _, err := sch.Approve(ctx, doc.Version, "bench:bob", true); err != nil {
		return nil, err
	}
	_, err = pool.Exec(ctx, `VACUUM (ANALYZE)`)
	return sch, err
}

// seedDisposition books n archives (ledger rows only) of
// dispositionCasesPerArchive cases each, their case rows, and the clocks of
// dispositionDueCases closed cases, by COPY.
func seedDisposition(ctx context.Context, conn *pgx.Conn, key subject.Key, n int) error {
	hashes := make([][]byte, dispositionCases+1)
	boxes := make([][]byte, dispositionCases+1)
	for c := 1; c <= dispositionCases; c++ {
		s, err := subject.Parse("case:" + strconv.Itoa(c))
		if err != nil {
			return err
		}
		hashes[c] = key.Hash(s)
		if boxes[c], err = key.Box([]byte(s.String())); err != nil {
			return err
		}
	}
	archivedAt := time.Now().UTC().AddDate(0, -1, 0)
	day := pgtype.Date{Time: archivedAt.AddDate(0, 0, -100).Truncate(24 * time.Hour), Valid: true}
	ids := make([]uuid.UUID, n)
	ledger := make([][]any, n)
	for i := range n {
		ids[i] = uuid.Must(uuid.NewV7())
		ledger[i] = []any{ids[i], evaluationsTable, "bench/" + ids[i].String() + ".ndjson", "bench/" + ids[i].String() + ".json", "00",
			int32(dispositionRowsPerArchive), "http://bench", "bench", ids[i], ids[i], archivedAt.AddDate(0, 0, -101), archivedAt.AddDate(0, 0, -100),
			int32(90), archivedAt, "bench", true, true}
	}
	if _, err := conn.CopyFrom(ctx, pgx.Identifier{"archive_ledger"}, []string{"archive_id", "table_name", "data_key", "manifest_key", "data_sha256",
		"record_count", "store_endpoint", "store_bucket", "first_record_id", "last_record_id", "first_record_at", "last_record_at",
		"hot_window_days", "archived_at", "archived_by", "subjects_indexed", "case_rows_indexed"}, pgx.CopyFromRows(ledger)); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	var cases [][]any
	for i := range n {
		for k := range dispositionCasesPerArchive {
			c := 1 + (i*7+k)%dispositionCases
			cases = append(cases, []any{ids[i], hashes[c], []byte{}, boxes[c], day, day, int64(dispositionRowsPerArchive / dispositionCasesPerArchive)})
		}
	}
	if _, err := conn.CopyFrom(ctx, pgx.Identifier{"archive_cases"}, []string{"archive_id", "subject_hash", "others", "subject_box", "oldest_day",
		"newest_day", "rows"}, pgx.CopyFromRows(cases)); err != nil {
		return fmt.Errorf("case rows: %w", err)
	}
	closed := time.Now().UTC().AddDate(0, 0, -30)
	var clocks [][]any
	for c := 1; c <= dispositionDueCases; c++ {
		clocks = append(clocks, []any{hashes[c], "closed", closed, "x", closed})
	}
	if _, err := conn.CopyFrom(ctx, pgx.Identifier{"case_clocks"}, []string{"subject_hash", "state", "closed_at", "classification", "changed_at"},
		pgx.CopyFromRows(clocks)); err != nil {
		return fmt.Errorf("clocks: %w", err)
	}
	return nil
}
