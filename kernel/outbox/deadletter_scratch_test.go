package outbox_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/outbox"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/sweep"
	"github.com/craig/retention/migrations"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// transportPolicies are the kernel's transport sweep policies at the
// default outbox window and the given dead-letter window, by label.
func transportPolicies(deadLetterDays int) map[string]prune.Policy {
	out := map[string]prune.Policy{}
	for _, p := range sweep.Transport(sweep.TransportConfig{OutboxWindowDays: 30, InboxWindowDays: 31, DeadLetterWindowDays: deadLetterDays}).Policies {
		out[p.Label()] = p
	}
	return out
}

// TestMalformedEnvelopeIsNeverSweptAsPublished: an envelope the drain finds
// malformed, created before the outbox window (it waited out an outage), is
// dead-lettered and survives the published sweep. Before dead letters the
// drain stamped it published and the next sweep deleted the only evidence
// of an event that never left.
func TestMalformedEnvelopeIsNeverSweptAsPublished(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	bad := uuid.Must(uuid.NewV7())
	db.Exec(t, "INSERT INTO event_outbox (id, event_type, payload, created_at) VALUES ($1, 'rules evaluated', '{}', now() - interval '40 days')", bad)
	_, logger := newLogRecorder()
	rep, err := (&outbox.Drainer{Pool: db.Pool, Publisher: &fakePublisher{}, Logger: logger}).DrainOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Malformed)

	for _, p := range transportPolicies(0) {
		_, err := prune.PruneTable(ctx, db.Pool, p)
		require.NoError(t, err, p.Label())
	}
	require.Equal(t, int64(1), db.Count(t, "SELECT count(*) FROM event_outbox WHERE id = $1 AND published_at IS NULL AND dead_lettered_at IS NOT NULL", bad),
		"the malformed envelope is kept as a dead letter, never swept as published")
}

// TestPoisonRowGoesDeadAfterItsAttempts: a row the broker always refuses,
// at the head of the backlog, is tried MaxAttempts times and dead-lettered,
// while every row behind it is delivered; afterwards the drain never
// offers it to the broker again, it is not pending backlog, and the metrics
// count it.
func TestPoisonRowGoesDeadAfterItsAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	poison := stage(t, db, "rules.poison")
	var good []uuid.UUID
	for range 5 {
		good = append(good, stage(t, db, "rules.evaluated"))
	}
	reg := prometheus.NewRegistry()
	m, err := metrics.NewOutbox(reg)
	require.NoError(t, err)
	pub := &fakePublisher{fail: func(_ context.Context, msg outbox.Message) error {
		if msg.ID == poison {
			return errors.New("broker refused it")
		}
		return nil
	}}
	rec, logger := newLogRecorder()
	d := &outbox.Drainer{Pool: db.Pool, Publisher: pub, Logger: logger, Metrics: m, BatchSize: 2, MaxAttempts: 3, RetryBackoff: time.Nanosecond}
	var total outbox.DrainReport
	for range 10 {
		rep, err := d.DrainOnce(ctx)
		require.NoError(t, err)
		total.Published += rep.Published
		total.Failed += rep.Failed
		total.DeadLettered += rep.DeadLettered
	}
	require.Equal(t, outbox.DrainReport{Published: 5, Failed: 3, DeadLettered: 1}, total)
	calls := pub.ids()
	require.Equal(t, 3, count(calls, poison), "tried exactly max_attempts times, then never again")
	for _, id := range good {
		require.Equal(t, 1, count(calls, id))
	}

	var attempts int
	var lastError string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT attempts, last_error FROM event_outbox
		WHERE id = $1 AND published_at IS NULL AND dead_lettered_at IS NOT NULL AND last_attempt_at IS NOT NULL`, poison).Scan(&attempts, &lastError))
	require.Equal(t, 3, attempts)
	require.Equal(t, "broker refused it", lastError)
	require.Len(t, rec.at(slog.LevelError), 1, "one ERROR: the dead letter")

	require.NoError(t, outbox.PendingGauge(ctx, db.Pool, m))
	require.Zero(t, testutil.ToFloat64(m.Pending), "a dead letter is never pending backlog")
	require.Zero(t, testutil.ToFloat64(m.OldestPendingAge))
	require.Equal(t, 1.0, testutil.ToFloat64(m.DeadLetters))
	require.Equal(t, 1.0, testutil.ToFloat64(m.DeadLettered))
}

// TestFailedRowWaitsForItsBackoff: a refused row is not offered again
// before its backoff has passed, however often the drain runs.
func TestFailedRowWaitsForItsBackoff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	id := stage(t, db, "rules.evaluated")
	pub := &fakePublisher{fail: func(context.Context, outbox.Message) error { return errors.New("nacked") }}
	_, logger := newLogRecorder()
	d := &outbox.Drainer{Pool: db.Pool, Publisher: pub, Logger: logger, MaxAttempts: 25, RetryBackoff: time.Hour}
	for range 5 {
		_, err := d.DrainOnce(ctx)
		require.NoError(t, err)
	}
	require.Equal(t, []uuid.UUID{id}, pub.ids(), "one attempt, then an hour's wait")
	// Its backoff passed (the last attempt moved back by the database
	// clock): it is offered again.
	db.Exec(t, "UPDATE event_outbox SET last_attempt_at = last_attempt_at - interval '61 minutes' WHERE id = $1", id)
	_, err := d.DrainOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{id, id}, pub.ids())
}

// TestUnavailableBrokerCostsNoAttempt: a broker that cannot be reached
// says nothing about the row: no attempt is counted, however long it lasts.
func TestUnavailableBrokerCostsNoAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	id := stage(t, db, "rules.evaluated")
	pub := &fakePublisher{fail: func(context.Context, outbox.Message) error { return outbox.ErrUnavailable }}
	_, logger := newLogRecorder()
	d := &outbox.Drainer{Pool: db.Pool, Publisher: pub, Logger: logger, MaxAttempts: 1, RetryBackoff: time.Nanosecond}
	for range 3 {
		_, err := d.DrainOnce(ctx)
		require.ErrorIs(t, err, outbox.ErrUnavailable)
	}
	require.Equal(t, int64(1), db.Count(t, "SELECT count(*) FROM event_outbox WHERE id = $1 AND attempts = 0 AND dead_lettered_at IS NULL", id))
}

// TestDeadLettersKeptOrSweptByTheirOwnSetting: dead letters are kept at
// window 0 whatever their age; at a window they go once dead-lettered longer
// than it (by dead_lettered_at, not created_at), and nothing else goes with
// them.
func TestDeadLettersKeptOrSweptByTheirOwnSetting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	// Created 400 days ago; dead-lettered 100, 20 and 1 days ago.
	db.Exec(t, `INSERT INTO event_outbox (event_type, payload, created_at, dead_lettered_at, attempts)
		SELECT 'dead.' || d, '{}', now() - interval '400 days', now() - make_interval(days => d), 3
		FROM unnest(ARRAY[100, 20, 1]) AS d`)
	// A pending row and a published row as old: neither is a dead letter.
	db.Exec(t, `INSERT INTO event_outbox (event_type, payload, created_at, published_at) VALUES
		('pending', '{}', now() - interval '400 days', NULL), ('published', '{}', now() - interval '5 days', now() - interval '5 days')`)

	off := transportPolicies(0)[sweep.OutboxDeadLetters]
	rep, err := prune.PruneTable(ctx, db.Pool, off)
	require.NoError(t, err)
	require.True(t, rep.Disabled)
	require.Equal(t, int64(5), db.Count(t, "SELECT count(*) FROM event_outbox"), "window 0 keeps every dead letter")

	on := transportPolicies(30)[sweep.OutboxDeadLetters]
	rep, err = prune.PruneTable(ctx, db.Pool, on)
	require.NoError(t, err)
	require.Equal(t, int64(1), rep.Deleted)
	require.Equal(t, sweep.OutboxDeadLetters, rep.Table)
	var left []string
	rows, err := db.Pool.Query(ctx, "SELECT event_type FROM event_outbox ORDER BY event_type")
	require.NoError(t, err)
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		left = append(left, s)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"dead.1", "dead.20", "pending", "published"}, left)
}

func count(ids []uuid.UUID, id uuid.UUID) int {
	n := 0
	for i := range slices.Values(ids) {
		if i == id {
			n++
		}
	}
	return n
}
