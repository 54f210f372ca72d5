package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/eventsig"
	"github.com/craig/retention/kernel/outbox"
	"github.com/craig/retention/services/security"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
)

// fleetDeadline bounds one fleet round (its serve start, the publish and
// every event's booking).
const fleetDeadline = 5 * time.Minute

// runFleet measures security's inbound path: FleetEvents signed, valid
// rules.evaluations_archived events (distinct archives) published as fast
// as the broker confirms them to a scratch exchange, consumed by `security
// serve` (in-process, trust configured) through the inbox into
// archive_records. A round's rate is the events divided by the time from
// the first publish to the last row booked.
func (r *runner) runFleet(ctx context.Context) (*FleetResult, error) {
	dir, err := os.MkdirTemp("", "craig-bench-fleet-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	signer, trustFile, err := fleetSigner(dir)
	if err != nil {
		return nil, err
	}
	sets := security.Spec().MigrationSets()
	tpl, full := r.srv.name("fleet"), r.srv.name("fleetfull")
	if err := r.buildTemplate(ctx, tpl, sets, func(*pgx.Conn) error { return nil }); err != nil {
		return nil, err
	}
	booked := int64(r.cfg.ScaleArchives)
	if err := r.buildTemplate(ctx, full, sets, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, scaleBookFleet, booked)
		return err
	}); err != nil {
		return nil, err
	}
	res := &FleetResult{Events: r.cfg.FleetEvents, Signed: true, BookedRows: booked}
	configs := []struct {
		name, tpl string
		base      int64
	}{{cfgFleetEmpty, tpl, 0}, {cfgFleetBooked, full, booked}}
	var rates, bookedRates, ratios []float64
	for round := range r.cfg.Rounds {
		var pair [2]float64
		for i := range configs {
			c := configs[(i+round)%len(configs)]
			run, err := r.fleetOnce(ctx, c.tpl, round, c.base, signer, trustFile)
			if err != nil {
				return nil, fmt.Errorf("fleet %s round %d: %w", c.name, round+1, err)
			}
			run.Config = c.name
			r.cfg.logf("fleet round %d/%d %s: %d signed events booked in %.2f s, %.0f events/s", round+1, r.cfg.Rounds, c.name, run.Events, run.Seconds, run.EventsPerSec)
			res.Runs = append(res.Runs, run)
			if c.base == 0 {
				rates, pair[0] = append(rates, run.EventsPerSec), run.EventsPerSec
			} else {
				bookedRates, pair[1] = append(bookedRates, run.EventsPerSec), run.EventsPerSec
			}
		}
		ratios = append(ratios, pair[1]/pair[0])
	}
	res.EventsPerSec, res.BookedEventsPerSec, res.BookedRatio = round3(median(rates)), round3(median(bookedRates)), round3(median(ratios))
	if res.Replicas, err = r.fleetReplicas(ctx, tpl, signer, trustFile); err != nil {
		return nil, err
	}
	return res, nil
}

// fleetSigner writes a signing key and the trust file naming it into dir,
// and loads the signer.
func fleetSigner(dir string) (*eventsig.Signer, string, error) {
	priv, line, err := eventsig.GeneratePEM("rules-bench", "craig-rules")
	if err != nil {
		return nil, "", err
	}
	keyFile, trustFile := filepath.Join(dir, "rules.pem"), filepath.Join(dir, "trusted")
	if err := os.WriteFile(keyFile, priv, 0o600); err != nil {
		return nil, "", err
	}
	if err := os.WriteFile(trustFile, []byte(line+"\n"), 0o600); err != nil {
		return nil, "", err
	}
	signer, err := eventsig.LoadSigner("rules-bench", keyFile)
	return signer, trustFile, err
}

// Fleet configurations: archive_records empty, and holding ScaleArchives
// rows.
const (
	cfgFleetEmpty  = "empty_ledger"
	cfgFleetBooked = "booked_ledger"
)

// fleetOnce runs one round on a fresh copy of the template.
func (r *runner) fleetOnce(ctx context.Context, tpl string, round int, base int64, signer *eventsig.Signer, trustFile string) (FleetRun, error) {
	run := FleetRun{Round: round + 1, Events: r.cfg.FleetEvents}
	ctx, cancel := context.WithTimeout(ctx, fleetDeadline)
	defer cancel()
	db, err := r.srv.copyOf(ctx, tpl, "fleet", round)
	if err != nil {
		return run, err
	}
	defer r.discard(db.name)
	exchange := "craig.bench.fleet." + randomSuffix()
	defer deleteFleetBroker(r.cfg.AMQPURL, exchange)
	bodies, err := fleetBodies(r.cfg.FleetEvents, signer)
	if err != nil {
		return run, err
	}
	serveCtx, stop := context.WithCancel(ctx)
	done := make(chan int, 1)
	go func() {
		done <- app.Run(serveCtx, security.Spec(), []string{"serve"}, io.Discard, io.Discard, []string{
			"CRAIG_SECURITY__DATABASE_URL=" + db.url, "CRAIG_SECURITY__AMQP_URL=" + r.cfg.AMQPURL,
			"CRAIG_SECURITY__AMQP_EXCHANGE=" + exchange, "CRAIG_SECURITY__HTTP_ADDR=" + loopbackAddr(),
			"CRAIG_SECURITY__EVENTS__TRUSTED_KEYS_FILE=" + trustFile, "CRAIG_SECURITY__LOG_LEVEL=error",
		})
	}()
	defer func() { stop(); <-done }()
	queue := app.InboundQueue(exchange, security.Spec().Name)
	if err := waitConsumer(ctx, r.cfg.AMQPURL, queue); err != nil {
		return run, err
	}
	start := time.Now()
	if err := publishAll(ctx, r.cfg.AMQPURL, exchange, bodies); err != nil {
		return run, err
	}
	if err := waitBooked(ctx, db.url, base+int64(len(bodies))); err != nil {
		return run, err
	}
	run.Seconds = time.Since(start).Seconds()
	run.EventsPerSec = float64(run.Events) / run.Seconds
	return run, nil
}

// fleetMessage is one prepared publish: routing key, body, headers.
type fleetMessage struct {
	id      string
	body    []byte
	headers amqp.Table
}

// fleetBodies prepares n signed events, each a distinct valid archive.
func fleetBodies(n int, signer *eventsig.Signer) ([]fleetMessage, error) {
	now := time.Now().UTC()
	day := now.Format("2006/01/02")
	out := make([]fleetMessage, 0, n)
	for range n {
		aid := uuid.Must(uuid.NewV7()).String()
		key := "retention-archives/rules/rule_evaluations/" + day + "/" + aid
		payload, err := json.Marshal(map[string]any{
			"source_service": "craig-rules", "archive_id": aid, "table": "rule_evaluations",
			"data_key": key + ".ndjson", "manifest_key": key + ".manifest.json", "data_sha256": strings.Repeat("0f", 32),
			"record_count": 1000, "store_endpoint": "http://127.0.0.1:7070", "store_bucket": "craig-archive",
			"first_record_id": "0190a8a0-0000-7000-8000-000000000001", "last_record_id": "0190a8a0-0000-7000-8000-0000000003e8",
			"first_record_at": now.Add(-100 * 24 * time.Hour).Format(time.RFC3339Nano), "last_record_at": now.Add(-91 * 24 * time.Hour).Format(time.RFC3339Nano),
			"hot_window_days": 90, "archived_at": now.Add(-time.Minute).Format(time.RFC3339Nano), "archived_by": "system:retention",
		})
		if err != nil {
			return nil, err
		}
		m := outbox.Message{ID: uuid.Must(uuid.NewV7()), EventType: "rules.evaluations_archived", Payload: payload, CreatedAt: now}
		body, err := outbox.EncodeMessage(m)
		if err != nil {
			return nil, err
		}
		out = append(out, fleetMessage{id: m.ID.String(), body: body, headers: signer.Headers(body)})
	}
	return out, nil
}

// publishAll publishes every message with confirms, pipelined, and waits
// for the last confirm.
func publishAll(ctx context.Context, url, exchange string, msgs []fleetMessage) error {
	conn, err := amqp.Dial(url)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.Confirm(false); err != nil {
		return err
	}
	var last *amqp.DeferredConfirmation
	for _, m := range msgs {
		last, err = ch.PublishWithDeferredConfirmWithContext(ctx, exchange, "rules.evaluations_archived", false, false, amqp.Publishing{
			Headers: m.headers, ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: m.id, Body: m.body,
		})
		if err != nil {
			return err
		}
	}
	if last == nil {
		return nil
	}
	ok, err := last.WaitContext(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("waiting for the broker's confirms: %w", err)
	case !ok:
		return errors.New("the broker nacked the publishes")
	}
	return nil
}

// waitConsumer waits until the queue exists and has a consumer.
func waitConsumer(ctx context.Context, url, queue string) error {
	for {
		if n, err := consumers(url, queue); err == nil && n > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no consumer on %s: %w", queue, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func consumers(url, queue string) (int, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return 0, err
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	return q.Consumers, err
}

// waitBooked waits until archive_records holds n rows.
func waitBooked(ctx context.Context, dbURL string, n int64) error {
	return withConn(ctx, dbURL, func(conn *pgx.Conn) error {
		for {
			var got int64
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM archive_records`).Scan(&got); err != nil {
				return err
			}
			if got >= n {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%d of %d events booked: %w", got, n, ctx.Err())
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
}

func deleteFleetBroker(url, exchange string) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	dlx, dlq := app.DeadLetterNames(exchange, security.Spec().Name)
	_, _ = ch.QueueDelete(app.InboundQueue(exchange, security.Spec().Name), false, false, false)
	_, _ = ch.QueueDelete(dlq, false, false, false)
	_ = ch.ExchangeDelete(exchange, false, false)
	_ = ch.ExchangeDelete(dlx, false, false)
}

func randomSuffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func loopbackAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "127.0.0.1:0"
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().String()
}
