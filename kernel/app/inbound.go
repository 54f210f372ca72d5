package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/craig/retention/kernel/eventsig"
	"github.com/craig/retention/kernel/inbox"
	"github.com/craig/retention/kernel/rabbitmq"
	"github.com/craig/retention/kernel/settings"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

const (
	// InboundConcurrency is how many received events a service handles at
	// once: each is one short transaction, so a few in flight let the
	// database commit them together (measured: 1 handler ~750 events/s,
	// 4 handlers well over 1,000 on 2 cores).
	InboundConcurrency = 4
	// InboundMaxAttempts is how many times a received event is handed to
	// the service before it is dead-lettered: enough to ride out a
	// deadlock or a restart of the database, few enough that a poison
	// event does not hold the queue.
	InboundMaxAttempts = 5
	// inboundRetryDelay is waited after a failed handle before its retry,
	// so five attempts span a few seconds rather than microseconds.
	inboundRetryDelay = time.Second
	// deadLetterRetryDelay is waited after a failed dead-letter record
	// (the database is down) before the next try; dead letters are never
	// dropped.
	deadLetterRetryDelay = 5 * time.Second
	// DeadLetterMaxAttempts is how many times a dead letter's record is
	// tried (a failed one goes to the back of the queue, so it never holds
	// the others) before it is parked, whole, in the durable queue
	// <queue>.dead-letter.parked for an operator: 60 tries 5 s apart ride
	// out a five-minute database outage; nothing retries for ever.
	DeadLetterMaxAttempts = 60
	// parkedSuffix names the parked dead letters' exchange and queue.
	parkedSuffix = ".parked"
	// deadLetterSuffix names the dead-letter exchange and queue after the
	// transport's exchange and the service's queue.
	deadLetterSuffix = ".dead-letter"
)

// InboundSpec is a service that consumes events: every event routed to its
// durable queue (<amqp_exchange>.<service>, bound with BindingKeys) goes
// through the inbox (dedup by event id) into Handle; an event whose Handle
// failed InboundMaxAttempts times goes to the dead-letter exchange
// (<amqp_exchange>.dead-letter) and its queue (<queue>.dead-letter), and
// DeadLetter records it.
type InboundSpec[T any] struct {
	BindingKeys []string
	// New builds the handlers once per serve.
	New func(InboundDeps[T]) (Inbound, error)
}

// InboundDeps is what a service's inbound handlers are built from.
type InboundDeps[T any] struct {
	Settings T
	// Trust holds the trusted producers' keys (events.trusted_keys_file);
	// nil when none is configured (events are not authenticated).
	Trust      *eventsig.Trust
	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

// Inbound are a service's handlers of received events.
type Inbound struct {
	// Handle applies one event inside the inbox's transaction; an error
	// rolls everything back and the event is retried.
	Handle func(ctx context.Context, tx pgx.Tx, d rabbitmq.Delivery) error
	// DeadLetter records an event after its last failed attempt
	// (d.LastError is that attempt's error), in its own transaction.
	DeadLetter func(ctx context.Context, tx pgx.Tx, d rabbitmq.Delivery) error
	// Committed, when set, runs after an event's transaction committed
	// (e.g. publishing the journal entries it appended); its error is
	// logged, the event stays received.
	Committed func(ctx context.Context) error
}

// InboundQueue is the durable queue a service consumes from.
func InboundQueue(exchange, service string) string { return exchange + "." + service }

// DeadLetterNames are the dead-letter exchange and queue of a service's
// inbound queue.
func DeadLetterNames(exchange, service string) (dlx, dlq string) {
	return exchange + deadLetterSuffix, InboundQueue(exchange, service) + deadLetterSuffix
}

// loadSigner returns the events signer, or nil when signing is off.
func loadSigner(service string, ev settings.Events) (*eventsig.Signer, error) {
	if ev.SigningKeyFile == "" {
		return nil, nil
	}
	s, err := eventsig.LoadSigner(ev.SigningKeyID, ev.SigningKeyFile)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", settings.EnvVar(service, "events.signing_key_file"), err)
	}
	return s, nil
}

// inboundSpec is what the service consumes (nil: nothing) and the
// dependencies its handlers are built from: its own inbound spec, with the
// case events added when events.case_events_producer names their
// producer.
func (r *runtime[T]) inboundSpec(reg prometheus.Registerer, api *ArchiveAPI) (*InboundSpec[T], InboundDeps[T], error) {
	spec := r.spec.Inbound
	deps := InboundDeps[T]{Settings: r.cfg, Registerer: reg, Logger: r.logger}
	producer := r.tr.Events.CaseEventsProducer
	if producer != "" && (api == nil || api.Clocks == nil) {
		return nil, deps, fmt.Errorf("%s=%q: this service keeps no case clocks (it archives no table with a subject key)",
			settings.EnvVar(r.spec.Name, "events.case_events_producer"), producer)
	}
	if spec == nil && producer == "" {
		return nil, deps, nil
	}
	if f := r.tr.Events.TrustedKeysFile; f != "" {
		t, err := eventsig.LoadTrust(f)
		if err != nil {
			return nil, deps, fmt.Errorf("%s: %w", settings.EnvVar(r.spec.Name, "events.trusted_keys_file"), err)
		}
		deps.Trust = t
		r.logger.Info("inbound events: signatures required on archive events", slog.Int("trusted_keys", t.Len()))
	} else {
		r.logger.Warn("inbound events are not authenticated: any producer on the broker can book archives; set events.trusted_keys_file",
			slog.String("knob", settings.EnvVar(r.spec.Name, "events.trusted_keys_file")))
	}
	if producer != "" {
		// Validated at load: a producer comes with a trust file.
		ce := &CaseEvents{Clocks: api.Clocks, Trust: deps.Trust, Producer: producer, Metrics: api.CaseEvents, Logger: r.logger}
		spec = withCaseEvents(spec, ce.Inbound())
		r.logger.Info("inbound events: case events move the case clocks", slog.String("producer", producer))
	}
	return spec, deps, nil
}

// startInbound builds the service's consumers (nil: the service consumes
// nothing): the event queue with bounded attempts, and its dead-letter
// queue.
func (r *runtime[T]) startInbound(pool *pgxpool.Pool, reg prometheus.Registerer, api *ArchiveAPI) (func(context.Context) error, error) {
	spec, deps, err := r.inboundSpec(reg, api)
	if err != nil || spec == nil {
		return nil, err
	}
	in, err := spec.New(deps)
	if err != nil {
		return nil, err
	}
	queue := InboundQueue(r.tr.AMQPExchange, r.spec.Name)
	dlx, dlq := DeadLetterNames(r.tr.AMQPExchange, r.spec.Name)
	events := &rabbitmq.Consumer{Logger: r.logger, Concurrency: InboundConcurrency, MaxAttempts: InboundMaxAttempts, DeadLetterExchange: dlx, DeadLetterQueue: dlq, RetryDelay: inboundRetryDelay}
	dead := &rabbitmq.Consumer{Logger: r.logger, RetryDelay: deadLetterRetryDelay, MaxAttempts: DeadLetterMaxAttempts,
		DeadLetterExchange: dlx + parkedSuffix, DeadLetterQueue: dlq + parkedSuffix}
	return func(ctx context.Context) error {
		done := make(chan struct{}, 2)
		go func() {
			defer func() { done <- struct{}{} }()
			r.keepConsuming(ctx, queue, func(ctx context.Context) error {
				return events.ConsumeDeliveries(ctx, r.tr.AMQPURL, r.tr.AMQPExchange, queue, spec.BindingKeys, func(ctx context.Context, d rabbitmq.Delivery) error {
					_, err := inbox.Receive(ctx, pool, inbox.Event{ID: d.Message.ID, EventType: d.Message.EventType}, func(ctx context.Context, tx pgx.Tx) error {
						return in.Handle(ctx, tx, d)
					})
					if err == nil && in.Committed != nil {
						if cerr := in.Committed(ctx); cerr != nil && ctx.Err() == nil {
							r.logger.WarnContext(ctx, "after a received event", slog.String("event_id", d.Message.ID.String()), slog.Any("error", cerr))
						}
					}
					return err
				})
			})
		}()
		go func() {
			defer func() { done <- struct{}{} }()
			r.keepConsuming(ctx, dlq, func(ctx context.Context) error {
				return dead.ConsumeDeliveries(ctx, r.tr.AMQPURL, dlx, dlq, []string{"#"}, func(ctx context.Context, d rabbitmq.Delivery) error {
					return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return in.DeadLetter(ctx, tx, d) })
				})
			})
		}()
		<-done
		<-done
		return nil
	}, nil
}

// keepConsuming runs consume until ctx ends: a broker that is down when
// serve starts (consume fails at once) is retried with backoff, as the
// publisher does, so the service keeps sweeping and serving meanwhile.
func (r *runtime[T]) keepConsuming(ctx context.Context, queue string, consume func(context.Context) error) {
	delay := time.Second
	for {
		err := consume(ctx)
		if ctx.Err() != nil {
			return
		}
		r.logger.WarnContext(ctx, "event consumer cannot start; retrying", slog.String("queue", queue),
			slog.Duration("retry_in", delay), slog.Any("error", err))
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		delay = min(2*delay, 30*time.Second)
	}
}
