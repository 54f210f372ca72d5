package bench

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/craig/retention/kernel/outbox"
	"github.com/craig/retention/kernel/pgsession"
	"github.com/craig/retention/kernel/rabbitmq"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/migrations"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Configurations of the outbox scenario, measured side by side each round.
const (
	cfgOutboxClean  = "clean"
	cfgOutboxPoison = "poison_at_head"
)

// OutboxResult is the outbox scenario (ADR-075): the drain publishing a
// backlog of OutboxRows events through RabbitMQ with publisher confirms and
// mandatory publishing, clean against the same backlog with one poison row
// (an event no queue is bound for, created before every other) at its head,
// at the kernel's defaults (batch 100, outbox.max_attempts 25, backoff 1 s
// doubling to an hour).
type OutboxResult struct {
	Rows int `json:"rows"`
	// CleanRowsPerSec and PoisonRowsPerSec are the medians over the rounds.
	CleanRowsPerSec  float64 `json:"clean_rows_per_s"`
	PoisonRowsPerSec float64 `json:"poison_rows_per_s"`
	// Ratio is the median of the rounds' poison ÷ clean.
	Ratio float64     `json:"poison_vs_clean_ratio"`
	Runs  []OutboxRun `json:"runs"`
}

// OutboxRun is one drain of the backlog.
type OutboxRun struct {
	Config     string  `json:"config"`
	Round      int     `json:"round"`
	Published  int     `json:"published"`
	Seconds    float64 `json:"seconds"`
	RowsPerSec float64 `json:"rows_per_s"`
	// PoisonAttempts are the attempts the poison row cost (0 when clean).
	PoisonAttempts int `json:"poison_attempts"`
}

// runOutbox measures the drain's rate with and without a poison row.
func (r *runner) runOutbox(ctx context.Context) (*OutboxResult, error) {
	rows := r.cfg.DrainRows / 10
	if !r.cfg.Smoke {
		rows = 100_000
	}
	tpl := r.srv.name("outbox_tpl")
	r.cfg.logf("outbox: seeding a %d-event backlog", rows)
	if err := r.buildTemplate(ctx, tpl, []migrations.Set{migrations.Transport()}, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `INSERT INTO event_outbox (event_type, payload, created_at)
			SELECT 'bench.delivered', jsonb_build_object('n', g), now() - interval '1 hour' + g * interval '1 microsecond'
			FROM generate_series(1, $1::int) AS g`, rows)
		return err
	}); err != nil {
		return nil, err
	}
	defer r.discard(tpl)
	exchange := "craig.bench." + r.srv.runID + ".outbox"
	cleanup, err := declareOutboxBroker(r.cfg.AMQPURL, exchange)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	res := &OutboxResult{Rows: rows}
	configs := []string{cfgOutboxClean, cfgOutboxPoison}
	for round := range r.cfg.Rounds {
		for i := range configs {
			name := configs[(i+round)%len(configs)]
			run, err := r.outboxOnce(ctx, tpl, exchange, name, round, rows)
			if err != nil {
				return nil, fmt.Errorf("outbox %s round %d: %w", name, round+1, err)
			}
			r.cfg.logf("outbox round %d/%d %-15s %7d events %8.0f events/s, poison attempts %d", round+1, r.cfg.Rounds, name, run.Published, run.RowsPerSec, run.PoisonAttempts)
			res.Runs = append(res.Runs, run)
		}
	}
	var clean, poison, ratios []float64
	for round := range r.cfg.Rounds {
		var c, p float64
		for _, run := range res.Runs {
			if run.Round != round {
				continue
			}
			if run.Config == cfgOutboxClean {
				c = run.RowsPerSec
				clean = append(clean, c)
			} else {
				p = run.RowsPerSec
				poison = append(poison, p)
			}
		}
		if c > 0 {
			ratios = append(ratios, p/c)
		}
	}
	res.CleanRowsPerSec, res.PoisonRowsPerSec, res.Ratio = median(clean), median(poison), median(ratios)
	return res, nil
}

// outboxOnce drains one copy of the backlog (with the poison row at its
// head for cfgOutboxPoison) until every deliverable event is published.
func (r *runner) outboxOnce(ctx context.Context, tpl, exchange, name string, round, rows int) (OutboxRun, error) {
	run := OutboxRun{Config: name, Round: round}
	db, err := r.srv.copyOf(ctx, tpl, name, round)
	if err != nil {
		return run, err
	}
	defer r.discard(db.name)
	pool, err := pgsession.NewPool(ctx, db.url)
	if err != nil {
		return run, err
	}
	defer pool.Close()
	if name == cfgOutboxPoison {
		if _, err := pool.Exec(ctx, `INSERT INTO event_outbox (event_type, payload, created_at) VALUES ('bench.unbound', '{}', now() - interval '2 hours')`); err != nil {
			return run, err
		}
	}
	logger := slog.New(slog.DiscardHandler)
	pub, err := rabbitmq.NewPublisher(ctx, r.cfg.AMQPURL, exchange, logger)
	if err != nil {
		return run, err
	}
	defer func() { _ = pub.Close() }()
	d := &outbox.Drainer{Pool: pool, Publisher: pub.Mandatory(true), Logger: logger, MaxAttempts: settings.DefaultOutboxMaxAttempts}
	start := time.Now()
	for run.Published < rows {
		rep, err := d.DrainOnce(ctx)
		if err != nil {
			return run, err
		}
		run.Published += rep.Published
		if rep.Published == 0 && rep.Failed == 0 {
			return run, fmt.Errorf("the drain stopped after %d of %d events", run.Published, rows)
		}
	}
	run.Seconds = time.Since(start).Seconds()
	run.RowsPerSec = float64(run.Published) / run.Seconds
	err = pool.QueryRow(ctx, "SELECT coalesce(max(attempts), 0) FROM event_outbox WHERE event_type = 'bench.unbound'").Scan(&run.PoisonAttempts)
	return run, err
}

// declareOutboxBroker declares the scenario's exchange and a queue bound
// for its deliverable events (none for the poison's key), and returns what
// deletes them.
func declareOutboxBroker(url, exchange string) (func(), error) {
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)})
	if err != nil {
		return nil, fmt.Errorf("outbox broker: %w", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("outbox broker: %w", err)
	}
	queue := exchange + ".q"
	err = ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, true, false, false, false, nil)
	if err == nil {
		_, err = ch.QueueDeclare(queue, false, false, false, false, amqp.Table{"x-max-length": int32(1000), "x-overflow": "drop-head"})
	}
	if err == nil {
		err = ch.QueueBind(queue, "bench.delivered", exchange, false, nil)
	}
	cleanup := func() {
		_, _ = ch.QueueDelete(queue, false, false, false)
		_ = ch.ExchangeDelete(exchange, false, false)
		_ = conn.Close()
	}
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("outbox broker: %w", err)
	}
	return cleanup, nil
}
