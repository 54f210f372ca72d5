// Package lifecycle is what happens to a service's archives after they are
// written: each
// archive's retention date, legal holds as first-class records (a title, a
// reason, who placed and who released them), and the purge that destroys an
// archive only when its date has come and no hold covers it — bounded,
// under the archive lease, re-checked at every destructive statement,
// optionally approved by a second operator, and certified by a
// destruction record in the store. It acts on the service's OWN archives
// (its local archive_ledger) only; every act is logged with who, when and
// why and staged as an event for security's fleet ledger.
package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/journal"
	"github.com/craig/retention/kernel/lease"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/outbox"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/kernel/subject"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Bounds of the API's calls.
// Reasons a purge skips an archive or refuses a request: the label values
// of archive_purge_refused_total{reason}.
const (
	RefusedNoLongerEligible = "no_longer_eligible"
	RefusedSelfApproval     = "self_approval"
	RefusedAlreadyRunning   = "already_running"
	RefusedStoreError       = "store_error"
)

// PurgeRefusals are every refusal reason, exported from boot at 0.
func PurgeRefusals() []string {
	return []string{RefusedNoLongerEligible, RefusedSelfApproval, RefusedAlreadyRunning, RefusedStoreError}
}

const (
	// MaxPurgeLimit is the most archives one purge call destroys.
	MaxPurgeLimit = 100
	// DefaultPurgeLimit is a purge call's limit unless given.
	DefaultPurgeLimit = 10
	// MaxRecordsLimit is the most records one listing returns.
	MaxRecordsLimit = 1000
	// DefaultRecordsLimit is a listing's page unless given.
	DefaultRecordsLimit = 100
)

// Sentinels callers map to answers.
var (
	ErrNotFound       = errors.New("lifecycle: not found")
	ErrPurged         = errors.New("lifecycle: archive already purged")
	ErrInvalid        = errors.New("lifecycle: invalid request")
	ErrAlreadyRunning = errors.New("lifecycle: another purge or archive pass holds the archive lease")
	ErrSelfApproval   = errors.New("lifecycle: a purge cannot be approved by the operator who requested it")
	ErrNotAwaiting    = errors.New("lifecycle: the purge is not awaiting approval")
	// ErrShortens: the retention date would bring destruction nearer,
	// which only the purge scope may do.
	ErrShortens = errors.New("lifecycle: the date brings the archive's destruction nearer, which needs archive:purge")
	// ErrHeldPurged: a hold names an archive already purged.
	ErrHeldPurged = errors.New("lifecycle: a hold names an archive already purged")
	// ErrNoSubjectKey: a subject hold on a service with no subject key.
	ErrNoSubjectKey = errors.New("lifecycle: no subject key is configured (archive.subject_key_file)")
	// ErrNotIndexed: a subject hold while archives are not yet indexed by
	// subject (it would hold every one of them); run the backfill first.
	ErrNotIndexed = errors.New("lifecycle: archives are not yet indexed by subject")
)

// Config is one service's lifecycle.
type Config struct {
	// Service names the events (<service>.archive_purged, …) and the
	// certificates' key segment.
	Service string
	// ApprovalsRequired is 0 (a purge executes at once) or 1 (dual
	// control: another operator approves the frozen list).
	ApprovalsRequired int
	// LockKey is the archive lease; 0 means lease.ArchiveKey.
	LockKey int64
	// ObjectLock: the bucket has S3 Object Lock, so holds are also set on
	// the objects (the store then refuses to delete a held archive) and the
	// purge destroys every version.
	ObjectLock bool
	// Tables are the service's archived tables (from its spec): a hold by
	// table names one of them. Empty: not checked.
	Tables []string
	// SubjectKey hashes the subjects a hold names (archive.subject_key_file);
	// without it a subject hold is refused with ErrNoSubjectKey.
	SubjectKey subject.Key
	// SubjectTables are the archived tables that declare subjects: a
	// subject hold is refused while one of their archives is not indexed.
	SubjectTables []string
	// Journal records holds placed and released and archives purged in the
	// store too (ADR-070); while its gate says the database is behind the
	// store's journal, every act is refused (ErrBehind). Nil: no journal.
	Journal *journal.Journal
	// PurgeCheck, when set, is re-checked in the transaction that destroys
	// an archive, after its ledger row is locked: false keeps it (no
	// longer eligible). A records schedule in force uses it so an archive
	// is purged only when every row of it is due (ADR-073).
	PurgeCheck func(ctx context.Context, tx pgx.Tx, archiveID uuid.UUID) (bool, error)
}

// Manager runs the lifecycle of one service's archives.
type Manager struct {
	pool    *pgxpool.Pool
	store   *store.Store
	cfg     Config
	logger  *slog.Logger
	metrics *metrics.Purge
}

// New returns a manager; st may be nil when only records and holds are
// used (a purge needs the store).
func New(pool *pgxpool.Pool, st *store.Store, cfg Config, logger *slog.Logger, m *metrics.Purge) (*Manager, error) {
	if cfg.Service == "" || cfg.ApprovalsRequired < 0 || cfg.ApprovalsRequired > 1 {
		return nil, fmt.Errorf("%w: service %q, approvals %d (0 or 1)", ErrInvalid, cfg.Service, cfg.ApprovalsRequired)
	}
	if cfg.LockKey == 0 {
		cfg.LockKey = lease.ArchiveKey
	}
	return &Manager{pool: pool, store: st, cfg: cfg, logger: logger, metrics: m}, nil
}

// Record is one archive with its lifecycle state (the records listing).
type Record struct {
	ArchiveID      uuid.UUID   `json:"archive_id"`
	Table          string      `json:"table"`
	DataKey        string      `json:"data_key"`
	ManifestKey    string      `json:"manifest_key"`
	DataSHA256     string      `json:"data_sha256"`
	RecordCount    int         `json:"record_count"`
	FirstRecordID  uuid.UUID   `json:"first_record_id"`
	LastRecordID   uuid.UUID   `json:"last_record_id"`
	FirstRecordAt  time.Time   `json:"first_record_at"`
	LastRecordAt   time.Time   `json:"last_record_at"`
	ArchivedAt     time.Time   `json:"archived_at"`
	ArchivedBy     string      `json:"archived_by"`
	RetentionUntil *string     `json:"retention_until"`
	LegalHold      bool        `json:"legal_hold"`
	Holds          []uuid.UUID `json:"holds"`
	PurgedAt       *time.Time  `json:"purged_at"`
	PurgedBy       *string     `json:"purged_by"`
}

// Filter selects records; nil fields do not filter.
type Filter struct {
	Table     *string
	Held      *bool
	Purgeable *bool
	Limit     int
	After     uuid.UUID
}

// Records lists archives by archive id after f.After.
func (m *Manager) Records(ctx context.Context, f Filter) ([]Record, error) {
	if f.Limit == 0 {
		f.Limit = DefaultRecordsLimit
	}
	if f.Limit < 1 || f.Limit > MaxRecordsLimit {
		return nil, fmt.Errorf("%w: limit %d outside 1..%d", ErrInvalid, f.Limit, MaxRecordsLimit)
	}
	rows, err := queries.New(m.pool).ListArchiveRecords(ctx, queries.ListArchiveRecordsParams{
		TableName: f.Table, Held: f.Held, Purgeable: f.Purgeable, After: pgUUID(f.After), RowLimit: int32(f.Limit),
	})
	if err != nil {
		return nil, fmt.Errorf("list archive records: %w", err)
	}
	out := make([]Record, len(rows))
	for i, r := range rows {
		out[i] = Record{
			ArchiveID: r.ArchiveID.Bytes, Table: r.TableName, DataKey: r.DataKey, ManifestKey: r.ManifestKey,
			DataSHA256: r.DataSha256, RecordCount: int(r.RecordCount), FirstRecordID: r.FirstRecordID.Bytes,
			LastRecordID: r.LastRecordID.Bytes, FirstRecordAt: r.FirstRecordAt.Time, LastRecordAt: r.LastRecordAt.Time,
			ArchivedAt: r.ArchivedAt.Time, ArchivedBy: r.ArchivedBy, RetentionUntil: dateString(r.RetentionUntil),
			LegalHold: r.LegalHold, Holds: uuids(r.Holds), PurgedAt: timePtr(r.PurgedAt), PurgedBy: r.PurgedBy,
		}
	}
	return out, nil
}

// SetRetention sets or moves an unpurged archive's retention date, logged
// and announced (<service>.archive_retention_set), attributed to actor. A
// date that brings destruction nearer (before today's UTC date, before the
// archive's current date, or any date on an undated archive, which was
// never purgeable) needs mayShorten (the purge scope); without it the call
// fails with ErrShortens and changes nothing. The log records which it was.
func (m *Manager) SetRetention(ctx context.Context, archiveID uuid.UUID, until time.Time, actor string, mayShorten bool) error {
	until = time.Date(until.Year(), until.Month(), until.Day(), 0, 0, 0, 0, time.UTC)
	day := until.Format(time.DateOnly)
	return pgx.BeginFunc(ctx, m.pool, func(tx pgx.Tx) error {
		q := queries.New(tx)
		cur, err := q.GetLedgerRowForUpdate(ctx, pgUUID(archiveID))
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("%w: archive %s is not in this service's ledger", ErrNotFound, archiveID)
		case err != nil:
			return fmt.Errorf("read archive %s: %w", archiveID, err)
		case cur.PurgedAt.Valid:
			return fmt.Errorf("%w: %s", ErrPurged, archiveID)
		}
		today := time.Now().UTC().Truncate(24 * time.Hour)
		nearer := until.Before(today) || !cur.RetentionUntil.Valid || until.Before(cur.RetentionUntil.Time)
		if nearer && !mayShorten {
			return fmt.Errorf("%w: %s from %v to %s", ErrShortens, archiveID, dateString(cur.RetentionUntil), day)
		}
		if _, err := q.SetRetentionUntil(ctx, queries.SetRetentionUntilParams{
			RetentionUntil: pgtype.Date{Time: until, Valid: true}, ArchiveID: pgUUID(archiveID),
		}); err != nil {
			return fmt.Errorf("set retention of %s: %w", archiveID, err)
		}
		detail := map[string]any{"archive_id": archiveID, "table": cur.TableName, "retention_until": day, "previous": dateString(cur.RetentionUntil),
			"brings_destruction_nearer": nearer}
		return m.record(ctx, tx, actor, "archive_retention_set", detail, act{archive: archiveID})
	})
}

// MaxRetentionDays bounds a retention schedule: a century (records of a
// child can be due decades after the child's majority).
const MaxRetentionDays = 36500

// ScheduleRetention dates a newly booked archive days after the UTC day of
// its newest record, in tx (the archive's own transaction); days 0 leaves it
// undated (never purgeable).
func ScheduleRetention(ctx context.Context, tx pgx.Tx, archiveID uuid.UUID, days int) error {
	if days == 0 {
		return nil
	}
	if days < 0 || days > MaxRetentionDays {
		return fmt.Errorf("%w: retention %d days outside 0..%d", ErrInvalid, days, MaxRetentionDays)
	}
	if err := queries.New(tx).ScheduleRetention(ctx, queries.ScheduleRetentionParams{Days: int32(days), ArchiveID: pgUUID(archiveID)}); err != nil {
		return fmt.Errorf("schedule retention of %s: %w", archiveID, err)
	}
	return nil
}

// act names what a lifecycle log row is about.
type act struct {
	archive, hold, purge uuid.UUID
}

// record logs a lifecycle act and stages its event (<service>.<action>)
// in tx; detail gains the actor and the time.
func (m *Manager) record(ctx context.Context, tx pgx.Tx, actor, action string, detail map[string]any, a act) error {
	detail["actor"] = actor
	detail["at"] = time.Now().UTC().Format(time.RFC3339Nano)
	doc, err := json.Marshal(detail)
	if err != nil {
		return fmt.Errorf("%s detail: %w", action, err)
	}
	opt := func(u uuid.UUID) pgtype.UUID { return pgtype.UUID{Bytes: u, Valid: u != uuid.Nil} }
	if err := queries.New(tx).LogLifecycle(ctx, queries.LogLifecycleParams{
		Actor: actor, Action: action, ArchiveID: opt(a.archive), HoldID: opt(a.hold), PurgeID: opt(a.purge), Detail: doc,
	}); err != nil {
		return fmt.Errorf("log %s: %w", action, err)
	}
	if _, err := outbox.Stage(ctx, tx, outbox.Envelope{EventType: m.cfg.Service + "." + action, Payload: doc}); err != nil {
		return fmt.Errorf("stage %s.%s: %w", m.cfg.Service, action, err)
	}
	return nil
}

func pgUUID(u uuid.UUID) pgtype.UUID { return pgtype.UUID{Bytes: u, Valid: true} }

func uuids(in []pgtype.UUID) []uuid.UUID {
	out := make([]uuid.UUID, len(in))
	for i, u := range in {
		out[i] = u.Bytes
	}
	return out
}

func pgUUIDs(in []uuid.UUID) []pgtype.UUID {
	out := make([]pgtype.UUID, len(in))
	for i, u := range in {
		out[i] = pgUUID(u)
	}
	return out
}

func dateString(d pgtype.Date) *string {
	if !d.Valid {
		return nil
	}
	s := d.Time.Format(time.DateOnly)
	return &s
}

func timePtr(t pgtype.Timestamptz) *time.Time {
	if !t.Valid {
		return nil
	}
	return &t.Time
}
