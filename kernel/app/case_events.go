package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/craig/retention/kernel/eventsig"
	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/rabbitmq"
	"github.com/craig/retention/kernel/schedule"
)

// CaseEventSource is the case_clock_events source of an event received
// from the broker: event:<producer>.
func CaseEventSource(producer string) string { return "event:" + producer }

// CaseEvents moves a service's case clocks from the case events its inbox
// receives (ADR-073): only events whose signature proves the configured
// producer are applied; a forged, malformed or stale event is counted,
// logged without its case, and acknowledged (it must never poison-loop
// the queue); a database error is returned and the event retried.
type CaseEvents struct {
	Clocks   *schedule.Clocks
	Trust    *eventsig.Trust
	Producer string
	Metrics  *metrics.CaseEvents
	Logger   *slog.Logger
}

// Handle applies one received case event in tx, the inbox's transaction.
func (c *CaseEvents) Handle(ctx context.Context, tx pgx.Tx, d rabbitmq.Delivery) error {
	ev := d.Message
	count := func(outcome string) { c.Metrics.Received.WithLabelValues(ev.EventType, "inbox", outcome).Inc() }
	keyID, err := c.Trust.Verify(d.Body, d.Headers, c.Producer)
	if err != nil {
		// A forgery must not use up the genuine event's id.
		if err := queries.New(tx).ReleaseInboxClaim(ctx, pgtype.UUID{Bytes: ev.ID, Valid: true}); err != nil {
			return fmt.Errorf("release the inbox claim of %s: %w", ev.ID, err)
		}
		count(metrics.CaseEventRefused)
		c.Logger.WarnContext(ctx, "case event refused: its signature does not prove the configured producer",
			slog.String("event_id", ev.ID.String()), slog.String("event_type", ev.EventType), slog.String("producer", c.Producer),
			slog.String("key_id", keyID), slog.String("reason", err.Error()))
		return nil
	}
	e, err := schedule.DecodeEvent(ev.EventType, ev.Payload)
	if err == nil {
		_, err = c.Clocks.ApplyTx(ctx, tx, e, CaseEventSource(c.Producer))
	}
	switch {
	case err == nil:
		count(metrics.CaseEventApplied)
		c.Logger.InfoContext(ctx, "case clock moved", slog.String("event_id", ev.ID.String()), slog.String("event_type", ev.EventType))
		return nil
	case errors.Is(err, schedule.ErrStale):
		count(metrics.CaseEventStale)
		c.Logger.WarnContext(ctx, "case event refused as stale: the case's clock changed after it",
			slog.String("event_id", ev.ID.String()), slog.String("event_type", ev.EventType))
		return nil
	case errors.Is(err, schedule.ErrBadEvent):
		count(metrics.CaseEventMalformed)
		c.Logger.WarnContext(ctx, "case event refused as malformed", slog.String("event_id", ev.ID.String()),
			slog.String("event_type", ev.EventType), slog.String("reason", err.Error()))
		return nil
	default:
		return fmt.Errorf("case event %s: %w", ev.ID, err)
	}
}

// withCaseEvents returns spec with the case events added: their routing
// keys bound, and each one applied to the clocks before the service's own
// handler (if its bindings take it) sees it. A service consuming nothing
// gets an inbound path of its own, whose dead letters are logged.
func withCaseEvents[T any](spec *InboundSpec[T], c Inbound) *InboundSpec[T] {
	if spec == nil {
		return &InboundSpec[T]{
			BindingKeys: schedule.CaseEventTypes(),
			New:         func(InboundDeps[T]) (Inbound, error) { return c, nil },
		}
	}
	all := slices.Contains(spec.BindingKeys, "#")
	keys := slices.Clone(spec.BindingKeys)
	for _, t := range schedule.CaseEventTypes() {
		if !all && !slices.Contains(keys, t) {
			keys = append(keys, t)
		}
	}
	return &InboundSpec[T]{
		BindingKeys: keys,
		New: func(deps InboundDeps[T]) (Inbound, error) {
			in, err := spec.New(deps)
			if err != nil {
				return Inbound{}, err
			}
			takes := func(t string) bool { return all || slices.Contains(spec.BindingKeys, t) }
			committed := in.Committed
			if c.Committed != nil {
				committed = func(ctx context.Context) error {
					err := c.Committed(ctx)
					if in.Committed != nil {
						err = errors.Join(err, in.Committed(ctx))
					}
					return err
				}
			}
			return Inbound{
				Committed: committed,
				Handle: func(ctx context.Context, tx pgx.Tx, d rabbitmq.Delivery) error {
					if !schedule.IsCaseEvent(d.Message.EventType) {
						return in.Handle(ctx, tx, d)
					}
					if err := c.Handle(ctx, tx, d); err != nil {
						return err
					}
					if takes(d.Message.EventType) {
						return in.Handle(ctx, tx, d)
					}
					return nil
				},
				DeadLetter: func(ctx context.Context, tx pgx.Tx, d rabbitmq.Delivery) error {
					if schedule.IsCaseEvent(d.Message.EventType) && !takes(d.Message.EventType) {
						return c.DeadLetter(ctx, tx, d)
					}
					return in.DeadLetter(ctx, tx, d)
				},
			}, nil
		},
	}
}

// Inbound is the case events' handlers.
func (c *CaseEvents) Inbound() Inbound {
	in := Inbound{Handle: c.Handle, DeadLetter: c.deadLetter}
	if j := c.Clocks.Journal(); j != nil {
		in.Committed = j.Done
	}
	return in
}

// deadLetter tries a case event that failed every attempt once more, in
// tx with its inbox claim (the database was down, or behind the store's
// journal until `reconcile`): an error leaves it to the dead-letter
// queue's retries and then the parked queue, where it is kept for an
// operator; a case event is never dropped.
func (c *CaseEvents) deadLetter(ctx context.Context, tx pgx.Tx, d rabbitmq.Delivery) error {
	n, err := queries.New(tx).RecordReceived(ctx, queries.RecordReceivedParams{EventID: pgtype.UUID{Bytes: d.Message.ID, Valid: true}, EventType: d.Message.EventType})
	if err != nil || n == 0 {
		return err // a duplicate: received meanwhile
	}
	if err := c.Handle(ctx, tx, d); err != nil {
		c.Logger.ErrorContext(ctx, "case event dead-lettered: its clock did not move; it is retried, then parked",
			slog.String("event_id", d.Message.ID.String()), slog.String("event_type", d.Message.EventType),
			slog.Int("attempts", d.Attempt), slog.String("last_error", d.LastError), slog.Any("error", err))
		return err
	}
	return nil
}
