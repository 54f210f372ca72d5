package outbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/craig/retention/kernel/identity"
	"github.com/craig/retention/kernel/internal/queries"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Bounds of a dead-letter listing.
const (
	// DefaultDeadLetterPage is how many dead letters a listing answers
	// unless asked: a screen's worth.
	DefaultDeadLetterPage = 100
	// MaxDeadLetterPage bounds one listing (a page of 1,000 rows is about
	// 300 kB of JSON); page with after for more.
	MaxDeadLetterPage = 1000
)

// DeadLetter is one dead-lettered outbox row as an operator sees it
// (ADR-075): never its payload (it may name a person), only its size.
type DeadLetter struct {
	ID             uuid.UUID  `json:"id"`
	EventType      string     `json:"event_type"`
	CreatedAt      time.Time  `json:"created_at"`
	Attempts       int        `json:"attempts"`
	LastError      string     `json:"last_error"`
	LastAttemptAt  *time.Time `json:"last_attempt_at"`
	DeadLetteredAt time.Time  `json:"dead_lettered_at"`
	// AgeSeconds is the event's age (since created_at), DeadForSeconds how
	// long it has been a dead letter, both by the database clock.
	AgeSeconds     float64    `json:"age_seconds"`
	DeadForSeconds float64    `json:"dead_for_seconds"`
	PayloadBytes   int64      `json:"payload_bytes"`
	RetriedBy      string     `json:"retried_by,omitempty"`
	RetriedAt      *time.Time `json:"retried_at,omitempty"`
}

// DeadLetterPage is a listing: the dead letters, and how many there are.
type DeadLetterPage struct {
	DeadLetters []DeadLetter `json:"dead_letters"`
	// Total counts every dead letter of the outbox, not only this page.
	Total int64 `json:"total"`
	// Next is the after of the next page; empty on the last.
	Next string `json:"next,omitempty"`
}

// Errors of a dead-letter listing or retry.
var (
	// ErrNoSuchEvent: no outbox row has the id (never, or swept).
	ErrNoSuchEvent = errors.New("outbox: no such event")
	// ErrNotDeadLettered (wrapped in NotDeadLetteredError): the row is
	// pending or published.
	ErrNotDeadLettered = errors.New("outbox: the event is not a dead letter")
	// ErrBadDeadLetterRequest: a limit out of range, an actor that is not
	// an identity.
	ErrBadDeadLetterRequest = errors.New("outbox: invalid dead-letter request")
)

// NotDeadLetteredError says where a row that is not a dead letter is.
type NotDeadLetteredError struct {
	ID uuid.UUID
	// State is "pending" or "published".
	State string
}

func (e *NotDeadLetteredError) Error() string {
	return fmt.Sprintf("outbox event %s is %s, not a dead letter", e.ID, e.State)
}

func (e *NotDeadLetteredError) Unwrap() error { return ErrNotDeadLettered }

// TxBeginner opens a transaction (a *pgxpool.Pool, a *pgx.Conn).
type TxBeginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// ListDeadLetters lists up to limit dead letters (0: DefaultDeadLetterPage),
// oldest dead letter first, after the dead letter after (uuid.Nil: from the
// first). An after that is not a dead letter is an error, not an empty page.
// The check, the page and the total are read in one repeatable-read,
// read-only snapshot: a retry committed meanwhile cannot make the page end
// early.
func ListDeadLetters(ctx context.Context, db TxBeginner, after uuid.UUID, limit int) (DeadLetterPage, error) {
	page := DeadLetterPage{DeadLetters: []DeadLetter{}}
	if limit == 0 {
		limit = DefaultDeadLetterPage
	}
	if limit < 1 || limit > MaxDeadLetterPage {
		return page, fmt.Errorf("%w: limit %d outside 1..%d", ErrBadDeadLetterRequest, limit, MaxDeadLetterPage)
	}
	tx, err := db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return page, fmt.Errorf("outbox dead letters: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	q := queries.New(tx)
	var afterID pgtype.UUID
	if after != uuid.Nil {
		if err := requireDeadLetter(ctx, q, after); err != nil {
			return page, err
		}
		afterID = pgUUID(after)
	}
	// One row more than the page: whether there is a next page.
	rows, err := q.ListDeadLetters(ctx, queries.ListDeadLettersParams{AfterID: afterID, RowLimit: int32(limit) + 1}) //nolint:gosec // 1..MaxDeadLetterPage
	if err != nil {
		return page, fmt.Errorf("outbox dead letters: %w", err)
	}
	if page.Total, err = q.DeadLetterStats(ctx); err != nil {
		return page, fmt.Errorf("outbox dead letters: count: %w", err)
	}
	more := len(rows) > limit
	if more {
		rows = rows[:limit]
	}
	for _, r := range rows {
		page.DeadLetters = append(page.DeadLetters, DeadLetter{
			ID: uuid.UUID(r.ID.Bytes), EventType: r.EventType, CreatedAt: r.CreatedAt.Time.UTC(), Attempts: int(r.Attempts),
			LastError: deref(r.LastError), LastAttemptAt: timePtr(r.LastAttemptAt), DeadLetteredAt: r.DeadLetteredAt.Time.UTC(),
			AgeSeconds: r.AgeSeconds, DeadForSeconds: r.DeadSeconds, PayloadBytes: r.PayloadBytes,
			RetriedBy: deref(r.RetriedBy), RetriedAt: timePtr(r.RetriedAt),
		})
	}
	if more {
		page.Next = page.DeadLetters[len(rows)-1].ID.String()
	}
	return page, nil
}

// Retried is the outcome of a retry.
type Retried struct {
	ID        uuid.UUID `json:"id"`
	EventType string    `json:"event_type"`
	CreatedAt time.Time `json:"created_at"`
	LastError string    `json:"last_error"`
	RetriedBy string    `json:"retried_by"`
	RetriedAt time.Time `json:"retried_at"`
}

// RetryDeadLetter returns the dead letter id to the drain with its attempts
// reset, recording actor (a normalized identity, or a system: actor) as who
// did it. The statement that acts re-checks that the row is a dead letter:
// a row retried, published or swept meanwhile is reported, not touched. A
// retried row is published once by the drain; the consumers' inbox dedup
// absorbs a second delivery should one happen.
func RetryDeadLetter(ctx context.Context, db queries.DBTX, id uuid.UUID, actor string) (Retried, error) {
	if !strings.HasPrefix(actor, "system:") {
		if err := identity.Check(actor); err != nil {
			return Retried{}, fmt.Errorf("%w: actor: %w", ErrBadDeadLetterRequest, err)
		}
	}
	q := queries.New(db)
	r, err := q.RetryDeadLetter(ctx, queries.RetryDeadLetterParams{ID: pgUUID(id), Actor: &actor})
	if errors.Is(err, pgx.ErrNoRows) {
		if err := requireDeadLetter(ctx, q, id); err != nil {
			return Retried{}, err
		}
		return Retried{}, fmt.Errorf("outbox retry %s: the row changed under the retry; try again", id)
	}
	if err != nil {
		return Retried{}, fmt.Errorf("outbox retry %s: %w", id, err)
	}
	return Retried{ID: uuid.UUID(r.ID.Bytes), EventType: r.EventType, CreatedAt: r.CreatedAt.Time.UTC(), LastError: deref(r.LastError),
		RetriedBy: actor, RetriedAt: r.RetriedAt.Time.UTC()}, nil
}

// requireDeadLetter is nil when id is a dead letter, ErrNoSuchEvent or a
// NotDeadLetteredError otherwise.
func requireDeadLetter(ctx context.Context, q *queries.Queries, id uuid.UUID) error {
	st, err := q.OutboxRowState(ctx, pgUUID(id))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: %s", ErrNoSuchEvent, id)
	case err != nil:
		return fmt.Errorf("outbox event %s: %w", id, err)
	case st.Published:
		return &NotDeadLetteredError{ID: id, State: "published"}
	case !st.DeadLettered:
		return &NotDeadLetteredError{ID: id, State: "pending"}
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func timePtr(t pgtype.Timestamptz) *time.Time {
	if !t.Valid {
		return nil
	}
	u := t.Time.UTC()
	return &u
}
