package rules_test

import (
	"io"
	"testing"
	"time"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/services/rules"
	"github.com/stretchr/testify/require"
)

// benchRows is the backlog one measured pass archives.
const benchRows = 100_000

// BenchmarkArchivePass100k measures one archive pass over 100,000 aged
// rule_evaluations (batch 1000, a budget that drains them, the real S3
// store, the production spec and bookkeeping) beside
// `COPY (SELECT to_jsonb(e) FROM rule_evaluations e) TO STDOUT` into
// io.Discard on the same rows in the same run: the floor for reading the
// same documents out of PostgreSQL.
//
//	go test -run '^$' -bench ArchivePass100k -benchtime 3x ./services/rules
//
// ns/op times the pass alone; archive_rows/s and copy_rows/s are the two
// throughputs, ndjson_MB/s the pass's data rate.
func BenchmarkArchivePass100k(b *testing.B) {
	ctx, env := newRulesEnv(b)
	eng := env.engine(b, []archive.TableSpec{productionSpec(b)}, rules.Bookkeep, func(c *archive.Config) { c.BatchSize = 1000 })
	budget := benchRows/1000 + 10
	var passTotal, copyTotal time.Duration
	var ndjsonBytes int64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		seedEvaluations(b, env.db, i*benchRows+1, (i+1)*benchRows+1, 100, 0)
		env.db.Exec(b, `VACUUM ANALYZE rule_evaluations`)
		var bytes int64
		require.NoError(b, env.db.Pool.QueryRow(ctx, `SELECT sum(octet_length(to_jsonb(e)::text) + 1) FROM rule_evaluations e`).Scan(&bytes))
		ndjsonBytes += bytes

		conn, err := env.db.Pool.Acquire(ctx)
		require.NoError(b, err)
		const copySQL = `COPY (SELECT to_jsonb(e) FROM rule_evaluations e) TO STDOUT`
		tag, err := conn.Conn().PgConn().CopyTo(ctx, io.Discard, copySQL) // warm-up, as the pass's SELECTs find the pages warm too
		require.NoError(b, err)
		require.Equal(b, int64(benchRows), tag.RowsAffected())
		start := time.Now()
		tag, err = conn.Conn().PgConn().CopyTo(ctx, io.Discard, copySQL)
		copyTotal += time.Since(start)
		conn.Release()
		require.NoError(b, err)
		require.Equal(b, int64(benchRows), tag.RowsAffected())

		b.StartTimer()
		start = time.Now()
		rep, err := eng.RunPass(ctx, budget)
		passTotal += time.Since(start)
		b.StopTimer()
		require.NoError(b, err)
		require.NoError(b, rep.Err())
		require.False(b, rep.More)
		require.Equal(b, int64(benchRows), rep.Table(rules.EvaluationsTable).Archived)
		require.Len(b, rep.Table(rules.EvaluationsTable).Archives, benchRows/1000)
		require.Zero(b, env.db.Count(b, `SELECT count(*) FROM rule_evaluations`))
		b.StartTimer()
	}
	rows := float64(b.N * benchRows)
	b.ReportMetric(rows/passTotal.Seconds(), "archive_rows/s")
	b.ReportMetric(rows/copyTotal.Seconds(), "copy_rows/s")
	b.ReportMetric(float64(ndjsonBytes)/1e6/passTotal.Seconds(), "ndjson_MB/s")
	b.ReportMetric(float64(ndjsonBytes)/rows, "bytes/row")
}
