package outbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/outbox"
	"github.com/craig/retention/migrations"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

const day = 24 * time.Hour

// dbNow is the database clock, which the replay clamp uses.
func dbNow(t *testing.T, db *kerneltest.DB) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, db.Pool.QueryRow(context.Background(), "SELECT now()").Scan(&now))
	return now
}

// insertAt writes an outbox row created at createdAt, published (stamped at
// createdAt) or pending, with an optional last_error.
func insertAt(t *testing.T, db *kerneltest.DB, createdAt time.Time, published bool, lastError *string) uuid.UUID {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	var publishedAt *time.Time
	if published {
		publishedAt = &createdAt
	}
	db.Exec(t, `INSERT INTO event_outbox (id, event_type, payload, created_at, published_at, last_error)
		VALUES ($1, 'rules.evaluated', '{}', $2, $3, $4)`, id, createdAt, publishedAt, lastError)
	return id
}

func TestReplayInWindowRequeuesPublishedRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	now := dbNow(t, db)
	malformed := "was stamped malformed"
	oneDay := insertAt(t, db, now.Add(-1*day), true, nil)
	twoDays := insertAt(t, db, now.Add(-2*day), true, &malformed)
	tenDays := insertAt(t, db, now.Add(-10*day), true, nil) // before the range
	pending := insertAt(t, db, now.Add(-1*day), false, nil) // not published: nothing to replay

	n, err := outbox.Replay(ctx, db.Pool, now.Add(-3*day), now, limits(30))
	require.NoError(t, err)
	require.Equal(t, int64(2), n)

	for _, tc := range []struct {
		name          string
		id            uuid.UUID
		wantPublished bool
	}{
		{name: "one day old, in range", id: oneDay, wantPublished: false},
		{name: "two days old, in range", id: twoDays, wantPublished: false},
		{name: "ten days old, before the range", id: tenDays, wantPublished: true},
		{name: "pending", id: pending, wantPublished: false},
	} {
		got := rowState(t, db, tc.id)
		require.Equal(t, tc.wantPublished, got.Published, tc.name)
		require.Nil(t, got.LastError, "%s: replay clears last_error", tc.name)
	}

	// The drain publishes the re-queued rows again.
	pub := &fakePublisher{}
	_, logger := newLogRecorder()
	rep, err := (&outbox.Drainer{Pool: db.Pool, Publisher: pub, Logger: logger}).DrainOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, outbox.DrainReport{Published: 3}, rep)
	require.ElementsMatch(t, []uuid.UUID{oneDay, twoDays, pending}, pub.ids())
}

func TestReplayRangeIsHalfOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	at := dbNow(t, db).Add(-day).Truncate(time.Microsecond) // timestamptz precision
	id := insertAt(t, db, at, true, nil)

	n, err := outbox.Replay(ctx, db.Pool, at.Add(-time.Hour), at, limits(30))
	require.NoError(t, err)
	require.Zero(t, n, "to is exclusive")
	require.True(t, rowState(t, db, id).Published)

	n, err = outbox.Replay(ctx, db.Pool, at, at.Add(time.Hour), limits(30))
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "from is inclusive")
	require.False(t, rowState(t, db, id).Published)
}

func TestReplayOutOfWindowIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	now := dbNow(t, db)
	old := insertAt(t, db, now.Add(-40*day), true, nil)
	recent := insertAt(t, db, now.Add(-1*day), true, nil)
	from := now.Add(-45 * day)

	n, err := outbox.Replay(ctx, db.Pool, from, now, limits(30))
	require.ErrorIs(t, err, outbox.ErrReplayOutOfWindow)
	require.Zero(t, n)
	var oow *outbox.ReplayOutOfWindowError
	require.True(t, errors.As(err, &oow))
	require.Equal(t, 30, oow.WindowDays)
	require.True(t, from.Equal(oow.From))
	require.WithinDuration(t, now.Add(-30*day), oow.Cutoff, time.Minute, "the cutoff comes from the database clock")
	require.Contains(t, err.Error(), "30-day replay window")
	require.Contains(t, err.Error(), "dedup records")

	require.True(t, rowState(t, db, old).Published, "a refused replay changes nothing")
	require.True(t, rowState(t, db, recent).Published, "a refused replay changes nothing, even in the window")
}

// TestReplayWithTheSweepDisabledIsClamped replaces the test that pinned the
// unsafe behaviour: with event_outbox_retention_days=0
// a 400-day-old row was replayed. The clamp protects the consumers' inbox
// dedup windows, whatever this service does with its own outbox: with the
// sweep off it is replay_max_age_days.
func TestReplayWithTheSweepDisabledIsClamped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	now := dbNow(t, db)
	old := insertAt(t, db, now.Add(-400*day), true, nil)
	recent := insertAt(t, db, now.Add(-20*day), true, nil)

	n, err := outbox.Replay(ctx, db.Pool, now.Add(-500*day), now, limits(0))
	var oow *outbox.ReplayOutOfWindowError
	require.ErrorAs(t, err, &oow)
	require.Equal(t, 30, oow.WindowDays, "the clamp is replay_max_age_days")
	require.Zero(t, n)
	require.True(t, rowState(t, db, old).Published, "a refused replay changes nothing")
	require.True(t, rowState(t, db, recent).Published)

	// A longer outbox window does not widen the clamp either.
	lim := limits(90)
	_, err = outbox.Replay(ctx, db.Pool, now.Add(-60*day), now, lim)
	require.ErrorAs(t, err, &oow)
	require.Equal(t, 30, oow.WindowDays)

	// Inside replay_max_age_days the replay runs with the sweep disabled.
	n, err = outbox.Replay(ctx, db.Pool, now.Add(-25*day), now, limits(0))
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	require.False(t, rowState(t, db, recent).Published)
	require.True(t, rowState(t, db, old).Published)
}

// TestReplayInBatches: the replay re-nulls in batches (each
// its own statement), and a range holding more than replay_max_rows is
// refused naming the count, changing nothing.
func TestReplayInBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	now := dbNow(t, db)
	// 25 published rows in the range, two sharing one created_at (the
	// cursor's tie-break on id), one pending, one outside the range.
	db.Exec(t, `INSERT INTO event_outbox (event_type, payload, created_at, published_at)
		SELECT 'e', '{}', $1::timestamptz - make_interval(mins => g), $1::timestamptz
		FROM generate_series(1, 23) AS g`, now.Add(-day))
	tie := now.Add(-2 * day).Truncate(time.Microsecond)
	insertAt(t, db, tie, true, nil)
	insertAt(t, db, tie, true, nil)
	pending := insertAt(t, db, now.Add(-day), false, nil)
	outside := insertAt(t, db, now.Add(-10*day), true, nil)

	t.Run("TooLarge", func(t *testing.T) {
		lim := limits(30)
		lim.MaxRows = 24
		n, err := outbox.Replay(ctx, db.Pool, now.Add(-3*day), now, lim)
		var big *outbox.ReplayTooLargeError
		require.ErrorAs(t, err, &big)
		require.ErrorIs(t, err, outbox.ErrReplayTooLarge)
		require.Equal(t, int64(25), big.Count)
		require.Equal(t, int64(24), big.MaxRows)
		require.Zero(t, n)
		require.Equal(t, int64(26), db.Count(t, `SELECT count(*) FROM event_outbox WHERE published_at IS NOT NULL`), "nothing changed")
	})
	t.Run("Batched", func(t *testing.T) {
		lim := limits(30)
		lim.MaxRows = 25
		lim.BatchSize = 4
		var before int64
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT pg_current_xact_id()::text::bigint`).Scan(&before))
		n, err := outbox.Replay(ctx, db.Pool, now.Add(-3*day), now, lim)
		require.NoError(t, err)
		require.Equal(t, int64(25), n)
		var after int64
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT pg_current_xact_id()::text::bigint`).Scan(&after))
		// 25 rows in batches of 4: 7 writing statements (6 full, 1 of 1),
		// each its own transaction; the probe above takes one more xid.
		require.GreaterOrEqual(t, after-before, int64(7), "one transaction per batch")
		require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM event_outbox WHERE published_at IS NOT NULL`))
		require.True(t, rowState(t, db, outside).Published)
		require.False(t, rowState(t, db, pending).Published)
	})
}
