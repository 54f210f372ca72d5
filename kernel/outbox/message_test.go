package outbox_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/craig/retention/kernel/outbox"
	"github.com/craig/retention/kernel/prune"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func TestValidateEventType(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		key     string
		wantErr bool
	}{
		{name: "dotted", key: "rules.evaluations_archived"},
		{name: "single word", key: "ping"},
		{name: "exactly 255 bytes", key: strings.Repeat("a", outbox.MaxRoutingKeyBytes)},
		{name: "topic wildcards are literal in a routing key", key: "a.*.#"},
		{name: "empty", key: "", wantErr: true},
		{name: "256 bytes", key: strings.Repeat("a", outbox.MaxRoutingKeyBytes+1), wantErr: true},
		{name: "space", key: "rules evaluated", wantErr: true},
		{name: "tab", key: "rules\tevaluated", wantErr: true},
		{name: "newline", key: "rules.evaluated\n", wantErr: true},
		{name: "NUL", key: "rules\x00", wantErr: true},
		{name: "invalid UTF-8", key: "rules.\xff", wantErr: true},
		{name: "non-breaking space", key: "rules\u00a0x", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := outbox.ValidateEventType(tc.key)
			if tc.wantErr {
				require.ErrorIs(t, err, outbox.ErrInvalidRoutingKey)
				return
			}
			require.NoError(t, err)
		})
	}
}

func TestMessageWireForm(t *testing.T) {
	t.Parallel()
	m := outbox.Message{
		ID:        uuid.Must(uuid.NewV7()),
		EventType: "rules.evaluations_archived",
		Payload:   json.RawMessage(`{"batch":7,"ids":[1,2]}`),
		CreatedAt: time.Date(2026, 7, 26, 12, 30, 0, 123456000, time.UTC),
	}
	body, err := outbox.EncodeMessage(m)
	require.NoError(t, err)

	var fields map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(body, &fields))
	require.Len(t, fields, 4)
	require.JSONEq(t, `"`+m.ID.String()+`"`, string(fields["id"]))
	require.JSONEq(t, `"rules.evaluations_archived"`, string(fields["event_type"]))
	require.JSONEq(t, `{"batch":7,"ids":[1,2]}`, string(fields["payload"]))
	require.JSONEq(t, `"2026-07-26T12:30:00.123456Z"`, string(fields["created_at"]))

	got, err := outbox.DecodeMessage(body)
	require.NoError(t, err)
	require.Equal(t, m.ID, got.ID)
	require.Equal(t, m.EventType, got.EventType)
	require.JSONEq(t, string(m.Payload), string(got.Payload))
	require.True(t, m.CreatedAt.Equal(got.CreatedAt))
}

func TestEncodeMessageRejectsMalformed(t *testing.T) {
	t.Parallel()
	valid := outbox.Message{ID: uuid.Must(uuid.NewV7()), EventType: "a.b", Payload: json.RawMessage(`{}`)}
	tests := []struct {
		name   string
		mutate func(*outbox.Message)
	}{
		{name: "nil id", mutate: func(m *outbox.Message) { m.ID = uuid.Nil }},
		{name: "routing key with a space", mutate: func(m *outbox.Message) { m.EventType = "a b" }},
		{name: "routing key over 255 bytes", mutate: func(m *outbox.Message) { m.EventType = strings.Repeat("k", 256) }},
		{name: "payload not JSON", mutate: func(m *outbox.Message) { m.Payload = json.RawMessage(`{"a":`) }},
		{name: "no payload", mutate: func(m *outbox.Message) { m.Payload = nil }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := valid
			tc.mutate(&m)
			_, err := outbox.EncodeMessage(m)
			require.ErrorIs(t, err, outbox.ErrMalformed)
		})
	}
}

func TestDecodeMessageRejectsMalformed(t *testing.T) {
	t.Parallel()
	id := uuid.Must(uuid.NewV7()).String()
	tests := []struct {
		name string
		body string
	}{
		{name: "empty", body: ``},
		{name: "not JSON", body: `not json`},
		{name: "array", body: `[1,2]`},
		{name: "unknown field", body: `{"id":"` + id + `","event_type":"a.b","payload":{},"created_at":"2026-01-01T00:00:00Z","extra":1}`},
		{name: "trailing data", body: `{"id":"` + id + `","event_type":"a.b","payload":{}} {}`},
		{name: "bad id", body: `{"id":"nope","event_type":"a.b","payload":{}}`},
		{name: "missing id", body: `{"event_type":"a.b","payload":{}}`},
		{name: "missing payload", body: `{"id":"` + id + `","event_type":"a.b"}`},
		{name: "bad event type", body: `{"id":"` + id + `","event_type":"a b","payload":{}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := outbox.DecodeMessage([]byte(tc.body))
			require.ErrorIs(t, err, outbox.ErrMalformed)
		})
	}
}

// TestReplayRejectsBadArgumentsBeforeTouchingTheDatabase passes a nil
// database: a refusal must not need one.
func TestReplayRejectsBadArgumentsBeforeTouchingTheDatabase(t *testing.T) {
	t.Parallel()
	now := time.Now()
	tests := []struct {
		name     string
		from, to time.Time
		lim      outbox.ReplayLimits
		want     error
	}{
		{name: "from equals to", from: now, to: now, lim: limits(30), want: outbox.ErrInvalidReplayRange},
		{name: "from after to", from: now, to: now.Add(-time.Hour), lim: limits(30), want: outbox.ErrInvalidReplayRange},
		{name: "from after to, sweep disabled", from: now, to: now.Add(-time.Hour), lim: limits(0), want: outbox.ErrInvalidReplayRange},
		{name: "negative window", from: now.Add(-time.Hour), to: now, lim: limits(-1), want: prune.ErrOutOfRange},
		{name: "window over the maximum", from: now.Add(-time.Hour), to: now, lim: limits(prune.MaxWindowDays + 1), want: prune.ErrOutOfRange},
		{name: "max age 0", from: now.Add(-time.Hour), to: now, lim: outbox.ReplayLimits{OutboxWindowDays: 30, MaxRows: 1, BatchSize: 1}, want: prune.ErrOutOfRange},
		{name: "max age over the maximum", from: now.Add(-time.Hour), to: now, lim: outbox.ReplayLimits{MaxAgeDays: prune.MaxWindowDays + 1, MaxRows: 1, BatchSize: 1}, want: prune.ErrOutOfRange},
		{name: "max rows 0", from: now.Add(-time.Hour), to: now, lim: outbox.ReplayLimits{MaxAgeDays: 30, BatchSize: 1}, want: prune.ErrOutOfRange},
		{name: "batch 0", from: now.Add(-time.Hour), to: now, lim: outbox.ReplayLimits{MaxAgeDays: 30, MaxRows: 1}, want: prune.ErrOutOfRange},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			n, err := outbox.Replay(context.Background(), nil, tc.from, tc.to, tc.lim)
			require.ErrorIs(t, err, tc.want)
			require.Zero(t, n)
		})
	}
}

// limits are the default replay bounds with the given outbox window.
func limits(outboxWindowDays int) outbox.ReplayLimits {
	return outbox.ReplayLimits{OutboxWindowDays: outboxWindowDays, MaxAgeDays: 30, MaxRows: 100_000, BatchSize: 5000}
}

// TestReplayWindow: the clamp is the shorter of the
// outbox window and replay_max_age_days, and with the outbox sweep disabled
// it is replay_max_age_days (it used to be no clamp at all).
func TestReplayWindow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ outbox, maxAge, want int }{
		{30, 30, 30}, {10, 30, 10}, {60, 30, 30}, {0, 30, 30}, {0, 3650, 3650}, {1, 1, 1},
	} {
		lim := outbox.ReplayLimits{OutboxWindowDays: tc.outbox, MaxAgeDays: tc.maxAge}
		require.Equal(t, tc.want, lim.WindowDays(), "outbox %d, max age %d", tc.outbox, tc.maxAge)
	}
}

func TestReplayTooLargeError(t *testing.T) {
	t.Parallel()
	var err error = &outbox.ReplayTooLargeError{Count: 100_001, MaxRows: 100_000}
	require.ErrorIs(t, err, outbox.ErrReplayTooLarge)
	require.Contains(t, err.Error(), "100001 published rows, more than replay_max_rows=100000")
}

func TestReplayOutOfWindowError(t *testing.T) {
	t.Parallel()
	cutoff := time.Date(2026, 6, 26, 0, 0, 0, 0, time.UTC)
	var err error = &outbox.ReplayOutOfWindowError{WindowDays: 30, Cutoff: cutoff, From: cutoff.Add(-24 * time.Hour)}
	require.ErrorIs(t, err, outbox.ErrReplayOutOfWindow)
	require.Contains(t, err.Error(), "replay range starts before the 30-day replay window (cutoff 2026-06-26T00:00:00Z")
	require.Contains(t, err.Error(), "older rows may have lost their consumers' dedup records")
}
