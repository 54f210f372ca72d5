package schedule

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/journal"
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
	pool    *pgxpool.Pool
	key     subject.Key
	journal *journal.Journal
}

// NewClocks returns the clocks of a service hashing cases with key.
func NewClocks(pool *pgxpool.Pool, key subject.Key) *Clocks { return &Clocks{pool: pool, key: key} }

// WithJournal returns the clocks with every accepted event journaled in j
// (ADR-070): a database restored from before a reopening gets it back
// from `reconcile`, instead of a case that looks closed. While the
// database is behind the store's journal, no event is applied.
func (c *Clocks) WithJournal(j *journal.Journal) *Clocks {
	n := *c
	n.journal = j
	return &n
}

// Journal is the journal the clocks write to (nil: none).
func (c *Clocks) Journal() *journal.Journal {
	if c == nil {
		return nil
	}
	return c.journal
}

// eventEntry is a case event's journal entry: the case (and the case it
// merged into) as keyed hashes sealed under the subject key, hex; times as
// microseconds since the Unix epoch.
type eventEntry struct {
	Case           string  `json:"case"`
	Type           string  `json:"type"`
	AtUS           int64   `json:"at_us"`
	Classification *string `json:"classification,omitempty"`
	Into           string  `json:"into,omitempty"`
	Source         string  `json:"source"`
}

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
	// The clock keeps microseconds: an event is compared with the clock's
	// last change, and answered, at that precision (an event finer than it
	// would otherwise pass as newer than a change it is older than).
	e.At = e.At.Truncate(time.Microsecond)
	if err := e.check(time.Now()); err != nil {
		return CaseClock{}, err
	}
	if err := c.journal.Check(ctx); err != nil {
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
		if err := q.RecordClockEvent(ctx, queries.RecordClockEventParams{SubjectHash: hash, Type: e.Type, At: p.ChangedAt, Classification: class,
			MergedInto: into, Source: source}); err != nil {
			return err
		}
		if c.journal == nil {
			return nil
		}
		entry := eventEntry{Type: e.Type, AtUS: e.At.UnixMicro(), Classification: class, Source: source}
		if entry.Case, err = c.sealHash(hash); err != nil {
			return err
		}
		if into != nil {
			if entry.Into, err = c.sealHash(into); err != nil {
				return err
			}
		}
		return journal.Append(ctx, tx, journal.ActCaseEvent, entry, source)
	}
	if tx != nil {
		// A savepoint: a stale event leaves the caller's transaction (the
		// inbox's) usable, so the refusal is acknowledged, not retried.
		// The caller's commit is published by the next act or the
		// journal's watch.
		return out, pgx.BeginFunc(ctx, tx, write)
	}
	if err := pgx.BeginFunc(ctx, c.pool, write); err != nil {
		return out, err
	}
	if c.journal != nil {
		return out, c.journal.Done(ctx)
	}
	return out, nil
}

func (c *Clocks) sealHash(hash []byte) (string, error) {
	b, err := c.key.Box(hash)
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

func (c *Clocks) openHash(h string) ([]byte, error) {
	b, err := hex.DecodeString(h)
	if err != nil {
		return nil, err
	}
	return c.key.Unbox(b)
}

// Reapply re-applies a case event's journal entry the database lost
// (reconcile), unless the clock changed after it (nothing to do); the
// entry adopted in the same transaction.
func (c *Clocks) Reapply(ctx context.Context, e journal.Entry) error {
	var ev eventEntry
	if err := json.Unmarshal(e.Detail, &ev); err != nil {
		return fmt.Errorf("journal entry %d: %w", e.Seq, err)
	}
	hash, err := c.openHash(ev.Case)
	if err != nil {
		return fmt.Errorf("journal entry %d: its case: %w", e.Seq, err)
	}
	at := pgtype.Timestamptz{Time: time.UnixMicro(ev.AtUS), Valid: true}
	p := queries.SetCaseClockParams{SubjectHash: hash, ChangedAt: at}
	var into []byte
	switch ev.Type {
	case EventClosed:
		p.State, p.ClosedAt, p.Classification = "closed", at, ev.Classification
	case EventReopened:
		p.State = "reopened"
	case EventMerged:
		if into, err = c.openHash(ev.Into); err != nil {
			return fmt.Errorf("journal entry %d: the case it merged into: %w", e.Seq, err)
		}
		p.State, p.MergedInto = "merged", into
	default:
		return fmt.Errorf("journal entry %d: unknown case event %q", e.Seq, ev.Type)
	}
	return pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		q := queries.New(tx)
		n, err := q.SetCaseClock(ctx, p)
		if err != nil {
			return err
		}
		if n == 1 {
			if err := q.RecordClockEvent(ctx, queries.RecordClockEventParams{SubjectHash: hash, Type: ev.Type, At: at, Classification: ev.Classification,
				MergedInto: into, Source: ev.Source}); err != nil {
				return err
			}
		}
		return journal.Adopt(ctx, tx, e)
	})
}
