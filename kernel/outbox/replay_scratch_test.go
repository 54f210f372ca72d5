//go:build scratch

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

	n, err := outbox.Replay(ctx, db.Pool, now.Add(-3*day), now, 30)
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

	n, err := outbox.Replay(ctx, db.Pool, at.Add(-time.Hour), at, 30)
	require.NoError(t, err)
	require.Zero(t, n, "to is exclusive")
	require.True(t, rowState(t, db, id).Published)

	n, err = outbox.Replay(ctx, db.Pool, at, at.Add(time.Hour), 30)
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

	n, err := outbox.Replay(ctx, db.Pool, from, now, 30)
	require.ErrorIs(t, err, outbox.ErrReplayOutOfWindow)
	require.Zero(t, n)
	var oow *outbox.ReplayOutOfWindowError
	require.True(t, errors.As(err, &oow))
	require.Equal(t, 30, oow.WindowDays)
	require.True(t, from.Equal(oow.From))
	require.WithinDuration(t, now.Add(-30*day), oow.Cutoff, time.Minute, "the cutoff comes from the database clock")
	require.Contains(t, err.Error(), "30-day outbox retention window")
	require.Contains(t, err.Error(), "dedup records")

	require.True(t, rowState(t, db, old).Published, "a refused replay changes nothing")
	require.True(t, rowState(t, db, recent).Published, "a refused replay changes nothing, even in the window")
}

func TestReplayWithTheSweepDisabledIsUnclamped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	now := dbNow(t, db)
	old := insertAt(t, db, now.Add(-400*day), true, nil)

	n, err := outbox.Replay(ctx, db.Pool, now.Add(-500*day), now, 0)
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	require.False(t, rowState(t, db, old).Published)
}
