package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/archivetest"
	"github.com/craig/retention/kernel/eventsig"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/outbox"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/services/rules"
	"github.com/craig/retention/services/security"
)

// fleetDeadline bounds each wait of the fleet test for something to cross
// the broker (a drain tick, a consume, five retries a second apart).
const fleetDeadline = 45 * time.Second

// fleetWorld is a broker exchange of the test's own, rules' and security's
// databases, their event keys and the store.
type fleetWorld struct {
	amqpURL, exchange, bucketURL string
	rulesDB, secDB               *kerneltest.DB
	rulesKey                     *eventsig.Signer
	keyDir                       string
}

func newFleetWorld(t *testing.T) *fleetWorld {
	t.Helper()
	w := &fleetWorld{amqpURL: kerneltest.AMQPURL(t), bucketURL: kerneltest.S3Bucket(t), keyDir: t.TempDir()}
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	w.exchange = "craig.test.fleet." + hex.EncodeToString(suffix)
	t.Cleanup(func() { w.deleteBrokerObjects(t) })
	var trust []string
	for _, k := range []struct{ id, source string }{{"rules-1", "craig-rules"}, {"security-1", "craig-security"}} {
		priv, line, err := eventsig.GeneratePEM(k.id, k.source)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(w.keyDir, k.id+".pem"), priv, 0o600))
		trust = append(trust, line)
	}
	require.NoError(t, os.WriteFile(filepath.Join(w.keyDir, "trusted"), []byte(strings.Join(trust, "\n")+"\n"), 0o600))
	var err error
	w.rulesKey, err = eventsig.LoadSigner("rules-1", filepath.Join(w.keyDir, "rules-1.pem"))
	require.NoError(t, err)
	w.rulesDB, w.secDB = kerneltest.NewDB(t, rules.Spec().MigrationSets()...), kerneltest.NewDB(t, security.Spec().MigrationSets()...)
	return w
}

func (w *fleetWorld) deleteBrokerObjects(t *testing.T) {
	conn, err := amqp.Dial(w.amqpURL)
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	dlx, dlq := app.DeadLetterNames(w.exchange, security.Name)
	for _, q := range []string{app.InboundQueue(w.exchange, security.Name), dlq} {
		_, _ = ch.QueueDelete(q, false, false, false)
	}
	for _, x := range []string{w.exchange, dlx} {
		_ = ch.ExchangeDelete(x, false, false)
	}
}

// env is a service's environment in this world; keyID names its signing key.
func (w *fleetWorld) env(service, databaseURL, keyID string, extra ...string) []string {
	e := func(k, v string) string { return settings.EnvVar(service, k) + "=" + v }
	return append([]string{
		e("database_url", databaseURL), e("amqp_url", w.amqpURL), e("amqp_exchange", w.exchange),
		e("http_addr", freeLoopback()), e("archive.enabled", "true"), e("archive.store.url", w.bucketURL),
		e("events.signing_key_file", filepath.Join(w.keyDir, keyID+".pem")), e("events.signing_key_id", keyID),
		e("events.trusted_keys_file", filepath.Join(w.keyDir, "trusted")),
	}, extra...)
}

func freeLoopback() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "127.0.0.1:0"
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().String()
}

// served is a `serve` running in-process.
type served struct {
	addr   string
	cancel context.CancelFunc
	code   chan int
	stderr *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func serve(t *testing.T, run runner, env []string) *served {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &served{cancel: cancel, code: make(chan int, 1), stderr: &syncBuffer{}}
	for _, kv := range env {
		if k, v, _ := strings.Cut(kv, "="); strings.HasSuffix(k, "__HTTP_ADDR") {
			s.addr = v
		}
	}
	go func() {
		var out bytes.Buffer
		var errOut bytes.Buffer
		code := run(ctx, []string{"serve"}, &out, &errOut, env)
		_, _ = s.stderr.Write(errOut.Bytes())
		s.code <- code
	}()
	t.Cleanup(func() { s.stop(t) })
	return s
}

func (s *served) stop(t *testing.T) int {
	t.Helper()
	if s.cancel == nil {
		return app.ExitOK
	}
	s.cancel()
	s.cancel = nil
	select {
	case code := <-s.code:
		return code
	case <-time.After(fleetDeadline):
		t.Error("serve did not stop")
		return -1
	}
}

// metric reads one sample of the service's /metrics ("" when absent).
func (s *served) metric(t *testing.T, series string) string {
	t.Helper()
	resp, err := http.Get("http://" + s.addr + "/metrics")
	if err != nil {
		return ""
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

// publish publishes an event to the world's exchange as a producer would,
// signed by s (nil: unsigned).
func (w *fleetWorld) publish(t *testing.T, eventType string, payload []byte, s *eventsig.Signer) uuid.UUID {
	t.Helper()
	m := outbox.Message{ID: uuid.Must(uuid.NewV7()), EventType: eventType, Payload: payload, CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}
	body, err := outbox.EncodeMessage(m)
	require.NoError(t, err)
	conn, err := amqp.Dial(w.amqpURL)
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Confirm(false))
	var headers amqp.Table
	if s != nil {
		headers = s.Headers(body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), fleetDeadline)
	defer cancel()
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, w.exchange, eventType, false, false, amqp.Publishing{
		Headers: headers, ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: m.ID.String(), Body: body,
	})
	require.NoError(t, err)
	ok, err := dc.WaitContext(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	return m.ID
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, fleetDeadline, 50*time.Millisecond, what)
}

// TestFleetLedgerOverRabbitMQ (for real): rules archives,
// rules' drain publishes the signed rules.evaluations_archived, security
// consumes it and books ONE archive_records row (source craig-rules) equal
// to rules' local ledger row; an identical replay leaves one row; a
// conflicting replay leaves it unchanged and counts a divergence; a forged
// (unsigned) event is refused; a handler that keeps failing dead-letters the
// event into dead_letter_audit with the last error; both services stop
// cleanly.
func TestFleetLedgerOverRabbitMQ(t *testing.T) {
	t.Parallel()
	w := newFleetWorld(t)
	ctx := context.Background()
	runRules, runSec := runnerOf(rules.Spec()), runnerOf(security.Spec())
	rulesEnv := w.env(rules.Name, w.rulesDB.URL, "rules-1")
	w.rulesDB.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
		SELECT now() - make_interval(days => 100, mins => g), 'r', '{}', '{}' FROM generate_series(1, 12) g`)
	var out, errOut bytes.Buffer
	require.Equal(t, app.ExitOK, runRules(ctx, []string{"archive", "run", "--json"}, &out, &errOut, rulesEnv), errOut.String())
	deleteReported(t, w.bucketURL, out.Bytes())
	local := archivetest.Ledger(ctx, t, w.rulesDB.Pool)
	require.Len(t, local, 1)

	sec := serve(t, runSec, w.env(security.Name, w.secDB.URL, "security-1"))
	eventually(t, "security consumes its queue", func() bool { return brokerConsumers(t, w, app.InboundQueue(w.exchange, security.Name)) > 0 })
	rulesServe := serve(t, runRules, rulesEnv)
	eventually(t, "the fleet row is booked", func() bool {
		return w.secDB.Count(t, `SELECT count(*) FROM archive_records WHERE source_service = 'craig-rules'`) == 1
	})
	requireFleetRowIs(t, w, local[0])
	require.Equal(t, int64(1), w.secDB.Count(t, `SELECT count(*) FROM audit_log WHERE action = 'event.received' AND detail->>'event_type' = 'rules.evaluations_archived'`))

	events := archivetest.Events(ctx, t, w.rulesDB.Pool)
	require.Len(t, events, 1)
	payload, err := json.Marshal(events[0].Payload)
	require.NoError(t, err)
	// Identical replay (another event id, the same facts): still one row.
	w.publish(t, rules.EvaluationsArchivedEvent, payload, w.rulesKey)
	eventually(t, "the replay is recorded", func() bool {
		return w.secDB.Count(t, `SELECT count(*) FROM audit_log WHERE detail->>'event_type' = 'rules.evaluations_archived'`) == 2
	})
	require.Equal(t, int64(1), w.secDB.Count(t, `SELECT count(*) FROM archive_records`))
	// Conflicting replay: unchanged row, a divergence counted.
	conflicting := bytes.Replace(payload, []byte(local[0].DataSHA256), []byte(strings.Repeat("e", 64)), 1)
	require.NotEqual(t, payload, conflicting)
	w.publish(t, rules.EvaluationsArchivedEvent, conflicting, w.rulesKey)
	eventually(t, "the divergence is counted", func() bool {
		return sec.metric(t, `archive_ledger_divergence_total{source_service="craig-rules"}`) == "1"
	})
	requireFleetRowIs(t, w, local[0])
	// Forged: the same shape, unsigned, another archive id: refused.
	other := uuid.Must(uuid.NewV7()).String()
	forged := bytes.ReplaceAll(payload, []byte(local[0].ArchiveID.String()), []byte(other))
	w.publish(t, rules.EvaluationsArchivedEvent, forged, nil)
	eventually(t, "the forgery is refused", func() bool {
		return sec.metric(t, `archive_event_refused_total{reason="signature"}`) == "1"
	})
	require.Zero(t, w.secDB.Count(t, `SELECT count(*) FROM archive_records WHERE archive_id = $1`, other))

	// Dead letters: with audit_log gone every attempt fails; after five the
	// event is recorded in dead_letter_audit with the last error.
	w.secDB.Exec(t, `ALTER TABLE audit_log RENAME TO audit_log_gone`)
	id := w.publish(t, "exchange.sent", []byte(`{"case":"c-17"}`), nil)
	eventually(t, "the event is dead-lettered", func() bool {
		return w.secDB.Count(t, `SELECT count(*) FROM dead_letter_audit WHERE event_type = 'exchange.sent'`) == 1
	})
	var reason string
	require.NoError(t, w.secDB.Pool.QueryRow(ctx, `SELECT reason FROM dead_letter_audit WHERE event_type = 'exchange.sent'`).Scan(&reason))
	require.Contains(t, reason, "audit_log")
	w.secDB.Exec(t, `ALTER TABLE audit_log_gone RENAME TO audit_log`)
	// Every dead letter is counted: the one above, and any event rules
	// published while audit_log was gone (a service with more archived
	// tables publishes more).
	eventually(t, "every dead letter is counted", func() bool {
		return sec.metric(t, "events_dead_lettered_total") == strconv.FormatInt(w.secDB.Count(t, `SELECT count(*) FROM dead_letter_audit`), 10)
	})
	require.Zero(t, w.secDB.Count(t, `SELECT count(*) FROM event_inbox WHERE event_id = $1`, id), "a dead-lettered event is not marked received")

	require.Equal(t, app.ExitOK, rulesServe.stop(t), rulesServe.stderr.String())
	require.Equal(t, app.ExitOK, sec.stop(t), sec.stderr.String())
}

// requireFleetRowIs: security's fleet row carries rules' local ledger facts.
func requireFleetRowIs(t *testing.T, w *fleetWorld, l archivetest.LedgerRow) {
	t.Helper()
	var got archivetest.LedgerRow
	require.NoError(t, w.secDB.Pool.QueryRow(context.Background(), `
		SELECT archive_id, table_name, data_key, manifest_key, data_sha256, record_count,
		       store_endpoint, store_bucket, first_record_id, last_record_id,
		       first_record_at, last_record_at, hot_window_days, archived_at, archived_by
		FROM archive_records WHERE archive_id = $1`, l.ArchiveID).Scan(
		&got.ArchiveID, &got.TableName, &got.DataKey, &got.ManifestKey, &got.DataSHA256, &got.RecordCount,
		&got.StoreEndpoint, &got.StoreBucket, &got.FirstRecordID, &got.LastRecordID,
		&got.FirstRecordAt, &got.LastRecordAt, &got.HotWindowDays, &got.ArchivedAt, &got.ArchivedBy))
	require.Equal(t, l.ArchiveID, got.ArchiveID)
	require.Equal(t, l.DataSHA256, got.DataSHA256)
	require.Equal(t, l.DataKey, got.DataKey)
	require.Equal(t, l.ManifestKey, got.ManifestKey)
	require.Equal(t, l.RecordCount, got.RecordCount)
	require.True(t, l.ArchivedAt.Equal(got.ArchivedAt))
	require.True(t, l.FirstRecordAt.Equal(got.FirstRecordAt))
	require.Equal(t, l.ArchivedBy, got.ArchivedBy)
}

// brokerConsumers counts the consumers of a queue (0 when it does not
// exist yet).
func brokerConsumers(t *testing.T, w *fleetWorld, queue string) int {
	t.Helper()
	conn, err := amqp.Dial(w.amqpURL)
	if err != nil {
		return 0
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		return 0
	}
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		return 0
	}
	return q.Consumers
}

// TestServeEventKeyBoot (for the event keys): a signing key
// or trust file that does not load refuses the boot naming its environment
// variable (never the key's bytes); without a trust file security boots and
// WARNs that events are not authenticated.
func TestServeEventKeyBoot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	require.NoError(t, os.WriteFile(garbage, []byte("NOT-A-KEY-SECRET-BYTES"), 0o600))
	tests := []struct {
		name     string
		service  string
		run      runner
		extra    []string
		wantCode int
		want     string
	}{
		{"rules: signing key unreadable", rules.Name, runnerOf(rules.Spec()),
			[]string{"CRAIG_RULES__EVENTS__SIGNING_KEY_FILE=" + garbage, "CRAIG_RULES__EVENTS__SIGNING_KEY_ID=rules-1"}, app.ExitFail, "CRAIG_RULES__EVENTS__SIGNING_KEY_FILE"},
		{"rules: signing key without its id", rules.Name, runnerOf(rules.Spec()),
			[]string{"CRAIG_RULES__EVENTS__SIGNING_KEY_FILE=" + garbage}, app.ExitUsage, "CRAIG_RULES__EVENTS__SIGNING_KEY_ID"},
		{"security: trust file missing", security.Name, runnerOf(security.Spec()),
			[]string{"CRAIG_SECURITY__EVENTS__TRUSTED_KEYS_FILE=" + filepath.Join(dir, "missing")}, app.ExitFail, "CRAIG_SECURITY__EVENTS__TRUSTED_KEYS_FILE"},
		{"security: trust file not a trust file", security.Name, runnerOf(security.Spec()),
			[]string{"CRAIG_SECURITY__EVENTS__TRUSTED_KEYS_FILE=" + garbage}, app.ExitFail, "CRAIG_SECURITY__EVENTS__TRUSTED_KEYS_FILE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db := serviceDB(t, tt.service)
			env := append([]string{settings.EnvVar(tt.service, "database_url") + "=" + db.URL, settings.EnvVar(tt.service, "http_addr") + "=127.0.0.1:0"}, tt.extra...)
			ctx, cancel := context.WithTimeout(context.Background(), fleetDeadline)
			defer cancel()
			var out, errOut bytes.Buffer
			code := tt.run(ctx, []string{"serve"}, &out, &errOut, env)
			require.Equal(t, tt.wantCode, code, errOut.String())
			require.Contains(t, errOut.String(), tt.want)
			require.NotContains(t, errOut.String(), "SECRET-BYTES")
		})
	}

	t.Run("security without a trust file warns", func(t *testing.T) {
		t.Parallel()
		db := kerneltest.NewDB(t, security.Spec().MigrationSets()...)
		w := &fleetWorld{amqpURL: kerneltest.AMQPURL(t), exchange: "craig.test.fleet.boot." + uuid.NewString()[:8]}
		t.Cleanup(func() { w.deleteBrokerObjects(t) })
		s := serve(t, runnerOf(security.Spec()), []string{"CRAIG_SECURITY__DATABASE_URL=" + db.URL, "CRAIG_SECURITY__HTTP_ADDR=" + freeLoopback(),
			"CRAIG_SECURITY__AMQP_URL=" + w.amqpURL, "CRAIG_SECURITY__AMQP_EXCHANGE=" + w.exchange})
		waitHealthy(t, s)
		require.Equal(t, app.ExitOK, s.stop(t))
		require.Contains(t, s.stderr.String(), "inbound events are not authenticated")
		require.Contains(t, s.stderr.String(), "CRAIG_SECURITY__EVENTS__TRUSTED_KEYS_FILE")
	})
}

// deleteReported deletes, when the test ends, the objects an `archive run
// --json` report names.
func deleteReported(t *testing.T, bucketURL string, report []byte) {
	t.Helper()
	var rep archive.PassReport
	require.NoError(t, json.Unmarshal(report, &rep))
	st, err := store.Open(context.Background(), bucketURL)
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, tr := range rep.Tables {
			for _, a := range tr.Archives {
				_, _ = st.DeleteIfExists(context.Background(), a.DataKey)
				_, _ = st.DeleteIfExists(context.Background(), a.ManifestKey)
			}
		}
		_ = st.Close()
	})
}
