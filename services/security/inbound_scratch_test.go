package security_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
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
	"github.com/craig/retention/services/security"
)

// fleetEnv is a security database, the inbound handlers over it, and the
// keys of two producers (rules and security) plus an untrusted one.
type fleetEnv struct {
	db                *kerneltest.DB
	in                app.Inbound
	m                 *metrics.Fleet
	logs              *kerneltest.LogRecorder
	rules, sec, rogue *eventsig.Signer
}

func signer(t *testing.T, keyID, source string) (*eventsig.Signer, string) {
	t.Helper()
	priv, line, err := eventsig.GeneratePEM(keyID, source)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), keyID+".pem")
	require.NoError(t, os.WriteFile(path, priv, 0o600))
	s, err := eventsig.LoadSigner(keyID, path)
	require.NoError(t, err)
	return s, line
}

func newFleetEnv(t *testing.T, trusted bool) *fleetEnv {
	t.Helper()
	rules, rulesLine := signer(t, "rules-1", "craig-rules")
	sec, secLine := signer(t, "security-1", "craig-security")
	rogue, _ := signer(t, "rules-1", "craig-rules") // claims the trusted id
	var trust *eventsig.Trust
	if trusted {
		var err error
		trust, err = eventsig.ParseTrust(strings.NewReader(rulesLine + "\n" + secLine + "\n"))
		require.NoError(t, err)
	}
	m, err := metrics.NewFleet(prometheus.NewRegistry())
	require.NoError(t, err)
	logs := &kerneltest.LogRecorder{}
	return &fleetEnv{db: kerneltest.NewDB(t, security.Spec().MigrationSets()...), in: security.NewInboundHandler(trust, m, slog.New(logs)),
		m: m, logs: logs, rules: rules, sec: sec, rogue: rogue}
}

const testArchiveID = "0193f1d2-7c4e-7a10-8e2b-5f6a7b8c9d10"

// rulesPayload is a valid rules.evaluations_archived payload.
func rulesPayload() map[string]any {
	day := time.Now().UTC().Format("2006/01/02")
	return map[string]any{
		"source_service": "craig-rules", "archive_id": testArchiveID, "table": "rule_evaluations",
		"data_key":        "retention-archives/rules/rule_evaluations/" + day + "/" + testArchiveID + ".ndjson",
		"manifest_key":    "retention-archives/rules/rule_evaluations/" + day + "/" + testArchiveID + ".manifest.json",
		"data_sha256":     strings.Repeat("0f", 32),
		"record_count":    120,
		"store_endpoint":  "http://127.0.0.1:7070",
		"store_bucket":    "craig-archive",
		"first_record_id": "0190a8a0-0000-7000-8000-000000000001",
		"last_record_id":  "0190a8a0-0000-7000-8000-000000000078",
		"first_record_at": "2026-08-01T10:00:00.123456Z",
		"last_record_at":  "2026-08-02T10:00:00Z",
		"hot_window_days": 90,
		"archived_at":     time.Now().UTC().Add(-time.Minute).Format(time.RFC3339Nano),
		"archived_by":     "system:retention",
	}
}

// delivery builds the delivery of an event as the broker hands it over,
// signed by s (nil: unsigned).
func delivery(t *testing.T, eventType string, payload map[string]any, s *eventsig.Signer) rabbitmq.Delivery {
	t.Helper()
	p, err := json.Marshal(payload)
	require.NoError(t, err)
	m := outbox.Message{ID: uuid.Must(uuid.NewV7()), EventType: eventType, Payload: p, CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}
	body, err := outbox.EncodeMessage(m)
	require.NoError(t, err)
	d := rabbitmq.Delivery{Message: m, Body: body, RoutingKey: eventType, Headers: map[string]any{}, Attempt: 1}
	if s != nil {
		d.Headers = s.Headers(body)
	}
	return d
}

func (e *fleetEnv) handle(t *testing.T, d rabbitmq.Delivery) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(context.Background(), e.db.Pool, func(tx pgx.Tx) error { return e.in.Handle(context.Background(), tx, d) }))
}

// auditFleet returns the detail.fleet of the audit row of event id.
func (e *fleetEnv) auditFleet(t *testing.T, id uuid.UUID) map[string]any {
	t.Helper()
	var actor, action string
	var detail map[string]any
	require.NoError(t, e.db.Pool.QueryRow(context.Background(),
		`SELECT actor, action, detail FROM audit_log WHERE subject_id = $1`, id.String()).Scan(&actor, &action, &detail))
	require.Equal(t, security.InboundActor, actor)
	require.Equal(t, security.EventReceivedAction, action)
	f, _ := detail["fleet"].(map[string]any)
	return f
}

// TestInboundBooksAndReplays: a signed, valid rules event
// books one fleet row; an identical replay (another event id) leaves one
// row; a conflicting replay leaves the row unchanged, WARNs naming the
// fields and counts archive_ledger_divergence_total.
func TestInboundBooksAndReplays(t *testing.T) {
	t.Parallel()
	e := newFleetEnv(t, true)
	base := rulesPayload()
	first := delivery(t, "rules.evaluations_archived", base, e.rules)
	e.handle(t, first)
	require.Equal(t, true, e.auditFleet(t, first.Message.ID)["booked"])
	require.Equal(t, int64(1), e.db.Count(t, `SELECT count(*) FROM archive_records WHERE source_service = 'craig-rules' AND archive_id = $1`, testArchiveID))
	require.Equal(t, 1.0, testutil.ToFloat64(e.m.Booked.WithLabelValues("craig-rules")))
	var booked string
	require.NoError(t, e.db.Pool.QueryRow(context.Background(), `SELECT to_jsonb(r)::text FROM archive_records r`).Scan(&booked))

	replay := delivery(t, "rules.evaluations_archived", base, e.rules)
	e.handle(t, replay)
	require.Equal(t, false, e.auditFleet(t, replay.Message.ID)["booked"])
	require.Nil(t, e.auditFleet(t, replay.Message.ID)["divergent"])
	require.Zero(t, testutil.ToFloat64(e.m.Divergence.WithLabelValues("craig-rules")))

	conflict := maps.Clone(base)
	conflict["data_sha256"] = strings.Repeat("ee", 32)
	conflict["record_count"] = 121
	c := delivery(t, "rules.evaluations_archived", conflict, e.rules)
	e.handle(t, c)
	require.Equal(t, []any{"data_sha256", "record_count"}, e.auditFleet(t, c.Message.ID)["divergent"])
	require.Equal(t, 1.0, testutil.ToFloat64(e.m.Divergence.WithLabelValues("craig-rules")))
	warns := e.logs.Entries(slog.LevelWarn, "diverges")
	require.Len(t, warns, 1)
	require.Equal(t, []string{"data_sha256", "record_count"}, warns[0]["fields"])
	var after string
	require.NoError(t, e.db.Pool.QueryRow(context.Background(), `SELECT to_jsonb(r)::text FROM archive_records r`).Scan(&after))
	require.Equal(t, booked, after, "the booked row is never overwritten")
	require.Equal(t, int64(3), e.db.Count(t, `SELECT count(*) FROM audit_log WHERE action = 'event.received'`))
}

// TestInboundRefusesForgeries: each forged event is
// refused before any write to the fleet ledger, WARNed with the rule it
// broke, counted under its reason, acknowledged (Handle returns nil), and
// recorded in the generic audit row.
func TestInboundRefusesForgeries(t *testing.T) {
	t.Parallel()
	type forged struct {
		name      string
		eventType string
		edit      func(map[string]any)
		sign      func(e *fleetEnv) *eventsig.Signer
		reason    string
	}
	set := func(k string, v any) func(map[string]any) { return func(m map[string]any) { m[k] = v } }
	rulesKey := func(e *fleetEnv) *eventsig.Signer { return e.rules }
	day := time.Now().UTC().Format("2006/01/02")
	tests := []forged{
		{name: "unsigned", sign: func(*fleetEnv) *eventsig.Signer { return nil }, reason: "signature"},
		{name: "untrusted key under a trusted id", sign: func(e *fleetEnv) *eventsig.Signer { return e.rogue }, reason: "signature"},
		{name: "security's key speaking for rules", sign: func(e *fleetEnv) *eventsig.Signer { return e.sec }, reason: "signature"},
		{name: "rules' key on a security event", eventType: "security.archive_completed", reason: "signature"},
		{name: "unsigned purge announcement", eventType: "rules.archive_purged", sign: func(*fleetEnv) *eventsig.Signer { return nil }, reason: "signature"},
		{name: "source of another service", edit: set("source_service", "craig-security"), reason: "source_service"},
		{name: "table outside rules' vocabulary", edit: set("table", "audit_log"), reason: "table"},
		{name: "data key under security's prefix", edit: set("data_key", "retention-archives/security/rule_evaluations/"+day+"/"+testArchiveID+".ndjson"), reason: "key_prefix"},
		{name: "manifest key of another archive", edit: set("manifest_key", "retention-archives/rules/rule_evaluations/"+day+"/0193f1d2-7c4e-7a10-8e2b-5f6a7b8c9d11.manifest.json"), reason: "key_prefix"},
		{name: "sha256 not hex", edit: set("data_sha256", strings.Repeat("zz", 32)), reason: "data_sha256"},
		{name: "zero records", edit: set("record_count", 0), reason: "record_count"},
		{name: "more records than a batch", edit: set("record_count", 10_001), reason: "record_count"},
		{name: "inverted id range", edit: set("first_record_id", "0190a8a0-0000-7000-8000-0000000000ff"), reason: "record_range"},
		{name: "archived in the future", edit: set("archived_at", time.Now().UTC().Add(time.Hour).Format(time.RFC3339Nano)), reason: "timestamps"},
		{name: "first record after last", edit: set("first_record_at", "2026-08-03T00:00:00Z"), reason: "timestamps"},
		{name: "hot window zero", edit: set("hot_window_days", 0), reason: "hot_window_days"},
		{name: "empty store endpoint", edit: set("store_endpoint", ""), reason: "store_identity"},
		{name: "missing field", edit: func(m map[string]any) { delete(m, "store_bucket") }, reason: "malformed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newFleetEnv(t, true)
			p := rulesPayload()
			if tt.edit != nil {
				tt.edit(p)
			}
			sign := tt.sign
			if sign == nil {
				sign = rulesKey
			}
			et := tt.eventType
			if et == "" {
				et = "rules.evaluations_archived"
			}
			d := delivery(t, et, p, sign(e))
			e.handle(t, d)
			require.Zero(t, e.db.Count(t, `SELECT count(*) FROM archive_records`), "nothing booked")
			require.Equal(t, tt.reason, e.auditFleet(t, d.Message.ID)["refused"], "the audit row records the refusal")
			require.Equal(t, 1.0, testutil.ToFloat64(e.m.Refused.WithLabelValues(tt.reason)))
			warns := e.logs.Entries(slog.LevelWarn, "refused")
			require.Len(t, warns, 1)
			require.Equal(t, tt.reason, warns[0]["reason"])
			require.NotEmpty(t, warns[0]["rule"])
		})
	}
	require.GreaterOrEqual(t, len(tests), 12)
}

// TestInboundWithoutTrust: with no trusted keys configured, a valid
// unsigned event is booked (and serve WARNs at boot that events are not
// authenticated); a generic event is recorded with no fleet detail.
func TestInboundWithoutTrust(t *testing.T) {
	t.Parallel()
	e := newFleetEnv(t, false)
	d := delivery(t, "rules.evaluations_archived", rulesPayload(), nil)
	e.handle(t, d)
	require.Equal(t, int64(1), e.db.Count(t, `SELECT count(*) FROM archive_records`))
	g := delivery(t, "exchange.sent", map[string]any{"case": "c-17"}, nil)
	e.handle(t, g)
	require.Nil(t, e.auditFleet(t, g.Message.ID))
	var detail map[string]any
	require.NoError(t, e.db.Pool.QueryRow(context.Background(), `SELECT detail FROM audit_log WHERE subject_id = $1`, g.Message.ID.String()).Scan(&detail))
	require.Equal(t, "exchange.sent", detail["event_type"])
	require.Equal(t, "exchange.sent", detail["routing_key"])
	require.Equal(t, map[string]any{"case": "c-17"}, detail["payload"])
}

// TestDeadLetterRecorded: a dead-lettered event lands in dead_letter_audit
// with its type, payload and the last error as the reason.
func TestDeadLetterRecorded(t *testing.T) {
	t.Parallel()
	e := newFleetEnv(t, true)
	d := delivery(t, "exchange.sent", map[string]any{"case": "c-9"}, nil)
	d.Attempt, d.LastError = 6, "audit_log: relation does not exist"
	require.NoError(t, pgx.BeginFunc(context.Background(), e.db.Pool, func(tx pgx.Tx) error { return e.in.DeadLetter(context.Background(), tx, d) }))
	var eventType, reason string
	var payload map[string]any
	require.NoError(t, e.db.Pool.QueryRow(context.Background(), `SELECT event_type, payload, reason FROM dead_letter_audit`).Scan(&eventType, &payload, &reason))
	require.Equal(t, "exchange.sent", eventType)
	require.Equal(t, map[string]any{"case": "c-9"}, payload)
	require.Equal(t, "audit_log: relation does not exist", reason)
	require.Equal(t, 1.0, testutil.ToFloat64(e.m.DeadLettered))
}

// TestInboundAppliesSubjectHolds: a subject hold's events say, per archive,
// whether a subject hold covers it; the fleet row shows it (subject_hold)
// beside its hold state, and a subject_hold alone (another hold already
// held the archive) changes only that.
func TestInboundAppliesSubjectHolds(t *testing.T) {
	t.Parallel()
	e := newFleetEnv(t, true)
	e.handle(t, delivery(t, "rules.evaluations_archived", rulesPayload(), e.rules))
	state := func() (held, subject bool) {
		require.NoError(t, e.db.Pool.QueryRow(context.Background(),
			`SELECT legal_hold, subject_hold FROM archive_records WHERE archive_id = $1`, testArchiveID).Scan(&held, &subject))
		return
	}
	at := time.Now().UTC().Add(-time.Minute)
	e.handle(t, delivery(t, "rules.archive_hold_placed", map[string]any{"actor": "ops:carol", "at": at.Format(time.RFC3339Nano),
		"legal_hold": map[string]bool{}, "subject_hashes": []string{strings.Repeat("ab", 32)}, "subject_hold": map[string]bool{testArchiveID: true}}, e.rules))
	held, subj := state()
	require.False(t, held, "the hold state is not in this event")
	require.True(t, subj)
	e.handle(t, delivery(t, "rules.archive_hold_released", map[string]any{"actor": "ops:carol", "at": at.Add(time.Second).Format(time.RFC3339Nano),
		"legal_hold": map[string]bool{testArchiveID: true}, "subject_hold": map[string]bool{testArchiveID: false}}, e.rules))
	held, subj = state()
	require.True(t, held)
	require.False(t, subj)
	bad := delivery(t, "rules.archive_hold_placed", map[string]any{"actor": "ops:carol", "at": at.Add(2 * time.Second).Format(time.RFC3339Nano),
		"legal_hold": map[string]bool{}, "subject_hold": map[string]bool{"not-a-uuid": true}}, e.rules)
	e.handle(t, bad)
	require.NotEmpty(t, e.auditFleet(t, bad.Message.ID)["refused"])
}

// TestInboundAppliesLifecycle: a producer's signed hold, retention and
// purge events change its own fleet rows; a source can never change
// another's rows; an unsigned purge announcement is refused.
func TestInboundAppliesLifecycle(t *testing.T) {
	t.Parallel()
	e := newFleetEnv(t, true)
	e.handle(t, delivery(t, "rules.evaluations_archived", rulesPayload(), e.rules))
	base := time.Now().UTC().Add(-time.Minute)
	step := 0
	next := func() string { // each act a moment after the last, as producers record them
		step++
		return base.Add(time.Duration(step) * time.Second).Format(time.RFC3339Nano)
	}
	at := next()
	state := func() (held bool, until *time.Time, purged *time.Time) {
		require.NoError(t, e.db.Pool.QueryRow(context.Background(),
			`SELECT legal_hold, retention_until::timestamptz, purged_at FROM archive_records WHERE archive_id = $1`, testArchiveID).Scan(&held, &until, &purged))
		return
	}
	e.handle(t, delivery(t, "rules.archive_hold_placed", map[string]any{"actor": "ops:carol", "at": at, "legal_hold": map[string]bool{testArchiveID: true}}, e.rules))
	held, _, _ := state()
	require.True(t, held)
	e.handle(t, delivery(t, "rules.archive_retention_set", map[string]any{"actor": "ops:carol", "at": next(), "archive_id": testArchiveID, "retention_until": "2030-06-30"}, e.rules))
	_, until, _ := state()
	require.Equal(t, "2030-06-30", until.UTC().Format(time.DateOnly))

	// Released, then the old placement replayed (its
	// inbox row aged out, so a new event id): refused as stale, counted,
	// the row stays released.
	e.handle(t, delivery(t, "rules.archive_hold_released", map[string]any{"actor": "ops:carol", "at": next(), "legal_hold": map[string]bool{testArchiveID: false}}, e.rules))
	replay := delivery(t, "rules.archive_hold_placed", map[string]any{"actor": "ops:carol", "at": at, "legal_hold": map[string]bool{testArchiveID: true}}, e.rules)
	e.handle(t, replay)
	require.Equal(t, "stale", e.auditFleet(t, replay.Message.ID)["refused"])
	require.Equal(t, 1.0, testutil.ToFloat64(e.m.Refused.WithLabelValues("stale")))
	held, _, _ = state()
	require.False(t, held, "a replayed old hold never re-holds")
	at = next()

	// security's key, speaking for security, naming rules' archive: nothing changes.
	foreign := delivery(t, "security.archive_purged", map[string]any{"actor": "ops:mallory", "at": at, "archive_ids": []string{testArchiveID}}, e.sec)
	e.handle(t, foreign)
	require.Equal(t, 0.0, e.auditFleet(t, foreign.Message.ID)["applied"])
	_, _, purged := state()
	require.Nil(t, purged)

	unsigned := delivery(t, "rules.archive_purged", map[string]any{"actor": "ops:alice", "at": at, "archive_ids": []string{testArchiveID}}, nil)
	e.handle(t, unsigned)
	require.Equal(t, "signature", e.auditFleet(t, unsigned.Message.ID)["refused"])
	_, _, purged = state()
	require.Nil(t, purged)

	e.handle(t, delivery(t, "rules.archive_purged", map[string]any{"actor": "ops:alice", "approver": "ops:bob", "at": next(), "archive_ids": []string{testArchiveID}}, e.rules))
	_, _, purged = state()
	require.NotNil(t, purged)
	var by string
	require.NoError(t, e.db.Pool.QueryRow(context.Background(), `SELECT purged_by FROM archive_records WHERE archive_id = $1`, testArchiveID).Scan(&by))
	require.Equal(t, "ops:bob", by, "the approver's call destroyed it")
}

// TestDeadLetterUnstorableBodies: dead letters whose
// bytes PostgreSQL cannot store as they are (a \u0000 escape, invalid
// UTF-8, not JSON, a NUL in the event type or the reason) are recorded
// losslessly, flagged, instead of failing (and being retried for ever).
func TestDeadLetterUnstorableBodies(t *testing.T) {
	t.Parallel()
	e := newFleetEnv(t, true)
	cases := []struct {
		name, eventType, reason string
		payload                 []byte
	}{
		{"nul escape", "exchange.sent", "bad", []byte(`{"case":"a\u0000b"}`)},
		{"invalid utf-8", "exchange.sent", "bad", []byte("{\"case\":\"\xff\xfe\"}")},
		{"not json", "exchange.sent", "bad", []byte("not json at all")},
		{"empty", "exchange.sent", "bad", nil},
		{"nul in type and reason", "exchange.\x00sent", "re\x00ason \xff", []byte(`{"case":"c"}`)},
		// What Go's JSON accepts and jsonb refuses or loses.
		{"lone surrogate", "exchange.sent", "bad", []byte(`{"case":"\ud800"}`)},
		{"huge exponent", "exchange.sent", "bad", []byte(`{"n":1e1000000}`)},
		{"tiny exponent", "exchange.sent", "bad", []byte(`{"n":1e-1000000}`)},
		{"duplicate key", "exchange.sent", "bad", []byte(`{"case":"first","case":"second"}`)},
	}
	for _, c := range cases {
		d := delivery(t, "x", nil, nil)
		d.Message.EventType, d.Message.Payload, d.LastError = c.eventType, c.payload, c.reason
		require.NoError(t, pgx.BeginFunc(context.Background(), e.db.Pool, func(tx pgx.Tx) error { return e.in.DeadLetter(context.Background(), tx, d) }), c.name)
		var payload map[string]any
		require.NoError(t, e.db.Pool.QueryRow(context.Background(), `SELECT payload FROM dead_letter_audit ORDER BY id DESC LIMIT 1`).Scan(&payload), c.name)
		require.Equal(t, true, payload["unstorable_payload"], c.name)
		raw, err := base64.StdEncoding.DecodeString(payload["payload_base64"].(string))
		require.NoError(t, err)
		require.Equal(t, string(c.payload), string(raw), "%s: the payload's exact bytes are kept", c.name)
	}
	require.Equal(t, float64(len(cases)), testutil.ToFloat64(e.m.DeadLettered))
}

// TestForgeryDoesNotUseUpTheEventID: an unsigned
// forgery of an archive event, refused, does not claim its event id in the
// inbox: the genuine signed event with that id, arriving later, is booked
// (not dropped as a duplicate). And an oversized payload is
// recorded by its size and hash, not copied into audit_log.
func TestForgeryDoesNotUseUpTheEventID(t *testing.T) {
	t.Parallel()
	e := newFleetEnv(t, true)
	genuine := delivery(t, "rules.evaluations_archived", rulesPayload(), e.rules)
	forged := delivery(t, "rules.evaluations_archived", rulesPayload(), nil)
	forged.Message.ID = genuine.Message.ID
	receive := func(d rabbitmq.Delivery) bool {
		dup, err := inbox.Receive(context.Background(), e.db.Pool, inbox.Event{ID: d.Message.ID, EventType: d.Message.EventType},
			func(ctx context.Context, tx pgx.Tx) error { return e.in.Handle(ctx, tx, d) })
		require.NoError(t, err)
		return dup
	}
	require.False(t, receive(forged))
	require.Equal(t, "signature", e.auditFleet(t, forged.Message.ID)["refused"])
	require.False(t, receive(genuine), "the genuine event is not a duplicate of the forgery")
	require.Equal(t, int64(1), e.db.Count(t, `SELECT count(*) FROM archive_records WHERE archive_id = $1`, testArchiveID))
	require.True(t, receive(genuine), "a redelivery of the genuine event is")

	big := delivery(t, "exchange.sent", map[string]any{"blob": strings.Repeat("x", security.MaxAuditPayload)}, nil)
	e.handle(t, big)
	var detail map[string]any
	require.NoError(t, e.db.Pool.QueryRow(context.Background(), `SELECT detail FROM audit_log WHERE subject_id = $1`, big.Message.ID.String()).Scan(&detail))
	require.Nil(t, detail["payload"])
	require.Greater(t, detail["payload_bytes"], float64(security.MaxAuditPayload))
	require.Len(t, detail["payload_sha256"], 64)

	// An oversized payload about a case keeps its case_id: the row stays
	// the case's (it was no subject's on main, so a seal and an
	// expungement of the case missed it).
	for _, id := range []any{17, "case-17"} {
		bigCase := delivery(t, "exchange.sent", map[string]any{"case_id": id, "blob": strings.Repeat("x", security.MaxAuditPayload)}, nil)
		e.handle(t, bigCase)
		require.Equal(t, int64(1), e.db.Count(t, `SELECT count(*) FROM audit_log WHERE subject_id = $1 AND audit_log_payload_case(detail) = 'case:17'`,
			bigCase.Message.ID.String()), "%v", id)
		require.Zero(t, e.db.Count(t, `SELECT count(*) FROM audit_log WHERE subject_id = $1 AND strpos(detail::text, 'xxxx') > 0`, bigCase.Message.ID.String()),
			"the payload is still not stored whole")
	}
}
