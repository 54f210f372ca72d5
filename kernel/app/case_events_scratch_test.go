package app_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/eventsig"
	"github.com/craig/retention/kernel/inbox"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/outbox"
	"github.com/craig/retention/kernel/rabbitmq"
	"github.com/craig/retention/kernel/schedule"
	"github.com/craig/retention/kernel/subject"
)

// TestCaseEventsFromTheInbox: a case event signed by the configured
// producer moves the clock once (a redelivery is a duplicate); one signed
// by another producer's key, or unsigned, is refused and gives its id
// back, so the genuine event with that id is still applied; a malformed
// or stale event is acknowledged, counted and changes nothing.
func TestCaseEventsFromTheInbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, kerneltest.ArchivingFixture()...)
	key, err := subject.NewKey([]byte("case events inbox test subject key, 32 bytes+"))
	require.NoError(t, err)
	signer := func(id, source string) (*eventsig.Signer, string) {
		pub, priv, err := ed25519.GenerateKey(nil)
		require.NoError(t, err)
		s, err := eventsig.NewSigner(id, priv)
		require.NoError(t, err)
		return s, eventsig.TrustLine(id, source, pub)
	}
	cases, casesLine := signer("cases-1", "craig-cases")
	rules, rulesLine := signer("rules-1", "craig-rules")
	trust, err := eventsig.ParseTrust(strings.NewReader(casesLine + "\n" + rulesLine + "\n"))
	require.NoError(t, err)
	m, err := metrics.NewCaseEvents(prometheus.NewRegistry(), schedule.CaseEventTypes())
	require.NoError(t, err)
	ce := &app.CaseEvents{Clocks: schedule.NewClocks(db.Pool, key), Trust: trust, Producer: "craig-cases", Metrics: m,
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))}
	deliver := func(id uuid.UUID, typ, payload string, by *eventsig.Signer) bool {
		t.Helper()
		body, err := json.Marshal(outbox.Message{ID: id, EventType: typ, Payload: json.RawMessage(payload), CreatedAt: time.Now()})
		require.NoError(t, err)
		var msg outbox.Message
		require.NoError(t, json.Unmarshal(body, &msg))
		d := rabbitmq.Delivery{Message: msg, Body: body, RoutingKey: typ, Headers: map[string]any{}}
		if by != nil {
			d.Headers = by.Headers(body)
		}
		dup, err := inbox.Receive(ctx, db.Pool, inbox.Event{ID: id, EventType: typ}, func(ctx context.Context, tx pgx.Tx) error {
			return ce.Handle(ctx, tx, d)
		})
		require.NoError(t, err)
		return dup
	}
	count := func(typ, outcome string) float64 {
		return testutil.ToFloat64(m.Received.WithLabelValues(typ, "inbox", outcome))
	}
	clock := func(n string) (state string, closed *time.Time, class *string) {
		t.Helper()
		rows, err := db.Pool.Query(ctx, `SELECT state, closed_at, classification FROM case_clocks WHERE subject_hash = $1`, key.Hash(mustParse(t, n)))
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			require.NoError(t, rows.Scan(&state, &closed, &class))
		}
		return state, closed, class
	}

	forged := uuid.New()
	require.False(t, deliver(forged, schedule.EventClosed, `{"case_id":17,"closed_at":"2020-01-01T00:00:00Z","classification":"x"}`, rules))
	require.False(t, deliver(uuid.New(), schedule.EventClosed, `{"case_id":17,"closed_at":"2020-01-01T00:00:00Z","classification":"x"}`, nil))
	st, _, _ := clock("case:17")
	require.Empty(t, st, "neither another producer's key nor no signature moves a clock")
	require.Equal(t, 2.0, count(schedule.EventClosed, metrics.CaseEventRefused))
	require.Zero(t, db.Count(t, `SELECT count(*) FROM event_inbox`), "a refused event gives its id back")

	require.False(t, deliver(forged, schedule.EventClosed, `{"case_id":"017","closed_at":"2021-06-30T22:00:00-02:00","classification":"substantiated"}`, cases),
		"the genuine event with the forgery's id is received")
	require.True(t, deliver(forged, schedule.EventClosed, `{"case_id":"017","closed_at":"2021-06-30T22:00:00-02:00","classification":"substantiated"}`, cases))
	st, closed, class := clock("case:17")
	require.Equal(t, "closed", st)
	require.Equal(t, time.Date(2021, 7, 1, 0, 0, 0, 0, time.UTC), closed.UTC())
	require.Equal(t, "substantiated", *class)
	require.Equal(t, 1.0, count(schedule.EventClosed, metrics.CaseEventApplied))

	for _, bad := range []struct{ typ, payload string }{
		{schedule.EventClosed, `{"case_id":"17a","closed_at":"2022-01-01T00:00:00Z","classification":"x"}`},
		{schedule.EventClosed, `{"case_id":-17,"closed_at":"2022-01-01T00:00:00Z","classification":"x"}`},
		{schedule.EventClosed, `{"case_id":17,"closed_at":"2022-01-01T00:00:00Z"}`},
		{schedule.EventClosed, `{"case_id":17,"closed_at":"2022-01-01T00:00:00Z","classification":"x","case_ID":18}`},
		{schedule.EventReopened, `{"case_id":17,"closed_at":"2022-01-01T00:00:00Z"}`},
		{schedule.EventMerged, `{"case_id":17,"merged_at":"2022-01-01T00:00:00Z"}`},
		{schedule.EventMerged, `{"case_id":17,"into_case_id":"case:18","merged_at":"2022-01-01T00:00:00Z"}`},
		{schedule.EventMerged, `{"case_id":17,"into_case_id":17,"merged_at":"2022-01-01T00:00:00Z"}`},
		{schedule.EventReopened, `[]`},
	} {
		require.False(t, deliver(uuid.New(), bad.typ, bad.payload, cases), bad.payload)
	}
	st, closed, _ = clock("case:17")
	require.Equal(t, "closed", st, "a malformed event changes nothing")
	require.Equal(t, time.Date(2021, 7, 1, 0, 0, 0, 0, time.UTC), closed.UTC())
	require.Equal(t, 9.0, count(schedule.EventClosed, metrics.CaseEventMalformed)+count(schedule.EventReopened, metrics.CaseEventMalformed)+
		count(schedule.EventMerged, metrics.CaseEventMalformed))

	require.False(t, deliver(uuid.New(), schedule.EventReopened, `{"case_id":17,"reopened_at":"2021-01-01T00:00:00Z"}`, cases))
	require.Equal(t, 1.0, count(schedule.EventReopened, metrics.CaseEventStale))
	st, _, _ = clock("case:17")
	require.Equal(t, "closed", st, "a stale reopening changes nothing")
	require.False(t, deliver(uuid.New(), schedule.EventMerged, `{"case_id":17,"into_case_id":"18","merged_at":"2022-01-01T00:00:00Z"}`, cases))
	st, _, _ = clock("case:17")
	require.Equal(t, "merged", st)
	require.Equal(t, int64(2), db.Count(t, `SELECT count(*) FROM case_clock_events WHERE source = 'event:craig-cases'`))
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM case_clocks WHERE merged_into = $1`, key.Hash(mustParse(t, "case:18"))))
}
