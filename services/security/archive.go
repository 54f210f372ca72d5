package security

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/subject"
	"github.com/craig/retention/services/rules"
	"github.com/craig/retention/services/security/fleet"
	"github.com/craig/retention/services/security/internal/queries"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// The archived tables of the security service: the audit trail.
const (
	AuditLogTable   = "audit_log"
	DeadLetterTable = "dead_letter_audit"
)

// ArchiveCompletedEvent is staged with every security archive (the same
// payload fields as rules.evaluations_archived); security receives it too
// and books it like any other service's (an identical replay of the row its
// own bookkeeping wrote).
const ArchiveCompletedEvent = fleet.SecurityArchived

// SourceService identifies security as an archive event's source.
const SourceService = "craig-security"

// Tables is the security service's table registry: each exported method is
// one table (app.ArchivedOf, app.LocalsOf). A new table is a method in a
// file of its own.
type Tables struct{}

// ArchiveTables returns security's archived tables (its registry's).
func ArchiveTables() []archive.TableSpec { return app.ArchivedOf(Tables{}) }

// AuditLog is audit_log: its two queries (queries/security/archive.sql)
// and this value.
func (Tables) AuditLog() archive.TableSpec {
	return archive.TableSpec{
		Table: AuditLogTable, AgeColumn: "occurred_at",
		// case:<n> when subject_id is case-<n> (migrations/security 00003),
		// and the case_id of a delivered event's payload kept in
		// detail.payload (00005): a row may be about both.
		Subjects: []archive.Subject{
			// subject_id is checked only where it names a case (a person's id
			// is not an unparsed case).
			{Kind: subject.Case, SQL: "audit_log_case(subject_id)", Field: "CASE WHEN subject_id ~* 'case' THEN subject_id END"},
			{Kind: subject.Case, SQL: "audit_log_payload_case(detail)", Field: "detail -> 'payload' ->> 'case_id'"},
		},
		Select: archive.SelectRows(func(ctx context.Context, db prune.DB, p archive.SelectParams) ([]queries.SelectAuditLogBatchRow, error) {
			return queries.New(db).SelectAuditLogBatch(ctx, queries.SelectAuditLogBatchParams{
				HotWindowDays: p.HotWindowDays, AfterKey: p.After.Key, AfterID: p.After.ID, BatchLimit: p.Limit, MaxBytes: p.MaxBytes,
			})
		}),
		Delete: func(ctx context.Context, tx pgx.Tx, hot int32, ids []uuid.UUID) (int64, error) {
			return queries.New(tx).DeleteAuditLogByIDs(ctx, queries.DeleteAuditLogByIDsParams{Ids: ids, HotWindowDays: hot})
		},
	}
}

// DeadLetterAudit is dead_letter_audit: its two queries and this value.
func (Tables) DeadLetterAudit() archive.TableSpec {
	return archive.TableSpec{
		Table: DeadLetterTable, AgeColumn: "dlq_received_at",
		// case:<payload->>'case_id'> (migrations/security 00003).
		Subjects: []archive.Subject{{Kind: subject.Case, SQL: "dead_letter_audit_case(payload)", Field: "payload ->> 'case_id'"}},
		Select: archive.SelectRows(func(ctx context.Context, db prune.DB, p archive.SelectParams) ([]queries.SelectDeadLetterAuditBatchRow, error) {
			return queries.New(db).SelectDeadLetterAuditBatch(ctx, queries.SelectDeadLetterAuditBatchParams{
				HotWindowDays: p.HotWindowDays, AfterKey: p.After.Key, AfterID: p.After.ID, BatchLimit: p.Limit, MaxBytes: p.MaxBytes,
			})
		}),
		Delete: func(ctx context.Context, tx pgx.Tx, hot int32, ids []uuid.UUID) (int64, error) {
			return queries.New(tx).DeleteDeadLetterAuditByIDs(ctx, queries.DeleteDeadLetterAuditByIDsParams{Ids: ids, HotWindowDays: hot})
		},
	}
}

// Bookkeeper is security's archive bookkeeping: the kernel's local ledger
// row, then the archive's fleet ledger row (source craig-security, in the
// same transaction), then security.archive_completed.
func Bookkeeper() archive.Bookkeeper {
	return archive.Bookkeeper{EventType: ArchiveCompletedEvent, SourceService: SourceService, Also: bookOwnArchive}
}

// Producer is security as the fleet ledger knows it, derived from its
// registration (Bookkeeper and ArchiveTables).
func Producer() archive.Producer { return archive.ProducerOf(Name, Bookkeeper(), ArchiveTables()) }

// FleetRegistry is the fleet ledger's vocabulary: every producer's
// registration (a table a producer registers is accepted with no edit here;
// a new producer SERVICE is one line in this list).
func FleetRegistry() fleet.Registry { return fleet.NewRegistry(rules.Producer(), Producer()) }

// Bookkeep is Bookkeeper's Bookkeep (the archive.BookkeepFunc of the spec).
func Bookkeep(ctx context.Context, tx pgx.Tx, m archive.Manifest, archivedBy string) error {
	return Bookkeeper().Bookkeep(ctx, tx, m, archivedBy)
}

// bookOwnArchive writes security's own archive into the fleet ledger, from
// the event it is about to stage (so the row and the event carry the same
// facts; the replay security later receives is identical).
func bookOwnArchive(ctx context.Context, tx pgx.Tx, ev archive.ArchivedEvent) error {
	body, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	rec, err := fleet.Parse(body)
	if err != nil {
		return fmt.Errorf("fleet ledger: %w", err)
	}
	if _, err := insertRecord(ctx, tx, rec); err != nil {
		return fmt.Errorf("fleet ledger: %w", err)
	}
	return nil
}

// insertRecord books rec (ON CONFLICT DO NOTHING): true when it inserted.
func insertRecord(ctx context.Context, tx pgx.Tx, rec fleet.Record) (bool, error) {
	n, err := queries.New(tx).InsertArchiveRecord(ctx, queries.InsertArchiveRecordParams{
		ArchiveID: rec.ArchiveID, SourceService: rec.SourceService, TableName: rec.Table,
		DataKey: rec.DataKey, ManifestKey: rec.ManifestKey, DataSha256: rec.DataSHA256,
		RecordCount: int32(rec.RecordCount), StoreEndpoint: rec.StoreEndpoint, StoreBucket: rec.StoreBucket,
		FirstRecordID: rec.FirstRecordID, LastRecordID: rec.LastRecordID,
		FirstRecordAt: rec.FirstRecordAt, LastRecordAt: rec.LastRecordAt,
		HotWindowDays: int32(rec.HotWindowDays), ArchivedAt: rec.ArchivedAt, ArchivedBy: rec.ArchivedBy,
	})
	return n == 1, err
}
