package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/outbox"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/sweep"
	"github.com/craig/retention/migrations"
)

// outboxModelSeed and outboxModelChecks fix the transport model in CI
// (-rapid.seed or RAPID_SEED choose another).
const (
	outboxModelSeed   = "4444"
	outboxModelChecks = 30
	modelMaxAttempts  = 3
)

// modelEvent is the reference model's view of one outbox row.
type modelEvent struct {
	id        uuid.UUID
	kind      string // "good", "poison" (refused until fixed), "malformed"
	published bool
	dead      bool
	attempts  int
	// ageDays is how old the row is (created_at) and deadDays how long it
	// has been dead, in whole days of the model's clock.
	ageDays, deadDays int
	// deadConfirms is how many times the broker confirmed it when it died.
	deadConfirms int
	// refusedBefore is how many refusals it had before its last retry (the
	// broker's offers count across retries; its attempts restart at 0).
	refusedBefore int
}

// modelBroker confirms good rows and poison rows once fixed.
type modelBroker struct {
	mu        sync.Mutex
	fixed     bool
	confirmed map[uuid.UUID]int
	offered   map[uuid.UUID]int
	kinds     map[uuid.UUID]string
}

func (b *modelBroker) Publish(_ context.Context, m outbox.Message) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.offered[m.ID]++
	if b.kinds[m.ID] == "poison" && !b.fixed {
		return errors.New("returned: no queue is bound")
	}
	b.confirmed[m.ID]++
	return nil
}

// TestOutboxModel: random sequences of staging (good, poison, malformed
// rows), drains, days passing, sweeps with the dead-letter window off and
// on, operator retries, the broker's cause fixed, and changes of the
// database's time zone and date style, against a real database, checked
// after every step against a reference model: a row is deleted only when
// published and older than the outbox window, or dead and dead longer than
// the dead-letter window while it is on; a malformed row is never
// published; a dead row is never offered to the broker again until retried;
// attempts never pass outbox.max_attempts; the pending gauge never counts a
// dead letter.
func TestOutboxModel(t *testing.T) {
	if f := flag.Lookup("rapid.seed"); f != nil && f.Value.String() == "0" && os.Getenv("RAPID_SEED") == "" {
		require.NoError(t, flag.Set("rapid.seed", outboxModelSeed))
	}
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == "100" {
		require.NoError(t, flag.Set("rapid.checks", fmt.Sprint(outboxModelChecks)))
	}
	ctx := context.Background()
	_, logger := newLogRecorder()
	db := kerneltest.NewDB(t, migrations.Transport())
	// Unpinned: the database's own zone and date style reach the drain.
	raw, err := pgxpool.New(ctx, db.URL)
	require.NoError(t, err)
	t.Cleanup(raw.Close)
	zones := []string{"UTC", "Pacific/Kiritimati", "Etc/GMT+12", "America/New_York"}
	styles := []string{"ISO, YMD", "SQL, DMY", "German", "Postgres, MDY"}

	rapid.Check(t, func(rt *rapid.T) {
		db.Exec(t, "DELETE FROM event_outbox")
		broker := &modelBroker{confirmed: map[uuid.UUID]int{}, offered: map[uuid.UUID]int{}, kinds: map[uuid.UUID]string{}}
		d := &outbox.Drainer{Pool: raw, Publisher: broker, Logger: logger, MaxAttempts: modelMaxAttempts, RetryBackoff: time.Nanosecond, BatchSize: 3}
		var events []*modelEvent
		deadWindow := 0
		rt.Repeat(map[string]func(*rapid.T){
			"stage": func(rt *rapid.T) {
				kind := rapid.SampledFrom([]string{"good", "good", "poison", "malformed"}).Draw(rt, "kind")
				id := uuid.Must(uuid.NewV7())
				eventType := "rules.evaluated"
				if kind == "malformed" {
					eventType = "rules evaluated" // no routing key
				}
				db.Exec(t, "INSERT INTO event_outbox (id, event_type, payload) VALUES ($1, $2, $3)", id, eventType, json.RawMessage(`{}`))
				broker.kinds[id] = kind
				events = append(events, &modelEvent{id: id, kind: kind})
			},
			"drain": func(rt *rapid.T) {
				_, err := d.DrainOnce(ctx)
				require.NoError(t, err)
				for _, e := range events {
					if e.published || e.dead {
						continue
					}
					switch {
					case e.kind == "malformed": // never offered: syncDead reads it
					case broker.confirmed[e.id] > 0:
						e.published = true
					default:
						e.attempts = broker.offered[e.id] - broker.confirmed[e.id] - e.refusedBefore
					}
				}
				syncDead(t, db, events, broker)
			},
			"days_pass": func(rt *rapid.T) {
				n := rapid.IntRange(1, 40).Draw(rt, "days")
				db.Exec(t, `UPDATE event_outbox SET created_at = created_at - make_interval(days => $1), published_at = published_at - make_interval(days => $1),
					dead_lettered_at = dead_lettered_at - make_interval(days => $1), last_attempt_at = last_attempt_at - make_interval(days => $1)`, n)
				for _, e := range events {
					e.ageDays += n
					if e.dead {
						e.deadDays += n
					}
				}
			},
			"sweep": func(rt *rapid.T) {
				deadWindow = rapid.SampledFrom([]int{0, 0, 30}).Draw(rt, "dead_letter_days")
				for _, p := range sweep.Transport(sweep.TransportConfig{OutboxWindowDays: 30, InboxWindowDays: 31, DeadLetterWindowDays: deadWindow}).Policies {
					_, err := prune.PruneTable(ctx, raw, p)
					require.NoError(t, err, p.Label())
				}
				kept := events[:0]
				for _, e := range events {
					// The model's whole days: a row exactly at the window
					// is not judged (the sweep's cutoff is to the second).
					gone := (e.published && e.ageDays > 30) || (e.dead && deadWindow > 0 && e.deadDays > deadWindow)
					stays := (!e.published && !e.dead) || (e.published && e.ageDays < 30) || (e.dead && (deadWindow == 0 || e.deadDays < deadWindow))
					present := db.Count(t, "SELECT count(*) FROM event_outbox WHERE id = $1", e.id) == 1
					if gone {
						require.False(t, present, "%s %s: due, yet kept", e.kind, e.id)
						continue
					}
					if stays {
						require.True(t, present, "%s %s (published %v, dead %v, age %d d, dead %d d, window %d): deleted before its time", e.kind, e.id, e.published, e.dead, e.ageDays, e.deadDays, deadWindow)
					}
					if present {
						kept = append(kept, e)
					}
				}
				events = kept
			},
			"retry": func(rt *rapid.T) {
				var dead []*modelEvent
				for _, e := range events {
					if e.dead {
						dead = append(dead, e)
					}
				}
				if len(dead) == 0 {
					return // nothing to retry yet: the step draws nothing
				}
				e := rapid.SampledFrom(dead).Draw(rt, "dead")
				_, err := outbox.RetryDeadLetter(ctx, raw, e.id, "ops:model")
				require.NoError(t, err)
				e.dead, e.attempts, e.deadDays = false, 0, 0
				e.refusedBefore = broker.offered[e.id] - broker.confirmed[e.id]
			},
			"fix_the_broker": func(rt *rapid.T) {
				broker.mu.Lock()
				broker.fixed = true
				broker.mu.Unlock()
			},
			"zone": func(rt *rapid.T) {
				db.Exec(t, fmt.Sprintf("ALTER DATABASE %q SET TimeZone = '%s'", db.Name, rapid.SampledFrom(zones).Draw(rt, "zone")))
				db.Exec(t, fmt.Sprintf("ALTER DATABASE %q SET DateStyle = '%s'", db.Name, rapid.SampledFrom(styles).Draw(rt, "style")))
				raw.Reset()
			},
			"": func(rt *rapid.T) {
				checkOutboxModel(t, db, events, broker)
			},
		})
	})
}

// syncDead marks the model's rows the database dead-lettered after a
// drain, checking that each had exactly max attempts of refusals (a
// malformed one: at once).
func syncDead(t *testing.T, db *kerneltest.DB, events []*modelEvent, broker *modelBroker) {
	t.Helper()
	for _, e := range events {
		if e.dead || e.published || e.kind == "good" {
			continue
		}
		if e.kind == "malformed" {
			// Claimed (a batch is 3 rows): dead at its first attempt.
			if db.Count(t, "SELECT count(*) FROM event_outbox WHERE id = $1 AND dead_lettered_at IS NOT NULL AND attempts = 1", e.id) == 1 {
				e.dead, e.attempts = true, 1
			}
			continue
		}
		if db.Count(t, "SELECT count(*) FROM event_outbox WHERE id = $1 AND dead_lettered_at IS NOT NULL", e.id) == 1 {
			require.Equal(t, modelMaxAttempts, e.attempts, "%s: dead after exactly max_attempts refusals", e.id)
			e.dead, e.deadConfirms = true, broker.confirmed[e.id]
		} else {
			require.Less(t, e.attempts, modelMaxAttempts, "%s: refused max_attempts times, yet not dead", e.id)
		}
	}
}

// checkOutboxModel compares the database with the model.
func checkOutboxModel(t *testing.T, db *kerneltest.DB, events []*modelEvent, broker *modelBroker) {
	t.Helper()
	pending, dead := 0, 0
	for _, e := range events {
		var published, deadLettered bool
		var attempts int
		require.NoError(t, db.Pool.QueryRow(context.Background(), "SELECT published_at IS NOT NULL, dead_lettered_at IS NOT NULL, attempts FROM event_outbox WHERE id = $1", e.id).
			Scan(&published, &deadLettered, &attempts), "%s %s: lost", e.kind, e.id)
		require.Equal(t, e.published, published, "%s %s: published", e.kind, e.id)
		require.Equal(t, e.dead, deadLettered, "%s %s: dead", e.kind, e.id)
		require.False(t, published && deadLettered, "%s: published and dead", e.id)
		require.LessOrEqual(t, attempts, modelMaxAttempts)
		if e.kind == "malformed" {
			require.Zero(t, broker.offered[e.id], "a malformed row never reaches the broker")
		}
		if e.dead {
			require.Equal(t, e.deadConfirms, broker.confirmed[e.id], "%s: a dead row is not published", e.id)
			dead++
		} else if !e.published {
			pending++
		}
	}
	st := db.Count(t, "SELECT count(*) FROM event_outbox WHERE published_at IS NULL AND dead_lettered_at IS NULL")
	require.Equal(t, int64(pending), st, "pending backlog: never a dead letter")
	require.Equal(t, int64(dead), db.Count(t, "SELECT count(*) FROM event_outbox WHERE dead_lettered_at IS NOT NULL"))
}
