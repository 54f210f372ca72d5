package outbox_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/outbox"
	"github.com/craig/retention/migrations"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func TestStageWritesInTheCallersTransaction(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		commit bool
		want   int64
	}{
		{name: "commit keeps the event", commit: true, want: 1},
		{name: "rollback discards the event", commit: false, want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := kerneltest.NewDB(t, migrations.Transport())
			tx, err := db.Pool.Begin(ctx)
			require.NoError(t, err)
			id, err := outbox.Stage(ctx, tx, outbox.Envelope{EventType: "rules.evaluated", Payload: json.RawMessage(`{"n":1}`)})
			require.NoError(t, err)
			require.Equal(t, uuid.Version(7), id.Version(), "a zero id is replaced by a UUIDv7")
			require.Zero(t, db.Count(t, "SELECT count(*) FROM event_outbox"), "the row is invisible outside the transaction until commit")
			if tc.commit {
				require.NoError(t, tx.Commit(ctx))
			} else {
				require.NoError(t, tx.Rollback(ctx))
			}
			require.Equal(t, tc.want, db.Count(t, "SELECT count(*) FROM event_outbox WHERE id = $1", id))
		})
	}
}

func TestStageStoresTheEnvelope(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	want := uuid.Must(uuid.NewV7())
	id, err := outbox.Stage(ctx, db.Pool, outbox.Envelope{ID: want, EventType: "exchange.job_done", Payload: json.RawMessage(`{"job": "j-1"}`)})
	require.NoError(t, err)
	require.Equal(t, want, id, "an explicit id is kept")

	var (
		eventType string
		payload   []byte
		published *string
		lastError *string
	)
	require.NoError(t, db.Pool.QueryRow(ctx,
		"SELECT event_type, payload, published_at::text, last_error FROM event_outbox WHERE id = $1", id).
		Scan(&eventType, &payload, &published, &lastError))
	require.Equal(t, "exchange.job_done", eventType)
	require.JSONEq(t, `{"job":"j-1"}`, string(payload))
	require.Nil(t, published, "a staged event is pending")
	require.Nil(t, lastError)
}

func TestStageRejectsInvalidEnvelopes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  outbox.Envelope
	}{
		{name: "empty event type", env: outbox.Envelope{Payload: json.RawMessage(`{}`)}},
		{name: "space in event type", env: outbox.Envelope{EventType: "rules evaluated", Payload: json.RawMessage(`{}`)}},
		{name: "event type over 255 bytes", env: outbox.Envelope{EventType: strings.Repeat("r", 256), Payload: json.RawMessage(`{}`)}},
		{name: "payload not JSON", env: outbox.Envelope{EventType: "rules.evaluated", Payload: json.RawMessage(`{"a":`)}},
		{name: "no payload", env: outbox.Envelope{EventType: "rules.evaluated"}},
	}
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tx, err := db.Pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			id, err := outbox.Stage(ctx, tx, tc.env)
			require.ErrorIs(t, err, outbox.ErrInvalidEnvelope)
			require.Equal(t, uuid.Nil, id)
			// Nothing ran on the transaction: it is still usable, and empty.
			var n int64
			require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM event_outbox").Scan(&n))
			require.Zero(t, n)
			require.NoError(t, tx.Commit(ctx))
		})
	}
	t.Cleanup(func() { require.Zero(t, db.Count(t, "SELECT count(*) FROM event_outbox")) })
}
