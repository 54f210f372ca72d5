package outbox_test

import (
	"context"
	"io/fs"
	"log/slog"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/migrate"
	"github.com/craig/retention/migrations"
)

// transportBefore is the transport set without its migrations from
// version first on: a database as an earlier release left it.
func transportBefore(t *testing.T, first string) migrations.Set {
	t.Helper()
	set := migrations.Transport()
	old := fstest.MapFS{}
	require.NoError(t, fs.WalkDir(set.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path >= first {
			return err
		}
		b, err := fs.ReadFile(set.FS, path)
		old[path] = &fstest.MapFile{Data: b}
		return err
	}))
	return migrations.New(set.Name, old)
}

// TestDeadLetterMigrationRecoversStampedMalformedRows: the rows the old
// drain stamped published with a last_error (its mark of a malformed
// envelope: only that mark kept one) become dead letters dated by the
// stamp, so the published sweep can no longer delete them; a delivered row
// and a pending failed row are left as they were.
func TestDeadLetterMigrationRecoversStampedMalformedRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, transportBefore(t, "00010"))
	db.Exec(t, `INSERT INTO event_outbox (event_type, payload, created_at, published_at, last_error) VALUES
		('rules evaluated', '{}', now() - interval '20 days', now() - interval '19 days', 'outbox: malformed message: invalid routing key'),
		('rules.evaluated', '{}', now() - interval '20 days', now() - interval '19 days', NULL),
		('rules.evaluated', '{}', now() - interval '2 days', NULL, 'broker nacked')`)

	sqlDB := stdlib.OpenDBFromPool(db.Pool)
	t.Cleanup(func() { _ = sqlDB.Close() })
	n, err := migrate.Up(ctx, sqlDB, []migrations.Set{migrations.Transport()}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.Positive(t, n)

	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM event_outbox WHERE event_type = 'rules evaluated'
		AND published_at IS NULL AND dead_lettered_at BETWEEN now() - interval '19 days 1 minute' AND now() - interval '19 days' + interval '1 minute' AND attempts = 1`))
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM event_outbox WHERE published_at IS NOT NULL AND last_error IS NULL AND dead_lettered_at IS NULL`),
		"a delivered row stays delivered")
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM event_outbox WHERE published_at IS NULL AND dead_lettered_at IS NULL AND last_error = 'broker nacked'`),
		"a pending row stays pending")
}

// TestPartitionedOutboxKeepsTheDeadLetterTrigger: converting a migrated
// outbox to daily partitions carries the row trigger over, so an older
// drain's malformed mark is still made a dead letter there.
func TestPartitionedOutboxKeepsTheDeadLetterTrigger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	db.Exec(t, `INSERT INTO event_outbox (event_type, payload, created_at) VALUES ('rules evaluated', '{}', now() - interval '3 days')`)
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, migrations.PartitionOutboxSQL())
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM pg_class WHERE relname = 'event_outbox' AND relkind = 'p'`))

	db.Exec(t, `UPDATE event_outbox SET published_at = now(), last_error = 'outbox: malformed message' WHERE published_at IS NULL`)
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM event_outbox WHERE published_at IS NULL AND dead_lettered_at IS NOT NULL AND attempts = 1`))
}
