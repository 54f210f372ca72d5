package rules

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/outbox"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/services/rules/internal/queries"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// EvaluationsTable is the archived table of rule evaluations.
const EvaluationsTable = "rule_evaluations"

// EvaluationsArchivedEvent is staged with every archive, for security's
// fleet ledger (secondary bookkeeping: the local archive_ledger is the truth).
const EvaluationsArchivedEvent = "rules.evaluations_archived"

// SourceService identifies rules as the event's source (security validates
// it before any write, D16).
const SourceService = "craig-rules"

// ArchiveTables returns the archived tables of the rules service.
func ArchiveTables() []archive.TableSpec {
	return []archive.TableSpec{{
		Table:     EvaluationsTable,
		AgeColumn: "evaluated_at",
		Select: func(ctx context.Context, db prune.DB, p archive.SelectParams) ([]archive.Row, error) {
			rows, err := queries.New(db).SelectRuleEvaluationsBatch(ctx, queries.SelectRuleEvaluationsBatchParams{
				HotWindowDays: p.HotWindowDays, AfterKey: p.After.Key, AfterID: p.After.ID, BatchLimit: p.Limit, MaxBytes: p.MaxBytes,
			})
			if err != nil {
				return nil, err
			}
			out := make([]archive.Row, len(rows))
			for i, r := range rows {
				out[i] = archive.Row{ID: r.ID, At: r.At, Key: r.AtKey, Doc: r.Doc, Size: r.DocBytes, Withheld: r.Withheld}
			}
			return out, nil
		},
		Delete: func(ctx context.Context, tx pgx.Tx, hotWindowDays int32, ids []uuid.UUID) (int64, error) {
			return queries.New(tx).DeleteRuleEvaluationsByIDs(ctx, queries.DeleteRuleEvaluationsByIDsParams{Ids: ids, HotWindowDays: hotWindowDays})
		},
	}}
}

// ArchivedEvent is the payload of rules.evaluations_archived: the ledger's
// facts, so security can keep its fleet ledger without reading rules' DB.
type ArchivedEvent struct {
	SourceService string `json:"source_service"`
	ArchiveID     string `json:"archive_id"`
	Table         string `json:"table"`
	DataKey       string `json:"data_key"`
	ManifestKey   string `json:"manifest_key"`
	DataSHA256    string `json:"data_sha256"`
	RecordCount   int    `json:"record_count"`
	StoreEndpoint string `json:"store_endpoint"`
	StoreBucket   string `json:"store_bucket"`
	FirstRecordID string `json:"first_record_id"`
	LastRecordID  string `json:"last_record_id"`
	FirstRecordAt string `json:"first_record_at"`
	LastRecordAt  string `json:"last_record_at"`
	HotWindowDays int    `json:"hot_window_days"`
	ArchivedAt    string `json:"archived_at"`
	ArchivedBy    string `json:"archived_by"`
}

// Bookkeep writes the local ledger row and stages the event, inside the
// archive's delete transaction: both commit with the delete or neither does.
func Bookkeep(ctx context.Context, tx pgx.Tx, m archive.Manifest, archivedBy string) error {
	if m.Endpoint == "" || m.Bucket == "" {
		return fmt.Errorf("archive %s: store identity (endpoint %q, bucket %q) must be non-empty", m.ArchiveID, m.Endpoint, m.Bucket)
	}
	count, hot := int32(m.RecordCount), int32(m.HotWindowDays) // bounded by batch size and 3650
	err := queries.New(tx).InsertArchiveLedger(ctx, queries.InsertArchiveLedgerParams{
		ArchiveID: m.ArchiveID, TableName: m.Table, DataKey: m.DataKey, ManifestKey: m.ManifestKey,
		DataSha256: m.DataSHA256, RecordCount: count, StoreEndpoint: m.Endpoint, StoreBucket: m.Bucket,
		FirstRecordID: m.FirstRecordID, LastRecordID: m.LastRecordID,
		FirstRecordAt: m.FirstRecordAt, LastRecordAt: m.LastRecordAt,
		HotWindowDays: hot, ArchivedAt: m.ArchivedAt, ArchivedBy: archivedBy,
	})
	if err != nil {
		return fmt.Errorf("ledger row: %w", err)
	}
	const ts = "2006-01-02T15:04:05.999999Z07:00"
	payload, err := json.Marshal(ArchivedEvent{
		SourceService: SourceService, ArchiveID: m.ArchiveID.String(), Table: m.Table,
		DataKey: m.DataKey, ManifestKey: m.ManifestKey, DataSHA256: m.DataSHA256, RecordCount: m.RecordCount,
		StoreEndpoint: m.Endpoint, StoreBucket: m.Bucket,
		FirstRecordID: m.FirstRecordID.String(), LastRecordID: m.LastRecordID.String(),
		FirstRecordAt: m.FirstRecordAt.UTC().Format(ts), LastRecordAt: m.LastRecordAt.UTC().Format(ts),
		HotWindowDays: m.HotWindowDays, ArchivedAt: m.ArchivedAt.UTC().Format(ts), ArchivedBy: archivedBy,
	})
	if err != nil {
		return fmt.Errorf("event payload: %w", err)
	}
	if _, err := outbox.Stage(ctx, tx, outbox.Envelope{EventType: EvaluationsArchivedEvent, Payload: payload}); err != nil {
		return fmt.Errorf("stage %s: %w", EvaluationsArchivedEvent, err)
	}
	return nil
}
