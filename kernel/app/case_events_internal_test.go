package app

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/outbox"
	"github.com/craig/retention/kernel/rabbitmq"
	"github.com/craig/retention/kernel/schedule"
)

// TestWithCaseEventsComposes: the case events' keys are bound beside the
// service's own; every case event reaches the clocks, and the service's
// handler only when its bindings take it; everything else goes to the
// service alone; dead letters go to whoever handled the event; a service
// that consumes nothing gets a path of its own.
func TestWithCaseEventsComposes(t *testing.T) {
	t.Parallel()
	all := []string{schedule.EventClosed, schedule.EventMerged, "rules.archive_booked", "exchange.sent"}
	for _, tc := range []struct {
		name        string
		keys        []string
		wantKeys    []string
		service     map[string]bool // the service's handler sees it
		serviceDead map[string]bool // the service's dead-letter handler records it
	}{
		{"everything", []string{"#"}, []string{"#"},
			map[string]bool{schedule.EventClosed: true, schedule.EventMerged: true, "rules.archive_booked": true, "exchange.sent": true},
			map[string]bool{schedule.EventClosed: true, schedule.EventMerged: true, "rules.archive_booked": true, "exchange.sent": true}},
		{"some", []string{"exchange.sent", schedule.EventMerged}, []string{"exchange.sent", schedule.EventMerged, schedule.EventClosed, schedule.EventReopened},
			map[string]bool{schedule.EventMerged: true, "exchange.sent": true, "rules.archive_booked": true},
			map[string]bool{schedule.EventMerged: true, "exchange.sent": true, "rules.archive_booked": true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var service, serviceDead, clocks, clocksDead []string
			rec := func(into *[]string) func(context.Context, pgx.Tx, rabbitmq.Delivery) error {
				return func(_ context.Context, _ pgx.Tx, d rabbitmq.Delivery) error {
					*into = append(*into, d.Message.EventType)
					return nil
				}
			}
			spec := &InboundSpec[struct{}]{BindingKeys: tc.keys, New: func(InboundDeps[struct{}]) (Inbound, error) {
				return Inbound{Handle: rec(&service), DeadLetter: rec(&serviceDead)}, nil
			}}
			got := withCaseEvents(spec, Inbound{Handle: rec(&clocks), DeadLetter: rec(&clocksDead)})
			require.Equal(t, tc.wantKeys, got.BindingKeys)
			in, err := got.New(InboundDeps[struct{}]{})
			require.NoError(t, err)
			for _, typ := range all {
				service, serviceDead, clocks, clocksDead = nil, nil, nil, nil
				d := rabbitmq.Delivery{Message: outbox.Message{EventType: typ}}
				require.NoError(t, in.Handle(context.Background(), nil, d))
				require.NoError(t, in.DeadLetter(context.Background(), nil, d))
				require.Equal(t, schedule.IsCaseEvent(typ), len(clocks) == 1, "%s reaches the clocks", typ)
				require.Equal(t, tc.service[typ], len(service) == 1, "%s reaches the service", typ)
				require.Equal(t, tc.serviceDead[typ], len(serviceDead) == 1, "%s dead-lettered by the service", typ)
				require.Equal(t, schedule.IsCaseEvent(typ) && !tc.serviceDead[typ], len(clocksDead) == 1, "%s dead-lettered by the clocks", typ)
			}
		})
	}
	own := withCaseEvents[struct{}](nil, (&CaseEvents{}).Inbound())
	require.Equal(t, schedule.CaseEventTypes(), own.BindingKeys)
}
