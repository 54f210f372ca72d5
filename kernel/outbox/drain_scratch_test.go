package outbox_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/outbox"
	"github.com/craig/retention/migrations"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// fakePublisher records what it was asked to publish; fail decides the
// outcome of each call (nil: confirmed).
type fakePublisher struct {
	mu    sync.Mutex
	calls []outbox.Message
	fail  func(ctx context.Context, m outbox.Message) error
}

func (f *fakePublisher) Publish(ctx context.Context, m outbox.Message) error {
	f.mu.Lock()
	f.calls = append(f.calls, m)
	fail := f.fail
	f.mu.Unlock()
	if fail == nil {
		return nil
	}
	return fail(ctx, m)
}

func (f *fakePublisher) ids() []uuid.UUID {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []uuid.UUID
	for _, m := range f.calls {
		ids = append(ids, m.ID)
	}
	return ids
}

// outboxRow is the drain-relevant state of one row.
type outboxRow struct {
	Published bool
	LastError *string
}

func rowState(t *testing.T, db *kerneltest.DB, id uuid.UUID) outboxRow {
	t.Helper()
	var r outboxRow
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		"SELECT published_at IS NOT NULL, last_error FROM event_outbox WHERE id = $1", id).Scan(&r.Published, &r.LastError))
	return r
}

func stage(t *testing.T, db *kerneltest.DB, eventType string) uuid.UUID {
	t.Helper()
	id, err := outbox.Stage(context.Background(), db.Pool, outbox.Envelope{EventType: eventType, Payload: json.RawMessage(`{"k":"v"}`)})
	require.NoError(t, err)
	return id
}

func TestDrainOnceOutcomes(t *testing.T) {
	t.Parallel()
	errDown := errors.New("connection refused")
	tests := []struct {
		name          string
		fail          error
		wantReport    outbox.DrainReport
		wantPublished bool
		wantLastError string // "" means NULL
		wantWarn      string
		wantLevel     slog.Level // of wantWarn: WARN unless set
	}{
		{
			name:          "confirmed: stamped, last_error cleared",
			wantReport:    outbox.DrainReport{Published: 1},
			wantPublished: true,
		},
		{
			name:          "publish failure: stays pending with last_error",
			fail:          errDown,
			wantReport:    outbox.DrainReport{Failed: 1},
			wantLastError: "connection refused",
			wantWarn:      "outbox publish failed; the event stays pending",
		},
		{
			name:          "malformed: dead-lettered with last_error, never published",
			fail:          fmt.Errorf("body too large: %w", outbox.ErrMalformed),
			wantReport:    outbox.DrainReport{Malformed: 1, DeadLettered: 1},
			wantLastError: "body too large: outbox: malformed message",
			wantWarn:      "outbox event is malformed and can never be published; dead-lettered, never delivered",
			wantLevel:     slog.LevelError,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := kerneltest.NewDB(t, migrations.Transport())
			id := stage(t, db, "rules.evaluated")
			// A stale last_error from an earlier attempt must be cleared on success.
			db.Exec(t, "UPDATE event_outbox SET last_error = 'earlier failure' WHERE id = $1", id)
			rec, logger := newLogRecorder()
			pub := &fakePublisher{fail: func(context.Context, outbox.Message) error { return tc.fail }}
			d := &outbox.Drainer{Pool: db.Pool, Publisher: pub, Logger: logger}

			rep, err := d.DrainOnce(ctx)
			require.NoError(t, err)
			require.Equal(t, tc.wantReport, rep)
			require.Equal(t, []uuid.UUID{id}, pub.ids())

			got := rowState(t, db, id)
			require.Equal(t, tc.wantPublished, got.Published)
			if tc.wantLastError == "" {
				require.Nil(t, got.LastError)
			} else {
				require.NotNil(t, got.LastError)
				require.Equal(t, tc.wantLastError, *got.LastError)
			}

			warns := rec.attrsAt(cmp.Or(tc.wantLevel, slog.LevelWarn))
			if tc.wantWarn == "" {
				require.Empty(t, warns)
				require.Equal(t, []string{"outbox drained"}, rec.at(slog.LevelInfo))
				return
			}
			require.Len(t, warns, 1)
			require.Equal(t, tc.wantWarn, warns[0]["msg"])
			require.Equal(t, id.String(), warns[0]["event_id"])
			require.Equal(t, "rules.evaluated", warns[0]["event_type"])
			if rep.DeadLettered == 0 {
				require.Empty(t, rec.at(slog.LevelInfo), "INFO only when something was published or dead-lettered")
			}
		})
	}
}

func TestDrainOncePublishesTheRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	id := stage(t, db, "financial.subsidy_reconciled")
	var createdAt time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT created_at FROM event_outbox WHERE id = $1", id).Scan(&createdAt))

	pub := &fakePublisher{}
	_, logger := newLogRecorder()
	rep, err := (&outbox.Drainer{Pool: db.Pool, Publisher: pub, Logger: logger}).DrainOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, outbox.DrainReport{Published: 1}, rep)
	require.Len(t, pub.calls, 1)
	m := pub.calls[0]
	require.Equal(t, id, m.ID)
	require.Equal(t, "financial.subsidy_reconciled", m.EventType)
	require.JSONEq(t, `{"k":"v"}`, string(m.Payload))
	require.True(t, createdAt.Equal(m.CreatedAt))

	// A published row is not claimed again.
	rep, err = (&outbox.Drainer{Pool: db.Pool, Publisher: pub, Logger: logger}).DrainOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, outbox.DrainReport{}, rep)
	require.Len(t, pub.calls, 1)
}

func TestDrainOnceDeadLettersAnInvalidRoutingKeyWithoutPublishing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	// Written around Stage (an older writer, a manual fix): the drain must
	// still refuse it.
	bad := uuid.Must(uuid.NewV7())
	db.Exec(t, "INSERT INTO event_outbox (id, event_type, payload) VALUES ($1, 'rules evaluated', '{}')", bad)
	good := stage(t, db, "rules.evaluated")

	rec, logger := newLogRecorder()
	pub := &fakePublisher{}
	rep, err := (&outbox.Drainer{Pool: db.Pool, Publisher: pub, Logger: logger}).DrainOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, outbox.DrainReport{Published: 1, Malformed: 1, DeadLettered: 1}, rep)
	require.Equal(t, []uuid.UUID{good}, pub.ids(), "the malformed row never reaches the publisher")

	got := rowState(t, db, bad)
	require.False(t, got.Published, "a malformed row is never stamped published")
	require.Equal(t, int64(1), db.Count(t, "SELECT count(*) FROM event_outbox WHERE id = $1 AND dead_lettered_at IS NOT NULL", bad))
	require.NotNil(t, got.LastError)
	require.Contains(t, *got.LastError, "invalid routing key")
	require.Len(t, rec.at(slog.LevelError), 1)
}

func TestDrainOnceSkipsRowsLockedByAnotherTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	locked := stage(t, db, "rules.evaluated")
	free := stage(t, db, "rules.evaluated")

	other, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = other.Rollback(ctx) }()
	_, err = other.Exec(ctx, "SELECT 1 FROM event_outbox WHERE id = $1 FOR UPDATE", locked)
	require.NoError(t, err)

	pub := &fakePublisher{}
	_, logger := newLogRecorder()
	d := &outbox.Drainer{Pool: db.Pool, Publisher: pub, Logger: logger}
	rep, err := d.DrainOnce(ctx) // would block on the lock without SKIP LOCKED
	require.NoError(t, err)
	require.Equal(t, outbox.DrainReport{Published: 1}, rep)
	require.Equal(t, []uuid.UUID{free}, pub.ids())
	require.False(t, rowState(t, db, locked).Published)

	require.NoError(t, other.Rollback(ctx))
	rep, err = d.DrainOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, outbox.DrainReport{Published: 1}, rep)
	require.Equal(t, []uuid.UUID{free, locked}, pub.ids())
}

func TestDrainOnceClaimsFreshRowsBeforeFailedOnes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	failing := stage(t, db, "rules.evaluated") // older
	_, logger := newLogRecorder()
	down := &fakePublisher{fail: func(context.Context, outbox.Message) error { return errors.New("down") }}
	rep, err := (&outbox.Drainer{Pool: db.Pool, Publisher: down, Logger: logger}).DrainOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, outbox.DrainReport{Failed: 1}, rep)

	fresh := stage(t, db, "rules.evaluated") // newer, never failed
	pub := &fakePublisher{}
	d := &outbox.Drainer{Pool: db.Pool, Publisher: pub, BatchSize: 1, Logger: logger, RetryBackoff: time.Nanosecond}
	_, err = d.DrainOnce(ctx)
	require.NoError(t, err)
	_, err = d.DrainOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{fresh, failing}, pub.ids(), "a row that failed before must not starve fresh ones")
	require.Nil(t, rowState(t, db, failing).LastError, "a later success clears last_error")
}

func TestDrainOnceRespectsBatchSize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	for range 5 {
		stage(t, db, "rules.evaluated")
	}
	pub := &fakePublisher{}
	_, logger := newLogRecorder()
	d := &outbox.Drainer{Pool: db.Pool, Publisher: pub, BatchSize: 2, Logger: logger}
	var got []int
	for range 3 {
		rep, err := d.DrainOnce(ctx)
		require.NoError(t, err)
		got = append(got, rep.Published)
	}
	require.Equal(t, []int{2, 2, 1}, got)
	require.Zero(t, db.Count(t, "SELECT count(*) FROM event_outbox WHERE published_at IS NULL"))
}

// TestDrainOnceCommitsConfirmedRowsWhenCancelled: shutdown mid-batch keeps
// the marks of the rows the broker already confirmed (even one confirmed
// after the cancellation) and leaves the rest pending without a failure
// record.
func TestDrainOnceCommitsConfirmedRowsWhenCancelled(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// second is what the second publish returns after cancelling.
		second        func(ctx context.Context) error
		wantPublished int
	}{
		{name: "cancelled during a publish", second: func(ctx context.Context) error { return ctx.Err() }, wantPublished: 1},
		{name: "cancelled just after a confirm", second: func(context.Context) error { return nil }, wantPublished: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := kerneltest.NewDB(t, migrations.Transport())
			for range 3 {
				stage(t, db, "rules.evaluated")
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			calls := 0
			pub := &fakePublisher{fail: func(ctx context.Context, _ outbox.Message) error {
				calls++ // DrainOnce publishes one row at a time
				if calls == 2 {
					cancel()
					return tc.second(ctx)
				}
				return nil
			}}
			_, logger := newLogRecorder()
			rep, err := (&outbox.Drainer{Pool: db.Pool, Publisher: pub, Logger: logger}).DrainOnce(ctx)
			require.ErrorIs(t, err, context.Canceled)
			require.Equal(t, outbox.DrainReport{Published: tc.wantPublished}, rep)
			require.Len(t, pub.calls, 2, "nothing is published after the cancellation")
			require.Equal(t, int64(tc.wantPublished), db.Count(t, "SELECT count(*) FROM event_outbox WHERE published_at IS NOT NULL"))
			require.Zero(t, db.Count(t, "SELECT count(*) FROM event_outbox WHERE last_error IS NOT NULL"))
		})
	}
}

// TestDrainOnceEndsTheBatchOnAPublishTimeout: a broker that stops
// confirming costs one timeout per drain, not one per claimed row.
func TestDrainOnceEndsTheBatchOnAPublishTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	first := stage(t, db, "rules.evaluated")
	stage(t, db, "rules.evaluated")
	stage(t, db, "rules.evaluated")

	stuck := &fakePublisher{fail: func(ctx context.Context, _ outbox.Message) error {
		<-ctx.Done() // never confirms
		return ctx.Err()
	}}
	_, logger := newLogRecorder()
	d := &outbox.Drainer{Pool: db.Pool, Publisher: stuck, PublishTimeout: 50 * time.Millisecond, Logger: logger}
	rep, err := d.DrainOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, outbox.DrainReport{Failed: 1}, rep)
	require.Equal(t, []uuid.UUID{first}, stuck.ids())
	got := rowState(t, db, first)
	require.False(t, got.Published)
	require.NotNil(t, got.LastError)
	require.Contains(t, *got.LastError, "deadline exceeded")
	require.Equal(t, int64(1), db.Count(t, "SELECT count(*) FROM event_outbox WHERE last_error IS NOT NULL"))
}

func TestDrainOnceWithNothingPendingIsQuiet(t *testing.T) {
	t.Parallel()
	db := kerneltest.NewDB(t, migrations.Transport())
	rec, logger := newLogRecorder()
	rep, err := (&outbox.Drainer{Pool: db.Pool, Publisher: &fakePublisher{}, Logger: logger}).DrainOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, outbox.DrainReport{}, rep)
	require.Empty(t, rec.atLeast(slog.LevelDebug))
}

func TestDrainOnceRejectsInvalidDrainer(t *testing.T) {
	t.Parallel()
	db := kerneltest.NewDB(t, migrations.Transport())
	tests := []struct {
		name string
		d    outbox.Drainer
	}{
		{name: "no pool", d: outbox.Drainer{Publisher: &fakePublisher{}}},
		{name: "no publisher", d: outbox.Drainer{Pool: db.Pool}},
		{name: "negative batch", d: outbox.Drainer{Pool: db.Pool, Publisher: &fakePublisher{}, BatchSize: -1}},
		{name: "negative timeout", d: outbox.Drainer{Pool: db.Pool, Publisher: &fakePublisher{}, PublishTimeout: -time.Second}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := tc.d.DrainOnce(context.Background())
			require.ErrorIs(t, err, outbox.ErrInvalidDrainer)
		})
	}
}
