package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/outbox"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/sweep"
	"github.com/craig/retention/migrations"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// oldMarkMalformed is the previous release's MarkMalformed, verbatim
// (queries/kernel/outbox.sql before 082222a).
const oldMarkMalformed = `UPDATE event_outbox
SET published_at = now(), last_error = $2
WHERE id = $1 AND published_at IS NULL`

// TestHostile2OldMalformedMarkOnADeadLetter: a rolling deploy. This release
// dead-lettered a malformed envelope (an invalid routing key). A replica of
// the previous release claims by published_at alone, so it claims the dead
// letter, finds it malformed too, and runs its MarkMalformed (published_at
// stamped WITH a last_error). The trigger's first branch (OLD.dead_lettered_at
// IS NOT NULL) takes that for "the broker took it" and clears
// dead_lettered_at: the malformed envelope is now published, never having
// left, and the published sweep deletes the evidence.
func TestHostile2OldMalformedMarkOnADeadLetter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	id := uuid.Must(uuid.NewV7())
	db.Exec(t, `INSERT INTO event_outbox (id, event_type, payload, created_at) VALUES ($1, 'rules evaluated', '{}', now() - interval '40 days')`, id)
	_, logger := newLogRecorder()
	rep, err := (&outbox.Drainer{Pool: db.Pool, Publisher: &fakePublisher{}, Logger: logger}).DrainOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.DeadLettered, "this release dead-letters the malformed row")

	// The old replica claims it and marks it malformed, its way.
	_, err = db.Pool.Exec(ctx, oldMarkMalformed, id, "outbox: malformed message: invalid routing key")
	require.NoError(t, err)
	var published, dead bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT published_at IS NOT NULL, dead_lettered_at IS NOT NULL FROM event_outbox WHERE id = $1`, id).Scan(&published, &dead))
	require.False(t, published, "an old replica's malformed mark on a dead letter stamped it PUBLISHED (dead=%v): a malformed envelope that never left is now a delivered event", dead)
	require.True(t, dead, "the malformed dead letter is no longer a dead letter")

	for _, p := range sweep.Transport(sweep.TransportConfig{OutboxWindowDays: 30, InboxWindowDays: 31}).Policies {
		_, err := prune.PruneTable(ctx, db.Pool, p)
		require.NoError(t, err, p.Label())
	}
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM event_outbox WHERE id = $1`, id), "the malformed dead letter was swept as published")
}

// TestHostile2OldBulkMarkManyRows: one UPDATE stamps published_at with a
// last_error on many rows at once (pending rows and dead letters alike, as an
// operator's hand-run "give up on these" or an old tool would). Each row must
// end a dead letter, none published, none lost.
func TestHostile2OldBulkMarkManyRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	for range 5 {
		stage(t, db, "rules.evaluated")
	}
	for range 5 {
		hostileDead(t, db, "rules.evaluated", "2 days", "1 day")
	}
	_, err := db.Pool.Exec(ctx, `UPDATE event_outbox SET published_at = now(), last_error = 'given up' WHERE published_at IS NULL`)
	require.NoError(t, err)
	require.Equal(t, int64(10), db.Count(t, `SELECT count(*) FROM event_outbox`), "a row was lost")
	require.Equal(t, int64(0), db.Count(t, `SELECT count(*) FROM event_outbox WHERE published_at IS NOT NULL AND dead_lettered_at IS NOT NULL`), "a row is both published and dead")
	require.Equal(t, int64(0), db.Count(t, `SELECT count(*) FROM event_outbox WHERE published_at IS NOT NULL AND last_error IS NOT NULL`),
		"%d row(s) stamped published with a last_error survived the trigger (the sweep deletes them as delivered)",
		db.Count(t, `SELECT count(*) FROM event_outbox WHERE published_at IS NOT NULL AND last_error IS NOT NULL`))
}

// TestHostile2ThisReleaseNeverFiresTheTrigger: the ADR says the trigger's
// WHEN is false for every write of this release. The function is replaced by
// one that raises, and every write of this release runs: a publish of a row
// that failed before (last_error set), a refusal, a timeout, a malformed
// dead-lettering, a refusal to the last attempt, a retry, a replay, both
// sweeps. Any of them firing the trigger fails its statement.
func TestHostile2ThisReleaseNeverFiresTheTrigger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	db.Exec(t, `CREATE OR REPLACE FUNCTION event_outbox_keep_dead_letters() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'event_outbox_keep_dead_letters fired for a write of this release'; END $$`)

	refused := stage(t, db, "rules.refused")
	slow := stage(t, db, "rules.slow")
	bad := uuid.Must(uuid.NewV7())
	db.Exec(t, `INSERT INTO event_outbox (id, event_type, payload) VALUES ($1, 'bad key', '{}')`, bad)
	good := stage(t, db, "rules.evaluated")
	pub := &fakePublisher{fail: func(ctx context.Context, m outbox.Message) error {
		switch m.EventType {
		case "rules.refused":
			return errors.New("nacked")
		case "rules.slow":
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}}
	_, logger := newLogRecorder()
	d := &outbox.Drainer{Pool: db.Pool, Publisher: pub, Logger: logger, MaxAttempts: 2, PublishTimeout: 50 * time.Millisecond, RetryBackoff: time.Nanosecond, MaxRetryBackoff: time.Nanosecond}
	for range 4 {
		_, err := d.DrainOnce(ctx)
		require.NoError(t, err)
	}
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM event_outbox WHERE id = $1 AND published_at IS NOT NULL`, good))
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM event_outbox WHERE id = $1 AND dead_lettered_at IS NOT NULL`, refused))
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM event_outbox WHERE id = $1 AND dead_lettered_at IS NOT NULL`, bad))
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM event_outbox WHERE id = $1 AND last_error IS NOT NULL AND attempts = 0`, slow))

	// The retried dead letter (last_error still set) is then published.
	_, err := outbox.RetryDeadLetter(ctx, db.Pool, refused, "ops:alice")
	require.NoError(t, err)
	pub.fail = nil
	for range 2 {
		_, err := d.DrainOnce(ctx)
		require.NoError(t, err)
	}
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM event_outbox WHERE id = $1 AND published_at IS NOT NULL AND last_error IS NULL`, refused))
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM event_outbox WHERE id = $1 AND published_at IS NOT NULL AND last_error IS NULL`, slow))

	n, err := outbox.Replay(ctx, db.Pool, time.Now().Add(-time.Hour), time.Now().Add(time.Hour),
		outbox.ReplayLimits{OutboxWindowDays: 30, MaxAgeDays: 7, MaxRows: 100, BatchSize: 10})
	require.NoError(t, err)
	require.Equal(t, int64(3), n)
	for range 2 {
		_, err := d.DrainOnce(ctx)
		require.NoError(t, err)
	}
	for _, p := range sweep.Transport(sweep.TransportConfig{OutboxWindowDays: 30, InboxWindowDays: 31}).Policies {
		_, err := prune.PruneTable(ctx, db.Pool, p)
		require.NoError(t, err, p.Label())
	}
	require.Equal(t, int64(0), db.Count(t, `SELECT count(*) FROM event_outbox WHERE published_at IS NOT NULL AND dead_lettered_at IS NOT NULL`))
}

// TestHostile2TriggerOnPremadePartitions: after the partition conversion,
// pg_partman premakes new daily partitions (run_maintenance). A row in a
// partition made after the conversion, and one in the default partition,
// must be kept by the trigger as well.
func TestHostile2TriggerOnPremadePartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	hostilePartition(t, db)
	db.Exec(t, `UPDATE partman.part_config SET premake = 12 WHERE parent_table = 'public.event_outbox'`)
	db.Exec(t, `SELECT partman.run_maintenance('public.event_outbox')`)
	future := uuid.Must(uuid.NewV7())
	db.Exec(t, `INSERT INTO event_outbox (id, event_type, payload, created_at) VALUES ($1, 'rules evaluated', '{}', now() + interval '10 days')`, future)
	outside := uuid.Must(uuid.NewV7())
	db.Exec(t, `INSERT INTO event_outbox (id, event_type, payload, created_at) VALUES ($1, 'rules evaluated', '{}', now() + interval '400 days')`, outside)
	var futurePart, outsidePart string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM event_outbox WHERE id = $1`, future).Scan(&futurePart))
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM event_outbox WHERE id = $1`, outside).Scan(&outsidePart))
	t.Logf("premade partition %s, outside partition %s", futurePart, outsidePart)
	require.NotContains(t, futurePart, "default", "run_maintenance did not premake the day")
	_, err := db.Pool.Exec(ctx, `UPDATE event_outbox SET published_at = now(), last_error = 'outbox: malformed message' WHERE id IN ($1, $2) AND published_at IS NULL`, future, outside)
	require.NoError(t, err)
	require.Equal(t, int64(2), db.Count(t, `SELECT count(*) FROM event_outbox WHERE id IN ($1, $2) AND published_at IS NULL AND dead_lettered_at IS NOT NULL`, future, outside),
		"an old drain's malformed mark in a partition premade after the conversion (or the default one) was not made a dead letter")
}

// TestHostile2TimeoutRowStarvesRetries: a row the broker never confirms in
// time because of the row itself (a body just under 16 MiB over a slow link;
// a publisher stuck on it) records last_error but counts no attempt, so it
// is never dead-lettered; it sorts with the failed rows by created_at and
// ends the batch every drain. A younger row that failed once (a transient
// refusal) sorts behind it and is never offered again.
func TestHostile2TimeoutRowStarvesRetries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	stuck := stage(t, db, "rules.huge")
	other := stage(t, db, "rules.evaluated")
	refuseOnce := true
	pub := &fakePublisher{fail: func(ctx context.Context, m outbox.Message) error {
		if m.EventType == "rules.huge" {
			<-ctx.Done()
			return fmt.Errorf("waiting for the broker's confirm: %w", ctx.Err())
		}
		if refuseOnce {
			refuseOnce = false
			return errors.New("queue at its length limit: nacked")
		}
		return nil
	}}
	_, logger := newLogRecorder()
	d := &outbox.Drainer{Pool: db.Pool, Publisher: pub, Logger: logger, MaxAttempts: 5, PublishTimeout: 30 * time.Millisecond,
		RetryBackoff: time.Nanosecond, MaxRetryBackoff: time.Nanosecond}
	// Drain 1: stuck (oldest, fresh) times out first: the batch ends. Make the
	// other row fail once on its own so both carry a last_error.
	_, _ = d.DrainOnce(ctx)
	_, _ = (&outbox.Drainer{Pool: db.Pool, Publisher: pub, Logger: logger, MaxAttempts: 5, BatchSize: 1,
		RetryBackoff: time.Hour, MaxRetryBackoff: time.Hour}).DrainOnce(ctx) // claims `other` only (stuck is in its backoff)
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM event_outbox WHERE id = $1 AND attempts = 1 AND published_at IS NULL`, other))
	for range 20 {
		_, _ = d.DrainOnce(ctx)
	}
	var stuckAttempts int
	var stuckDead bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT attempts, dead_lettered_at IS NOT NULL FROM event_outbox WHERE id = $1`, stuck).Scan(&stuckAttempts, &stuckDead))
	t.Logf("after 21 drains the stuck row has %d attempts, dead=%v (offered %d times)", stuckAttempts, stuckDead, count(pub.ids(), stuck))
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM event_outbox WHERE id = $1 AND published_at IS NOT NULL`, other),
		"a row that failed once was never offered again in 20 drains: a row whose publish times out every time (never counted, never dead) sorts ahead of it and ends every batch (stuck offered %d times, attempts %d)",
		count(pub.ids(), stuck), stuckAttempts)
}

// TestHostile2LateRefusalIsNotATimeout: the broker did answer (a nack, a
// return) but the publisher returned it just after the publish deadline.
// The drain classifies by pctx.Err(), not by the error, so the refusal is
// recorded as a timeout: no attempt, never dead-lettered.
func TestHostile2LateRefusalIsNotATimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	id := stage(t, db, "rules.evaluated")
	pub := &fakePublisher{fail: func(_ context.Context, _ outbox.Message) error {
		time.Sleep(60 * time.Millisecond) // the nack arrives after the deadline
		return errors.New("rabbitmq publish: the broker nacked the message")
	}}
	_, logger := newLogRecorder()
	d := &outbox.Drainer{Pool: db.Pool, Publisher: pub, Logger: logger, MaxAttempts: 2, PublishTimeout: 20 * time.Millisecond,
		RetryBackoff: time.Nanosecond, MaxRetryBackoff: time.Nanosecond}
	for range 3 {
		_, _ = d.DrainOnce(ctx)
	}
	var attempts int
	var dead bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT attempts, dead_lettered_at IS NOT NULL FROM event_outbox WHERE id = $1`, id).Scan(&attempts, &dead))
	require.True(t, dead, "a row the broker refused 3 times (each refusal a little after the deadline) has %d attempts and is not dead: a late nack counts as a timeout", attempts)
}

// TestHostile2TimedOutRowStaysPending: a timed-out row is pending, never
// published or dead, attempts 0 with last_attempt_at set; it is claimed
// again once past its backoff (one base step) and published with its
// last_error cleared.
func TestHostile2TimedOutRowStaysPending(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	id := stage(t, db, "rules.evaluated")
	hang := true
	pub := &fakePublisher{fail: func(ctx context.Context, _ outbox.Message) error {
		if hang {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}}
	_, logger := newLogRecorder()
	d := &outbox.Drainer{Pool: db.Pool, Publisher: pub, Logger: logger, MaxAttempts: 1, PublishTimeout: 20 * time.Millisecond,
		RetryBackoff: time.Hour, MaxRetryBackoff: time.Hour}
	rep, err := d.DrainOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 0, rep.Published)
	require.Equal(t, 0, rep.DeadLettered)
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM event_outbox WHERE id = $1 AND published_at IS NULL AND dead_lettered_at IS NULL
		AND attempts = 0 AND last_attempt_at IS NOT NULL AND last_error IS NOT NULL`, id))
	// In its backoff (one hour): not claimed.
	hang = false
	rep, err = d.DrainOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 0, rep.Published, "a timed-out row was claimed inside its backoff")
	db.Exec(t, `UPDATE event_outbox SET last_attempt_at = now() - interval '61 minutes' WHERE id = $1`, id)
	rep, err = d.DrainOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Published)
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM event_outbox WHERE id = $1 AND published_at IS NOT NULL AND last_error IS NULL AND dead_lettered_at IS NULL`, id))
}

// TestHostile2ListingEdges: ties in dead_lettered_at paged by one; after the
// last row is an empty page without next; a listing on a database whose
// default_transaction_read_only is on (a replica-like setting) still works;
// a listing on an exhausted pool returns when its context ends.
func TestHostile2ListingEdges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	var ids []uuid.UUID
	for range 4 {
		id := uuid.New()
		db.Exec(t, `INSERT INTO event_outbox (id, event_type, payload, dead_lettered_at, attempts, last_error)
			VALUES ($1, 'rules.evaluated', '{}', '2024-01-01T00:00:00Z', 3, 'nacked')`, id)
		ids = append(ids, id)
	}
	seen := map[uuid.UUID]int{}
	after, last := uuid.Nil, uuid.Nil
	for i := 0; ; i++ {
		require.Less(t, i, 10)
		page, err := outbox.ListDeadLetters(ctx, db.Pool, after, 1)
		require.NoError(t, err)
		require.Equal(t, int64(4), page.Total)
		for _, dl := range page.DeadLetters {
			seen[dl.ID]++
			last = dl.ID
		}
		if page.Next == "" {
			break
		}
		after = uuid.MustParse(page.Next)
	}
	require.Len(t, seen, 4)
	for _, id := range ids {
		require.Equal(t, 1, seen[id])
	}
	page, err := outbox.ListDeadLetters(ctx, db.Pool, last, 1)
	require.NoError(t, err)
	require.Empty(t, page.DeadLetters)
	require.Empty(t, page.Next)

	// A replica-like setting.
	db.Exec(t, fmt.Sprintf(`ALTER DATABASE %q SET default_transaction_read_only = on`, db.Name))
	ro, err := pgxpool.New(ctx, db.URL)
	require.NoError(t, err)
	defer ro.Close()
	page, err = outbox.ListDeadLetters(ctx, ro, uuid.Nil, 2)
	require.NoError(t, err, "a read-only session cannot list")
	require.Len(t, page.DeadLetters, 2)

	// An exhausted pool: the listing waits for a connection only as long as
	// its context.
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.MaxConns = 1
	small, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer small.Close()
	held, err := small.Acquire(ctx)
	require.NoError(t, err)
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = outbox.ListDeadLetters(cctx, small, uuid.Nil, 2)
	require.Error(t, err)
	require.Less(t, time.Since(start), 5*time.Second)
	held.Release()
	page, err = outbox.ListDeadLetters(ctx, small, uuid.Nil, 2)
	require.NoError(t, err, "the pool is usable again")
	require.Len(t, page.DeadLetters, 2)
}
