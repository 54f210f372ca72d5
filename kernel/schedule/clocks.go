package schedule

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/subject"
)

// The case events that move a case's clock (ADR-073).
const (
	EventClosed   = "case.closed"
	EventReopened = "case.reopened"
	EventMerged   = "case.merged"
)

// MaxEventSkew is how far in the future an event's time may be: a clock
// set ahead by more is a wrong clock, not an event.
const MaxEventSkew = 5 * time.Minute

// The refusals of an event.
var (
	// ErrStale: the case's clock changed after the event's time.
	ErrStale = errors.New("schedule: the event is older than the case clock's last change (stale)")
	// ErrBadEvent: the event is malformed.
	ErrBadEvent = errors.New("schedule: invalid case event")
	// ErrNoKey: no subject key: a clock is kept by the case's keyed hash.
	ErrNoKey = errors.New("schedule: no subject key: case clocks are kept by the keyed hash")
)

// Event is a case event, from the inbox or typed by hand.
type Event struct {
	Type           string
	Case           subject.Subject
	At             time.Time
	Classification string
	// Into is the case a merged case joined.
	Into subject.Subject
}

// CaseClock is a case's clock as an event left it.
type CaseClock struct {
	State          string     `json:"state"`
	ClosedAt       *time.Time `json:"closed_at"`
	Classification *string    `json:"classification"`
	Merged         bool       `json:"merged"`
	ChangedAt      time.Time  `json:"changed_at"`
}

// Clocks keeps the service's case clocks.
type Clocks struct {
	pool *pgxpool.Pool
	key  subject.Key
}

// NewClocks returns the clocks of a service hashing cases with key.
func NewClocks(pool *pgxpool.Pool, key subject.Key) *Clocks { return &Clocks{pool: pool, key: key} }

// check refuses a malformed event.
func (e Event) check(now time.Time) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadEvent, fmt.Sprintf(format, args...))
	}
	switch {
	case e.Type != EventClosed && e.Type != EventReopened && e.Type != EventMerged:
		return bad("type %q is not %s, %s or %s", e.Type, EventClosed, EventReopened, EventMerged)
	case e.Case.Kind() != subject.Case:
		return bad("the subject is not a case")
	case e.At.IsZero() || e.At.Year() < 1900 || e.At.After(now.Add(MaxEventSkew)):
		return bad("at must be a time between 1900 and now (not more than %s ahead)", MaxEventSkew)
	case e.Type == EventClosed && checkText(e.Classification, MaxText) != "":
		return bad("classification: %s", checkText(e.Classification, MaxText))
	case e.Type != EventClosed && e.Classification != "":
		return bad("classification is a %s's only", EventClosed)
	case e.Type == EventMerged && e.Into.Kind() != subject.Case:
		return bad("into must be a case")
	case e.Type == EventMerged && e.Into.String() == e.Case.String():
		return bad("a case does not merge into itself")
	case e.Type != EventMerged && e.Into != (subject.Subject{}):
		return bad("into is a %s's only", EventMerged)
	}
	return nil
}

// Apply moves the case's clock by e, recorded as from source; a stale
// event (older than the clock's last change) is refused and changes
// nothing.
func (c *Clocks) Apply(ctx context.Context, e Event, source string) (CaseClock, error) {
	return c.ApplyTx(ctx, nil, e, source)
}

// ApplyTx is Apply inside tx (nil: its own transaction): the inbox applies
// a received event in the transaction that claims its id.
func (c *Clocks) ApplyTx(ctx context.Context, tx pgx.Tx, e Event, source string) (CaseClock, error) {
	if !c.key.Valid() {
		return CaseClock{}, ErrNoKey
	}
	if err := e.check(time.Now()); err != nil {
		return CaseClock{}, err
	}
	hash := c.key.Hash(e.Case)
	p := queries.SetCaseClockParams{SubjectHash: hash, ChangedAt: pgtype.Timestamptz{Time: e.At, Valid: true}}
	out := CaseClock{ChangedAt: e.At.UTC()}
	var class *string
	var into []byte
	switch e.Type {
	case EventClosed:
		cl := strings.TrimSpace(e.Classification)
		class = &cl
		p.State, p.ClosedAt, p.Classification = "closed", p.ChangedAt, class
		at := e.At.UTC()
		out.State, out.ClosedAt, out.Classification = "closed", &at, class
	case EventReopened:
		p.State, out.State = "reopened", "reopened"
	case EventMerged:
		into = c.key.Hash(e.Into)
		p.State, p.MergedInto, out.State, out.Merged = "merged", into, "merged", true
	}
	write := func(tx pgx.Tx) error {
		q := queries.New(tx)
		n, err := q.SetCaseClock(ctx, p)
		if err != nil {
			return err
		}
		if n == 0 {
			return ErrStale
		}
		return q.RecordClockEvent(ctx, queries.RecordClockEventParams{SubjectHash: hash, Type: e.Type, At: p.ChangedAt, Classification: class,
			MergedInto: into, Source: source})
	}
	if tx != nil {
		// A savepoint: a stale event leaves the caller's transaction (the
		// inbox's) usable, so the refusal is acknowledged, not retried.
		return out, pgx.BeginFunc(ctx, tx, write)
	}
	return out, pgx.BeginFunc(ctx, c.pool, write)
}
