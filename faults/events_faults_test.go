//go:build faults

package faults_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/eventsig"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/outbox"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/services/rules"
	"github.com/craig/retention/services/security"
)

// TestForgedAndMalformedEvents: security `serve` (trust configured) fed,
// through RabbitMQ, real signed archive events of rules and, for each, an
// unsigned copy of another archive, one signed by an unknown key, one
// signed by security's own key (the wrong source), one with its count
// broken, one cut short, and bodies that are no envelope at all: the fleet
// ledger books exactly the real archives, every forgery is refused and
// counted, and the consumer keeps consuming.
func TestForgedAndMalformedEvents(t *testing.T) {
	t.Parallel()
	bin := binary(t, "security")
	rulesBin := binary(t, "rules")
	w := newRulesWorld(t)
	w.seed(t, 500, 5)
	res := runProcess(t, rulesBin, w.env(), 2*time.Minute, "archive", "run", "--budget", "10")
	require.Equal(t, 0, res.code, res.stderr)
	var payloads [][]byte
	rows, err := w.Pool.Query(context.Background(), `SELECT payload::text FROM event_outbox WHERE event_type = $1`, rules.EvaluationsArchivedEvent)
	require.NoError(t, err)
	for rows.Next() {
		var p string
		require.NoError(t, rows.Scan(&p))
		payloads = append(payloads, []byte(p))
	}
	require.NoError(t, rows.Err())
	require.Len(t, payloads, 5)

	dir := t.TempDir()
	signer := func(id, source string) (*eventsig.Signer, string) {
		priv, line, err := eventsig.GeneratePEM(id, source)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, id+".pem"), priv, 0o600))
		s, err := eventsig.LoadSigner(id, filepath.Join(dir, id+".pem"))
		require.NoError(t, err)
		return s, line
	}
	rulesKey, rulesLine := signer("rules-1", "craig-rules")
	secKey, secLine := signer("security-1", "craig-security")
	unknownKey, _ := signer("intruder-1", "craig-rules")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "trusted"), []byte(rulesLine+"\n"+secLine+"\n"), 0o600))

	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	exchange := "craig.faults." + hex.EncodeToString(suffix)
	amqpURL := kerneltest.AMQPURL(t)
	t.Cleanup(func() { deleteBroker(t, amqpURL, exchange) })
	secDB := kerneltest.NewDB(t, security.Spec().MigrationSets()...)
	e := func(k, v string) string { return settings.EnvVar(security.Name, k) + "=" + v }
	sec := startServiceServe(t, bin, security.Name, append(os.Environ(), e("database_url", secDB.URL), e("amqp_url", amqpURL),
		e("amqp_exchange", exchange), e("events.trusted_keys_file", filepath.Join(dir, "trusted")), e("log_level", "warn")))
	require.Eventually(t, func() bool { return queueConsumers(t, amqpURL, app.InboundQueue(exchange, security.Name)) > 0 }, time.Minute, 50*time.Millisecond)

	tl := newTally("bad_input", "forged and malformed events")
	publish := func(body []byte, s *eventsig.Signer, eventType string) {
		tl.Rounds++
		publishEvent(t, amqpURL, exchange, eventType, body, s)
	}
	for _, p := range payloads {
		publish(envelope(t, p), rulesKey, rules.EvaluationsArchivedEvent)
		other := bytes.ReplaceAll(p, []byte(archiveID(t, p)), []byte(uuid.Must(uuid.NewV7()).String()))
		publish(envelope(t, other), nil, rules.EvaluationsArchivedEvent)
		publish(envelope(t, other), unknownKey, rules.EvaluationsArchivedEvent)
		publish(envelope(t, other), secKey, rules.EvaluationsArchivedEvent)
		broken := bytes.Replace(other, []byte(`"record_count": 100`), []byte(`"record_count": 0`), 1)
		publish(envelope(t, broken), rulesKey, rules.EvaluationsArchivedEvent)
		publish(envelope(t, other)[:40], rulesKey, rules.EvaluationsArchivedEvent)
		publish([]byte("\x00\xffnot an envelope"), nil, "exchange.sent")
		tl.Faults["forged"] += 3
		tl.Faults["malformed"] += 3
	}
	want := map[string]bool{}
	for _, p := range payloads {
		want[archiveID(t, p)] = true
	}
	require.Eventually(t, func() bool {
		return secDB.Count(t, `SELECT count(*) FROM archive_records`) >= int64(len(payloads)) &&
			scrape(t, sec)[`archive_event_refused_total{reason="signature"}`] >= float64(3*len(payloads))
	}, time.Minute, 100*time.Millisecond, "the real archives are booked and the forgeries refused")
	require.Eventually(t, func() bool { return queueMessages(t, amqpURL, app.InboundQueue(exchange, security.Name)) == 0 },
		time.Minute, 50*time.Millisecond, "the consumer drains its queue (the malformed bodies too)")
	got := map[string]bool{}
	rs, err := secDB.Pool.Query(context.Background(), `SELECT archive_id::text FROM archive_records`)
	require.NoError(t, err)
	for rs.Next() {
		var id string
		require.NoError(t, rs.Scan(&id))
		got[id] = true
	}
	require.NoError(t, rs.Err())
	tl.Checks += len(want) + 1
	require.Equal(t, want, got, "the fleet ledger holds exactly the real archives")
	m := scrape(t, sec)
	var refused float64
	for k, v := range m {
		if strings.HasPrefix(k, "archive_event_refused_total") {
			refused += v
		}
	}
	require.GreaterOrEqual(t, refused, float64(4*len(payloads)), "every forgery and the broken count are refused: %v", m)
	sec.stop(t)
	tl.write(t)
}

func archiveID(t *testing.T, payload []byte) string {
	t.Helper()
	var v struct {
		ArchiveID string `json:"archive_id"`
	}
	require.NoError(t, json.Unmarshal(payload, &v))
	require.NotEmpty(t, v.ArchiveID)
	return v.ArchiveID
}

// envelope wraps a payload as the outbox drain does.
func envelope(t *testing.T, payload []byte) []byte {
	t.Helper()
	b, err := outbox.EncodeMessage(outbox.Message{ID: uuid.Must(uuid.NewV7()), EventType: rules.EvaluationsArchivedEvent, Payload: payload,
		CreatedAt: time.Now().UTC().Truncate(time.Microsecond)})
	require.NoError(t, err)
	return b
}

// publishEvent publishes body with routing key eventType, signed by s (nil:
// unsigned), and waits for the broker's confirm.
func publishEvent(t *testing.T, amqpURL, exchange, eventType string, body []byte, s *eventsig.Signer) {
	t.Helper()
	conn, err := amqp.Dial(amqpURL)
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Confirm(false))
	var headers amqp.Table
	if s != nil {
		headers = s.Headers(body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, eventType, false, false, amqp.Publishing{
		Headers: headers, ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: uuid.NewString(), Body: body})
	require.NoError(t, err)
	ok, err := dc.WaitContext(ctx)
	require.NoError(t, err)
	require.True(t, ok)
}

func queueConsumers(t *testing.T, amqpURL, queue string) int {
	t.Helper()
	return inspectQueue(t, amqpURL, queue).Consumers
}

func queueMessages(t *testing.T, amqpURL, queue string) int {
	t.Helper()
	return inspectQueue(t, amqpURL, queue).Messages
}

func inspectQueue(t *testing.T, amqpURL, queue string) amqp.Queue {
	t.Helper()
	conn, err := amqp.Dial(amqpURL)
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	require.NoError(t, err)
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		return amqp.Queue{}
	}
	return q
}

func deleteBroker(t *testing.T, amqpURL, exchange string) {
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	dlx, dlq := app.DeadLetterNames(exchange, security.Name)
	for _, q := range []string{app.InboundQueue(exchange, security.Name), dlq} {
		_, _ = ch.QueueDelete(q, false, false, false)
	}
	for _, x := range []string{exchange, dlx} {
		_ = ch.ExchangeDelete(x, false, false)
	}
}
