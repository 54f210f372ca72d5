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
	m := c.move(e)
	write := func(tx pgx.Tx) error {
		q := queries.New(tx)
		n, err := q.SetCaseClock(ctx, m.params)
		if err != nil {
			return err
		}
		if n == 0 {
			return ErrStale
		}
		if err := q.RecordClockEvent(ctx, queries.RecordClockEventParams{SubjectHash: m.params.SubjectHash, Type: e.Type, At: m.params.ChangedAt,
			Classification: m.params.Classification, MergedInto: m.params.MergedInto, Source: source}); err != nil {
			return err
		}
		return c.journalEvent(ctx, tx, e, m, source)
	}
	if tx != nil {
		// A savepoint: a stale event leaves the caller's transaction (the
		// inbox's) usable, so the refusal is acknowledged, not retried.
		// The caller's commit is published by the next act or the
		// journal's watch.
		return m.out, pgx.BeginFunc(ctx, tx, write)
	}
	if err := pgx.BeginFunc(ctx, c.pool, write); err != nil {
		return m.out, err
	}
	if c.journal != nil {
		return m.out, c.journal.Done(ctx)
	}
	return m.out, nil
}

// movement is what an event writes to its case's clock, and answers.
type movement struct {
	params queries.SetCaseClockParams
	out    CaseClock
}

// move is the clock e leaves (e checked).
func (c *Clocks) move(e Event) movement {
	at := e.At.UTC()
	m := movement{params: queries.SetCaseClockParams{SubjectHash: c.key.Hash(e.Case), ChangedAt: pgtype.Timestamptz{Time: at, Valid: true}},
		out: CaseClock{ChangedAt: at}}
	switch e.Type {
	case EventClosed:
		cl := strings.TrimSpace(e.Classification)
		m.params.State, m.params.ClosedAt, m.params.Classification = "closed", m.params.ChangedAt, &cl
		m.out.State, m.out.ClosedAt, m.out.Classification = "closed", &at, &cl
	case EventReopened:
		m.params.State, m.out.State = "reopened", "reopened"
	case EventMerged:
		m.params.State, m.params.MergedInto, m.out.State, m.out.Merged = "merged", c.key.Hash(e.Into), "merged", true
	}
	return m
}

// journalEvent journals an accepted event in tx (nothing without a
// journal): its cases sealed under the subject key.
func (c *Clocks) journalEvent(ctx context.Context, tx pgx.Tx, e Event, m movement, source string) error {
	if c.journal == nil {
		return nil
	}
	entry := eventEntry{Type: e.Type, AtUS: e.At.UnixMicro(), Classification: m.params.Classification, Source: source}
	var err error
	if entry.Case, err = c.sealHash(m.params.SubjectHash); err != nil {
		return err
	}
	if m.params.MergedInto != nil {
		if entry.Into, err = c.sealHash(m.params.MergedInto); err != nil {
			return err
		}
	}
	return journal.Append(ctx, tx, journal.ActCaseEvent, entry, source)
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
