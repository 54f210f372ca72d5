package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/craig/retention/kernel/identity"
	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/journal"
	"github.com/craig/retention/kernel/lease"
)

// The refusals of Propose and Approve.
var (
	// ErrExists: a version of that name was proposed before (a version is
	// never replaced: propose another).
	ErrExists = errors.New("schedule: a version of that name exists")
	// ErrNotFound: no version of that name.
	ErrNotFound = errors.New("schedule: no such version")
	// ErrNotAwaiting: the version was approved already.
	ErrNotAwaiting = errors.New("schedule: the version is not awaiting approval")
	// ErrSelfApproval: the approver proposed the version.
	ErrSelfApproval = errors.New("schedule: the identity that proposed a version cannot approve it")
	// ErrNearer: the version brings some row's destruction nearer than the
	// version in force, and the approver lacks archive:purge.
	ErrNearer = errors.New("schedule: the version brings destruction nearer than the one in force: its approval needs archive:purge")
)

// Schedules are a service's records schedule versions in its database.
type Schedules struct {
	pool    *pgxpool.Pool
	series  []Series
	journal *journal.Journal
}

// WithJournal returns the schedules with approvals journaled in j
// (ADR-070): a database restored from before an approval gets it back
// from `reconcile`, instead of an older version quietly in force.
func (s *Schedules) WithJournal(j *journal.Journal) *Schedules {
	c := *s
	c.journal = j
	return &c
}

// approvalEntry is an approval's journal entry: what re-applying it needs,
// times as microseconds since the Unix epoch.
type approvalEntry struct {
	Version      string          `json:"version"`
	Document     json.RawMessage `json:"document"`
	ProposedBy   string          `json:"proposed_by"`
	ProposedAtUS int64           `json:"proposed_at_us"`
	Nearer       int64           `json:"nearer"`
	ApprovedAtUS int64           `json:"approved_at_us"`
}

// New returns the schedules of a service archiving series.
func New(pool *pgxpool.Pool, series []Series) *Schedules {
	return &Schedules{pool: pool, series: series}
}

// Series are the service's archived tables.
func (s *Schedules) Series() []Series { return s.series }

// Version is a stored version of the schedule.
type Version struct {
	Version    string     `json:"version"`
	Status     string     `json:"status"`
	Document   Document   `json:"document"`
	ProposedBy string     `json:"proposed_by"`
	ProposedAt time.Time  `json:"proposed_at"`
	Nearer     int64      `json:"nearer"`
	ApprovedBy *string    `json:"approved_by"`
	ApprovedAt *time.Time `json:"approved_at"`
}

// The statuses of a version.
const (
	StatusProposed   = "proposed"
	StatusInForce    = "in_force"
	StatusSuperseded = "superseded"
)

// Proposed is what a proposal answers.
type Proposed struct {
	Version string `json:"version"`
	Status  string `json:"status"`
	// Nearer counts the rows, hot and archived, of the series some row
	// of which the version could make due earlier than the version in
	// force (NearerSeries): its approval then needs archive:purge.
	Nearer       int64    `json:"nearer"`
	NearerSeries []string `json:"nearer_series"`
}

// Propose records doc (validated for the service's series) as a proposed
// version by actor.
func (s *Schedules) Propose(ctx context.Context, doc Document, actor string) (Proposed, error) {
	if err := doc.Validate(s.series); err != nil {
		return Proposed{}, err
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		return Proposed{}, err
	}
	var out Proposed
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := queries.New(tx)
		if err := q.LockSchedules(ctx, lease.ScheduleKey); err != nil {
			return err
		}
		nearer, names, err := s.nearer(ctx, tx, doc)
		if err != nil {
			return err
		}
		if _, err := q.ProposeSchedule(ctx, queries.ProposeScheduleParams{Version: doc.Version, Document: raw, ProposedBy: actor, Nearer: nearer}); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("%w: %q", ErrExists, doc.Version)
			}
			return fmt.Errorf("schedule: propose %q: %w", doc.Version, err)
		}
		out = Proposed{Version: doc.Version, Status: StatusProposed, Nearer: nearer, NearerSeries: names}
		return logAct(ctx, q, actor, "schedule_proposed", map[string]any{"version": doc.Version, "nearer": nearer, "nearer_series": names})
	})
	return out, err
}

// Approve puts a proposed version in force, approved by actor: a second
// identity; mayShorten says the approver holds archive:purge, which a
// version that brings destruction nearer than the one in force (counted
// again now) needs.
func (s *Schedules) Approve(ctx context.Context, version, actor string, mayShorten bool) (Version, error) {
	// A database behind the store's journal would give the approval a
	// sequence number an act it forgot holds: refused until reconcile.
	if err := s.journal.Check(ctx); err != nil {
		return Version{}, err
	}
	var out Version
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := queries.New(tx)
		if err := q.LockSchedules(ctx, lease.ScheduleKey); err != nil {
			return err
		}
		row, err := q.ScheduleVersion(ctx, version)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: %q", ErrNotFound, version)
		}
		if err != nil {
			return err
		}
		v, err := versionOf(row)
		if err != nil {
			return err
		}
		switch {
		case v.ApprovedAt != nil:
			return fmt.Errorf("%w: %q was approved by %s", ErrNotAwaiting, version, *v.ApprovedBy)
		case identity.Same(v.ProposedBy, actor):
			return ErrSelfApproval
		}
		nearer, names, err := s.nearer(ctx, tx, v.Document)
		if err != nil {
			return err
		}
		if nearer > 0 && !mayShorten {
			return fmt.Errorf("%w (%d rows of %v)", ErrNearer, nearer, names)
		}
		at, err := q.ApproveSchedule(ctx, queries.ApproveScheduleParams{ApprovedBy: &actor, Version: version})
		if err != nil {
			return fmt.Errorf("schedule: approve %q: %w", version, err)
		}
		if s.journal != nil {
			if err := journal.Append(ctx, tx, journal.ActScheduleApproved, approvalEntry{Version: version, Document: row.Document, ProposedBy: v.ProposedBy,
				ProposedAtUS: v.ProposedAt.UnixMicro(), Nearer: v.Nearer, ApprovedAtUS: at.Time.UnixMicro()}, actor); err != nil {
				return err
			}
		}
		v.Status, v.ApprovedBy, v.Nearer = StatusInForce, &actor, nearer
		t := at.Time.UTC()
		v.ApprovedAt = &t
		out = v
		return logAct(ctx, q, actor, "schedule_approved", map[string]any{"version": version, "nearer": nearer, "nearer_series": names})
	})
	if err == nil && s.journal != nil {
		err = s.journal.Done(ctx)
	}
	return out, err
}

// Reapply re-applies an approval's journal entry the database lost
// (reconcile): the version, as proposed and approved then, in force in
// the order of the approvals; the entry adopted in the same transaction.
func (s *Schedules) Reapply(ctx context.Context, e journal.Entry) error {
	var a approvalEntry
	if err := json.Unmarshal(e.Detail, &a); err != nil {
		return fmt.Errorf("journal entry %d: %w", e.Seq, err)
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := queries.New(tx)
		if err := q.LockSchedules(ctx, lease.ScheduleKey); err != nil {
			return err
		}
		if err := q.RestoreSchedule(ctx, queries.RestoreScheduleParams{Version: a.Version, Document: a.Document, ProposedBy: a.ProposedBy,
			ProposedAt: pgtype.Timestamptz{Time: time.UnixMicro(a.ProposedAtUS), Valid: true}, Nearer: a.Nearer}); err != nil {
			return fmt.Errorf("schedule %q: %w", a.Version, err)
		}
		actor := e.Actor
		if _, err := q.RestoreApproval(ctx, queries.RestoreApprovalParams{ApprovedBy: &actor,
			ApprovedAt: pgtype.Timestamptz{Time: time.UnixMicro(a.ApprovedAtUS), Valid: true}, Version: a.Version}); err != nil {
			return fmt.Errorf("schedule %q: its approval: %w", a.Version, err)
		}
		return journal.Adopt(ctx, tx, e)
	})
}

// InForce is the version in force; nil while none is approved (then
// Implicit(Series()) holds).
func (s *Schedules) InForce(ctx context.Context) (*Version, error) {
	rows, err := queries.New(s.pool).ScheduleInForce(ctx)
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	v, err := versionOf(rows[0])
	if err != nil {
		return nil, err
	}
	v.Status = StatusInForce
	return &v, nil
}

// History is every version, newest first, each with its status.
func (s *Schedules) History(ctx context.Context) ([]Version, error) {
	rows, err := queries.New(s.pool).ScheduleHistory(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Version, 0, len(rows))
	inForce := true // the first approved one, newest first
	for _, r := range rows {
		v, err := versionOf(r)
		if err != nil {
			return nil, err
		}
		switch {
		case v.ApprovedAt == nil:
			v.Status = StatusProposed
		case inForce:
			v.Status, inForce = StatusInForce, false
		default:
			v.Status = StatusSuperseded
		}
		out = append(out, v)
	}
	return out, nil
}

// current is the document in force in tx, or the implicit one.
func (s *Schedules) current(ctx context.Context, tx pgx.Tx) (Document, error) {
	rows, err := queries.New(tx).ScheduleInForce(ctx)
	if err != nil {
		return Document{}, err
	}
	if len(rows) == 0 {
		return Implicit(s.series), nil
	}
	v, err := versionOf(rows[0])
	return v.Document, err
}

// nearer counts the rows, hot and archived, of the series doc could make
// due earlier than the version in force.
func (s *Schedules) nearer(ctx context.Context, tx pgx.Tx, doc Document) (int64, []string, error) {
	cur, err := s.current(ctx, tx)
	if err != nil {
		return 0, nil, err
	}
	names := NearerSeries(cur, doc)
	if len(names) == 0 {
		return 0, []string{}, nil
	}
	n, err := queries.New(tx).ArchivedRows(ctx, names)
	if err != nil {
		return 0, nil, err
	}
	for _, t := range names {
		var hot int64
		if err := tx.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{t}.Sanitize()).Scan(&hot); err != nil {
			return 0, nil, fmt.Errorf("schedule: count %s: %w", t, err)
		}
		n += hot
	}
	return n, names, nil
}

func versionOf(r queries.RetentionSchedule) (Version, error) {
	v := Version{Version: r.Version, ProposedBy: r.ProposedBy, ProposedAt: r.ProposedAt.Time.UTC(), Nearer: r.Nearer, ApprovedBy: r.ApprovedBy}
	if err := json.Unmarshal(r.Document, &v.Document); err != nil {
		return v, fmt.Errorf("schedule: version %q: %w", r.Version, err)
	}
	if r.ApprovedAt.Valid {
		t := r.ApprovedAt.Time.UTC()
		v.ApprovedAt = &t
	}
	return v, nil
}

func logAct(ctx context.Context, q *queries.Queries, actor, action string, detail map[string]any) error {
	raw, err := json.Marshal(detail)
	if err != nil {
		return err
	}
	return q.LogLifecycle(ctx, queries.LogLifecycleParams{Actor: actor, Action: action, Detail: raw})
}
