package outbox_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/migrate"
	"github.com/craig/retention/kernel/outbox"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/sweep"
	"github.com/craig/retention/migrations"
)

func hostileMigrateUp(t *testing.T, db *kerneltest.DB) {
	t.Helper()
	sqlDB := stdlib.OpenDBFromPool(db.Pool)
	t.Cleanup(func() { _ = sqlDB.Close() })
	_, err := migrate.Up(context.Background(), sqlDB, []migrations.Set{migrations.Transport()}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
}

func hostilePartition(t *testing.T, db *kerneltest.DB) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(ctx, migrations.PartitionOutboxSQL())
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
}

func hostileDayAgo(daysAgo int) time.Time {
	return time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -daysAgo).Add(12 * time.Hour)
}

// TestHostileMigrationOnPartitionedOutbox: an operator partitioned the
// outbox under the old release (pg_partman, daily), whose drain stamped a
// malformed envelope published with a last_error 40 days ago. Migration
// 00010 runs on the partitioned table and turns it back into a dead letter;
// the published sweep's partition retirement then drops the day holding
// only delivered rows and keeps the day holding the dead letter; the
// dead-letter policy at 60 days leaves it alone.
func TestHostileMigrationOnPartitionedOutbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, transportBefore(t, "00010"))
	db.Exec(t, `INSERT INTO event_outbox (event_type, payload, created_at, published_at, last_error) VALUES
		('rules evaluated', '{}', $1, $1, 'outbox: malformed message: invalid routing key'),
		('rules.evaluated', '{}', $1, $1, NULL),
		('rules.evaluated', '{}', $2, $2, NULL),
		('rules.evaluated', '{}', $3, $3, NULL)`, hostileDayAgo(40), hostileDayAgo(45), hostileDayAgo(1))
	hostilePartition(t, db)
	hostileMigrateUp(t, db)

	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM event_outbox WHERE event_type = 'rules evaluated'
		AND published_at IS NULL AND dead_lettered_at IS NOT NULL AND attempts = 1`), "the stamped malformed row is a dead letter again")

	for range 10 { // partition retirement is capped per cycle
		for _, p := range sweep.Transport(sweep.TransportConfig{OutboxWindowDays: 30, InboxWindowDays: 31, DeadLetterWindowDays: 60}).Policies {
			_, err := prune.PruneTable(ctx, db.Pool, p)
			require.NoError(t, err, p.Label())
		}
	}
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM event_outbox WHERE event_type = 'rules evaluated' AND dead_lettered_at IS NOT NULL`),
		"the dead letter survives partition retirement and its own (60-day) window")
	require.Equal(t, int64(1), db.Count(t, "SELECT count(*) FROM pg_class WHERE relname = $1", "event_outbox_p"+hostileDayAgo(40).Format("2006_01_02")),
		"the partition holding the dead letter is kept")
	require.Zero(t, db.Count(t, "SELECT count(*) FROM pg_class WHERE relname = $1", "event_outbox_p"+hostileDayAgo(45).Format("2006_01_02")),
		"the day holding only delivered rows is dropped")
	require.Equal(t, int64(2), db.Count(t, "SELECT count(*) FROM event_outbox"))

	// The listing and a retry work on the partitioned table.
	page, err := outbox.ListDeadLetters(ctx, db.Pool, [16]byte{}, 0)
	require.NoError(t, err)
	require.Len(t, page.DeadLetters, 1)
	_, err = outbox.RetryDeadLetter(ctx, db.Pool, page.DeadLetters[0].ID, "ops:alice")
	require.NoError(t, err)
}

// TestHostileDeadLettersInOldPartitions: on a partitioned outbox, dead
// letters in partitions far older than the outbox window keep their
// partitions through repeated sweeps; with a dead-letter window the aged
// ones go by batches (no partition holding a younger dead letter or a
// pending row is dropped), and pending rows never go.
func TestHostileDeadLettersInOldPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	db.Exec(t, `INSERT INTO event_outbox (event_type, payload, created_at, published_at, dead_lettered_at, attempts, last_error) VALUES
		('dead.kept', '{}', $1, NULL, now() - interval '2 days', 25, 'nacked'),
		('dead.aged', '{}', $2, NULL, now() - interval '20 days', 25, 'nacked'),
		('pending.old', '{}', $3, NULL, NULL, 3, 'nacked'),
		('published', '{}', $1, $1, NULL, 0, NULL),
		('published', '{}', $2, $2, NULL, 0, NULL),
		('published', '{}', $4, $4, NULL, 0, NULL)`,
		hostileDayAgo(50), hostileDayAgo(48), hostileDayAgo(46), hostileDayAgo(44))
	hostilePartition(t, db)
	for range 10 {
		for _, p := range sweep.Transport(sweep.TransportConfig{OutboxWindowDays: 30, InboxWindowDays: 31, DeadLetterWindowDays: 10}).Policies {
			_, err := prune.PruneTable(ctx, db.Pool, p)
			require.NoError(t, err, p.Label())
		}
	}
	var left []string
	rows, err := db.Pool.Query(ctx, "SELECT event_type FROM event_outbox ORDER BY event_type")
	require.NoError(t, err)
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		left = append(left, s)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"dead.kept", "pending.old"}, left)
	for _, d := range []int{50, 46} {
		require.Equal(t, int64(1), db.Count(t, "SELECT count(*) FROM pg_class WHERE relname = $1", "event_outbox_p"+hostileDayAgo(d).Format("2006_01_02")), "day -%d", d)
	}
}

// TestHostileMigrationRerunAfterRestore: a database restored from a backup
// taken before 00010 (rows stamped by the old drain, some beyond the outbox
// window) is migrated by the new release before its first sweep: the
// malformed rows survive the sweep, and a second migrate run changes
// nothing.
func TestHostileMigrationRerunAfterRestore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, transportBefore(t, "00010"))
	db.Exec(t, `INSERT INTO event_outbox (event_type, payload, created_at, published_at, last_error) VALUES
		('rules evaluated', '{}', now() - interval '90 days', now() - interval '45 days', 'outbox: malformed message: invalid routing key'),
		('rules.big', '{}', now() - interval '31 days', now() - interval '31 days', 'rabbitmq publish: outbox: malformed message: body is 17000000 bytes, the limit is 16777216')`)
	hostileMigrateUp(t, db)
	hostileMigrateUp(t, db)
	for _, p := range sweep.Transport(sweep.TransportConfig{OutboxWindowDays: 30, InboxWindowDays: 31}).Policies {
		_, err := prune.PruneTable(ctx, db.Pool, p)
		require.NoError(t, err, p.Label())
	}
	require.Equal(t, int64(2), db.Count(t, "SELECT count(*) FROM event_outbox WHERE published_at IS NULL AND dead_lettered_at IS NOT NULL AND attempts = 1"))
	require.Equal(t, int64(1), db.Count(t, "SELECT count(*) FROM event_outbox WHERE event_type = 'rules evaluated' AND dead_lettered_at BETWEEN now() - interval '45 days 1 minute' AND now() - interval '44 days 23 hours 59 minutes'"),
		"dated by the stamp")
}

// The previous release's drain statements (queries/kernel/outbox.sql before
// transport 00010), verbatim.
const (
	oldClaimPending = `SELECT id, event_type, payload, created_at
FROM event_outbox
WHERE published_at IS NULL
ORDER BY (last_error IS NOT NULL), created_at
LIMIT $1::int
FOR UPDATE SKIP LOCKED`
)

// TestHostileOldReplicaAfterMigration: a rolling deploy. `migrate` ran
// 00010 and a replica of the previous release is still draining (nothing
// stops a binary from running against a newer schema). Its claim cannot be
// kept from a dead letter (it reads published_at only; ADR-075 says so), so
// the schema keeps what the rows say true: a malformed row it stamps
// published with a last_error becomes a dead letter (never swept as
// published), and a dead letter it claimed and the broker took is
// published (it did leave), never both.
func TestHostileOldReplicaAfterMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	dead := hostileDead(t, db, "rules.evaluated", "2 days", "1 day")
	db.Exec(t, `INSERT INTO event_outbox (event_type, payload, created_at) VALUES ('rules evaluated', '{}', now() - interval '40 days')`)

	rows, err := db.Pool.Query(ctx, oldClaimPending, 100)
	require.NoError(t, err)
	var claimedDead bool
	for rows.Next() {
		var id [16]byte
		var et string
		var payload []byte
		var created time.Time
		require.NoError(t, rows.Scan(&id, &et, &payload, &created))
		claimedDead = claimedDead || id == dead
	}
	require.NoError(t, rows.Err())
	require.True(t, claimedDead, "the old claim reads published_at only (documented)")
	// The broker took the dead letter from the old drain: its MarkPublished.
	_, err = db.Pool.Exec(ctx, `UPDATE event_outbox SET published_at = now(), last_error = NULL WHERE id = $1 AND published_at IS NULL`, dead)
	require.NoError(t, err)
	require.Equal(t, int64(1), db.Count(t, "SELECT count(*) FROM event_outbox WHERE id = $1 AND published_at IS NOT NULL AND dead_lettered_at IS NULL", dead),
		"a dead letter the broker took is published, not both")
	// The old MarkMalformed on the malformed row.
	_, err = db.Pool.Exec(ctx, `UPDATE event_outbox SET published_at = now(), last_error = 'outbox: malformed message: invalid routing key'
		WHERE event_type = 'rules evaluated' AND published_at IS NULL`)
	require.NoError(t, err)
	for _, p := range sweep.Transport(sweep.TransportConfig{OutboxWindowDays: 30, InboxWindowDays: 31}).Policies {
		_, err := prune.PruneTable(ctx, db.Pool, p)
		require.NoError(t, err, p.Label())
	}
	require.Equal(t, int64(1), db.Count(t, "SELECT count(*) FROM event_outbox WHERE event_type = 'rules evaluated' AND published_at IS NULL AND dead_lettered_at IS NOT NULL AND attempts = 1"),
		"a malformed row stamped published by an old replica after the migration is a dead letter, not swept")
}
