package inbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/craig/retention/kernel/inbox"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/outbox"
	"github.com/craig/retention/migrations"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// waitLimit bounds every wait for a signal; it is a deadline, not a sleep.
const waitLimit = 10 * time.Second

// stagingHandler is a handler with a visible effect in the database: it
// stages a follow-up event on the receive transaction.
func stagingHandler(runs *atomic.Int64) inbox.HandleFunc {
	return func(ctx context.Context, tx pgx.Tx) error {
		runs.Add(1)
		_, err := outbox.Stage(ctx, tx, outbox.Envelope{EventType: "security.noted", Payload: json.RawMessage(`{}`)})
		return err
	}
}

func newEvent() inbox.Event {
	return inbox.Event{ID: uuid.Must(uuid.NewV7()), EventType: "rules.evaluations_archived"}
}

func TestReceiveRunsTheHandlerOncePerEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	ev := newEvent()
	var runs atomic.Int64

	var dups []bool
	for range 3 {
		dup, err := inbox.Receive(ctx, db.Pool, ev, stagingHandler(&runs))
		require.NoError(t, err)
		dups = append(dups, dup)
	}
	require.Equal(t, []bool{false, true, true}, dups)
	require.Equal(t, int64(1), runs.Load())
	require.Equal(t, int64(1), db.Count(t, "SELECT count(*) FROM event_inbox WHERE event_id = $1 AND event_type = $2", ev.ID, ev.EventType))
	require.Equal(t, int64(1), db.Count(t, "SELECT count(*) FROM event_outbox"), "the handler's writes committed once")

	// Another event is not a duplicate of the first.
	dup, err := inbox.Receive(ctx, db.Pool, newEvent(), stagingHandler(&runs))
	require.NoError(t, err)
	require.False(t, dup)
	require.Equal(t, int64(2), runs.Load())
}

func TestReceiveRollsBackOnHandlerError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	ev := newEvent()
	errHandler := errors.New("downstream unavailable")
	var runs atomic.Int64

	dup, err := inbox.Receive(ctx, db.Pool, ev, func(ctx context.Context, tx pgx.Tx) error {
		if err := stagingHandler(&runs)(ctx, tx); err != nil {
			return err
		}
		return errHandler // after writing
	})
	require.ErrorIs(t, err, errHandler)
	require.False(t, dup)
	require.Zero(t, db.Count(t, "SELECT count(*) FROM event_inbox"), "the dedup row rolls back with the handler")
	require.Zero(t, db.Count(t, "SELECT count(*) FROM event_outbox"), "the handler's writes roll back")

	// The redelivery runs the handler again, and this time it sticks.
	dup, err = inbox.Receive(ctx, db.Pool, ev, stagingHandler(&runs))
	require.NoError(t, err)
	require.False(t, dup)
	require.Equal(t, int64(2), runs.Load())
	require.Equal(t, int64(1), db.Count(t, "SELECT count(*) FROM event_inbox"))
	require.Equal(t, int64(1), db.Count(t, "SELECT count(*) FROM event_outbox"))
}

// TestReceiveConcurrentDuplicatesRunOnce delivers one event twice at once:
// the second insert waits on the first transaction's key and, once that
// commits, finds a duplicate.
func TestReceiveConcurrentDuplicatesRunOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	ev := newEvent()
	var runs atomic.Int64

	inHandler, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := inbox.Receive(ctx, db.Pool, ev, func(ctx context.Context, tx pgx.Tx) error {
			close(inHandler)
			<-release
			return stagingHandler(&runs)(ctx, tx)
		})
		first <- err
	}()
	select {
	case <-inHandler:
	case <-time.After(waitLimit):
		t.Fatal("first delivery never reached its handler")
	}

	type result struct {
		dup bool
		err error
	}
	second := make(chan result, 1)
	go func() {
		dup, err := inbox.Receive(ctx, db.Pool, ev, stagingHandler(&runs))
		second <- result{dup, err}
	}()
	// The second delivery blocks on the row lock of the first.
	require.Eventually(t, func() bool {
		var waiting int64
		err := db.Pool.QueryRow(ctx,
			"SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'").Scan(&waiting)
		return err == nil && waiting == 1
	}, waitLimit, 10*time.Millisecond, "second delivery never waited on the first")

	close(release)
	select {
	case err := <-first:
		require.NoError(t, err)
	case <-time.After(waitLimit):
		t.Fatal("first delivery did not finish")
	}
	select {
	case r := <-second:
		require.NoError(t, r.err)
		require.True(t, r.dup)
	case <-time.After(waitLimit):
		t.Fatal("second delivery did not finish")
	}
	require.Equal(t, int64(1), runs.Load())
	require.Equal(t, int64(1), db.Count(t, "SELECT count(*) FROM event_inbox"))
}

func TestReceiveRejectsInvalidEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	var runs atomic.Int64
	tests := []struct {
		name   string
		ev     inbox.Event
		handle inbox.HandleFunc
	}{
		{name: "nil id", ev: inbox.Event{EventType: "a.b"}, handle: stagingHandler(&runs)},
		{name: "empty event type", ev: inbox.Event{ID: uuid.Must(uuid.NewV7())}, handle: stagingHandler(&runs)},
		{name: "no handler", ev: newEvent()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dup, err := inbox.Receive(ctx, db.Pool, tc.ev, tc.handle)
			require.ErrorIs(t, err, inbox.ErrInvalidEvent)
			require.False(t, dup)
		})
	}
	t.Cleanup(func() {
		require.Zero(t, runs.Load())
		require.Zero(t, db.Count(t, "SELECT count(*) FROM event_inbox"))
	})
}

func TestMessageHandlerDeduplicates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	m := outbox.Message{ID: uuid.Must(uuid.NewV7()), EventType: "rules.evaluated", Payload: json.RawMessage(`{"n":1}`), CreatedAt: time.Now()}
	var got []outbox.Message
	handle := inbox.MessageHandler(db.Pool, func(ctx context.Context, tx pgx.Tx, m outbox.Message) error {
		got = append(got, m)
		return nil
	})
	for range 2 {
		require.NoError(t, handle(ctx, m))
	}
	require.Len(t, got, 1)
	require.Equal(t, m.ID, got[0].ID)
	require.Equal(t, int64(1), db.Count(t, "SELECT count(*) FROM event_inbox WHERE event_id = $1", m.ID))

	errHandler := errors.New("nope")
	failing := inbox.MessageHandler(db.Pool, func(context.Context, pgx.Tx, outbox.Message) error { return errHandler })
	other := m
	other.ID = uuid.Must(uuid.NewV7())
	require.ErrorIs(t, failing(ctx, other), errHandler, "a handler error reaches the consumer, which requeues")
	require.Zero(t, db.Count(t, "SELECT count(*) FROM event_inbox WHERE event_id = $1", other.ID))
}
